"""Apptainer's command-line rules: flags end at the first positional argument, ``--flag=value``,
unknown flags (or flags the program's version does not have) and wrong arity are fatal."""

from __future__ import annotations

from tests.support.standin.identity import Fatal, Identity, Usage

ACTION = (
    "--cleanenv -e --nv --writable-tmpfs --no-eval --disable-cache --no-https",
    "--bind -B --overlay -o --env --env-file --cwd --pwd",
)
# Real exec/run/shell flags whose effect the stand-in cannot show on the host: refused loudly
UNMODELLED_TEXT = (
    "--nvccli --rocm --contain -c --containall -C --no-home --fakeroot -f --userns -u --pid -p "
    "--ipc -i --compat --home -H --workdir -W --scratch -S --mount --app --network --net -n "
    "--hostname"
)
UNMODELLED = set(UNMODELLED_TEXT.split())
FLAG_TEXT = {  # verb: (modelled flags without a value, with a value); Apptainer has more
    "exec": ACTION,
    "run": ACTION,
    "shell": (ACTION[0], ACTION[1] + " --shell -s"),
    "pull": ("--force -F --disable-cache --no-https", "--dir --name --arch --tmpdir"),
    "build": (
        "--force -F --fakeroot -f --warn-unused-build-args --disable-cache --notest -T "
        "--fix-perms --no-cleanup --no-https",
        "--build-arg --build-arg-file --bind -B --tmpdir --section",
    ),
    "inspect": ("--labels -l --deffile -d --environment -e --json -j --all --runscript -r", ""),
    "overlay create": ("--sparse -S --fakeroot -f", "--size -s --create-dir"),
}
FLAGS = {verb: (set(b.split()), set(v.split())) for verb, (b, v) in FLAG_TEXT.items()}
POSITIONALS = {  # verb: (least, most) positional arguments; None: no upper bound
    "exec": (2, None),
    "run": (1, None),
    "shell": (1, None),
    "pull": (1, 2),
    "build": (2, 2),
    "inspect": (1, 1),
    "overlay create": (1, 1),
}

Flags = list[tuple[str, str]]


def parse(verb: str, args: list[str], who: Identity) -> tuple[Flags, list[str]]:
    """(flags as (name, value), positionals); flags end at the first positional or ``--``."""
    booleans, valued = FLAGS[verb]
    command = verb.split()[-1]  # cobra names the subcommand: "create" for overlay create
    flags: Flags = []
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] != "-":
        arg = rest.pop(0)
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if verb in ("exec", "run", "shell") and name in UNMODELLED:
            raise Fatal(f"stand-in: {name} is an Apptainer flag this stand-in does not model")
        if name not in booleans | valued or not who.has_flag(name):
            raise Usage(f'Error for command "{command}": unknown flag: {name}')
        if name in valued and not eq:
            if not rest:
                raise Usage(f'Error for command "{command}": flag needs an argument: {name}')
            value = rest.pop(0)
        flags.append((name, value if name in valued else "true"))
    least, most = POSITIONALS[verb]
    if len(rest) < least or (most is not None and len(rest) > most):
        raise Usage(f'Error for command "{command}": {arity(least, most, len(rest))}')
    return flags, rest


def arity(least: int, most: int | None, got: int) -> str:
    """cobra's words for a wrong number of positional arguments."""
    if most is None:
        return f"requires at least {least} arg(s), only received {got}"
    if least == most:
        return f"accepts {least} arg(s), received {got}"
    return f"accepts between {least} and {most} arg(s), received {got}"


def values(flags: Flags, *names: str) -> list[str]:
    return [value for name, value in flags if name in names]


def given(flags: Flags, *names: str) -> bool:
    return any(name in names for name, _ in flags)
