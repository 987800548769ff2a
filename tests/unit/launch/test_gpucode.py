"""GPUs and drivers against TensorFlow's GPU code, from nvidia-smi's answers to
``--query-gpu=index,name,compute_cap,driver_version --format=csv,noheader`` on real nodes.

No GPU is here: the answers are written as nvidia-smi prints them (fields in the order asked,
", " between them; a driver before 510 refuses compute_cap, "Field "compute_cap" is not a valid
field to query", and answers the query without it). The compute capabilities are NVIDIA's.
"""

from __future__ import annotations

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


def test_versions_compare_as_numbers() -> None:
    assert version("555.42.06") == (555, 42, 6)
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


def test_a_driver_older_than_cuda_12_fails_first() -> None:
    assert judge(parse_query(P100_OLD_DRIVER), "2.21.0", CODE) == Check(
        NAME,
        "FAIL",
        "driver 418.87.01 is older than CUDA 12 code needs (>= 525.60.13)",
        "ask the site for driver >= 525.60.13, or use an image built for this driver's CUDA",
    )
    assert judge(parse_query(K80_OLD), "2.21.0", CODE).detail.startswith("driver 470.82.01 ")


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
JIT_CODE = matrix.GpuCode("12.8.0", ("8.0",), "8.0", "570.26", "12.0", "525.60.13")


def test_a_gpu_reached_only_by_the_ptx_jit_warns_and_needs_the_full_driver() -> None:
    ok = judge(parse_query("0, NVIDIA H100 80GB HBM3, 9.0, 570.124.06\n"), "9.9", JIT_CODE)
    assert ok.status == "WARN" and "through the JIT of its PTX for 8.0" in ok.detail
    old = judge(parse_query("0, NVIDIA H100 80GB HBM3, 9.0, 550.54.15\n"), "9.9", JIT_CODE)
    assert old.status == "FAIL" and "needs driver >= 570.26 (CUDA 12.8.0)" in old.detail


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
