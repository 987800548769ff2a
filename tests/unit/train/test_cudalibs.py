"""Opening CUDA libraries by name as TensorFlow does, on small shared objects built here with gcc
(gcc from `make system`; no CUDA library is on this machine: the GPU image's build check and
test_built_images open the real ones)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ctrain.checkline import Check
from ctrain.train import cudalibs


def shared_object(path: Path, *link: str, run_path: str | None = None) -> Path:
    """A shared object called path.name (its soname too), linked against ``link``."""
    source = path.with_suffix(".c")
    source.write_text(f"int {path.name.split('.')[0]}_symbol(void) {{ return 1; }}\n")
    argv = ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{path.name}", "-o", str(path), str(source)]
    if run_path is not None:
        argv.append(f"-Wl,-rpath,{run_path},--enable-new-dtags")
    # --no-as-needed: the dependency is recorded though no symbol of it is used.
    subprocess.run(
        [*argv, "-Wl,--no-as-needed", *link], check=True, capture_output=True, timeout=60
    )
    return path


def test_run_paths_are_read_from_the_elf_with_origin_expanded(tmp_path: Path) -> None:
    lib = shared_object(tmp_path / "libcaller.so.2", run_path="$ORIGIN/../nvidia/x/lib:/opt/y")
    assert cudalibs.run_paths(lib) == [str(tmp_path.parent / "nvidia/x/lib"), "/opt/y"]
    assert cudalibs.run_paths(shared_object(tmp_path / "libplain.so.1")) == []


def test_a_library_opens_by_the_loader_or_from_a_run_path(tmp_path: Path) -> None:
    found = tmp_path / "found"
    found.mkdir()
    shared_object(found / "libctrainfoo.so.7")
    assert cudalibs.open_library("libctrainfoo.so.7", [str(found)]) == {
        "name": "libctrainfoo.so.7",
        "how": "tensorflow run path",
        "path": str(found / "libctrainfoo.so.7"),
    }
    missing = cudalibs.open_library("libctrainnone.so.1", [str(found)])
    assert missing["how"] is None
    assert "libctrainnone.so.1: cannot open shared object file" in str(missing["path"])


def test_a_library_whose_dependency_no_path_names_does_not_open(tmp_path: Path) -> None:
    """libcusolver.so.11 needs libnvJitLink.so.12, which no run path of TensorFlow names: found
    through TensorFlow's run path, it still fails to open, as users report."""
    jit, solver = tmp_path / "jit", tmp_path / "solver"
    jit.mkdir()
    solver.mkdir()
    shared_object(jit / "libctrainjit.so.12")
    shared_object(
        solver / "libctrainsolver.so.11", f"-L{jit}", "-l:libctrainjit.so.12", run_path="$ORIGIN"
    )
    failed = cudalibs.open_library("libctrainsolver.so.11", [str(solver)])
    assert failed["how"] is None
    assert "libctrainjit.so.12: cannot open shared object file" in str(failed["path"])


def test_the_module_reports_json_and_exits_1_when_one_does_not_open() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ctrain.train.cudalibs", "--loader"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(done.stdout)
    assert report["loader_only"] is True
    assert [e["name"] for e in report["libraries"]] == list(cudalibs.CUDA12_LIBRARIES)
    # This machine's loader knows no CUDA library.
    assert done.returncode == 1 and not any(e["how"] for e in report["libraries"])


def report(*hows: str | None) -> dict[str, object]:
    names = cudalibs.CUDA12_LIBRARIES[: len(hows)]
    return {
        "libraries": [
            {"name": n, "how": h, "path": "/x" if h else f"{n}: cannot open shared object file"}
            for n, h in zip(names, hows, strict=True)
        ]
    }


def test_doctor_lines() -> None:
    assert cudalibs.judge(report("loader", "loader"), gpus=True) == Check(
        "cuda-libs", "PASS", "all 2 CUDA libraries TensorFlow opens open by name"
    )
    assert cudalibs.judge(report("loader", "tensorflow run path"), gpus=True).detail == (
        "all 2 CUDA libraries TensorFlow opens open by name, 1 through TensorFlow's run paths"
    )
    failed = cudalibs.judge(report("loader", None, None), gpus=True)
    assert failed.status == "FAIL"
    assert failed.detail == (
        "TensorFlow cannot open libcublas.so.12, libcublasLt.so.12 "
        "(libcublas.so.12: cannot open shared object file)"
    )
    assert "/etc/ld.so.conf.d" in failed.fix and "LD_LIBRARY_PATH" in failed.fix
    assert cudalibs.judge(report(None, None), gpus=False) == Check(
        "cuda-libs", "PASS", "none of TensorFlow's 2 CUDA 12 libraries opens here (a CPU install)"
    )
    assert cudalibs.judge(report(None, None), gpus=True).status == "WARN"
