"""``ctrain doctor``: what this machine offers for a training run, one line per check.

Every check returns a Check and never raises (a crash becomes a FAIL line). TensorFlow and
Horovod are probed in a child Python so this process never imports them. Parsing of each tool's
output lives in the ``parse_*`` functions, tested with captured output.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ctrain import matrix
from ctrain.checkline import STATUSES, Check, worst
from ctrain.container import podman
from ctrain.errors import CtrainError
from ctrain.images import cachedir
from ctrain.launch import mpilibs
from ctrain.launch.gpus import code_verdict, list_gpus
from ctrain.names import CHARLIECLOUD, CONTAINER_RUNTIMES, program_of
from ctrain.settings_table import Settings
from ctrain.train import cudalibs
from ctrain.util import fs, proc

PROBE_TIMEOUT = 120.0
TOOL_TIMEOUT = 30.0
INSTALL_FIX = "`make install`, or run inside the ctrain image"

# The probes, each run in a child of this Python: TensorFlow's (with probe_dists()) and Horovod's.
TF_PROBE_MODULE = "ctrain.train.tf_probe"
HOROVOD_PROBE = ("ctrain.train.horovod_probe",)


@functools.cache
def version_matrix() -> tuple[matrix.Row, ...]:
    """The version matrix, read the first time a check needs it (not when this is imported)."""
    return matrix.load()


def probe_dists() -> tuple[str, ...]:
    """The distributions whose versions the TensorFlow probe reports, to compare with the
    matrix."""
    wheels = sorted({n for r in version_matrix() for n in r.cuda_wheels})
    return ("tf-keras", "horovod", "keras", *wheels)


def tf_probe() -> tuple[str, ...]:
    """The TensorFlow probe's module and arguments."""
    return (TF_PROBE_MODULE, *probe_dists())


def parse_version(text: str) -> str:
    """The version in ``apptainer --version``, ``docker --version``, ``podman --version``..."""
    version = re.search(r"\bv?(\d+(?:\.\d+)+[\w.+~-]*)", text)
    if version:
        return version.group(1)
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else "unknown version"


def parse_docker_server(text: str) -> str | None:
    """The server version from ``docker version --format {{.Server.Version}}``, if any."""
    value = text.strip()
    return value if value and value != "<no value>" else None


def parse_mpirun_version(text: str) -> str:
    """First line of ``mpirun --version``; MPICH's Hydra puts its version on a later line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "unknown version"
    hydra = re.search(r"^\s*Version:\s*(\S+)", text, re.MULTILINE)
    if lines[0].startswith("HYDRA") and hydra:
        return f"MPICH (Hydra) {hydra.group(1)}"
    return lines[0]


def pyxis_loaded(srun_help: str) -> bool:
    """Whether ``srun --help`` lists pyxis' ``--container-image`` (its SPANK plugin is loaded)."""
    return re.search(r"^\s*--container-image\b", srun_help, re.MULTILINE) is not None


def parse_probe(stdout: str) -> dict[str, Any]:
    """The JSON object a probe prints on its last ``{`` line (libraries may print before it)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    raise ValueError("the probe printed no JSON object")


def count_names(names: Sequence[str]) -> str:
    """``["A", "A", "B"]`` -> ``"2 x A, 1 x B"``."""
    return ", ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def _tool(argv: list[str], what: str, environ: Mapping[str, str]) -> str | CtrainError:
    """The tool's stdout, or the error saying why it failed: a doctor reports, never raises."""
    try:
        return proc.check(argv, environ, TOOL_TIMEOUT, what=what)
    except CtrainError as exc:
        return exc


def _runtime(name: str, path: str, environ: Mapping[str, str]) -> tuple[bool, str]:
    """(usable, description) of one installed runtime."""
    if name == "docker":
        out = _tool([path, "version", "--format", "{{.Server.Version}}"], "docker", environ)
        server = parse_docker_server(out) if isinstance(out, str) else None
        if server:
            return True, f"docker {server} ({path})"
        out = _tool([path, "--version"], "docker --version", environ)
        client = parse_version(out) if isinstance(out, str) else "version unknown"
        return False, f"docker {client} ({path}): daemon not reachable"
    if name == CHARLIECLOUD:
        return _charliecloud(path, environ)
    out = _tool([path, "--version"], f"{name} at {path}", environ)
    if isinstance(out, CtrainError):
        return False, out.message
    return True, f"{name} {parse_version(out)} ({path})"


def _charliecloud(path: str, environ: Mapping[str, str]) -> tuple[bool, str]:
    """ch-run's version (it prints it on stderr), whether ch-checkns can create the user
    namespaces it needs, and what ctrain runs with it (SquashFS: ch-run 0.31 cannot say)."""
    try:
        said = proc.run([path, "--version"], {"USER": "ctrain-doctor", **environ}, TOOL_TIMEOUT)
        version = parse_version(said.stderr + said.stdout)
    except CtrainError:
        version = "version unknown"
    checkns = str(Path(path).with_name("ch-checkns"))
    works = not isinstance(_tool([checkns], "ch-checkns", environ), CtrainError)
    userns = "user namespaces work" if works else "user namespaces unavailable (ch-checkns)"
    detail = f"{CHARLIECLOUD} {version} ({path}): {userns}; image directories (SquashFS not used)"
    return works, detail


def check_runtime(environ: Mapping[str, str]) -> Check:
    installed = [
        (n, p) for n in CONTAINER_RUNTIMES if (p := proc.which(program_of(n), environ)) is not None
    ]
    results = [_runtime(name, path, environ) for name, path in installed]
    detail = "; ".join(text for _, text in results) or "none of " + ", ".join(CONTAINER_RUNTIMES)
    if any(usable for usable, _ in results):
        return Check("runtime", "PASS", detail)
    fix = "install Apptainer (clusters) or Docker; `--runtime host` still runs without one"
    if any(name == "docker" for name, _ in installed):
        fix = "start the Docker daemon or " + fix
    return Check("runtime", "WARN", detail, fix)


def _subid_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def check_podman(
    environ: Mapping[str, str], user: tuple[str, int], read: Callable[[str], str] = _subid_text
) -> Check:
    """Podman's mode; rootless podman needs subordinate uids and gids for ``user`` (name, uid)."""
    path = proc.which("podman", environ)
    if path is None:
        return Check("podman", "PASS", "not installed (needed only for --runtime podman)")
    out = _tool([path, *podman.INFO_ARGV], "podman info", environ)
    if isinstance(out, CtrainError):
        return Check("podman", "WARN", out.message, f"run `{path} info` to see why it fails")
    try:
        info = podman.parse_info(out)
    except (ValueError, KeyError, TypeError) as exc:
        why = f"`podman info --format json` not understood: {exc!r}"
        return Check("podman", "WARN", why, "report a bug with the output of podman info")
    detail = f"{info.describe()} ({path})"
    if not info.rootless:
        return Check("podman", "PASS", detail)
    name, uid = user
    short = [
        f"{f}: {count}"
        for f in podman.SUBID_FILES
        if (count := podman.subid_count(read(f), name, uid)) < podman.SUBID_WANTED
    ]
    if short:
        wanted = f"{podman.SUBID_WANTED} subordinate ids wanted for {name}"
        fix = podman.subid_fix(name)
        return Check("podman", "WARN", f"{detail}; {wanted}, found {', '.join(short)}", fix)
    return Check("podman", "PASS", f"{detail}; {name} has subordinate uids and gids")


def check_cache(environ: Mapping[str, str], settings: Settings) -> Check:
    try:
        choice = cachedir.resolve_cache_dir(settings, environ, accept_home=True)
    except CtrainError as exc:
        return Check("cache", "WARN", exc.message, exc.fix)
    needed = settings.min_free_gb
    free = fs.free_bytes(choice.path)
    tmp = cachedir.build_tmpdir(settings, environ)
    detail = f"{choice.path} ({choice.source}), {fs.human(free)} free, temporary space {tmp}"
    if choice.under_home:
        fix = "set CTRAIN_CACHE_DIR to a directory on scratch: home quotas are small"
        return Check("cache", "WARN", detail + ": under $HOME", fix)
    if free < needed * fs.GIB:
        fix = f"free space or set CTRAIN_CACHE_DIR elsewhere ({needed} GiB wanted)"
        return Check("cache", "WARN", f"{detail}: under {needed} GiB", fix)
    return Check("cache", "PASS", detail)


def check_tmp(environ: Mapping[str, str], settings: Settings) -> Check:
    tmp = Path(environ.get("TMPDIR") or "/tmp")
    needed = settings.min_free_gb
    free = fs.free_bytes(tmp)
    detail = f"{tmp} (TMPDIR {'set' if environ.get('TMPDIR') else 'unset'}), {fs.human(free)} free"
    if free < needed * fs.GIB:
        fix = "set TMPDIR to a local or scratch directory with more room"
        return Check("tmp", "WARN", f"{detail}: under {needed} GiB", fix)
    return Check("tmp", "PASS", detail)


def describe_slurm_job(environ: Mapping[str, str]) -> str:
    """Which Slurm job and step this process is in, from the environment alone."""
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job:
        return "not inside a Slurm job"
    step = environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or "batch"
    tasks = environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS") or "?"
    return f"inside job {job} (step {step}, {tasks} tasks)"


def describe_pyxis(srun: str | None, environ: Mapping[str, str]) -> str:
    """Whether srun has pyxis (``--runtime pyxis``) and which enroot is on PATH."""
    srun_help = _tool([srun, "--help"], "srun --help", environ) if srun else None
    pyxis = "pyxis loaded" if isinstance(srun_help, str) and pyxis_loaded(srun_help) else "no pyxis"
    enroot = proc.which("enroot", environ)
    out = _tool([enroot, "version"], "enroot version", environ) if enroot else None
    if isinstance(out, str):
        return f"{pyxis}, enroot {parse_version(out)} ({enroot})"
    return f"{pyxis}, no enroot" + (f" ({out.message})" if out else "")


def check_slurm(environ: Mapping[str, str]) -> Check:
    tools = {name: proc.which(name, environ) for name in ("sbatch", "srun")}
    missing = [name for name, path in tools.items() if path is None]
    where = ", ".join(f"{name} {path}" for name, path in tools.items() if path)
    detail = describe_slurm_job(environ) + (f"; {where}" if where else "")
    detail += "; " + describe_pyxis(tools["srun"], environ)
    if missing:
        fix = "load the Slurm module or use a cluster node; without Slurm, run on one machine"
        return Check("slurm", "WARN", f"{detail}; {' and '.join(missing)} not found", fix)
    return Check("slurm", "PASS", detail)


def check_gpus(gpus: list[str] | None, environ: Mapping[str, str]) -> Check:
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    shown = "CUDA_VISIBLE_DEVICES unset" if visible is None else f"CUDA_VISIBLE_DEVICES={visible}"
    if not gpus:
        why = "no working nvidia-smi" if gpus is None else "nvidia-smi lists none"
        fix = "run on a GPU node (srun --gpus=...) if you meant to use GPUs"
        return Check("gpus", "WARN", f"no GPU visible: training runs on CPU ({why}); {shown}", fix)
    return Check("gpus", "PASS", f"{len(gpus)}: {count_names(gpus)}; {shown}")


def _probe(name: str, module: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any] | Check:
    env = {**environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}
    try:
        done = proc.run([sys.executable, "-m", *module], env, timeout=PROBE_TIMEOUT)
    except CtrainError:
        why = f"importing {name} in {sys.executable} did not finish within {PROBE_TIMEOUT:.0f} s"
        return Check(name, "FAIL", why, "check the filesystem holding site-packages, then retry")
    if done.returncode != 0:
        why = proc.failure(done)
        return Check(name, "FAIL", f"not importable by {sys.executable}: {why}", INSTALL_FIX)
    try:
        return parse_probe(done.stdout)
    except ValueError as exc:
        return Check(name, "FAIL", f"probe output not understood: {exc}", INSTALL_FIX)


def check_tensorflow(environ: Mapping[str, str], gpus: list[str] | None) -> Check:
    info = _probe("tensorflow", tf_probe(), environ)
    if isinstance(info, Check):
        return info
    seen = len(info.get("gpus") or [])
    dists = dict(info.get("dists") or {})
    detail = f"{matrix.describe_install(info['version'], dists)}; {seen} GPU(s) seen"
    if "tf-keras" not in dists:
        return Check("tensorflow", "WARN", detail, "pip install tf-keras (or " + INSTALL_FIX + ")")
    problem = matrix.off_matrix(version_matrix(), info["version"], dists)
    if problem:
        fix = matrix.reinstall_fix(version_matrix(), info["version"])
        return Check("tensorflow", "WARN", f"{detail}; {problem}", fix)
    if gpus and not seen:
        fix = "use the ctrain GPU image, or a TensorFlow built with CUDA matching the driver"
        return Check("tensorflow", "WARN", f"{detail}, but nvidia-smi lists {len(gpus)}", fix)
    return Check("tensorflow", "PASS", detail)


def check_horovod(environ: Mapping[str, str], gpus: list[str] | None) -> Check:
    info = _probe("horovod", HOROVOD_PROBE, environ)
    if isinstance(info, Check):
        return info
    yes = {key: "yes" if info.get(key) else "no" for key in ("mpi", "gloo", "nccl")}
    detail = f"{info['version']}: MPI {yes['mpi']}, Gloo {yes['gloo']}, NCCL {yes['nccl']}"
    rebuild = (
        "reinstall Horovod with HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 (and "
        "HOROVOD_GPU_OPERATIONS=NCCL on GPUs), or use the ctrain image"
    )
    if not info.get("mpi") and not info.get("gloo"):
        return Check("horovod", "FAIL", detail + ": no controller built", rebuild)
    if gpus and not info.get("nccl"):
        return Check("horovod", "WARN", detail + ": GPUs present but no NCCL", rebuild)
    return Check("horovod", "PASS", detail)


def check_mpi(environ: Mapping[str, str]) -> Check:
    path = proc.which("mpirun", environ)
    if path is None:
        fix = "install Open MPI for Horovod's MPI mode; Gloo (horovodrun --gloo) works without"
        return Check("mpi", "WARN", "mpirun not found", fix)
    out = _tool([path, "--version"], f"{path} --version", environ)
    if isinstance(out, CtrainError):
        return Check("mpi", "WARN", out.message, "")
    return Check("mpi", "PASS", f"{parse_mpirun_version(out)} ({path})")


def guarded(name: str, check: Callable[[], Check]) -> Check:
    """Run one check; any exception becomes its FAIL line."""
    try:
        return check()
    except Exception as exc:  # a doctor reports, it does not crash
        return Check(name, "FAIL", f"check crashed: {type(exc).__name__}: {exc}", "report a bug")


def _caller(environ: Mapping[str, str]) -> tuple[str, int]:
    """This process's user name and uid (the name from the password database, else $USER)."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return environ.get("USER") or str(uid), uid


def run_checks(environ: Mapping[str, str], settings: Settings) -> list[Check]:
    """Every check, in display order; the slow probes run side by side."""
    try:
        listed = list_gpus(environ)
        gpus = None if listed is None else [gpu.name for gpu in listed]
    except Exception:  # check_gpus reports the absence
        gpus = None
    checks: list[tuple[str, Callable[[], Check]]] = [
        ("runtime", lambda: check_runtime(environ)),
        ("podman", lambda: check_podman(environ, _caller(environ))),
        ("cache", lambda: check_cache(environ, settings)),
        ("tmp", lambda: check_tmp(environ, settings)),
        ("slurm", lambda: check_slurm(environ)),
        ("gpus", lambda: check_gpus(gpus, environ)),
        ("gpu-code", lambda: code_verdict(environ)),
        ("cuda-libs", lambda: cudalibs.doctor_check(environ, bool(gpus))),
        ("tensorflow", lambda: check_tensorflow(environ, gpus)),
        ("horovod", lambda: check_horovod(environ, gpus)),
        ("mpi", lambda: check_mpi(environ)),
        ("mpi-match", lambda: mpilibs.doctor_check(environ)),
    ]
    with ThreadPoolExecutor(max_workers=len(checks)) as pool:
        futures = [pool.submit(guarded, name, check) for name, check in checks]
        return [future.result() for future in futures]


def failed(results: Sequence[Check]) -> bool:
    return worst(result.status for result in results) == "FAIL"


def render(results: Sequence[Check], as_json: bool) -> str:
    """One line per check (`` -> fix`` on WARN and FAIL), or JSON with a summary."""
    if as_json:
        counts: dict[str, int] = {s: sum(r.status == s for r in results) for s in STATUSES}
        summary = {**counts, "failed": failed(results)}
        return json.dumps({"checks": [asdict(r) for r in results], "summary": summary}, indent=2)
    lines = []
    for r in results:
        fix = f" -> {r.fix}" if r.status != "PASS" and r.fix else ""
        lines.append(f"{r.status:<6}{r.name:<13}{r.detail}{fix}")
    return "\n".join(lines)
