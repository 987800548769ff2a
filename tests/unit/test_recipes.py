"""The image recipes take every pin from the version matrix (src/ctrain/matrix.toml): no recipe
names a version of it; Dockerfile.gpu's ARGs, the Apptainer definitions' build args (parsed with
spython, built with the Apptainer stand-in) and docker/install.sh's inputs are the matrix's pin
names; pyproject's train extra admits every row."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from spython.main.parse.parsers import SingularityParser

from ctrain import __version__, matrix
from tests.support import fake_apptainer
from tests.support.helpers import PYPROJECT, REPO, Sandbox, need, sandbox

DOCKERFILE = REPO / "Dockerfile.gpu"
INSTALL = REPO / "docker" / "install.sh"
DEFS = REPO / "definitions"
ROWS = matrix.load()
# The build args of both recipes: the matrix's pins and ctrain's version (ctrain.__version__).
BUILD_ARGS = {*matrix.PIN_NAMES, "CTRAIN_VERSION"}
RECIPES = [
    "Dockerfile.gpu",
    "definitions/ctrain-gpu.def",
    "definitions/ctrain-cpu.def",
    "definitions/from-docker.def",
    "docker/install.sh",
    "scripts/wheelhouse.sh",
    "scripts/image-build.sh",
    "Makefile",
    "pyproject.toml",
]
CASES = [(row.tensorflow, flavour) for row in ROWS for flavour in matrix.FLAVOURS]


def row_versions(row: matrix.Row) -> set[str]:
    return {
        row.tensorflow,
        row.tf_keras,
        row.tensorflow_datasets,
        row.horovod,
        row.openmpi,
        row.horovod_nvcc,
        *row.cuda_wheels.values(),
    }


def build_args(tf: str, flavour: str) -> dict[str, str]:
    """What `make image` passes: the matrix's pins and ctrain's version."""
    pins = matrix.pins(matrix.find(ROWS, tf), flavour)
    return pins | {"CTRAIN_VERSION": __version__}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerfile_args() -> dict[str, str | None]:
    """ARG name -> its default (None: no default)."""
    found: dict[str, str | None] = {}
    for word, rest in dockerfile_instructions():
        if word == "ARG":
            name, eq, value = rest.partition("=")
            found.setdefault(name, value if eq else None)
    return found


def dockerfile_labels() -> dict[str, str]:
    """Label -> its value with ${NAME} as {{ NAME }} (the definitions' form)."""
    (labels,) = [rest for word, rest in dockerfile_instructions() if word == "LABEL"]
    pairs = dict(item.split("=", 1) for item in shlex.split(labels))
    return {k: re.sub(r"\$\{(\w+)\}", r"{{ \1 }}", v) for k, v in pairs.items()}


def arguments(text: str) -> dict[str, str]:
    """The %arguments section's defaults (NAME=VALUE lines)."""
    m = re.search(r"^%arguments\s*\n((?:[ \t]+\S.*\n)*)", text, re.M)
    return dict(line.strip().split("=", 1) for line in m.group(1).splitlines()) if m else {}


def parse_def(name: str, tmp_path: Path) -> tuple[object, str]:
    """spython's reading of a definition, its header's placeholders filled in with the
    %arguments defaults as Apptainer fills them (spython reads only ``Bootstrap: docker...``)."""
    text = (DEFS / name).read_text()
    filled = tmp_path / name
    defaults = arguments(text)
    header = re.compile(r"^(Bootstrap|From): \{\{ (\w+) \}\}$", re.M)
    filled.write_text(
        header.sub(lambda m: f"{m[1]}: {defaults[m[2]]}" if m[2] in defaults else m[0], text)
    )
    (recipe,) = SingularityParser(str(filled)).recipe.values()
    return recipe, text


def placeholders(text: str) -> set[str]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", "\n".join(lines)))


def header(text: str, key: str) -> str:
    m = re.search(rf"^{key}:\s*(\S.*)$", text, re.M)
    assert m, f"no {key}: header"
    return m.group(1).strip()


@pytest.mark.parametrize("name", RECIPES)
def test_no_recipe_names_a_version_of_the_matrix(name: str) -> None:
    text = (REPO / name).read_text()
    for version in set().union(*(row_versions(row) for row in ROWS)):
        found = re.search(rf"(?<![\w.]){re.escape(version)}(?![\w]|\.\d)", text)
        assert found is None, f"{name} names {version}: {text[found.start() - 60 : found.end()]!r}"


def test_dockerfile_pins_are_the_matrix_names_without_defaults() -> None:
    args = dockerfile_args()
    assert args.pop("BASE_IMAGE") == "debian:12-slim"
    assert args.pop("DEBIAN_MIRROR") == ""
    assert args == dict.fromkeys(BUILD_ARGS)  # a missing one stops install.sh (need)


@pytest.mark.parametrize("flavour", matrix.FLAVOURS)
def test_definition_build_args_are_the_dockerfiles_args(flavour: str, tmp_path: Path) -> None:
    recipe, text = parse_def(f"ctrain-{flavour}.def", tmp_path)
    assert (header(text, "Bootstrap"), header(text, "From")) == ("{{ BOOT }}", "{{ FROM }}")
    # the base alone has a default, the Dockerfile's; a missing pin fails the build
    assert arguments(text) == {"BOOT": "docker", "FROM": dockerfile_args()["BASE_IMAGE"]}
    assert recipe.fromHeader == "debian:12-slim"  # type: ignore[attr-defined]
    assert placeholders(text) == BUILD_ARGS | {"BOOT", "FROM"}
    post = recipe.install  # type: ignore[attr-defined]
    exported = dict(re.findall(r"^\s*export (\w+)=(.+?)\s*$", "\n".join(post), re.M))
    assert exported == {name: f"{{{{ {name} }}}}" for name in BUILD_ARGS}
    assert "/opt/ctrain/install.sh all" in post
    files = [f.split() for f in recipe.files]  # type: ignore[attr-defined]
    assert files == [
        ["docker/install.sh", "/opt/ctrain/install.sh"],
        [f"build/wheelhouse/{flavour}-tf{{{{", "TF_VERSION", "}}", "/wheelhouse"],
        ["build/wheelhouse/ctrain", "/wheelhouse-ctrain"],
    ]


@pytest.mark.parametrize("flavour", matrix.FLAVOURS)
def test_definition_labels_are_the_dockerfiles(flavour: str, tmp_path: Path) -> None:
    recipe, _ = parse_def(f"ctrain-{flavour}.def", tmp_path)
    labels = dict(line.split(None, 1) for line in recipe.labels)  # type: ignore[attr-defined]
    wanted = dockerfile_labels()
    assert labels.keys() - {"org.opencontainers.image.licenses"} <= wanted.keys()
    assert {k for k in wanted if k.startswith("io.ctrain.")} <= labels.keys()
    assert labels["org.opencontainers.image.title"] == f"ctrain-{flavour}"
    for key, value in labels.items():
        if key != "org.opencontainers.image.title":
            assert value == wanted[key], key


@pytest.mark.parametrize(("tf", "flavour"), CASES)
def test_a_definition_builds_with_the_matrix_pins_only(
    tmp_path: Path, tf: str, flavour: str
) -> None:
    """Built by the Apptainer stand-in as `make image` does (--build-arg-file): the labels are the
    matrix's; a missing pin and a pin the definition does not take are fatal (facts: build)."""
    box: Sandbox = sandbox(tmp_path)
    fake_apptainer.install(box.bin, "apptainer")
    pins = build_args(tf, flavour)
    arg_file = tmp_path / "pins.env"
    arg_file.write_text("".join(f"{k}={v}\n" for k, v in pins.items()))
    spec = str(DEFS / f"ctrain-{flavour}.def")
    built = fake_apptainer.run(box, "build", "--build-arg-file", str(arg_file), "o.sif", spec)
    assert built.returncode == 0, built.stderr
    shown = json.loads(fake_apptainer.run(box, "inspect", "--json", "o.sif").stdout)
    labels = shown["data"]["attributes"]["labels"]
    assert labels["io.ctrain.tensorflow.version"] == tf
    assert labels["io.ctrain.nccl.version"] == pins["NCCL_VERSION"]
    assert labels["io.ctrain.flavour"] == flavour
    arg_file.write_text("".join(f"{k}={v}\n" for k, v in pins.items() if k != "TFDS_VERSION"))
    again = ["build", "-F", "--build-arg-file", str(arg_file)]
    missing = fake_apptainer.run(box, *again, "o.sif", spec)
    assert missing.returncode == 255 and "TFDS_VERSION" in missing.stderr
    extra = ["--build-arg", "TFDS_VERSION=1", "--build-arg", "PYTHON=3"]
    unused = fake_apptainer.run(box, *again, *extra, "o.sif", spec)
    assert unused.returncode == 255 and "PYTHON" in unused.stderr


@pytest.mark.parametrize("flavour", matrix.FLAVOURS)
def test_a_definition_refuses_the_other_flavours_pins(flavour: str, tmp_path: Path) -> None:
    """%post's first step: the FLAVOUR build arg must be the definition's own."""
    recipe, _ = parse_def(f"ctrain-{flavour}.def", tmp_path)
    post = "\n".join(recipe.install)  # type: ignore[attr-defined]
    check = post.split("export ", 1)[0]  # the lines before the exports
    for given in matrix.FLAVOURS:
        script = check.replace("{{ FLAVOUR }}", given)
        done = subprocess.run(["sh", "-ec", script], capture_output=True, text=True, timeout=30)
        assert (done.returncode == 0) == (given == flavour), done.stderr
        if given != flavour:
            assert f"FLAVOUR={given}" in done.stderr and "Fix:" in done.stderr


def test_the_two_definitions_differ_only_in_their_flavour_and_help() -> None:
    """Outside the header comment and %help, each is the other with "cpu" and "gpu" swapped (and
    the Makefile's target of each, image-cpu and image)."""

    def body(flavour: str) -> str:
        text = (DEFS / f"ctrain-{flavour}.def").read_text().split("\n%help")[0]
        text = text.replace("make image-cpu", "make image")
        lines = [line for line in text.splitlines() if not line.startswith("#")]
        return "\n".join(lines).replace(flavour, "FLAVOUR")

    assert body("cpu") == body("gpu")


@pytest.mark.parametrize("name", ["ctrain-gpu.def", "ctrain-cpu.def", "from-docker.def"])
def test_definition_sections(name: str, tmp_path: Path) -> None:
    recipe, text = parse_def(name, tmp_path)
    assert recipe.cmd.strip() == 'exec ctrain launch -- "$@"'  # type: ignore[attr-defined]
    assert 'echo "ctrain doctor" >> /tests.sh' in recipe.install  # type: ignore[attr-defined]
    environ = dict(e.split("=", 1) for e in recipe.environ)  # type: ignore[attr-defined]
    assert environ["PATH"].startswith("/opt/ctrain/venv/bin:")
    assert re.search(r"^%help\s*$", text, re.M)
    if name == "from-docker.def":
        assert header(text, "Bootstrap") == "docker-daemon"
        assert header(text, "From") == "{{ IMAGE }}"


def test_dockerfile_entrypoint_and_steps() -> None:
    instructions = dockerfile_instructions()
    (entrypoint,) = [rest for word, rest in instructions if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["ctrain", "launch", "--"]
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    steps = re.findall(r"/opt/ctrain/install\.sh ([a-z ]+)", runs)
    assert " ".join(steps).split() == ["system", "python", "ctrain", "verify", "clean"]
    assert "type=secret,id=ca_bundle" in runs  # the CA bundle is a secret, not a layer
    assert not re.search(r"^\s*(COPY|ADD)\s+\S*wheelhouse", DOCKERFILE.read_text(), re.M)


def test_install_script_needs_only_what_the_recipes_set() -> None:
    needed = set(re.findall(r"\bneed ([A-Z_ ]+)", INSTALL.read_text()))
    names = {n for group in needed for n in group.split()}
    assert names - {"FLAVOUR"} <= BUILD_ARGS
    assert BUILD_ARGS - {"FLAVOUR"} <= names  # every pin is checked against what got installed


def test_image_build_passes_the_matrix_pins_and_the_ca_as_a_secret() -> None:
    text = (REPO / "scripts" / "image-build.sh").read_text()
    assert 'matrix.py pins "$tf" "$flavour"' in text
    assert '--secret "id=ca_bundle,src=$CA_BUNDLE"' in text
    # the bundle is never a build argument (those stay in the image's history)
    assert not re.search(r"--build-arg[^\n]*CA_BUNDLE", text)


def test_pyproject_train_extra_admits_every_row_and_not_the_next_minor() -> None:
    train = [Requirement(r) for r in PYPROJECT["optional-dependencies"]["train"]]
    specs = {r.name: r.specifier for r in train if r.name in ("tensorflow", "tf-keras")}
    assert specs.keys() == {"tensorflow", "tf-keras"}
    for row in ROWS:
        assert row.tensorflow in specs["tensorflow"] and row.tf_keras in specs["tf-keras"]
    newest = max(Version(row.tensorflow) for row in ROWS)
    beyond = f"{newest.major}.{newest.minor + 1}.0"
    assert beyond not in specs["tensorflow"] and beyond not in specs["tf-keras"]
    assert any(d.startswith("spython") for d in PYPROJECT["optional-dependencies"]["dev"])


@pytest.mark.parametrize(("tf", "flavour"), CASES)
def test_install_requirements_are_the_matrix_pins(tf: str, flavour: str) -> None:
    env = {"PATH": "/usr/bin:/bin"} | build_args(tf, flavour)
    done = subprocess.run(
        ["bash", str(INSTALL), "requirements"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    pinned = {
        Requirement(line).name: str(Requirement(line).specifier)
        for line in done.stdout.split()
        if "==" in line
    }
    row = matrix.find(ROWS, tf)
    wanted = dict(line.split("==") for line in matrix.constraints(row, flavour))
    for name, version in pinned.items():
        assert wanted[name] == version.removeprefix("=="), name
    assert {"tensorflow", "tf-keras", "tensorflow-datasets"} <= pinned.keys()
    cuda = {matrix.CUDA_RUNTIME, matrix.CUDNN, matrix.NCCL}
    assert cuda <= pinned.keys() if flavour == "gpu" else not cuda & pinned.keys()
    extras = "[and-cuda]" if flavour == "gpu" else ""
    assert f"tensorflow{extras}=={tf}" in done.stdout.split()


def test_horovods_runtime_dependencies_have_one_home() -> None:
    """install.sh horovod-deps is the list: the image's requirements hold it, and make install
    and scripts/horovod-wheel.sh read it (Horovod's wheel goes in with --no-deps)."""
    done = subprocess.run(
        ["bash", str(INSTALL), "horovod-deps"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    deps = done.stdout.split()
    assert deps == ["cloudpickle", "psutil", "pyyaml", "packaging"]
    env = {"PATH": "/usr/bin:/bin"} | build_args(ROWS[0].tensorflow, "cpu")
    required = subprocess.run(
        ["bash", str(INSTALL), "requirements"], env=env, capture_output=True, text=True, timeout=30
    ).stdout.split()
    assert set(deps) <= set(required)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    wheel_script = (REPO / "scripts" / "horovod-wheel.sh").read_text(encoding="utf-8")
    assert "$$(docker/install.sh horovod-deps)" in makefile
    assert '$("$root/docker/install.sh" horovod-deps)' in wheel_script
    for text in (makefile, wheel_script):
        assert "cloudpickle" not in text


def test_cuda_pins_satisfy_the_installed_tensorflows_and_cuda_extra() -> None:
    """The CUDA wheels of the installed TensorFlow's row are what its and-cuda extra allows."""
    try:
        requires = importlib.metadata.requires("tensorflow") or []
        version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        need(False, "tensorflow is not installed (make install)")
        raise
    row = matrix.find(ROWS, version)
    allowed: dict[str, SpecifierSet] = {}
    for line in requires:
        req = Requirement(line)
        cuda = req.name.startswith("nvidia")
        if cuda and req.marker and req.marker.evaluate({"extra": "and-cuda"}):
            allowed[req.name] = req.specifier
    assert allowed.keys() == row.cuda_wheels.keys()
    for name, pin in row.cuda_wheels.items():
        assert pin in allowed[name], (name, pin, str(allowed[name]))
