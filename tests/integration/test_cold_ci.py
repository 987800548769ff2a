"""scripts/cold-ci.sh's mechanics, with a stand-in for CI's run (the run itself takes an hour).

cold-ci.sh stops this machine's services and starts them again, so the test runs it in
scripts/fresh-state.sh's sandbox (tests/integration/test_fresh_state.py), whose services are the
ones it stops, and whose network the inner sandbox shares: nothing out here is touched.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.fresh_state import in_fresh_state
from tests.support.helpers import REPO

COLD_CI = str(REPO / "scripts" / "cold-ci.sh")

# The outer sandbox's services with compute hosts, then a cold run of a stand-in in a clone under
# /tmp, then what the outer sandbox is left with. The watcher samples every second
# (COLD_CI_DISK_EVERY=1), so the stand-in holds its 2 GiB for 3 s, not the 12 s that 10 s samples
# would need.
STAND_IN = """
links() { ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort | tr '\\n' ' '; }
CTRAIN_SERVICES_NODES=3 scripts/services.sh start >/dev/null
echo "links before: $(links)"
COLD_CI_DISK_EVERY=1 scripts/cold-ci.sh /tmp/cold bash -c '
    echo "cache in there: [$(ls -A "$XDG_CACHE_HOME")]"
    echo "clone in there: $PWD, venv $(test -e .venv && echo yes || echo no)"
    touch "$XDG_CACHE_HOME/written"
    fallocate -l 2G two-gib && sleep 3 && rm two-gib
    CTRAIN_SERVICES_NODES=3 scripts/services.sh start >/dev/null
    echo "services in there: $(scripts/services.sh status | grep -c " running")"
'
echo "links after: $(links)"
echo "services after: $(scripts/services.sh status | grep -c " running")"
echo "clone after: $(test -e /tmp/cold && echo kept || echo removed)"
echo "cache after: [$(ls -A "$XDG_CACHE_HOME")]"
"""


@pytest.mark.sandbox
@pytest.mark.timeout(360)
def test_a_cold_run_hides_the_caches_and_puts_the_services_and_network_back() -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ctrain-cache-") as cache:
        (Path(cache) / "pip").mkdir()
        proc = in_fresh_state(STAND_IN, 300, XDG_CACHE_HOME=cache, CTRAIN_SERVICES_MIN_FREE_GIB="0")
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    said = {line.split(":")[0]: line.split(": ", 1)[1] for line in lines if ": " in line}
    # The stand-in: no cache, a new clone under /tmp (the sandbox empties /tmp), the services
    # from nothing (munged, slurmctld, slurmd, three compute hosts, dockerd, the registry).
    assert said["cache in there"] == "[]", proc.stdout
    assert said["clone in there"] == "/tmp/cold, venv no", proc.stdout
    assert said["services in there"] == "8", proc.stdout
    # Out here: the same network devices (the compute hosts' bridge and veths, made again by
    # the services' start), every service running, the clone gone, the cache as it was.
    assert said["links after"] == said["links before"], proc.stdout
    assert "ctrain-br0" in said["links after"].split(), proc.stdout
    assert said["services after"] == "8", proc.stdout
    assert said["clone after"] == "removed", proc.stdout
    assert said["cache after"] == "[pip]", proc.stdout
    assert any(re.fullmatch(r"cold-ci: took \dm\d\ds \(exit 0\) .*", line) for line in lines)
    # The 2 GiB the stand-in held for 3 s, seen by the watcher that samples every second.
    disk = re.compile(r"cold-ci: disk: at most (\d+) GiB more in use .*")
    assert [int(m[1]) >= 1 for m in map(disk.fullmatch, lines) if m] == [True], proc.stdout
    assert "cold-ci: removed network device ctrain-br0" in lines, proc.stdout


@pytest.mark.sandbox
def test_a_directory_that_is_not_new_is_refused_before_anything_stops(tmp_path: Path) -> None:
    # Refused before the clone and before the services stop.
    for where, said in (
        ("relative", "cold-ci: DIR relative: want an absolute path (/ctrain-cold-ci)\n"),
        (
            str(tmp_path),
            f"cold-ci: {tmp_path} exists. Fix: rm -rf {tmp_path}, or name another DIR\n",
        ),
    ):
        done = subprocess.run(
            [COLD_CI, where, "true"], capture_output=True, text=True, timeout=60, check=False
        )
        assert (done.returncode, done.stdout, done.stderr) == (1, "", said)
