"""The remotes file: what ctrain writes it reads back; a file it did not write is refused with
its path, never rewritten; names and hosts that ssh would read as options are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.errors import ConfigError, UsageError
from ctrain.remote import registry
from ctrain.remote.registry import Remote

HPC = Remote("hpc", "me@login.example.org")
SCRATCH = Remote("scratch", "login2", "/scratch/me", "/opt/ctrain/bin/ctrain", "/home/me/ssh.cfg")


def test_what_is_written_reads_back(tmp_path: Path) -> None:
    path = str(tmp_path / "ctrain" / "remotes.toml")
    registry.write(path, {"scratch": SCRATCH, "hpc": HPC})
    assert registry.read(path) == {"hpc": HPC, "scratch": SCRATCH}
    assert [p.name for p in (tmp_path / "ctrain").iterdir()] == ["remotes.toml"]


def test_defaults_are_not_written() -> None:
    assert registry.render({"hpc": HPC}) == '["hpc"]\nhost = "me@login.example.org"\n'


def test_a_missing_file_holds_no_remote(tmp_path: Path) -> None:
    assert registry.read(str(tmp_path / "none.toml")) == {}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[hpc\n", "malformed TOML"),
        ('[hpc]\nworkdir = "x"\n', "no host"),
        ('[hpc]\nhost = "h"\nport = "22"\n', "has port"),
        ("[hpc]\nhost = 3\n", "not a table of strings"),
        ('hpc = "h"\n', "not a table of strings"),
    ],
)
def test_a_file_not_as_ctrain_writes_it_is_refused(text: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as caught:
        registry.parse(text, "/home/me/.config/ctrain/remotes.toml")
    assert "/home/me/.config/ctrain/remotes.toml" in caught.value.message


@pytest.mark.parametrize(
    "remote",
    [
        Remote("b d", "h"),
        Remote("-x", "h"),
        Remote("hpc", "-oProxyCommand=touch /tmp/x"),
        Remote("hpc", "me@host; rm -rf ~"),
        Remote("hpc", "h", workdir=" "),
        Remote("hpc", "h", ctrain=""),
    ],
)
def test_names_and_hosts_ssh_would_misread_are_refused(remote: Remote) -> None:
    with pytest.raises(UsageError):
        registry.checked(remote)


@pytest.mark.parametrize("host", ["login", "me@login.example.org", "a_b@10.0.0.1", "me@[::1]"])
def test_hosts_ssh_reads_as_hosts_pass(host: str) -> None:
    assert registry.checked(Remote("hpc", host)).host == host


def test_an_unknown_name_says_how_to_add_it() -> None:
    with pytest.raises(UsageError, match=r"known: hpc") as caught:
        registry.find({"hpc": HPC}, "other", "/p")
    assert caught.value.fix == "add it: ctrain remote add other [USER@]HOST"


def test_the_file_is_under_xdg_config_home_else_home() -> None:
    assert registry.remotes_path({"XDG_CONFIG_HOME": "/x"}) == "/x/ctrain/remotes.toml"
    assert registry.remotes_path({"HOME": "/h"}) == "/h/.config/ctrain/remotes.toml"
