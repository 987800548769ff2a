"""Open each CUDA library TensorFlow opens, by name, as TensorFlow does, without a GPU:
``python -m ctrain.train.cudalibs [--loader]`` prints one JSON object and exits 1 when one does
not open.

TensorFlow opens its CUDA libraries at run time with dlopen by file name (tsl's dso_loader:
cudart, cublas, cublasLt, cufft, cusolver, cusparse, cupti, cudnn, nccl), and users report three
more it needs that no run path of its wheel names (curand, nvJitLink, nvrtc: "Cannot dlopen some
GPU libraries"). dlopen finds a name in LD_LIBRARY_PATH, in the run paths of the library that
calls it (libtensorflow_framework.so.2, libtensorflow_cc.so.2), or through the loader's cache
(/etc/ld.so.conf.d, ldconfig); a library's own dependencies must be found the same way. This
opens each name from this process, in TensorFlow's order: by the loader first, then (without
``--loader``) from each run path of TensorFlow's libraries, as TensorFlow's own dlopen would.
``--loader`` counts the loader alone: what ctrain's GPU image promises, whatever a container
runtime does to LD_LIBRARY_PATH (Apptainer 1.5 changed how ``--nv`` sets it). The driver's own
libcuda.so.1 is not opened: a GPU node's driver brings it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctrain.checkline import Check
from ctrain.util import proc

# CUDA 12 builds of TensorFlow: the dso_loader's names with TF_*_VERSION of its CUDA 12 build,
# in its order, then those it needs through them or XLA.
CUDA12_LIBRARIES = (
    "libcudart.so.12",
    "libcublas.so.12",
    "libcublasLt.so.12",
    "libcufft.so.11",
    "libcusolver.so.11",
    "libcusparse.so.12",
    "libcupti.so.12",
    "libcudnn.so.9",
    "libnccl.so.2",
    "libcurand.so.10",
    "libnvJitLink.so.12",
    "libnvrtc.so.12",
)
CALLERS = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2")
DT_RPATH, DT_RUNPATH, SHT_DYNAMIC = 15, 29, 6


def run_paths(path: Path) -> list[str]:
    """The DT_RUNPATH and DT_RPATH directories of an ELF64 little-endian shared object, with
    $ORIGIN replaced by its directory."""
    data = path.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    dirs: list[str] = []
    for section in (s for s in sections if s[1] == SHT_DYNAMIC):
        strtab = sections[section[6]]
        for offset in range(section[4], section[4] + section[5], 16):
            tag, value = struct.unpack_from("<qQ", data, offset)
            if tag in (DT_RPATH, DT_RUNPATH):
                end = data.index(b"\0", strtab[4] + value)
                text = data[strtab[4] + value : end].decode()
                for entry in text.split(":"):  # Bazel's run paths repeat entries
                    entry = os.path.normpath(entry.replace("$ORIGIN", str(path.parent)))
                    if entry not in dirs:
                        dirs.append(entry)
    return dirs


def tensorflow_run_paths() -> list[str]:
    """The run paths of TensorFlow's libraries that dlopen CUDA, where TensorFlow is installed."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return []
    paths: list[str] = []
    for location in spec.submodule_search_locations:
        for name in CALLERS:
            library = Path(location, name)
            if library.is_file():
                paths += [d for d in run_paths(library) if d not in set(paths)]
    return paths


def _loaded_path(name: str) -> str:
    """Where this process mapped the library called ``name`` from."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path) == name:
                return path
    return name


def open_library(name: str, paths: list[str]) -> dict[str, str | None]:
    """Open ``name`` by the loader, else from each of ``paths``; how it opened, and where from
    (or the loader's last error)."""
    try:
        ctypes.CDLL(name)
        return {"name": name, "how": "loader", "path": _loaded_path(name)}
    except OSError as exc:
        error = str(exc)
    for directory in paths:
        candidate = os.path.join(directory, name)
        if not os.path.exists(candidate):
            continue
        try:
            ctypes.CDLL(candidate)
            return {"name": name, "how": "tensorflow run path", "path": candidate}
        except OSError as exc:  # found, but a dependency of it is not
            error = str(exc)
    return {"name": name, "how": None, "path": error}


NAME = "cuda-libs"  # ctrain doctor's line
PROBE_TIMEOUT = 120.0


def judge(report: Mapping[str, Any], gpus: bool) -> Check:
    """``ctrain doctor``'s cuda-libs line from this module's report; ``gpus``: nvidia-smi lists
    some."""
    libraries = report["libraries"]
    missing = [entry["name"] for entry in libraries if not entry["how"]]
    if len(missing) == len(libraries):
        detail = f"none of TensorFlow's {len(libraries)} CUDA 12 libraries opens here"
        fix = "use ctrain's GPU image, or pip install 'tensorflow[and-cuda]'"
        if gpus:
            return Check(NAME, "WARN", detail, fix)
        return Check(NAME, "PASS", f"{detail} (a CPU install)")
    if missing:
        why = next(e["path"] for e in libraries if not e["how"])
        return Check(
            NAME,
            "FAIL",
            f"TensorFlow cannot open {', '.join(missing)} ({why})",
            "give the loader their directories: a file in /etc/ld.so.conf.d and ldconfig (an "
            "image), or LD_LIBRARY_PATH (a venv: site-packages/nvidia/*/lib)",
        )
    by_path = sum(1 for entry in libraries if entry["how"] != "loader")
    how = f", {by_path} through TensorFlow's run paths" if by_path else ""
    return Check(
        NAME, "PASS", f"all {len(libraries)} CUDA libraries TensorFlow opens open by name{how}"
    )


def doctor_check(environ: Mapping[str, str], gpus: bool) -> Check:
    """Run this module in a child of this Python (nothing of CUDA loads into the doctor) and
    judge its report."""
    done = proc.run([sys.executable, "-m", __name__], environ, timeout=PROBE_TIMEOUT)
    try:
        return judge(json.loads(done.stdout), gpus)
    except (ValueError, KeyError, TypeError):
        return Check(NAME, "FAIL", f"the library check said: {proc.failure(done)}", "report a bug")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    loader_only = args == ["--loader"]
    if args and not loader_only:
        print("usage: python -m ctrain.train.cudalibs [--loader]", file=sys.stderr)
        return 2
    paths = [] if loader_only else tensorflow_run_paths()
    opened = [open_library(name, paths) for name in CUDA12_LIBRARIES]
    print(json.dumps({"loader_only": loader_only, "libraries": opened}))
    return 0 if all(entry["how"] for entry in opened) else 1


if __name__ == "__main__":
    sys.exit(main())
