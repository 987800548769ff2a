"""The image recipes agree: Dockerfile.gpu's pins, the Apptainer definitions (parsed with
spython), docker/install.sh's inputs, pyproject's train extra and the Makefile's Horovod."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import subprocess
import sys

import pytest
from spython.main.parse.parsers import SingularityParser

from tests.helpers import REPO, need

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOCKERFILE = REPO / "Dockerfile.gpu"
INSTALL = REPO / "docker" / "install.sh"
DEFS = REPO / "definitions"
PINS = (
    "TF_VERSION",
    "KERAS_VERSION",
    "TFDS_VERSION",
    "HOROVOD_VERSION",
    "OPENMPI_VERSION",
    "CUDA_VERSION",
    "CUDNN_VERSION",
    "NCCL_VERSION",
    "HOROVOD_NVCC_VERSION",
    "CTRAIN_VERSION",
)
GPU_ONLY = ("CUDA_VERSION", "CUDNN_VERSION", "NCCL_VERSION", "HOROVOD_NVCC_VERSION")
# label -> the pin it shows
LABEL_PINS = {
    "io.ctrain.ctrain.version": "CTRAIN_VERSION",
    "io.ctrain.tensorflow.version": "TF_VERSION",
    "io.ctrain.keras.version": "KERAS_VERSION",
    "io.ctrain.tensorflow-datasets.version": "TFDS_VERSION",
    "io.ctrain.horovod.version": "HOROVOD_VERSION",
    "io.ctrain.openmpi.version": "OPENMPI_VERSION",
    "io.ctrain.cuda.version": "CUDA_VERSION",
    "io.ctrain.cudnn.version": "CUDNN_VERSION",
    "io.ctrain.nccl.version": "NCCL_VERSION",
    "io.ctrain.horovod.nvcc.version": "HOROVOD_NVCC_VERSION",
    "org.opencontainers.image.version": "CTRAIN_VERSION",
}


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


def dockerfile_args() -> dict[str, str]:
    args: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args.setdefault(name, value)
    return args


def dockerfile_labels(flavour_args: dict[str, str]) -> dict[str, str]:
    (labels,) = [rest for word, rest in dockerfile_instructions() if word == "LABEL"]
    pairs = dict(item.split("=", 1) for item in shlex.split(labels))
    return {
        k: re.sub(r"\$\{(\w+)\}", lambda m: flavour_args[m.group(1)], v) for k, v in pairs.items()
    }


def parse_def(name: str) -> tuple[object, str]:
    path = DEFS / name
    (recipe,) = SingularityParser(str(path)).recipe.values()
    return recipe, path.read_text()


def exports(lines: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines:
        m = re.fullmatch(r"export (\w+)=(\S+)", line.strip())
        if m:
            found[m.group(1)] = m.group(2)
    return found


def header(text: str, key: str) -> str:
    m = re.search(rf"^{key}:\s*(\S.*)$", text, re.M)
    assert m, f"no {key}: header"
    return m.group(1).strip()


def expected_pins(flavour: str) -> dict[str, str]:
    pins = {k: v for k, v in dockerfile_args().items() if k in PINS}
    if flavour == "cpu":
        pins.update(dict.fromkeys(GPU_ONLY, "none"))
    return pins


def test_dockerfile_pins_every_version_and_defaults_to_a_public_base() -> None:
    args = dockerfile_args()
    assert set(PINS) <= set(args), set(PINS) - set(args)
    assert all(args[p] for p in PINS)
    assert args["FLAVOUR"] == "gpu"
    assert args["BASE_IMAGE"] == "debian:12-slim"


def test_dockerfile_entrypoint_labels_and_steps() -> None:
    instructions = dockerfile_instructions()
    (entrypoint,) = [rest for word, rest in instructions if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["ctrain", "launch", "--"]
    labels = dockerfile_labels(dockerfile_args() | {"BASE_IMAGE": "debian:12-slim"})
    for label, pin in LABEL_PINS.items():
        assert labels[label] == dockerfile_args()[pin], label
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    steps = re.findall(r"/opt/ctrain/install\.sh ([a-z ]+)", runs)
    assert " ".join(steps).split() == ["system", "python", "ctrain", "verify", "clean"]
    assert "type=secret,id=ca_bundle" in runs  # the CA bundle is a secret, not a layer
    assert not re.search(r"^\s*(COPY|ADD)\s+\S*wheelhouse", DOCKERFILE.read_text(), re.M)


@pytest.mark.parametrize("flavour", ["gpu", "cpu"])
def test_definition_pins_agree_with_the_dockerfile(flavour: str) -> None:
    recipe, text = parse_def(f"ctrain-{flavour}.def")
    assert header(text, "Bootstrap") == "docker"
    assert recipe.fromHeader == "debian:12-slim"  # type: ignore[attr-defined]
    post = exports(recipe.install)  # type: ignore[attr-defined]
    assert post.pop("FLAVOUR") == flavour
    assert post == expected_pins(flavour)
    labels = dict(line.split(None, 1) for line in recipe.labels)  # type: ignore[attr-defined]
    for label, pin in LABEL_PINS.items():
        assert labels[label] == expected_pins(flavour)[pin], label
    assert labels["io.ctrain.flavour"] == flavour
    assert "/opt/ctrain/install.sh all" in recipe.install  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["ctrain-gpu.def", "ctrain-cpu.def", "from-docker.def"])
def test_definition_sections(name: str) -> None:
    recipe, text = parse_def(name)
    assert recipe.cmd.strip() == 'exec ctrain launch -- "$@"'  # type: ignore[attr-defined]
    assert 'echo "ctrain doctor" >> /tests.sh' in recipe.install  # type: ignore[attr-defined]
    environ = dict(e.split("=", 1) for e in recipe.environ)  # type: ignore[attr-defined]
    assert environ["PATH"].startswith("/opt/ctrain/venv/bin:")
    assert re.search(r"^%help\s*$", text, re.M)
    if name == "from-docker.def":
        assert header(text, "Bootstrap") == "docker-daemon"
        assert header(text, "From") == "{{ IMAGE }}"
        assert not exports(recipe.install)  # type: ignore[attr-defined]  # nothing pinned here
    else:
        flavour = name.split("-")[1].removesuffix(".def")
        files = [f.split() for f in recipe.files]  # type: ignore[attr-defined]
        assert ["docker/install.sh", "/opt/ctrain/install.sh"] in files
        assert [f"build/wheelhouse/{flavour}", "/wheelhouse"] in files
        assert ["build/wheelhouse/ctrain", "/wheelhouse-ctrain"] in files


def test_install_script_needs_only_what_the_recipes_set() -> None:
    needed = set(re.findall(r"\bneed ([A-Z_ ]+)", INSTALL.read_text()))
    names = {n for group in needed for n in group.split()}
    assert names - {"FLAVOUR"} <= set(PINS)
    assert set(PINS) <= names  # every pin is checked against what got installed


def test_image_build_script_blanks_the_gpu_pins_and_passes_the_ca_as_a_secret() -> None:
    text = (REPO / "scripts" / "image-build.sh").read_text()
    m = re.search(r"for pin in ([A-Z_ ]+); do", text)
    assert m and set(m.group(1).split()) == set(GPU_ONLY)
    assert '--secret "id=ca_bundle,src=$CA_BUNDLE"' in text
    # the bundle is never a build argument (those stay in the image's history)
    assert not re.search(r"--build-arg[^\n]*CA_BUNDLE", text)


def test_pyproject_and_makefile_agree() -> None:
    args = dockerfile_args()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["version"] == args["CTRAIN_VERSION"]
    train = project["optional-dependencies"]["train"]
    assert f"tensorflow=={args['TF_VERSION']}" in train
    assert f"tf-keras=={args['KERAS_VERSION']}" in train
    makefile = (REPO / "Makefile").read_text()
    assert re.search(rf"^HOROVOD_VERSION \?= {re.escape(args['HOROVOD_VERSION'])}$", makefile, re.M)
    assert any(d.startswith("spython") for d in project["optional-dependencies"]["dev"])


@pytest.mark.parametrize("flavour", ["gpu", "cpu"])
def test_requirements_of_a_flavour(flavour: str) -> None:
    env = {"FLAVOUR": flavour, "PATH": "/usr/bin:/bin"} | expected_pins(flavour)
    done = subprocess.run(
        ["bash", str(INSTALL), "requirements"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    tf = "tensorflow[and-cuda]" if flavour == "gpu" else "tensorflow"
    assert f"{tf}=={env['TF_VERSION']}" in lines
    assert f"tf-keras=={env['KERAS_VERSION']}" in lines
    assert f"tensorflow-datasets=={env['TFDS_VERSION']}" in lines


def test_cuda_pins_are_tensorflows_own() -> None:
    """The CUDA, cuDNN and NCCL labels are the versions TensorFlow's and-cuda extra pins."""
    try:
        requires = importlib.metadata.requires("tensorflow") or []
        version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        need(False, "tensorflow is not installed (make install)")
        raise
    args = dockerfile_args()
    assert version == args["TF_VERSION"]
    pins: dict[str, str] = {}
    for req in requires:
        m = re.match(r"(nvidia-[\w-]+)\s*==\s*([\w.]+).*extra == .and-cuda.", req)
        if m:
            pins[m.group(1)] = m.group(2)
    assert pins["nvidia-cuda-runtime-cu12"] == args["CUDA_VERSION"]
    assert pins["nvidia-cudnn-cu12"] == args["CUDNN_VERSION"]
    assert pins["nvidia-nccl-cu12"] == args["NCCL_VERSION"]
