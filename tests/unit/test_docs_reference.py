"""The generated reference pages of the documentation site (scripts/docs-reference.py): every
command and option, every setting, every error class and every row of the version matrix is on
its page, the text does not depend on who generates it or where, and the site's nav has each
page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from ctrain import errors, matrix
from ctrain.cli import COMMANDS
from ctrain.cli import main as root
from ctrain.cli._options import setting_option, written
from ctrain.settings_table import SETTINGS, Value
from tests.support.helpers import DOCS_REFERENCE, REPO, docs_reference

SCRIPT = DOCS_REFERENCE
ref = docs_reference()


def every_command(
    command: click.Command, path: str, parent: click.Context | None = None
) -> Iterator[tuple[str, click.Command, click.Context]]:
    """The command tree as this test walks it, apart from the script's walk."""
    ctx = click.Context(command, info_name=path.split()[-1], parent=parent)
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            assert child is not None, f"{path} {name}"
            yield from every_command(child, f"{path} {name}", ctx)


def test_every_command_is_a_section_with_every_option_of_it() -> None:
    page = ref.commands_page()
    headings = re.findall(r"^## (.+)$", page, flags=re.M)
    walked = list(every_command(root, "ctrain"))
    assert headings == [path for path, _, _ in walked]
    assert {f"ctrain {name}" for name in COMMANDS} <= set(headings)
    sections = dict(zip(headings, re.split(r"^## .+$", page, flags=re.M)[1:], strict=True))
    for path, command, ctx in walked:
        for param in command.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden:
                for flag in (*param.opts, *param.secondary_opts):
                    assert flag in sections[path], f"{path}: {flag}"
    # a setting's option says its variable, as --help does
    assert "CTRAIN\\_IMAGE" in sections["ctrain job render"]
    # subcommands of a group are linked to their own sections
    assert "(#ctrain-job-render)" in sections["ctrain job"]


def test_every_setting_is_a_row_with_its_variable_default_and_flag() -> None:
    page = ref.settings_page()
    rows = {
        match.group(1): line
        for line in page.splitlines()
        if (match := re.match(r"^\| `(\w+)` \|", line))
    }
    assert list(rows) == [setting.name for setting in SETTINGS]
    flags = ref.setting_flags()
    for setting in SETTINGS:
        row = rows[setting.name]
        assert f"`{setting.env}`" in row
        assert f"`{written(setting.default)}`" in row.replace("\\|", "|")
        cell = row.split(" | ")[2]
        if setting.flagless:
            assert cell == f"config/env only: {ref.escape(setting.flagless)}", setting.name
        else:
            assert cell == ", ".join(f"`{flag}`" for flag in flags[setting.name]), setting.name
    assert "(none)" not in page
    assert "`--image`" in rows["image"]
    assert "`--collective-timeout`" in rows["collective_timeout"]
    assert rows["binds"].split(" | ")[2] == "`-B`, `--bind`"
    assert rows["launch"].split(" | ")[2] == "`--no-launch`"
    assert rows["sync_exclude"].split(" | ")[2] == "`--exclude`"


def test_a_flag_is_listed_for_its_option_not_for_its_help() -> None:
    """``setting_flags`` reads the options ``setting_option`` made; a hand-written option whose
    help names a setting sets nothing, and is not listed."""

    @click.group()
    def group() -> None:
        pass

    @group.command()
    @setting_option("runtime")
    @click.option("--image", help="Image. [env CTRAIN_IMAGE; setting image]")
    def command(**flags: str | None) -> None:
        pass

    assert ref.setting_flags(group) == {"runtime": ["--runtime"]}


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "none"),
        ((), "none"),
        (False, "false"),
        (True, "true"),
        (600, "600"),
        (("a", "b"), "a,b"),
    ],
)
def test_a_default_is_shown_as_a_user_writes_it(value: Value, shown: str) -> None:
    assert written(value) == shown


def subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= subclasses(sub)
    return found


def test_the_exit_code_page_lists_every_error_class_with_its_code() -> None:
    page = ref.exit_codes_page()
    rows = [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line in page.splitlines()
        if re.match(r"^\| \d+ \|", line)
    ]
    listed = {re.sub(r"`", "", row[-1]): int(row[0]) for row in rows if row[-1]}
    for cls in {errors.CtrainError} | subclasses(errors.CtrainError):
        assert listed.get(cls.__name__) == cls.exit_code, cls.__name__
    assert listed["REQUEUE_EXIT_CODE"] == errors.REQUEUE_EXIT_CODE
    assert listed["Interrupted"] == 130
    codes = [int(row[0]) for row in rows]
    assert codes == sorted(codes) and codes[0] == 0


def test_the_version_page_has_every_row_of_the_matrix_default_first() -> None:
    page = ref.versions_page().split("## GPU code and drivers")[0]
    rows = [line for line in page.splitlines() if re.match(r"^\| (\*\*)?\d", line)]
    matrix_rows = matrix.load()
    assert len(rows) == len(matrix_rows)
    assert rows[0].startswith(f"| **{matrix_rows[0].tensorflow}** (default) |")
    for line, row in zip(rows, matrix_rows, strict=True):
        for version in (row.tensorflow, row.tf_keras, row.horovod, row.openmpi):
            assert f" {version} " in line or f"**{version}**" in line
        assert row.cuda_wheels[matrix.NCCL] in line


def test_the_gpu_code_table_is_the_matrix_and_the_images_page_holds_no_copy() -> None:
    page = ref.versions_page()
    gpu_rows = page.split("## GPU code and drivers")[1]
    lines = [line for line in gpu_rows.splitlines() if re.match(r"^\| \d", line)]
    matrix_rows = matrix.load()
    assert len(lines) == len(matrix_rows)
    for line, row in zip(lines, matrix_rows, strict=True):
        code = row.gpu_code
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells == [
            row.tensorflow,
            code.cuda,
            ", ".join(code.sass),
            code.ptx,
            f">= {code.cuda12_driver}",
            f">= {code.driver}",
            code.newest,
        ]
    images = (REPO / "docs" / "images.md").read_text(encoding="utf-8")
    assert "(versions.md#gpu-code-and-drivers)" in images
    tables = [line for line in images.splitlines() if line.startswith("|")]
    for row in matrix_rows:
        assert not [line for line in tables if f"| {row.tensorflow} |" in line], row.tensorflow


def test_the_patches_column_reads_the_series_of_the_checkout(tmp_path: Path) -> None:
    series = tmp_path / "patches" / "horovod-9.9" / "series"
    series.parent.mkdir(parents=True)
    series.write_text("0001-a.patch all\n0002-b.patch >=2.19\n", encoding="utf-8")
    assert ref._patches("9.9", "2.21.0", tmp_path) == "0001, 0002"
    assert ref._patches("9.9", "2.18.1", tmp_path) == "0001"
    assert ref._patches("1.0", "2.18.1", tmp_path) == "-"


def test_markdown_is_escaped_outside_code_spans_only() -> None:
    assert ref.escape("values (*KEY*, *TOKEN*)") == "values (\\*KEY\\*, \\*TOKEN\\*)"
    assert ref.escape("run `job render|submit` [x]") == "run `job render|submit` \\[x\\]"
    assert ref.escape("a ` alone_") == "a \\` alone\\_"


def test_the_pages_do_not_depend_on_the_callers_environment_or_config(tmp_path: Path) -> None:
    """Generated twice: here, and in a fresh process with settings in the environment and in a
    config file of its working directory; the text is the same (defaults, not effective values)."""
    (tmp_path / "ctrain.toml").write_text('mode = "horovod"\nport_base = 24000\n', encoding="utf-8")
    env = {
        **os.environ,
        "CTRAIN_IMAGE": "docker://example.org/other:1",
        "CTRAIN_COLLECTIVE_TIMEOUT": "42",
        "XDG_CONFIG_HOME": str(tmp_path),
        "COLUMNS": "40",
    }
    out = tmp_path / "pages"
    subprocess.run(
        [sys.executable, str(SCRIPT), str(out)], cwd=tmp_path, env=env, check=True, timeout=60
    )
    here = ref.pages()
    assert sorted(path.name for path in out.iterdir()) == sorted(here)
    for name, text in here.items():
        assert (out / name).read_text(encoding="utf-8") == text, name
    assert here == ref.pages()


def test_the_site_nav_has_every_generated_page_and_docs_holds_none_of_them() -> None:
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    nav = re.findall(r"^\s+- [^:]+: (\S+\.md)$", config, flags=re.M)
    for name in ref.PAGES:
        assert name in nav, name
        assert not (REPO / "docs" / name).exists(), f"docs/{name} would hide the generated page"
    assert "scripts/docs-reference.py" in config
    for path in nav:
        assert path in ref.PAGES or (REPO / "docs" / path).is_file(), path


def test_the_links_of_the_generated_pages_go_to_pages_of_the_site() -> None:
    for name, text in ref.pages().items():
        for target in re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]+)?\)", text):
            assert target in ref.PAGES or (REPO / "docs" / target).is_file(), (name, target)


def test_mkdocs_builds_the_site_with_the_generated_pages(tmp_path: Path) -> None:
    """The hook as mkdocs.yml names it, in a strict build (what `make docs` runs)."""
    pytest.importorskip("mkdocs")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(REPO / "mkdocs.yml"), site_dir=str(tmp_path), strict=True)
    build(config)
    for name in ref.PAGES:
        assert (tmp_path / name.replace(".md", ".html")).is_file(), name
    assert "CTRAIN_COLLECTIVE_TIMEOUT" in (tmp_path / "settings.html").read_text(encoding="utf-8")
