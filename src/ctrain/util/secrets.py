"""What ctrain never prints as it is: the value of a variable whose name says it is a secret
(an API key, a token, a password), and the password in a URL (a proxy's ``user:pass@``). Job
logs and terminals on shared filesystems are often readable by others. Pure."""

from __future__ import annotations

import re

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL")
HIDDEN = "<hidden>"
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:)[^/@\s]+@")


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says its value is a secret (``WANDB_API_KEY``,
    ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD``, ...)."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def masked(name: str, value: str) -> str:
    """``value`` as ctrain prints it for variable ``name``: HIDDEN for a secret's (an empty
    one stays empty), else with any URL's password replaced by HIDDEN."""
    if is_secret_name(name):
        return HIDDEN if value else value
    return _USERINFO.sub(rf"\g<head>{HIDDEN}@", value)
