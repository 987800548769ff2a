"""The release workflow (.github/workflows/release.yml): actionlint passes it (and fails a broken
copy, so the check is not empty), every build step is a target of the Makefile, the version
matrix comes from matrix.toml through matrix.py (its step run here), and the digests step writes
the lines the release notes show."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ctrain import __version__, matrix
from tests.support.helpers import PYPROJECT, REPO

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
CONFIG = REPO / ".github" / "actionlint.yaml"
# What the images job builds, each through the Makefile target of the same name.
BUILD_TARGETS = {"system", "install", "wheelhouse", "image", "image-cpu", "sif", "push"}
# Ways around the Makefile that the build steps must not take.
BYPASSES = ("docker build", "apptainer build", "docker push", "apptainer push", "scripts/")


def actionlint() -> str:
    """The actionlint of the dev extra (beside this interpreter), else the one on PATH."""
    found = shutil.which("actionlint", path=f"{Path(sys.executable).parent}") or shutil.which(
        "actionlint"
    )
    if found is None:
        pytest.fail("actionlint is not installed. Fix: make install (the dev extra has it)")
    return found


def lint(workflow: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [actionlint(), "-oneline", str(workflow)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return loaded


def steps(job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"][job]["steps"]
    return found


def scripts() -> list[str]:
    return [step["run"] for job in workflow()["jobs"] for step in steps(job) if "run" in step]


def make_targets(script: str) -> list[str]:
    """The targets of every ``make`` command in a step's script (VAR=value and flags left out)."""
    words = shlex.split(script.replace("\\\n", " "), comments=True)
    targets, in_make = [], False
    for word in words:
        if word == "make":
            in_make = True
        elif word in {"|", "||", "&&", ";", "2>&1"} or word.startswith((">", "|")):
            in_make = False
        elif in_make and "=" not in word and not word.startswith("-"):
            targets.append(word)
    return targets


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    found = re.findall(r"^([A-Za-z0-9_.-][A-Za-z0-9_. -]*):(?!=)", text, re.MULTILINE)
    return {name for line in found for name in line.split()}


def test_actionlint_passes_the_workflow() -> None:
    done = lint(WORKFLOW, REPO)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("needs.matrix.outputs.tf", "needs.matrix.outputs.tensorflow", "tensorflow"),
        ("runs-on: ubuntu-latest", "runs-on: [self-hosted, gpu-farm]", "gpu-farm"),
        ("tag=$VERSION\n", "tag=$VERSION\n          echo $tag | cut -f1 $TAG\n", "shellcheck"),
    ],
)
def test_actionlint_fails_a_broken_copy(tmp_path: Path, old: str, new: str, words: str) -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert old in text
    broken = tmp_path / ".github" / "workflows" / "release.yml"
    broken.parent.mkdir(parents=True)
    shutil.copy(CONFIG, tmp_path / ".github" / CONFIG.name)
    broken.write_text(text.replace(old, new, 1), encoding="utf-8")
    done = lint(broken, tmp_path)
    assert done.returncode == 1 and words in done.stdout, done.stdout + done.stderr


def test_every_make_step_names_a_target_of_the_makefile() -> None:
    used = [target for script in scripts() for target in make_targets(script)]
    assert set(used) <= makefile_targets(), set(used) - makefile_targets()
    assert set(used) >= BUILD_TARGETS


def test_the_images_are_built_and_pushed_only_through_the_makefile() -> None:
    for step in steps("images"):
        script = step.get("run", "")
        assert not [way for way in BYPASSES if way in script], script


def test_the_matrix_rows_come_from_matrix_toml() -> None:
    job = workflow()["jobs"]["images"]
    assert job["strategy"]["matrix"]["tf"] == "${{ fromJSON(needs.matrix.outputs.tf) }}"
    text = WORKFLOW.read_text(encoding="utf-8")
    listed = [version for version in matrix.versions(matrix.load()) if version in text]
    assert listed == [], "a TensorFlow version written into the workflow"


def run_step(job: str, step_id: str, output: Path, **env: str) -> tuple[int, str]:
    """Run a step's script in the repository as the runner would (bash -eo pipefail); its exit
    code and what it wrote to $GITHUB_OUTPUT (``output``)."""
    (script,) = [s["run"] for s in steps(job) if s.get("id") == step_id]
    output.touch()
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=REPO,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "GITHUB_OUTPUT": str(output)}
        | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, output.read_text(encoding="utf-8")


def test_the_matrix_step_emits_matrix_toml_rows_and_checks_the_tag(tmp_path: Path) -> None:
    code, said = run_step("matrix", "rows", tmp_path / "out", GITHUB_REF_NAME=f"v{__version__}")
    assert code == 0
    outputs = dict(line.split("=", 1) for line in said.splitlines())
    assert json.loads(outputs["tf"]) == matrix.versions(matrix.load())
    assert outputs["version"] == __version__

    code, said = run_step("matrix", "rows", tmp_path / "wrong", GITHUB_REF_NAME="v9.9.9")
    assert (code, said) == (1, "")


def test_the_digests_step_records_the_oci_and_sif_digests(tmp_path: Path) -> None:
    (script,) = [s["run"] for s in steps("images") if s.get("name") == "Record the digests"]
    build = tmp_path / "build"
    build.mkdir()
    digest = "sha256:" + "ab" * 32
    (build / "push-gpu-tf2.21.0.log").write_text(
        f"+ apptainer push ...\npushed ghcr.io/ctrain/ctrain:0.1.0-gpu ({digest})\n"
    )
    (build / "ctrain-0.1.0-gpu.sif").write_bytes(b"sif")
    env = {"PATH": "/usr/bin:/bin", "FLAVOUR": "gpu", "TF_VERSION": "2.21.0"}
    env["REGISTRY"] = "ghcr.io/ctrain"
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script], cwd=tmp_path, env=env, check=False
    )
    assert done.returncode == 0
    sif_sum = hashlib.sha256(b"sif").hexdigest()
    assert (build / "digests-gpu-tf2.21.0.md").read_text().splitlines() == [
        "### TensorFlow 2.21.0, gpu",
        f"- OCI docker://ghcr.io/ctrain/ctrain:0.1.0-gpu@{digest}",
        f"- SIF oras://ghcr.io/ctrain/ctrain:0.1.0-gpu-sif, file sha256:{sif_sum}",
    ]


def test_the_wheel_goes_to_pypi_by_trusted_publishing_under_the_projects_name() -> None:
    """The pypi job publishes the wheel job's artifact with PyPI's action and an OIDC token (no
    stored password), after the images, into the environment whose URL names pyproject's
    distribution; README's install line installs that same name."""
    job = workflow()["jobs"]["pypi"]
    assert set(job["needs"]) == {"images", "wheel"}
    assert job["permissions"] == {"id-token": "write"}
    name = PYPROJECT["name"]
    assert name != "ctrain"  # PyPI's `ctrain` is another project (CTRAIN, certified training)
    assert job["environment"] == {"name": "pypi", "url": f"https://pypi.org/p/{name}"}
    download, publish = job["steps"]
    assert download["with"]["name"] == "python-dist"
    assert publish["uses"].startswith("pypa/gh-action-pypi-publish@")
    assert "with" not in publish, "trusted publishing takes no password or token"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"/bin/pip install {name}\n" in readme
