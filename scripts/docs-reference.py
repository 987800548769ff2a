"""The reference pages of the documentation site, written from the code so that they cannot drift.

- ``commands.md``: every command and option, walked from Click's tree (``ctrain.cli.main``);
- ``settings.md``: every setting with its variable, default and meaning (``ctrain.settings``);
- ``exit-codes.md``: every error class with its exit code (``ctrain.errors``);
- ``versions.md``: the version matrix (``src/ctrain/matrix.toml`` through ``ctrain.matrix``).

The page functions are pure: each returns the page's Markdown. MkDocs runs this file as a hook
(``hooks:`` in mkdocs.yml) and adds the pages to the site as it builds it, so they are never
written into docs/ nor kept in git. To read them without MkDocs:

    python scripts/docs-reference.py DIR     # writes DIR/commands.md, DIR/settings.md, ...
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

REPO = Path(__file__).resolve().parent.parent
GENERATED_NOTE = (
    "*This page is generated from the code when the site is built "
    "(`scripts/docs-reference.py`); edit the code, not the page.*"
)
_MARKDOWN_SPECIAL = re.compile(r"([\\*_<>\[\]|])")


def escape(text: str) -> str:
    """``text`` as Markdown that shows it as written: the characters Markdown would read as
    markup are escaped outside code spans (`...`), which are kept as they are."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: nothing is a code span
        return _MARKDOWN_SPECIAL.sub(r"\\\1", text).replace("`", "\\`")
    return "`".join(
        part if index % 2 else _MARKDOWN_SPECIAL.sub(r"\\\1", part)
        for index, part in enumerate(parts)
    )


def _help_text(text: str | None) -> str:
    """A docstring as Click shows it: Click's ``\\b`` (no rewrap) markers dropped."""
    lines = inspect.cleandoc(text or "").replace("``", "`").splitlines()
    return "\n".join(line for line in lines if line.strip() != "\b").strip()


# ---- commands ---------------------------------------------------------------------------------


def walk(
    command: click.Command, name: str, parent: click.Context | None = None
) -> Iterator[tuple[click.Context, click.Command]]:
    """Every command under ``command``, itself first, depth first in the order ``--help``
    lists them; each with the context Click would give it (for its usage and help)."""
    ctx = click.Context(command, info_name=name, parent=parent, **command.context_settings)
    yield ctx, command
    if isinstance(command, click.Group):
        for child_name in command.list_commands(ctx):
            child = command.get_command(ctx, child_name)
            if child is not None and not child.hidden:
                yield from walk(child, child_name, ctx)


def _command_section(ctx: click.Context, command: click.Command) -> list[str]:
    path = ctx.command_path
    usage = " ".join([path, *command.collect_usage_pieces(ctx)])
    lines = [f"## {path}", "", "```text", usage, "```", ""]
    help_text = _help_text(command.help)
    if help_text:
        lines += [escape(help_text), ""]
    arguments = [p for p in command.get_params(ctx) if isinstance(p, click.Argument)]
    if arguments:
        names = ", ".join(f"`{p.human_readable_name}`" for p in arguments)
        lines += [f"Arguments: {names}.", ""]
    options = [
        p.get_help_record(ctx) for p in command.get_params(ctx) if isinstance(p, click.Option)
    ]
    records = [record for record in options if record is not None]
    if records:
        lines += ["Options:", ""]
        lines += [f"- `{opts}`: {escape(text) if text else ''}".rstrip() for opts, text in records]
        lines.append("")
    if isinstance(command, click.Group):
        children = [
            (child_name, command.get_command(ctx, child_name))
            for child_name in command.list_commands(ctx)
        ]
        lines += ["Commands:", ""]
        for child_name, child in children:
            if child is None or child.hidden:
                continue
            anchor = slug(f"{path} {child_name}")
            short = escape(child.get_short_help_str(limit=120))
            lines.append(f"- [`{child_name}`](#{anchor}): {short}")
        lines.append("")
    return lines


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading of plain words."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def commands_page(root: click.Command | None = None) -> str:
    """Every command of ``root`` (ctrain's root command by default), with its usage, help,
    arguments and options, each option's help naming its ``CTRAIN_*`` variable and setting."""
    if root is None:
        from ctrain.cli import main as root
    lines = [
        "# Commands",
        "",
        GENERATED_NOTE,
        "",
        "Every command and option of `ctrain`, as `ctrain COMMAND --help` prints it. An option "
        "that is a setting names its `CTRAIN_*` variable and its default: the "
        "[settings](settings.md) page lists them all, with the config files that can set them "
        "too. A command that ends in `-- CMD...` runs everything after `--` as the command.",
        "",
    ]
    for ctx, command in walk(root, "ctrain"):
        lines += _command_section(ctx, command)
    return "\n".join(lines).rstrip() + "\n"


# ---- settings ---------------------------------------------------------------------------------


def setting_flags(root: click.Command | None = None) -> dict[str, list[str]]:
    """Setting name -> the flags that set it, over every command of ``root``: each option
    ``setting_option`` made names its setting (``SettingOption.setting``)."""
    from ctrain.cli._options import SettingOption

    if root is None:
        from ctrain.cli import main as root
    flags: dict[str, list[str]] = {}
    for ctx, command in walk(root, "ctrain"):
        for param in command.get_params(ctx):
            if isinstance(param, SettingOption):
                for flag in (*param.opts, *param.secondary_opts):
                    if flag not in flags.setdefault(param.setting, []):
                        flags[param.setting].append(flag)
    return flags


def flag_cell(setting: Any, flags: dict[str, list[str]]) -> str:
    """The flags of ``setting``, or why it has none (its row's ``flagless``)."""
    given = flags.get(setting.name, [])
    if given:
        return ", ".join(f"`{flag}`" for flag in given)
    return f"config/env only: {escape(setting.flagless)}" if setting.flagless else "(none)"


def _settings_table(settings: Any, flags: dict[str, list[str]]) -> list[str]:
    from ctrain.cli._options import written

    lines = [
        "| setting (config key) | environment variable | flag | default | meaning |",
        "|:--|:--|:--|:--|:--|",
    ]
    for setting in settings:
        flag = flag_cell(setting, flags)
        default = written(setting.default).replace("|", "\\|")
        lines.append(
            f"| `{setting.name}` | `{setting.env}` | {flag} | `{default}` | "
            f"{escape(setting.help)} |"
        )
    return lines


def settings_page(flags: dict[str, list[str]] | None = None) -> str:
    """Every setting of ``ctrain.settings`` (core, then ``ctrain bench``'s) with its config key,
    variable, flags, default and meaning."""
    from ctrain.settings_table import BENCH_SETTINGS, CORE_SETTINGS

    flags = setting_flags() if flags is None else flags
    lines = [
        "# Settings",
        "",
        GENERATED_NOTE,
        "",
        "Every setting has a config key, a `CTRAIN_*` environment variable and, on the commands "
        "that use it, a flag (a few are read where no command line reaches, and have none: "
        "config/env only). The first of these that is set wins:",
        "",
        "1. the flag on the command line;",
        "2. the environment variable;",
        "3. `./ctrain.toml` (the directory the command runs in);",
        "4. `$XDG_CONFIG_HOME/ctrain/config.toml` (`~/.config/ctrain/config.toml` when "
        "`XDG_CONFIG_HOME` is unset);",
        "5. the default below.",
        "",
        "A config file is TOML with the settings as top-level keys:",
        "",
        "```toml",
        "# ctrain.toml",
        'mode = "auto"',
        "collective_timeout = 900",
        "port_base = 24000",
        'cache_dir = "/scratch/me/ctrain"',
        "```",
        "",
        "`ctrain config show` prints each effective value and where it came from "
        "(`--json` for a program); a value that does not parse is an error naming the file and "
        "line. A list setting (`binds`) takes comma-separated items in its variable, a TOML "
        "list in a config file, and its flag repeated; a true/false setting takes `1`, `true`, "
        "`yes`, `on` or `0`, `false`, `no`, `off`, and its flag gives the value that is not its "
        "default (`--nv`: true, `--no-launch`: false).",
        "",
        "## Launch, containers, images and data",
        "",
        *_settings_table(CORE_SETTINGS, flags),
        "",
        "## `ctrain bench`",
        "",
        *_settings_table(BENCH_SETTINGS, flags),
    ]
    return "\n".join(lines).rstrip() + "\n"


# ---- exit codes -------------------------------------------------------------------------------


def error_classes() -> list[type]:
    """``CtrainError`` and every subclass of it that ``ctrain.errors`` defines, by exit code,
    then parents before their children."""
    from ctrain import errors

    found = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.CtrainError)
    ]
    return sorted(found, key=lambda cls: (cls.exit_code, len(cls.__mro__), cls.__name__))


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring, on one line (reST's double backticks as Markdown's)."""
    text = " ".join(_help_text(doc).split("\n\n")[0].split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def exit_codes_page() -> str:
    """Every exit code ctrain documents: 0, each ``ctrain.errors`` class's code with its
    docstring, ``REQUEUE_EXIT_CODE`` and ``STALLED_EXIT_CODE``; in code order."""
    from ctrain.errors import REQUEUE_EXIT_CODE, STALLED_EXIT_CODE

    rows: list[tuple[int, str, str]] = [(0, "success", "")]
    for cls in error_classes():
        rows.append((cls.exit_code, escape(first_sentence(cls.__doc__)), f"`{cls.__name__}`"))
    rows.append(
        (
            REQUEUE_EXIT_CODE,
            "training stopped on the time-limit signal after writing a checkpoint: the job "
            "script requeues the job, which resumes from it ([preemption](preemption.md))",
            "`REQUEUE_EXIT_CODE`",
        )
    )
    rows.append(
        (
            STALLED_EXIT_CODE,
            "a training rank in `fit` ended itself: no step for `CTRAIN_STALL_TIMEOUT` seconds "
            "(a peer stopped or lost, a hung collective or file system), or a Horovod rank "
            "under `srun --mpi=pmix` whose peer's process was lost ([preemption](preemption.md))",
            "`STALLED_EXIT_CODE`",
        )
    )
    rows.sort(key=lambda row: row[0])
    lines = [
        "# Exit codes",
        "",
        GENERATED_NOTE,
        "",
        "An error is one line on stderr that says what went wrong and what to do, never a "
        "traceback:",
        "",
        "```text",
        "ctrain: error: WHAT Fix: HOW",
        "```",
        "",
        "and the command exits with the code of its class in `ctrain.errors`. `ctrain launch` "
        "and `ctrain exec` replace themselves with the command they run, whose exit code is then "
        "the job step's; a training script that uses ctrain's API ends the same way when a "
        "ctrain error reaches its top. Several classes share 2: something given is wrong.",
        "",
        "| exit code | meaning | in `ctrain.errors` |",
        "|--:|:--|:--|",
    ]
    lines += [f"| {code} | {meaning} | {name} |" for code, meaning, name in rows]
    return "\n".join(lines) + "\n"


# ---- version matrix ---------------------------------------------------------------------------


def _patches(horovod: str, tf_version: str, repo: Path) -> str:
    """The patches of ctrain's series for this Horovod that apply to this TensorFlow, by number
    (``0001, 0002``), or ``none``; ``-`` when the checkout's patches/ is not there."""
    from ctrain.matrix import series

    path = repo / "patches" / f"horovod-{horovod}" / "series"
    if not path.is_file():
        return "-"
    names = series(path.read_text(encoding="utf-8"), tf_version)
    return ", ".join(name.split("-", 1)[0] for name in names) or "none"


def versions_page(rows: Any = None, repo: Path = REPO) -> str:
    """The version matrix: one row per TensorFlow, the default first, with what goes with it."""
    from ctrain.matrix import CUDA_RUNTIME, CUDNN, NCCL, load

    rows = load() if rows is None else rows
    lines = [
        "# Version matrix",
        "",
        GENERATED_NOTE,
        "",
        "The TensorFlow releases ctrain builds and tests, and what goes with each "
        "(`src/ctrain/matrix.toml`, the one place every pin lives: `make install`, the image "
        "recipes, `ctrain doctor` and the tests read it). The first row is the default; "
        "[choosing a TensorFlow](tensorflow.md) says how to pick another.",
        "",
        "| TensorFlow | tf-keras | TensorBoard | TensorFlow Datasets | Horovod | "
        "ctrain's Horovod patches | Open MPI (images) | GPU image: CUDA runtime / cuDNN / NCCL |",
        "|:--|:--|:--|:--|:--|:--|:--|:--|",
    ]
    for index, row in enumerate(rows):
        tensorflow = f"**{row.tensorflow}** (default)" if index == 0 else row.tensorflow
        cuda = " / ".join(row.cuda_wheels.get(name, "-") for name in (CUDA_RUNTIME, CUDNN, NCCL))
        lines.append(
            f"| {tensorflow} | {row.tf_keras} | {row.tensorboard} | {row.tensorflow_datasets} | "
            f"{row.horovod} | {_patches(row.horovod, row.tensorflow, repo)} | {row.openmpi} | "
            f"{cuda} |"
        )
    lines += [
        "",
        "The CUDA wheels of each GPU image, in full:",
        "",
    ]
    for row in rows:
        wheels = ", ".join(f"`{name}=={version}`" for name, version in row.cuda_wheels.items())
        lines.append(f"- TensorFlow {row.tensorflow}: {wheels}")
    lines += ["", *_gpu_code_table(rows)]
    return "\n".join(lines) + "\n"


def _gpu_code_table(rows: Any) -> list[str]:
    """Each TensorFlow's GPU code and the drivers it needs (the matrix's ``gpu_code``)."""
    lines = [
        "## GPU code and drivers",
        "",
        "The GPU code in each TensorFlow's wheel (the matrix's `gpu_code`, read from its "
        "`libtensorflow_cc.so.2` with `cuobjdump`) and the Linux driver it needs; which GPUs "
        "run it, and how this is known: "
        "[Build images](images.md#nvidia-driver-and-gpu-generations). `ctrain doctor` holds "
        "each GPU of a node against it (its `gpu-code` line).",
        "",
        "| TensorFlow | built with CUDA | SASS for compute capability | PTX for | "
        "minimum driver (CUDA 12) | driver for the PTX JIT | newest compute capability "
        "reported to work |",
        "|:--|:--|:--|:--|:--|:--|:--|",
    ]
    for row in rows:
        code = row.gpu_code
        lines.append(
            f"| {row.tensorflow} | {code.cuda} | {', '.join(code.sass)} | {code.ptx} | "
            f">= {code.cuda12_driver} | >= {code.driver} | {code.newest} |"
        )
    return lines


# ---- the site ---------------------------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "commands.md": commands_page,
    "settings.md": settings_page,
    "exit-codes.md": exit_codes_page,
    "versions.md": versions_page,
}


def pages() -> dict[str, str]:
    """Every generated page: its path under docs/ -> its Markdown."""
    return {name: page() for name, page in PAGES.items()}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs' hook: the generated pages join the site's files before the nav is built."""
    from mkdocs.structure.files import File

    for name, text in pages().items():
        files.append(File.generated(config, name, content=text))
    return files


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/docs-reference.py DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (out / name).write_text(text, encoding="utf-8")
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
