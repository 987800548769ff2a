"""GPUs and drivers against TensorFlow's GPU code, from nvidia-smi's answers to
``--query-gpu=index,name,compute_cap,driver_version --format=csv,noheader`` on real nodes.

No GPU is here: the answers are written as nvidia-smi prints them (fields in the order asked,
", " between them; a driver before 510 refuses compute_cap, "Field "compute_cap" is not a valid
field to query", and answers the query without it). The compute capabilities are NVIDIA's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ctrain import matrix
from ctrain.checkline import Check
from ctrain.launch.gpucode import BLACKWELL_IMAGE, NAME, GpuAnswer, judge, parse_query, version

CODE = matrix.find(matrix.load(), "2.21.0").gpu_code
V100 = "0, Tesla V100-SXM2-32GB, 7.0, 535.104.05\n1, Tesla V100-SXM2-32GB, 7.0, 535.104.05\n"
A100 = "".join(f"{i}, NVIDIA A100-SXM4-80GB, 8.0, 550.54.15\n" for i in range(4))
H100 = "0, NVIDIA H100 80GB HBM3, 9.0, 560.35.03\n"
T4 = "0, Tesla T4, 7.5, 535.183.01\n"
B200 = "0, NVIDIA B200, 10.0, 570.124.06\n"
RTX_PRO = "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 575.57.08\n"
K80_OLD = "0, Tesla K80, 470.82.01\n1, Tesla K80, 470.82.01\n"  # QUERY_OLD: no compute_cap
P100_OLD_DRIVER = "0, Tesla P100-PCIE-16GB, 6.0, 418.87.01\n"


def test_the_answers_parse() -> None:
    assert parse_query(H100) == (GpuAnswer("0", "NVIDIA H100 80GB HBM3", "9.0", "560.35.03"),)
    assert len(parse_query(A100)) == 4
    assert parse_query(K80_OLD)[0] == GpuAnswer("0", "Tesla K80", None, "470.82.01")
    assert parse_query("0, Tesla T4, [N/A], 535.183.01\n")[0].capability is None
    assert parse_query("No devices were found\n") == ()


def test_lines_that_are_no_gpu_are_passed_over() -> None:
    # The header of --format=csv without noheader, and a warning nvidia-smi prints before its
    # answer, neither ending the answer.
    header = "index, name, compute_cap, driver_version\n"
    warning = "WARNING: infoROM is corrupted at gpu 0000:04:00.0\n"
    assert parse_query(header + warning + H100) == parse_query(H100)
    assert parse_query(header + warning + H100 + T4)[1] == GpuAnswer(
        "0", "Tesla T4", "7.5", "535.183.01"
    )


def test_versions_compare_as_numbers() -> None:
    assert version("555.42.06") == (555, 42, 6)
    assert version("[N/A]") == ()
    assert version("12.0a.1") == (12,)
    assert version("12.0") > version("9.0")
    assert version("535.104.05") < version("555.42.06")


@pytest.mark.parametrize(
    ("answer", "status", "detail"),
    [
        (
            V100,
            "PASS",
            "2 GPU(s): Tesla V100-SXM2-32GB (compute capability 7.0): sm_70 code in TensorFlow "
            "2.21.0; driver 535.104.05 (CUDA 12.5.1 by minor-version compatibility)",
        ),
        (
            A100,
            "PASS",
            "4 GPU(s): NVIDIA A100-SXM4-80GB (compute capability 8.0): sm_80 code in TensorFlow "
            "2.21.0; driver 550.54.15 (CUDA 12.5.1 by minor-version compatibility)",
        ),
        (
            H100,
            "PASS",
            "NVIDIA H100 80GB HBM3 (compute capability 9.0): sm_90 code in TensorFlow 2.21.0; "
            "driver 560.35.03 (CUDA 12.5.1 in full)",
        ),
        (  # Turing runs Volta's machine code
            T4,
            "PASS",
            "Tesla T4 (compute capability 7.5): sm_70 code in TensorFlow 2.21.0; "
            "driver 535.183.01 (CUDA 12.5.1 by minor-version compatibility)",
        ),
    ],
)
def test_gpus_with_code_in_the_wheel_pass(answer: str, status: str, detail: str) -> None:
    assert judge(parse_query(answer), "2.21.0", CODE) == Check(NAME, status, detail, "")


@pytest.mark.parametrize(
    ("answer", "capability"), [(B200, "10.0"), (RTX_PRO, "12.0")], ids=["B200", "RTX-PRO-6000"]
)
def test_blackwell_has_no_code_in_tensorflow_2_21(answer: str, capability: str) -> None:
    line = judge(parse_query(answer), "2.21.0", CODE)
    status, detail, fix = line.status, line.detail, line.fix
    assert status == "FAIL"
    assert (
        f"(compute capability {capability}): TensorFlow 2.21.0 has no code for it (its wheel "
        in (detail)
    )
    assert "; users report it failing on anything newer than 9.0)" in detail
    assert fix == (
        f"use an image whose TensorFlow was built for compute capability {capability}, such as "
        f"NVIDIA's {BLACKWELL_IMAGE}"
    )


def test_a_gpu_newer_than_the_wheel_but_not_blackwell_is_pointed_at_no_image() -> None:
    # Jetson Thor: compute capability 11.0, which the Blackwell image has no code for either.
    assert judge(parse_query("0, NVIDIA Thor, 11.0, 580.00\n"), "2.21.0", CODE) == Check(
        NAME,
        "FAIL",
        "NVIDIA Thor (compute capability 11.0): TensorFlow 2.21.0 has no code for it (its wheel "
        "holds code for 6.0, 7.0, 8.0, 8.9, 9.0 and PTX for 9.0; users report it failing on "
        "anything newer than 9.0); driver 580.00 (CUDA 12.5.1 in full)",
        "use an image whose TensorFlow was built for compute capability 11.0",
    )


def test_a_driver_older_than_cuda_12_fails_first() -> None:
    assert judge(parse_query(P100_OLD_DRIVER), "2.21.0", CODE) == Check(
        NAME,
        "FAIL",
        "driver 418.87.01 is older than CUDA 12 code needs (>= 525.60.13)",
        "ask the site for driver >= 525.60.13, or use an image built for this driver's CUDA",
    )
    assert judge(parse_query(K80_OLD), "2.21.0", CODE).detail.startswith("driver 470.82.01 ")
    # The floor also holds where TensorFlow is not in the matrix.
    assert judge(parse_query(P100_OLD_DRIVER), "2.17.0", None) == Check(
        NAME,
        "FAIL",
        "driver 418.87.01 is older than CUDA 12 code needs (>= 525.60.13)",
        "ask the site for driver >= 525.60.13, or use an image built for this driver's CUDA",
    )


def test_the_cuda_12_floor_is_the_matrixs() -> None:
    higher = replace(CODE, cuda12_driver="535.54.03")
    assert judge(parse_query("0, Tesla T4, 7.5, 530.30.02\n"), "2.21.0", higher) == Check(
        NAME,
        "FAIL",
        "driver 530.30.02 is older than CUDA 12 code needs (>= 535.54.03)",
        "ask the site for driver >= 535.54.03, or use an image built for this driver's CUDA",
    )


@pytest.mark.parametrize(
    ("driver", "how"),
    [
        ("525.60.13", "by minor-version compatibility"),  # CUDA 12's floor exactly
        ("555.42.06", "in full"),  # the wheel's CUDA's driver exactly
    ],
)
def test_a_driver_at_a_floor_is_at_or_above_it(driver: str, how: str) -> None:
    assert judge(parse_query(f"0, NVIDIA H100 80GB HBM3, 9.0, {driver}\n"), "2.21.0", CODE) == (
        Check(
            NAME,
            "PASS",
            f"NVIDIA H100 80GB HBM3 (compute capability 9.0): sm_90 code in TensorFlow 2.21.0; "
            f"driver {driver} (CUDA 12.5.1 {how})",
            "",
        )
    )


def test_a_gpu_whose_capability_is_not_reported_warns() -> None:
    assert judge(parse_query("0, Tesla T4, [N/A], 535.183.01\n"), "2.21.0", CODE) == Check(
        NAME,
        "WARN",
        "Tesla T4: compute capability not reported (driver before 510); driver 535.183.01 "
        "(CUDA 12.5.1 by minor-version compatibility)",
        "",
    )


def test_a_gpu_older_than_the_wheels_code() -> None:
    maxwell = parse_query("0, Tesla M60, 5.2, 535.104.05\n")
    line = judge(maxwell, "2.21.0", CODE)
    status, detail, fix = line.status, line.detail, line.fix
    assert (status, fix) == (
        "FAIL",
        "use GPUs of compute capability 6.0 or newer, or an older TensorFlow",
    )
    assert detail.startswith("Tesla M60 (compute capability 5.2): TensorFlow 2.21.0 has no code")


# A build whose PTX a newer CUDA compiles for the GPU: the JIT, which needs the driver in full.
# Machine code for Volta only, PTX for Ampere.
JIT_CODE = matrix.GpuCode("12.8.0", ("7.0",), "8.0", "570.26", "12.0", "525.60.13")
JIT_WARN = "keep the JIT cache between runs (CUDA_CACHE_PATH on a shared filesystem)"


def test_a_gpu_reached_only_by_the_ptx_jit_warns_and_needs_the_full_driver() -> None:
    ok = judge(parse_query("0, NVIDIA H100 80GB HBM3, 9.0, 570.124.06\n"), "9.9", JIT_CODE)
    assert ok.status == "WARN" and "through the JIT of its PTX for 8.0" in ok.detail
    old = judge(parse_query("0, NVIDIA H100 80GB HBM3, 9.0, 550.54.15\n"), "9.9", JIT_CODE)
    assert old.status == "FAIL" and "needs driver >= 570.26 (CUDA 12.8.0)" in old.detail


def _jit(name: str, capability: str, driver: str) -> str:
    return (
        f"{name} (compute capability {capability}): TensorFlow 9.9 runs on it through the JIT of "
        f"its PTX for 8.0: the first run compiles every kernel (minutes); driver {driver} "
        "(CUDA 12.8.0 in full)"
    )


# nvidia-smi's answer -> the gpu-code line against JIT_CODE
JIT_LINES = [
    (
        "0, Tesla V100-SXM2-32GB, 7.0, 570.124.06\n",
        Check(
            NAME,
            "PASS",
            "Tesla V100-SXM2-32GB (compute capability 7.0): sm_70 code in TensorFlow 9.9; "
            "driver 570.124.06 (CUDA 12.8.0 in full)",
        ),
    ),
    (  # the capability of the PTX itself, with no machine code of its generation
        "0, NVIDIA A100-SXM4-80GB, 8.0, 570.124.06\n",
        Check(NAME, "WARN", _jit("NVIDIA A100-SXM4-80GB", "8.0", "570.124.06"), JIT_WARN),
    ),
    (  # the driver the JIT needs, exactly
        "0, NVIDIA H100 80GB HBM3, 9.0, 570.26\n",
        Check(NAME, "WARN", _jit("NVIDIA H100 80GB HBM3", "9.0", "570.26"), JIT_WARN),
    ),
    (  # the newest capability it is reported to run on, exactly
        "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 575.57.08\n",
        Check(
            NAME,
            "WARN",
            _jit("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "575.57.08"),
            JIT_WARN,
        ),
    ),
    (
        "0, NVIDIA H100 80GB HBM3, 9.0, 550.54.15\n",
        Check(
            NAME,
            "FAIL",
            "NVIDIA H100 80GB HBM3 (compute capability 9.0): TensorFlow 9.9 runs on it only "
            "through the JIT of its PTX for 8.0, which needs driver >= 570.26 (CUDA 12.8.0); "
            "this node has 550.54.15; driver 550.54.15 (CUDA 12.8.0 by minor-version "
            "compatibility)",
            "ask the site for driver >= 570.26, or use GPUs with code in the wheel",
        ),
    ),
]


@pytest.mark.parametrize(("answer", "line"), JIT_LINES)
def test_the_ptx_jit_as_a_truth_table(answer: str, line: Check) -> None:
    assert judge(parse_query(answer), "9.9", JIT_CODE) == line


def test_the_worst_kind_of_gpu_speaks_for_the_node() -> None:
    mixed = parse_query(
        "0, NVIDIA H100 80GB HBM3, 9.0, 570.124.06\n1, NVIDIA B200, 10.0, 570.124.06\n"
    )
    assert judge(mixed, "2.21.0", CODE).status == "FAIL"
    assert judge(mixed, "2.21.0", CODE).detail.startswith("2 GPU(s): NVIDIA B200")


def test_unknown_tensorflow_or_no_gpu() -> None:
    assert judge((), "2.21.0", CODE) == Check(NAME, "PASS", "no GPU: nothing to check", "")
    assert judge(parse_query(H100), "2.17.0", None) == Check(
        NAME,
        "WARN",
        "driver 560.35.03; TensorFlow 2.17.0, not in ctrain's matrix: its GPU code is not known "
        "here",
        "",
    )
    assert judge(parse_query(H100), None, None).detail == (
        "driver 560.35.03; no TensorFlow: its GPU code is not known here"
    )
