"""The one stand-in for ``apptainer`` (and ``singularity``) in ctrain's tests; its parts live in
tests/support/standin/, pinned to /work/shared/apptainer-facts.md by
tests/unit/test_fake_apptainer*.py. It is not Apptainer: it runs the command on the host, in the
environment and working directory Apptainer would give it, so a wrong argv or environment fails as
it would on a cluster.

``install(bin_dir, name)`` puts a launcher in a bin dir (run by the tests' interpreter, ``-I -S``:
standard library only). Each call appends a JSON line to $FAKE_APPTAINER_LOG (``calls`` reads
them): argv, pid, host, env (its APPTAINER*/SINGULARITY* variables) and, for exec/run/shell,
container (image, command, cwd, binds, overlays, nv, and the env the command got); plus a line
``{"event": "download", "ref", "host"}`` each time an image is fetched (``downloads``).

Steering (FAKE_APPTAINER_*): VERSION (default 1.4.5, as singularity 4.5.1), COMPAT=1
(``singularity`` is Apptainer's compatibility name), OFFLINE=1 (no network: every remote URI
fails, even cached), IMAGE_ENV (JSON: the environment of images from registries it cannot
reach), FAIL=pull|build|inspect (that verb fails, 255), BAD=1 (pull and build write a non-SIF),
DELAY (seconds a download or build takes), HOLD (bytes: a download or build writes that many
bytes of the image, the header at least, then holds until SIGUSR1 before the rest), SIZE
(bytes of a pulled image's partition).

Modelled (facts file sections in brackets):
- [parsing] flags end at the first positional; ``--flag=value``; unknown flags, flags newer
  than the version (identity.FIRST_VERSION: --no-eval, --build-arg), wrong arity, a flag's bad
  value: cobra's ``Error for command "VERB": ...`` line, exit 1 (the real 1.4.5's, measured;
  the facts file said FATAL and 255, which is only for failures after parsing);
  APPTAINER_<KEY> with the SINGULARITY_<KEY> fallback (CACHEDIR, TMPDIR, BIND, BINDPATH,
  OVERLAY, CLEANENV, NO_EVAL, DISABLE_CACHE; a WARNING when the two differ); ``--version``;
- [exec/run/shell] the command RUNS: /bin/sh builds the environment ([Environment]: --cleanenv
  keeps TERM and the proxies, LANG=C; the image's OCI Env (PATH forced, the rest only where
  unset), %environment, LD_LIBRARY_PATH + /.singularity.d/libs; <PREFIX>ENV_* and --env
  (pflag map rules) double-quoted with only ``"`` escaped, so ``$``, backticks and ``\\`` are
  evaluated and a trailing ``\\`` empties every injected variable (the command still runs,
  as the real 1.4.5 does), single-quoted with --no-eval; _PATH,
  _PREPEND_PATH, _APPEND_PATH; HOME refused; INFO per SINGULARITYENV_ under Apptainer (two
  WARNINGs beside a different APPTAINERENV_ one, nothing beside an equal one);
  --env-file sourced, repeatable from 1.4; APPTAINER_CONTAINER and _NAME set), then execs it
  (not found: FATAL, 255); cwd = --cwd (fatal if missing) or the host cwd (else $HOME with a
  WARNING); --bind lists (missing source fatal; a bind the host cannot see, destination
  differs or read-only, gets a real bind mount inside ``unshare --mount`` when root, else
  FATAL); --overlay: one writable at most, not with --writable-tmpfs, ext3 checked (dumpe2fs
  -h), fcntl write lock (rw) or read lock (:ro) held while the command runs; signals
  forwarded; status = the command's, and a command killed by signal N kills the stand-in
  with N (the real 1.4.5 re-raises it; the facts file says exit 128+N);
  run: ENTRYPOINT + (args or CMD); shell: --shell or /bin/sh;
- [remote IMAGE] docker://127.0.0.1:PORT/ and localhost:PORT/ fetched for real (manifest, then
  config: Env, Entrypoint, Cmd) over plain HTTP with --no-https only, else the real binary's
  FATAL "server gave HTTP response to HTTPS client"; other registries modelled; the manifest
  digest is asked for before the cache (cache/oci-tmp/<that digest>; the real one names its
  entries by another hash and keeps blobs in cache/blob: ctrain reads neither) is read;
  ``docker-daemon://`` refused;
- [pull] [DEST] URI, --dir, --name, --force, "Image file already exists"; --disable-cache
  writes DEST directly, otherwise the cache entry is copied through DEST_DIR/tmp-copy-* and a
  rename; build-temp-* in APPTAINER_TMPDIR (or --tmpdir, $TMPDIR, /tmp) removed on exit and on
  SIGINT/SIGTERM (then exit 255), not on SIGKILL;
- [build] def-file header keys, ``{{ NAME }}`` from --build-arg (over --build-arg-file's
  KEY=VALUE lines; others skipped with a warning) then %arguments, unused
  build-args fatal without --warn-unused-build-args, undefined ones fatal; %environment and
  %labels kept in the SIF; [inspect] labels, --json, --environment;
- [SIF global header] written: header, version 01, 48 descriptors of 585 bytes, a JSON
  descriptor with the metadata, a partition; read: magic, version 01, descriptors size;
- [overlay create] --size whole MiB >= 64, --sparse (truncate) or dd (every byte written),
  ``mkfs.ext3 -d`` with upper/ and work/ (0755, 0777 above uid/gid 65535; default reserved
  blocks), --create-dir, --fakeroot refused by CE; an existing PATH refused (a SIF with a
  "stand-in:" FATAL: adding an overlay partition is not modelled).
Not modelled: the container's own filesystem (the command sees the host's files and devices;
--nv is only logged; --writable-tmpfs changes nothing); exec flags whose effect cannot be shown
on the host (--contain, --containall, --home, --workdir, --mount, --app, --fakeroot, --userns,
namespaces, --nvccli, --rocm) are refused with a "stand-in:" FATAL rather than ignored; OCI
CMD/ENTRYPOINT evaluation under --no-eval, %files/%post (a build runs nothing), SIF overlay
partitions, layers (a fetch reads manifest and config only), signatures, ``cache list/clean``,
instances. Timing and resource use are not Apptainer's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import Sandbox, sandbox
from tests.support.standin.remote import DEFAULT_PATH, modelled
from tests.support.standin.sif import is_sif, make_sif, sif_bytes

__all__ = ["DEFAULT_PATH", "calls", "ctrain_image_env", "downloads", "install", "is_sif",
           "make_sif", "pulled_bytes", "sif_bytes", "with_standin"]  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]  # the checkout holding tests/support/standin


def install(bin_dir: Path, name: str = "apptainer") -> Path:
    """Put the stand-in in ``bin_dir`` as ``name`` (apptainer or singularity)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / name
    program.write_text(
        f"#!{sys.executable} -IS\nimport os, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.support.standin.main import main\nsys.exit(main(sys.argv, dict(os.environ)))\n"
    )
    program.chmod(0o755)
    return program


def with_standin(root: Path, *programs: str, **extra: str) -> Sandbox:
    """The tests' sandbox under ``root`` (helpers.sandbox) with the stand-in installed as each of
    ``programs`` (default: apptainer) and its log at ``root/calls.jsonl`` ($FAKE_APPTAINER_LOG);
    ``extra`` adds variables."""
    box = sandbox(root, FAKE_APPTAINER_LOG=str(root / "calls.jsonl"), **extra)
    for name in programs or ("apptainer",):
        install(box.bin, name)
    return box


def calls(log_file: Path) -> list[dict[str, object]]:
    """Every line of the log: calls and events, in order."""
    if not log_file.exists():
        return []
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]


def downloads(log_file: Path) -> list[dict[str, object]]:
    return [line for line in calls(log_file) if line.get("event") == "download"]


def pulled_bytes(ref: str, payload: int = 65536, image_env: str = "") -> bytes:
    """What a pull of ``ref`` from a registry the stand-in models writes (FAKE_APPTAINER_SIZE
    ``payload``, FAKE_APPTAINER_IMAGE_ENV ``image_env``)."""
    head, body = sif_bytes(ref, payload, modelled(ref, {"FAKE_APPTAINER_IMAGE_ENV": image_env})[1])
    return head + body


def ctrain_image_env() -> dict[str, str]:
    """An image environment in which ``ctrain`` (this checkout's) runs: for make_sif and,
    as JSON, FAKE_APPTAINER_IMAGE_ENV."""
    from tests.support.helpers import BIN, SRC

    return {"PATH": f"{BIN}:{DEFAULT_PATH}", "PYTHONPATH": SRC}


def run(
    box: Sandbox, *args: str, program: str = "apptainer", timeout: float = 120, **extra: str
) -> subprocess.CompletedProcess[str]:
    """The stand-in ``program`` installed in ``box.bin``, run with ``args`` in ``box.root``."""
    return subprocess.run(
        [str(box.bin / program), *args],
        env=box.with_env(**extra),
        cwd=box.root,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
