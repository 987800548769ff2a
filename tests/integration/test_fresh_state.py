"""The services and Apptainer start on a new machine's state, as on a used, stopped, half-started or
damaged one, always the same way.

Each test runs its script in scripts/fresh-state.sh's sandbox: this machine's packages, but none of
the state that scripts/services.sh, scripts/cluster.sh and scripts/apptainer.sh keep (no munge key,
no slurm.conf, no Slurm state, no registry store, no Docker data, no compute hosts, no Apptainer
root), an empty /run and /tmp, and a network of its own, so the services running out here (the
registry on 127.0.0.1:5000, slurmctld's ports) are neither met nor touched. Everything the sandbox
starts ends with it. The checkout stays visible wherever it lies, under /tmp included.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fresh_state import in_fresh_state
from tests.support.helpers import REPO

# What fresh-state.sh runs: itself and the two scripts whose `paths` it reads.
SCRIPTS = ("fresh-state.sh", "services.sh", "cluster.sh", "apptainer.sh")


@pytest.fixture
def checkout_in_tmp() -> Iterator[Path]:
    """A checkout under /tmp, which the sandbox empties: the scripts fresh-state.sh runs, and a
    file of its own."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="ctrain-checkout-") as directory:
        checkout = Path(directory) / "ctrain"
        (checkout / "scripts").mkdir(parents=True)
        for name in SCRIPTS:
            (checkout / "scripts" / name).write_bytes((REPO / "scripts" / name).read_bytes())
            (checkout / "scripts" / name).chmod(0o755)
        (checkout / "mine").write_text("the checkout's\n")
        yield checkout


@pytest.mark.sandbox
def test_a_checkout_under_tmp_is_seen_and_written_and_a_hidden_directory_is_empty(
    checkout_in_tmp: Path,
) -> None:
    checkout = checkout_in_tmp
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ctrain-hidden-") as hidden:
        (Path(hidden) / "cached").write_text("a cache\n")
        proc = in_fresh_state(
            f"""
            cat mine; cat {checkout}/mine
            echo written >{checkout}/written
            echo "in {hidden}: $(ls -A {hidden})."
            echo new >{hidden}/new
            stat -c '/tmp %a' /tmp
            find /tmp -mindepth 1 -maxdepth 1 -printf '%f %m\\n'
            """,
            60,
            checkout,
            FRESH_STATE_HIDE=hidden,
        )
        assert proc.returncode == 0, proc.stdout
        # The checkout is this machine's, read and written at its own path; /tmp keeps its mode
        # and holds nothing but the way to the checkout, made for its mount point; the hidden
        # directory is empty in there and untouched out here.
        top = checkout.parent.name
        assert proc.stdout.splitlines() == [
            "the checkout's",
            "the checkout's",
            f"in {hidden}: .",
            "/tmp 1777",
            f"{top} 755",
        ], proc.stdout
        assert (checkout / "written").read_text() == "written\n"
        assert sorted(p.name for p in Path(hidden).iterdir()) == ["cached"]


# Three sandboxes deep (CI's in scripts/cold-ci.sh, a test's, and the one cold-ci.sh's test starts):
# each sees what the one around it wrote and removed (munge's key, a state path), and keeps its own.
NESTED = """
echo outer >/etc/ctrain-outer
scripts/fresh-state.sh bash -c '
    echo middle >/etc/ctrain-middle
    scripts/fresh-state.sh bash -c "
        cat /etc/ctrain-outer /etc/ctrain-middle
        test -e /etc/munge/munge.key || echo no key
        echo inner >/etc/ctrain-inner
    "
    test -e /etc/ctrain-inner || echo inner gone
'
test -e /etc/ctrain-middle || echo middle gone
"""


@pytest.mark.sandbox
def test_a_sandbox_in_a_sandbox_in_a_sandbox() -> None:
    assert Path("/etc/munge/munge.key").exists()  # what the outer sandbox removes
    proc = in_fresh_state(NESTED, 60)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines() == ["outer", "middle", "no key", "inner gone", "middle gone"]
    assert not Path("/etc/ctrain-outer").exists()


@pytest.mark.sandbox
def test_the_command_is_a_child_of_a_first_process_that_reaps_orphans() -> None:
    # The orphan goes to PID 1: fresh-state.sh's shell (GNU make as PID 1 spun, .ci/run's).
    proc = in_fresh_state(
        """
        echo "pid 1: $(tr '\\0' '\\n' </proc/1/cmdline | sed -n 2p), the command's pid: $$"
        setsid sh -c 'sleep 0.2' &
        sleep 1
        echo "zombies: $(ps -eo stat= | grep -c '^Z' || true)"
        """,
        60,
    )
    assert proc.returncode == 0, proc.stdout
    first, zombies = proc.stdout.splitlines()
    assert first.startswith(f"pid 1: {REPO}/scripts/fresh-state.sh, the command's pid: "), first
    assert not first.endswith(": 1")
    assert zombies == "zombies: 0"


@pytest.mark.sandbox
def test_a_hidden_directory_must_be_absolute() -> None:
    proc = in_fresh_state("true", 60, FRESH_STATE_HIDE="/var/cache:relative")
    assert proc.returncode == 1
    assert proc.stdout == (
        "fresh-state: FRESH_STATE_HIDE=/var/cache:relative: want absolute directories,"
        " DIR[:DIR...]\n"
    )


@pytest.mark.sandbox
def test_the_sandboxs_settings_are_not_passed_on_to_the_command() -> None:
    """In a cold CI run (scripts/cold-ci.sh: the host network, a hidden cache) the tests start
    sandboxes of their own, which must get a network of their own, not the run's."""
    proc = in_fresh_state(
        "env | grep -c '^FRESH_STATE_' || true; ip -o link show | grep -c fresh0 || true",
        60, FRESH_STATE_NETWORK="host", FRESH_STATE_HIDE="/var/cache", FRESH_STATE_KEEP="0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines() == ["0", "0"]  # no setting; the host network, no fresh0


@pytest.mark.sandbox
def test_the_services_start_on_a_new_machines_state() -> None:
    # NODES=3 as `make services`: the compute hosts' bridge, namespaces and slurmds too.
    proc = in_fresh_state(
        "scripts/services.sh start && scripts/services.sh status",
        300,
        CTRAIN_SERVICES_NODES="3",
        CTRAIN_SERVICES_MIN_FREE_GIB="0",  # this test is about state: no warning of this disk's
    )
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    # What only an empty state makes: the sandbox really was a new machine's.
    assert "munge: creating /etc/munge/munge.key" in out
    assert "slurm: wrote /etc/slurm/slurm.conf" in out
    assert "cluster: bridge ctrain-br0" in out
    assert "registry: garbage-collected /var/lib/ctrain-registry" in out
    assert "WARNING" not in out
    # services.sh status: one line a service, its name in 16 columns and a space.
    running = {line[:16].strip() for line in out.splitlines() if line[17:].startswith("running")}
    assert running == {
        "munged",
        "slurmctld",
        "slurmd",
        "slurmd cn01",
        "slurmd cn02",
        "slurmd cn03",
        "dockerd",
        "docker-registry",
    }, out


# One tag pushed twice: the first manifest is left untagged, for the collector of the next start.
PUSH_TWICE = """
image=/var/lib/ctrain-registry/docker/registry/v2/repositories/fresh/image
push() {
    dir=$(mktemp -d)
    head -c 100000 /dev/urandom >"$dir/payload"
    tar -C "$dir" -c . | docker import - 127.0.0.1:5000/fresh/image:1 >/dev/null
    docker push -q 127.0.0.1:5000/fresh/image:1 >/dev/null
    rm -rf "$dir"
}
revisions() { ls "$image/_manifests/revisions/sha256" | wc -l; }
untagged() { docker images --quiet --filter dangling=true | wc -l; }
"""

USED_STOPPED_DAMAGED = (
    PUSH_TWICE
    + """
s=scripts/services.sh
$s start >/dev/null
push; push
echo "revisions before: $(revisions), untagged images before: $(untagged)"

echo "== used, stopped"
$s stop >/dev/null
$s start >/dev/null
echo "revisions after: $(revisions), untagged images after: $(untagged)"

echo "== half-started: slurmctld and the registry killed, the rest running"
pkill -KILL -x slurmctld; pkill -KILL -x docker-registry
$s start >/dev/null

echo "== damaged: every daemon killed, pid files and munge's socket left, dockerd's pid file naming
a live process, the registry's blobs gone and a manifest's link garbled, /etc/hosts with the
lines of compute hosts that are gone (a reboot: /run forgot them)"
pkill -KILL -x munged; pkill -KILL -x slurmctld; pkill -KILL -x slurmd
pkill -KILL -x dockerd; pkill -KILL -x docker-registry
sleep 1
test -S /run/munge/munge.socket.2
echo 1 >/run/ctrain-dockerd.pid
HOST=$(hostname -s) bash -c '. scripts/cluster.sh && hosts_up 2'
grep -q ' # ctrain-cluster$' /etc/hosts
rm -rf /var/lib/ctrain-registry/docker/registry/v2/blobs
for link in "$image"/_manifests/revisions/sha256/*/link; do
    printf 'sha256:garbled' >"$link"
done
$s start
$s status
srun -n 2 -t 1 true
push
docker rmi -f 127.0.0.1:5000/fresh/image:1 >/dev/null
docker pull -q 127.0.0.1:5000/fresh/image:1 >/dev/null
echo "pushed and pulled again"
"""
)


@pytest.mark.sandbox
@pytest.mark.timeout(480)
def test_the_services_start_again_from_used_stopped_half_started_and_damaged_states() -> None:
    proc = in_fresh_state(USED_STOPPED_DAMAGED, 420, CTRAIN_SERVICES_NODES="0")
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    # The collector took the untagged manifest of the used registry, and start the image the
    # second import left untagged in docker's store.
    assert "revisions before: 2, untagged images before: 1\n" in out, out
    assert "revisions after: 1, untagged images after: 0\n" in out, out
    # The damaged store: the collector fails, which is a warning; the registry starts all the same
    # and a push puts back what it lacks.
    assert "WARNING: docker-registry garbage-collect failed" in out
    assert "all services up" in out and out.rstrip().endswith("pushed and pulled again"), out
    assert "cluster: /etc/hosts restored" in out


# A root half built (a run killed during debootstrap) lies beside the place of the real one, and
# root has subordinate ids in one of the two files only.
APPTAINER = """
mkdir -p /opt/ctrain/apptainer/root.new.killed/usr
touch /etc/subuid /etc/subgid
sed -i '/^root:/d' /etc/subgid
grep -q '^root:' /etc/subuid || echo root:1000000:65536 >>/etc/subuid
scripts/apptainer.sh
test ! -e /opt/ctrain/apptainer/root.new.killed
test "$(grep -c '^root:' /etc/subuid) $(grep -c '^root:' /etc/subgid)" = "1 1"
apptainer --version
scripts/apptainer.sh
"""


@pytest.mark.sandbox
@pytest.mark.timeout(960)
def test_apptainer_installs_on_a_new_machines_state() -> None:
    # The host's network: the root is made from the Debian mirror.
    proc = in_fresh_state(APPTAINER, 900, FRESH_STATE_NETWORK="host")
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert any(line.startswith("apptainer: debootstrap trixie") for line in lines), proc.stdout
    assert "apptainer version 1.4.5" in lines
    assert lines[-1] == "apptainer: 1.4.5-2 present", proc.stdout
