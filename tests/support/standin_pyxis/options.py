"""srun's side of the pyxis stand-in: the ``--container-*`` options read as pyxis' args.c reads
them (docs/pyxis-facts.md, "Options"), refusals with pyxis' words, and the split of srun's
argv into its own options and the command."""

from __future__ import annotations

from dataclasses import dataclass, field


class Refused(Exception):
    """What srun prints before it exits non-zero (pyxis' error, then Slurm's)."""


# pyxis' options and whether each takes a value (args.c's spank_opts table).
PYXIS_OPTIONS = {
    "container-image": True,
    "container-mounts": True,
    "container-workdir": True,
    "container-name": True,
    "container-save": True,
    "container-mount-home": False,
    "no-container-mount-home": False,
    "container-remap-root": False,
    "no-container-remap-root": False,
    "container-entrypoint": False,
    "no-container-entrypoint": False,
    "container-entrypoint-log": False,
    "container-writable": False,
    "container-readonly": False,
    "container-env": True,
    "container-unshare": True,
}
MODELLED = {"container-image", "container-mounts", "container-workdir", "container-env",
            "container-mount-home", "no-container-mount-home"}  # fmt: skip
# srun options that take their value as the next argument (the ones tests and ctrain use).
SRUN_VALUED = {"-n", "-N", "-c", "-p", "-t", "-J", "-o", "-e", "-w", "-G", "-A", "--ntasks",
               "--nodes", "--cpus-per-task", "--partition", "--time", "--job-name", "--output",
               "--error", "--mpi", "--nodelist", "--gpus", "--gpus-per-node", "--account",
               "--mem", "--export", "--chdir", "--ntasks-per-node", "--signal"}  # fmt: skip
FROM_ENV = {"PYXIS_CONTAINER_IMAGE": "container-image", "PYXIS_CONTAINER_MOUNTS":
            "container-mounts", "PYXIS_CONTAINER_WORKDIR": "container-workdir",
            "PYXIS_CONTAINER_ENV": "container-env"}  # fmt: skip


@dataclass
class Mount:
    src: str
    dst: str
    flags: list[str]  # pyxis' defaults, then the ones given ("+" read as ",")


@dataclass
class Asked:
    image: str | None = None
    mounts: list[Mount] = field(default_factory=list)
    workdir: str | None = None
    env: list[str] = field(default_factory=list)
    mount_home: bool | None = None
    given: set[str] = field(default_factory=set)


def _once(current: str | None, name: str, value: str) -> str:
    if not value:
        raise Refused(f"pyxis: --{name}: argument required")
    if current is not None and current != value:
        raise Refused(f"pyxis: --{name} specified multiple times")
    return value


def _mount(entry: str, whole: str) -> Mount:
    src, sep, rest = entry.partition(":")
    if not src:
        raise Refused(f"pyxis: --container-mounts: invalid format: {whole}")
    dst, flags = src, ""
    if sep:
        dst, _, flags = rest.partition(":")
        if not dst:
            raise Refused(f"pyxis: --container-mounts: invalid format: {whole}")
    if src[0] in "./":
        defaults = ["x-create=auto", "rbind"]
    elif src in ("tmpfs", "umount"):
        raise Refused(f"stand-in: --container-mounts source {src} is not modelled")
    else:
        raise Refused('pyxis: mount source must be a relative path, an absolute path, "tmpfs" '
                      'or "umount"')  # fmt: skip
    if dst[0] not in "./":
        raise Refused("pyxis: mount target must be a relative path or an absolute path")
    return Mount(src, dst, defaults + [f for f in flags.replace("+", ",").split(",") if f])


def take(asked: Asked, name: str, value: str) -> None:
    """One option, as pyxis' callback for it takes it."""
    if name not in MODELLED:
        raise Refused(f"stand-in: --{name} is not modelled")
    asked.given.add(name.removeprefix("no-"))
    if name == "container-image":
        asked.image = _once(asked.image, name, value)
    elif name == "container-workdir":
        asked.workdir = _once(asked.workdir, name, value)
    elif name == "container-mounts":
        if not value:
            raise Refused("pyxis: --container-mounts: argument required")
        for entry in value.split(","):
            mount = _mount(entry, value)
            if mount not in asked.mounts:
                asked.mounts.append(mount)
    elif name == "container-env":
        if not value:
            raise Refused("pyxis: --container-env: argument required")
        for item in value.split(","):
            if not item:
                raise Refused(f"pyxis: --container-env: invalid format: {value}")
            if item not in asked.env:
                asked.env.append(item)
    else:
        home = name == "container-mount-home"
        if asked.mount_home is not None and asked.mount_home != home:
            raise Refused("pyxis: both --container-mount-home and --no-container-mount-home "
                          "were specified")  # fmt: skip
        asked.mount_home = home


def split(argv: list[str]) -> tuple[Asked, list[str], list[str]]:
    """pyxis' options, srun's other options, and the command."""
    asked, others, i = Asked(), [], 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        arg = argv[i]
        name, eq, value = arg[2:].partition("=")
        if arg.startswith("--") and "container" in name:
            if name not in PYXIS_OPTIONS:
                raise Refused(f"srun: unrecognized option '{arg}'")
            if PYXIS_OPTIONS[name] and not eq:
                i += 1
                if i == len(argv):
                    raise Refused(f"srun: option '--{name}' requires an argument")
                value = argv[i]
            elif not PYXIS_OPTIONS[name] and eq:
                raise Refused(f"srun: option '--{name}' doesn't allow an argument")
            take(asked, name, value)
        else:
            others.append(arg)
            if arg in SRUN_VALUED and i + 1 < len(argv):
                i += 1
                others.append(argv[i])
        i += 1
    command = argv[i + 1 :] if i < len(argv) and argv[i] == "--" else argv[i:]
    return asked, others, command


def from_environment(asked: Asked, environ: dict[str, str]) -> None:
    """PYXIS_CONTAINER_* for the options not given on the command line (args.c); the ones the
    stand-in does not model are refused."""
    for key in sorted(environ):
        if key.startswith("PYXIS_CONTAINER_") and key not in FROM_ENV:
            raise Refused(f"stand-in: {key} is not modelled")
        if key in FROM_ENV and FROM_ENV[key] not in asked.given:
            take(asked, FROM_ENV[key], environ[key])


def ignored(asked: Asked) -> list[str]:
    """Without an image, pyxis ignores the rest, each with an error line, and srun runs plainly."""
    shown = {"container-mount-home": "[no-]container-mount-home"}
    names = sorted(asked.given - {"container-image", "container-env"})
    return [f"pyxis: ignoring --{shown.get(name, name)} because neither --container-image nor "
            "--container-name is set" for name in names]  # fmt: skip
