"""The tests' login node (issue #47): one real OpenSSH sshd for the whole test session, on
127.0.0.1 only, that asks what a cluster's login node asks: a public key, then a time-based code
(the second factor) through PAM's pam_oath. ``ctrain remote`` runs everything for a cluster
through one ControlMaster connection, so a test counts the codes asked (``prompts``).

The server: /usr/sbin/sshd run under the name ``ctrain-test-sshd``, which is the PAM service it
uses (sshd takes its program name for it); ``make system`` writes /etc/pam.d/ctrain-test-sshd,
whose users file is ``/run/ctrain-test-sshd/users.oath``. The sshd runs in a mount namespace of
its own where this session's server directory is bind-mounted on /run/ctrain-test-sshd, so its
host key, authorized keys and TOTP secret are this session's alone (two runs at once do not
share a secret) and nothing under /etc changes. It lets in only the test user
(tests/support/users.py).

The laptop: root, the user the tests run as, with a key pair, a known_hosts file and an ssh
config (``ssh -F``: ssh reads ~/.ssh/config from the passwd home, never $HOME) naming the login
node ``cluster``. The code is answered by an SSH_ASKPASS script, which writes each prompt it gets
to a file and prints the next code not used yet: pam_oath refuses a code again (or an older one),
so logins faster than one in 30 s take codes ahead of the clock, inside pam_oath's window.
``wrong_code_env`` answers a code no step of the window has.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support import scratch
from tests.support.helpers import wait_for
from tests.support.users import ensure_test_user, user_source

SSHD = Path("/usr/sbin/sshd")
PAM_SERVICE = "ctrain-test-sshd"  # sshd's PAM service is its program name
PAM_FILE = Path("/etc/pam.d") / PAM_SERVICE
RUN_DIR = Path("/run/ctrain-test-sshd")  # the server directory, as the sshd sees it
USERS_FILE = RUN_DIR / "users.oath"  # the users file /etc/pam.d/ctrain-test-sshd names
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without it (systemd makes it, we do)
PYTHON = "/usr/bin/python3"  # Debian's, with python3-click: ctrain's core as the remote user
HOST = "cluster"
STEP = 30  # seconds of a TOTP code (pam_oath's HOTP/T30)
TIMEOUT = 30
TOOLS = ("ssh", "ssh-keygen", "oathtool", "rsync", "unshare", "flock")
PACKAGES = "openssh-server, rsync, libpam-oath and oathtool"


@dataclass(frozen=True)
class LoginNode:
    """The running login node, as the tests reach it: ``ssh -F ssh_config HOST`` with ``env``
    merged into ssh's environment (no terminal, no standard input needed)."""

    host: str  # the Host alias in ssh_config
    ssh_config: Path  # pass with ssh -F (also in rsync -e "ssh -F ...")
    env: Mapping[str, str]  # SSH_ASKPASS answering the right code, SSH_ASKPASS_REQUIRE, DISPLAY
    wrong_code_env: Mapping[str, str]  # the same, answering a wrong code
    user: str  # the remote user (tests/support/users.py's TEST_USER)
    home: Path  # its home on the login node
    port: int  # sshd's port on 127.0.0.1
    ctrain: Path  # runs this checkout's ctrain as the remote user: python3 -m ctrain "$@"
    prompts_file: Path  # one line a code asked: the prompt's text
    log: Path  # sshd's log (-e, LogLevel VERBOSE), for a failing test's message
    pid: int  # sshd's: /proc/PID/ns/mnt is the mount namespace its sessions see

    def prompts(self) -> list[str]:
        """The prompts answered (right or wrong) since the start or the last reset, in order."""
        return self.prompts_file.read_text().splitlines()

    def reset_prompts(self) -> None:
        self.prompts_file.write_text("")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def pam_window(pam_text: str) -> int | None:
    """The ``window=`` of the pam_oath line of the PAM service that reads USERS_FILE, or None
    where there is none such."""
    for line in pam_text.splitlines():
        words = line.split()
        if words[:3] == ["auth", "required", "pam_oath.so"] and f"usersfile={USERS_FILE}" in words:
            windows = [int(w[len("window=") :]) for w in words if re.fullmatch(r"window=\d+", w)]
            return windows[0] if windows else None
    return None


def missing() -> str | None:
    """Why this machine cannot run the login node, with the fix; None when it can."""
    if os.geteuid() != 0:
        return "the login node runs sshd and bind-mounts its directory: run the tests as root"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if not SSHD.is_file():
        absent.insert(0, str(SSHD))
    if absent:
        return f"{', '.join(absent)} not found (make system installs {PACKAGES})"
    if not PAM_FILE.is_file():
        return f"no PAM service {PAM_FILE} (run make system)"
    if pam_window(PAM_FILE.read_text()) is None:
        return f"{PAM_FILE} has no pam_oath line reading {USERS_FILE} (run make system)"
    return None


def openssh_version(sshd: Path = SSHD) -> tuple[int, int]:
    """(major, minor) of the OpenSSH that ``sshd -V`` names."""
    done = subprocess.run([sshd, "-V"], capture_output=True, text=True, timeout=TIMEOUT)
    found = re.search(r"OpenSSH_(\d+)\.(\d+)", done.stdout + done.stderr)
    assert found, f"{sshd} -V names no OpenSSH version: {done.stderr}"
    return int(found[1]), int(found[2])


def sshd_config(port: int, user: str, version: tuple[int, int]) -> str:
    """The sshd's configuration; its paths are RUN_DIR's (the server directory in sshd's mount
    namespace)."""
    lines = [
        f"ListenAddress 127.0.0.1:{port}",
        f"HostKey {RUN_DIR}/host_ed25519",
        f"PidFile {RUN_DIR}/sshd.pid",
        f"AuthorizedKeysFile {RUN_DIR}/authorized_keys",
        "StrictModes yes",  # RUN_DIR and / are root's and 755, the keys file root's and 644
        f"AllowUsers {user}",
        "PermitRootLogin no",
        "UsePAM yes",
        "PubkeyAuthentication yes",
        "KbdInteractiveAuthentication yes",
        "PasswordAuthentication no",
        "AuthenticationMethods publickey,keyboard-interactive",
        "MaxAuthTries 6",
        "MaxSessions 64",  # sessions multiplexed on one connection
        "MaxStartups 64:30:128",
        "LoginGraceTime 60",
        "UseDNS no",
        "PrintMotd no",
        "X11Forwarding no",
        "Subsystem sftp internal-sftp",  # scp speaks sftp since OpenSSH 9.0
        "LogLevel VERBOSE",
    ]
    if version >= (9, 8):  # failed logins (the wrong-code tests) would shut 127.0.0.1 out
        lines.append("PerSourcePenalties no")
    return "\n".join(lines) + "\n"


def ssh_config(host: str, port: int, user: str, laptop: Path) -> str:
    """The laptop's ssh configuration for ``ssh -F``: the login node as ``host``."""
    options = {
        "HostName": "127.0.0.1",
        "Port": str(port),
        "User": user,
        "IdentityFile": f'"{laptop / "id_ed25519"}"',
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        "UserKnownHostsFile": f'"{laptop / "known_hosts"}"',
        "GlobalKnownHostsFile": "/dev/null",
        "StrictHostKeyChecking": "yes",
        "UpdateHostKeys": "no",
        "PreferredAuthentications": "publickey,keyboard-interactive",
        "PasswordAuthentication": "no",
        "BatchMode": "no",  # the code is answered through SSH_ASKPASS
        "ForwardX11": "no",
        "ConnectTimeout": "10",
    }
    return f"Host {host}\n" + "".join(f"    {k} {v}\n" for k, v in options.items())


def askpass_script(prompts: Path, last_step: Path, secret: str) -> str:
    """SSH_ASKPASS answering the next unused code: that of this time step, or of the step after
    the last one it answered where that is later."""
    q = shlex.quote
    return f"""#!/bin/sh
# The login node's second factor (tests/support/login_node.py): writes the prompt, answers
# the next time-based code not used yet.
set -eu
printf '%s\\n' "$(printf '%s' "${{1:-}}" | tr '\\n' ' ')" >>{q(str(prompts))}
exec 9>>{q(str(last_step))}
flock 9
now=$(( $(date +%s) / {STEP} ))
last=$(cat {q(str(last_step))})
step=$(( now > ${{last:-0}} ? now : last + 1 ))
echo "$step" >{q(str(last_step))}
oathtool --totp --now "@$(( step * {STEP} ))" {secret}
"""


def wrong_askpass_script(prompts: Path, secret: str, window: int) -> str:
    """SSH_ASKPASS answering a 6-digit code that no step of pam_oath's window (and two more on
    each side) has."""
    q = shlex.quote
    span = window + 2
    return f"""#!/bin/sh
# The login node's second factor, answered wrong (tests/support/login_node.py).
set -eu
printf '%s\\n' "$(printf '%s' "${{1:-}}" | tr '\\n' ' ')" >>{q(str(prompts))}
now=$(( $(date +%s) / {STEP} ))
codes=$(oathtool --totp --window {2 * span} --now "@$(( (now - {span}) * {STEP} ))" {secret})
code=0
while printf '%s\\n' "$codes" | grep -qx "$(printf %06d "$code")"; do code=$((code + 1)); done
printf '%06d\\n' "$code"
"""


def ctrain_wrapper(source: Path) -> str:
    """``ctrain`` for the remote user: this checkout's source on Debian's Python."""
    return f"""#!/bin/sh
# ctrain on the login node (tests/support/login_node.py): this checkout's source on Debian's
# own Python.
PYTHONPATH={shlex.quote(str(source))} exec {PYTHON} -m ctrain "$@"
"""


def _write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair without passphrase at ``path``; its public key's line."""
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    subprocess.run(argv, check=True, capture_output=True, timeout=TIMEOUT)
    return path.with_name(path.name + ".pub").read_text().strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_sshd(server: Path, user: str) -> tuple[subprocess.Popen[bytes], int]:
    """sshd as PAM_SERVICE in a mount namespace where ``server`` is RUN_DIR, listening on a free
    port (another try where one is taken meanwhile): the process and its port."""
    program = server / PAM_SERVICE
    if not program.is_symlink():
        program.symlink_to(SSHD)  # sshd re-executes itself by this absolute path
    version = openssh_version()
    log = server / "sshd.log"
    for _ in range(3):
        port = _free_port()
        config = _write(server / "sshd_config", sshd_config(port, user, version), 0o644)
        mount_then_exec = 'mount --bind -- "$1" "$2" && shift 2 && exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                mount_then_exec, "sh", str(server), str(RUN_DIR),
                str(program), "-D", "-e", "-f", str(RUN_DIR / config.name)]  # fmt: skip
        with log.open("ab") as out:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        listening = f"Server listening on 127.0.0.1 port {port}."

        def up(process: subprocess.Popen[bytes] = process, listening: str = listening) -> bool:
            return process.poll() is not None or listening in log.read_text(errors="replace")

        wait_for(up, f"{PAM_SERVICE} on 127.0.0.1:{port} (log: {log})", timeout=TIMEOUT)
        if process.poll() is None:
            return process, port
        if "Address already in use" not in log.read_text(errors="replace"):
            break
    raise AssertionError(f"{PAM_SERVICE} did not start: {log.read_text(errors='replace')}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the sshd and its connections' processes (a ControlMaster's sessions outlive the
    listening sshd otherwise)."""
    if process.poll() is not None:
        return
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text() if entry.name.isdigit() else ""
        except OSError:  # ended meanwhile
            continue
        if re.search(rf"^PPid:\s+{process.pid}$", status, re.MULTILINE):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGTERM)
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@functools.cache
def login_node() -> LoginNode:
    """The session's login node, started on the first call and stopped when the run ends."""
    reason = missing()
    assert reason is None, reason
    window = pam_window(PAM_FILE.read_text())
    assert window is not None
    account = ensure_test_user()
    user = account.pw_name
    root = scratch.make("login-node")
    atexit.register(shutil.rmtree, root, True)  # after _stop: atexit runs the last one first
    root.chmod(0o755)
    server, laptop, bin_dir = root / "server", root / "laptop", root / "bin"
    server.mkdir(mode=0o755)
    laptop.mkdir(mode=0o700)
    bin_dir.mkdir(mode=0o755)
    for directory in (PRIVSEP_DIR, RUN_DIR):
        directory.mkdir(mode=0o755, exist_ok=True)

    host_key = _keygen(server / "host_ed25519", "ctrain-login-node")
    laptop_key = _keygen(laptop / "id_ed25519", "ctrain-laptop")
    _write(server / "authorized_keys", laptop_key + "\n", 0o644)
    secret = secrets.token_hex(20)
    _write(server / "users.oath", f"HOTP/T30 {user} - {secret}\n", 0o600)
    ctrain = _write(bin_dir / "ctrain", ctrain_wrapper(user_source()), 0o755)

    prompts = _write(laptop / "prompts", "", 0o600)
    last_step = _write(laptop / "last-step", "0\n", 0o600)
    askpass = _write(laptop / "askpass", askpass_script(prompts, last_step, secret), 0o700)
    wrong = _write(laptop / "askpass-wrong", wrong_askpass_script(prompts, secret, window), 0o700)

    process, port = _start_sshd(server, user)
    atexit.register(_stop, process)
    _write(laptop / "known_hosts", f"[127.0.0.1]:{port} {host_key}\n", 0o600)
    config = _write(laptop / "ssh_config", ssh_config(HOST, port, user, laptop), 0o600)
    common = {"SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}
    return LoginNode(
        host=HOST,
        ssh_config=config,
        env={"SSH_ASKPASS": str(askpass), **common},
        wrong_code_env={"SSH_ASKPASS": str(wrong), **common},
        user=user,
        home=Path(account.pw_dir),
        port=port,
        ctrain=ctrain,
        prompts_file=prompts,
        log=server / "sshd.log",
        pid=process.pid,
    )
