"""container/spec.py: what a bind and an overlay say, what reaches the container, and
every refusal with its message and fix in full. Inputs are written here, not taken from the
lists under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.container.spec import (
    Bind,
    Overlay,
    check_paths,
    container_env,
    job_tmpdir,
    parse_bind,
    parse_overlay,
    passthrough,
    refuse_shared_rw_overlay,
)
from ctrain.errors import SpecError


@pytest.mark.parametrize(
    ("text", "bind"),
    [
        ("/data", Bind("/data", "/data", "rw")),
        ("/data:/in", Bind("/data", "/in", "rw")),
        ("/data:/in:ro", Bind("/data", "/in", "ro")),
        ("/data:/in:rw", Bind("/data", "/in", "rw")),
        ("/data:", Bind("/data", "/data", "rw")),
        ("/data::ro", Bind("/data", "/data", "ro")),
        ("/data::rw", Bind("/data", "/data", "rw")),
        ("rel/dir:/in", Bind("rel/dir", "/in", "rw")),
        ("/data:/ro", Bind("/data", "/ro", "rw")),
    ],
)
def test_bind(text: str, bind: Bind) -> None:
    assert parse_bind(text) == bind


@pytest.mark.parametrize(
    ("text", "message", "fix"),
    [
        ("", "bind '' is not SRC[:DST[:ro|rw]]", "write -B /data:/data:ro"),
        (":/in", "bind ':/in' is not SRC[:DST[:ro|rw]]", "write -B /data:/data:ro"),
        ("/a:/b:ro:x", "bind '/a:/b:ro:x' is not SRC[:DST[:ro|rw]]", "write -B /data:/data:ro"),
        (
            "/data:ro",
            "bind '/data:ro' would mount /data on a directory called 'ro'",
            "write -B /data:/data:ro",
        ),
        (
            "/data:rw",
            "bind '/data:rw' would mount /data on a directory called 'rw'",
            "write -B /data:/data:rw",
        ),
        ("/a:/b:RO", "bind '/a:/b:RO': mode must be ro or rw, not 'RO'", "use :ro or :rw"),
        ("/a:/b:", "bind '/a:/b:': mode must be ro or rw, not ''", "use :ro or :rw"),
        ("/a:b", "bind '/a:b': destination 'b' is not absolute", "start it with /"),
        ("data", "bind 'data': destination 'data' is not absolute", "start it with /"),
    ],
)
def test_bind_refused(text: str, message: str, fix: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_bind(text)
    assert (caught.value.message, caught.value.fix) == (message, fix)


@pytest.mark.parametrize(
    ("text", "overlay"),
    [
        ("/o.img", Overlay("/o.img", False)),
        ("/o.img:ro", Overlay("/o.img", True)),
        ("/o.img:rw", Overlay("/o.img", False)),
        ("/a:b/o.img", Overlay("/a:b/o.img", False)),
        ("/a:ro/o.img:ro", Overlay("/a:ro/o.img", True)),
    ],
)
def test_overlay(text: str, overlay: Overlay) -> None:
    assert parse_overlay(text) == overlay


# Written here: what reaches the container (kept) and what does not (dropped).
KEPT = {
    "SLURM_JOB_ID": "1",
    "SLURMD_NODENAME": "n1",
    "OMPI_COMM_WORLD_RANK": "0",
    "PMI_RANK": "0",
    "PMIX_RANK": "0",
    "NCCL_DEBUG": "INFO",
    "HOROVOD_RANK": "0",
    "CUDA_VISIBLE_DEVICES": "0",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "CTRAIN_MODE": "auto",
    "TF_CONFIG": "{}",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_CPP_MAX_VLOG_LEVEL": "0",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    "TF_GPU_ALLOCATOR": "cuda_malloc_async",
    "TF_GPU_THREAD_MODE": "gpu_private",
    "TF_NUM_INTRAOP_THREADS": "4",
    "TF_NUM_INTEROP_THREADS": "2",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "TF_USE_LEGACY_KERAS": "1",
    "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
    "XLA_FLAGS": "--xla_gpu_cuda_data_dir=/usr/local/cuda",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
    "TERM": "xterm",
    "USER": "alice",
    "LOGNAME": "alice",
}
DROPPED = {
    "CUDA_HOME": "/usr/local/cuda",
    "CUDA_PATH": "/usr/local/cuda",
    "TF_VAR_region": "terraform",
    "TF_LOG": "DEBUG",
    "LANG": "de_DE.UTF-8",
    "HOME": "/home/alice",
    "PATH": "/usr/bin",
    "LD_LIBRARY_PATH": "/opt/lib",
    "PYTHONPATH": "/home/alice/lib",
    "TMPDIR": "/tmp/job",
    "http_proxy": "http://proxy:3128",
    "XSLURM_JOB_ID": "1",
    "slurm_job_id": "1",
    "MY_TF_CONFIG": "{}",
    "TF_CONFIGX": "{}",
}


def test_passthrough_keeps_launcher_and_tensorflow_variables_only() -> None:
    assert passthrough({**KEPT, **DROPPED}) == KEPT


@pytest.mark.parametrize("name", sorted(KEPT))
def test_each_kept_variable_alone(name: str) -> None:
    assert passthrough({name: "v", "HOME": "/h"}) == {name: "v"}


def test_container_env_order_of_precedence() -> None:
    host = {"SLURM_JOB_ID": "1", "OMP_NUM_THREADS": "8", "PYTHONNOUSERSITE": "0", "HOME": "/h"}
    asked = {"OMP_NUM_THREADS": "2", "PYTHONNOUSERSITE": "0", "TMPDIR": "/mine"}
    assert container_env(host, asked, "/tmp/job") == {
        "SLURM_JOB_ID": "1",
        "TMPDIR": "/mine",
        "OMP_NUM_THREADS": "2",
        "PYTHONNOUSERSITE": "1",
    }
    assert container_env(host, {}, "/tmp/job") == {
        "SLURM_JOB_ID": "1",
        "OMP_NUM_THREADS": "8",
        "TMPDIR": "/tmp/job",
        "PYTHONNOUSERSITE": "1",
    }
    assert container_env({}, {}, None) == {"PYTHONNOUSERSITE": "1"}


def test_job_tmpdir(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (tmp_path / "file").write_text("")
    assert job_tmpdir({"TMPDIR": str(job)}) == str(job)
    assert job_tmpdir({"TMPDIR": "/tmp"}) is None
    assert job_tmpdir({"TMPDIR": "/tmp/"}) is None
    assert job_tmpdir({"TMPDIR": str(tmp_path / "missing")}) is None
    assert job_tmpdir({"TMPDIR": str(tmp_path / "file")}) is None
    assert job_tmpdir({"TMPDIR": "relative"}) is None
    assert job_tmpdir({"TMPDIR": ""}) is None
    assert job_tmpdir({}) is None


def test_check_paths_accepts_what_exists(tmp_path: Path) -> None:
    (tmp_path / "o.img").write_text("")
    (tmp_path / "i.sif").write_text("")
    binds = [Bind(str(tmp_path), "/in"), Bind(str(tmp_path / "o.img"), "/f")]
    check_paths(binds, Overlay(str(tmp_path / "o.img"), True), str(tmp_path / "i.sif"))
    check_paths((), None, None)


@pytest.mark.parametrize(
    ("what", "message", "fix"),
    [
        ("bind", "bind source '{p}' does not exist", "create it or fix the path"),
        (
            "overlay",
            "overlay '{p}' does not exist",
            "create it: ctrain overlay create PATH --size 15G",
        ),
        ("image", "image '{p}' does not exist", "pull it first: ctrain pull -o PATH REF"),
        ("overlay dir", "overlay '{p}' does not exist", None),
        ("image dir", "image '{p}' does not exist", None),
    ],
)
def test_check_paths_refuses(tmp_path: Path, what: str, message: str, fix: str | None) -> None:
    (tmp_path / "ok").write_text("")
    ok = str(tmp_path / "ok")
    bad = str(tmp_path if what.endswith("dir") else tmp_path / "missing")
    binds = [Bind(ok, "/ok"), Bind(bad, "/bad")] if what == "bind" else [Bind(ok, "/ok")]
    overlay = Overlay(bad if what.startswith("overlay") else ok, False)
    image = bad if what.startswith("image") else ok
    with pytest.raises(SpecError) as caught:
        check_paths(binds, overlay, image)
    assert caught.value.message == message.format(p=bad)
    if fix is not None:
        assert caught.value.fix == fix


@pytest.mark.parametrize(
    ("overlay", "tasks", "refused"),
    [
        (Overlay("/o.img", False), "2", True),
        (Overlay("/o.img", False), "16", True),
        (Overlay("/o.img", False), "1", False),
        (Overlay("/o.img", False), None, False),
        (Overlay("/o.img", False), "", False),
        (Overlay("/o.img", False), "x", False),
        (Overlay("/o.img", True), "2", False),
        (None, "2", False),
    ],
)
def test_shared_read_write_overlay(
    overlay: Overlay | None, tasks: str | None, refused: bool
) -> None:
    environ = {} if tasks is None else {"SLURM_STEP_NUM_TASKS": tasks}
    if not refused:
        refuse_shared_rw_overlay(overlay, environ)
        return
    with pytest.raises(SpecError) as caught:
        refuse_shared_rw_overlay(overlay, environ)
    assert caught.value.message == f"overlay /o.img read-write in a Slurm step of {tasks} tasks"
    assert caught.value.fix == "mount it read-only: --overlay /o.img:ro"
