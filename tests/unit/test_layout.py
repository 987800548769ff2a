"""The layout rules of docs/architecture.md, on src/ctrain: no import cycle, counting imports
inside functions as well (an import moved into a function to dodge a cycle is still one); no
import from a floor up to a higher one (FLOORS); container/ and images/ never import each other
(what both need lives below them); no module over 400 lines, no function over 60; every module
is named in the module map at the top of docs/architecture.md. And on tests/: every module is a
test module, a conftest.py or an __init__.py, but for the helpers of tests/support/ and the
training scripts of tests/scripts/."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from tests.support.helpers import REPO

SRC = REPO / "src"


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``tree`` imports, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names & set(known)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: imported(ast.parse(path.read_text()), known) - {name} for name, path in known.items()
    }


def test_src_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


# The floors of docs/architecture.md, by top-level module or package of ctrain: a module imports
# from its own floor and the ones below, never from above. A new top-level name must be given one.
FLOORS = {
    # the ground: shared facts, the settings' rows and precedence, pure helpers
    **dict.fromkeys(
        ["ctrain", "errors", "names", "util", "profile_window", "settings_table", "settings"], 0
    ),
    **dict.fromkeys(["checkline", "matrix", "references", "releases"], 0),
    "launch": 1,  # what a rank does, in the image
    **dict.fromkeys(["container", "images", "network", "train"], 2),
    **dict.fromkeys(["slurm", "distributed", "planner", "doctor", "remote"], 3),
    **dict.fromkeys(["bench", "examples"], 4),
    **dict.fromkeys(["cli", "__main__"], 5),
}


def floor(module: str) -> int:
    parts = module.split(".")
    return FLOORS[parts[1] if len(parts) > 1 else parts[0]]


def upward(imports: dict[str, set[str]]) -> list[str]:
    """Every import from a floor up to a higher one."""
    return [
        f"{module} (floor {floor(module)}) -> {other} (floor {floor(other)})"
        for module, others in imports.items()
        for other in others
        if floor(other) > floor(module)
    ]


def test_every_import_points_down_or_across() -> None:
    assert upward(graph()) == []


def test_an_import_up_a_floor_is_found() -> None:
    """The arrow the settings once had: the ground floor importing launch/."""
    imports = {"ctrain.settings": {"ctrain.launch.profile", "ctrain.names"}, "ctrain.names": set()}
    assert upward(imports) == ["ctrain.settings (floor 0) -> ctrain.launch.profile (floor 1)"]


def test_container_and_images_never_import_each_other() -> None:
    crossing = [
        f"{module} -> {other}"
        for module, others in graph().items()
        for other in others
        for here, there in (
            ("ctrain.container", "ctrain.images"),
            ("ctrain.images", "ctrain.container"),
        )
        if module.startswith(here + ".") and other.startswith(there)
    ]
    assert crossing == []


MODULE_LINES, FUNCTION_LINES = 400, 60


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    too_long = []
    for name, path in modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {lines} lines")
    assert too_long == []


ARCHITECTURE = REPO / "docs" / "architecture.md"
# Folders of package data, not modules (util/shipped.py finds them): the map names the folder.
PACKAGE_DATA = ("examples",)


def module_map(text: str) -> dict[str, str]:
    """The map under ``src/ctrain/`` in docs/architecture.md, by entry (``errors.py``,
    ``launch/``...): each entry's lines, a line indented further going to the entry above it."""
    lines = text.splitlines()
    entries: dict[str, str] = {}
    entry = ""
    for line in lines[lines.index("    src/ctrain/") + 1 :]:
        if line and not line.startswith("    "):
            break
        if match := re.match(r" {6}(\S+)", line):
            entry = match.group(1)
        entries[entry] = entries.get(entry, "") + line + "\n"
    return entries


def said(name: str, text: str) -> bool:
    """``name`` written in ``text`` as itself, not as part of a longer name, a path or a flag."""
    return re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w-])", text) is not None


def unnamed(paths: Iterable[Path], entries: dict[str, str]) -> list[str]:
    """The modules of ``paths`` (relative to src/ctrain) that the map names nowhere. A top-level
    module is named as ``name.py`` anywhere in the map, a top-level package (its __init__.py) by
    its own entry ``name/``; a module in a folder is named by its name (``tuning``, with or
    without ``.py``; ``stores/`` for a package) in its top-level folder's entry."""
    everything = "".join(entries.values())
    missing = []
    for path in paths:
        *folders, name = path.parts
        if name == "__init__.py":
            if not folders:
                continue  # ctrain itself: the map's root
            *folders, package = folders
            name = package + "/"
        if not folders:
            found = name in entries if name.endswith("/") else said(name, everything)
        elif folders[0] in PACKAGE_DATA:
            found = folders[0] + "/" in entries
        else:
            found = said(name.removesuffix(".py"), entries.get(folders[0] + "/", ""))
        if not found:
            missing.append(path.as_posix())
    return sorted(missing)


def test_every_module_is_named_in_the_architecture_map() -> None:
    package = SRC / "ctrain"
    paths = [path.relative_to(package) for path in package.rglob("*.py")]
    missing = unnamed(paths, module_map(ARCHITECTURE.read_text()))
    assert not missing, f"named nowhere in docs/architecture.md's module map: {', '.join(missing)}"


def test_a_module_the_map_does_not_name_is_found() -> None:
    text = (
        "Intro\n\n    src/ctrain/\n"
        "      errors.py        every error class\n"
        "      launch/          jobenv (the variables) -> plan (ports: the window;\n"
        "                       --profile's window) -> start\n"
        "      images/          stores/: base, sif\n"
        "      examples/        package data\n\n"
        "planner.py is named here, below the map: not in it.\n"
    )
    paths = [
        Path(name)
        for name in (
            "__init__.py",
            "errors.py",
            "planner.py",
            "util/__init__.py",
            "launch/__init__.py",
            "launch/ports.py",
            "launch/profile.py",
            "launch/start.py",
            "launch/tuning.py",
            "images/stores/__init__.py",
            "images/stores/sif.py",
            "images/stores/engine.py",
            "examples/mnist_cnn.py",
        )
    ]
    assert unnamed(paths, module_map(text)) == [
        "images/stores/engine.py",
        "launch/profile.py",
        "launch/tuning.py",
        "planner.py",
        "util/__init__.py",
    ]


TESTS = REPO / "tests"
# Where the modules that are not tests live: what the tests share, and the scripts they run.
NOT_TESTS = ("support", "scripts")


def misplaced(paths: Iterable[Path]) -> list[str]:
    """The modules of ``paths`` (relative to tests/) that are neither a test module
    (``test_*.py``), a ``conftest.py`` nor an ``__init__.py``, outside tests/support/ and
    tests/scripts/: a helper beside the tests, where it reads like a test or a source module."""
    return sorted(
        path.as_posix()
        for path in paths
        if path.parts[0] not in NOT_TESTS
        and not path.name.startswith("test_")
        and path.name not in ("conftest.py", "__init__.py")
    )


def test_every_module_under_tests_is_a_test_but_the_support_and_the_scripts() -> None:
    paths = [path.relative_to(TESTS) for path in TESTS.rglob("*.py")]
    found = misplaced(paths)
    assert not found, f"not a test module, outside tests/support and tests/scripts: {found}"


def test_a_helper_beside_the_tests_is_found() -> None:
    paths = [
        Path(name)
        for name in (
            "__init__.py",
            "conftest.py",
            "unit/launch/test_plan.py",
            "unit/launch/environs.py",
            "unit/slurm/conftest.py",
            "integration/jobs.py",
            "integration/scripts/train_tiny.py",
            "helpers.py",
            "support/helpers.py",
            "support/images/lanes.py",
            "scripts/train_tiny.py",
        )
    ]
    assert misplaced(paths) == [
        "helpers.py",
        "integration/jobs.py",
        "integration/scripts/train_tiny.py",
        "unit/launch/environs.py",
    ]
