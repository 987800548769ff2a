#!/usr/bin/env bash
# Build ctrain's SIF from definitions/ctrain-FLAVOUR.def with apptainer, from the wheelhouse only
# (the Apptainer twin of scripts/image-build.sh; `make image` and `make image-cpu` run it where
# apptainer is installed).
#
#   scripts/sif-build.sh gpu|cpu SIF_FILE BUILD_ARGS_FILE
#
# Steps: the wheelhouse of the flavour and TensorFlow (scripts/wheelhouse.sh, only when missing),
# ctrain's wheel (always, offline, seconds), BUILD_ARGS_FILE written with every pin of the
# version matrix for TF_VERSION, ctrain's version and, with BASE_IMAGE (a Docker daemon's image),
# BOOT=docker-daemon FROM=BASE_IMAGE; then `apptainer build --build-arg-file` (Apptainer >= 1.2,
# SingularityCE >= 4.0) into SIF_FILE.new, renamed to SIF_FILE once whole: a build killed midway
# leaves no truncated SIF for `make push` to send, and a second build replaces the first
# (apptainer refuses an existing target without --force, and asks on a terminal).
#
# Environment:
#   TF_VERSION              the TensorFlow of the version matrix (src/ctrain/matrix.toml; its default)
#   CTRAIN_VERSION          ctrain's version (the Makefile's VERSION)
#   BASE_IMAGE              a Docker daemon's Debian 12 image to bootstrap from (default: the
#                           definition's own Bootstrap)
#   APPTAINER               the apptainer program (apptainer)
#   APPTAINER_BUILD_FLAGS   more `apptainer build` flags (e.g. --fakeroot)
#   WHEELHOUSE              build/wheelhouse
#   PYTHON                  the Python that reads the matrix (python3)
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:?usage: sif-build.sh gpu|cpu SIF_FILE BUILD_ARGS_FILE}
sif=${2:?usage: sif-build.sh gpu|cpu SIF_FILE BUILD_ARGS_FILE}
args=${3:?usage: sif-build.sh gpu|cpu SIF_FILE BUILD_ARGS_FILE}
case "$flavour" in gpu | cpu) ;; *) echo "sif-build: flavour $flavour? expected gpu or cpu" >&2; exit 2 ;; esac
python=${PYTHON:-python3}
wheelhouse=${WHEELHOUSE:-build/wheelhouse}
tf=${TF_VERSION:-$("$python" src/ctrain/matrix.py default)}
apptainer=${APPTAINER:-apptainer}
version=${CTRAIN_VERSION:?CTRAIN_VERSION is not set (the Makefile sets it)}

[ -f "$wheelhouse/$flavour-tf$tf/SHA256SUMS" ] || TF_VERSION=$tf scripts/wheelhouse.sh "$flavour" "$wheelhouse"
scripts/wheelhouse.sh ctrain "$wheelhouse"
mkdir -p "$(dirname "$sif")" "$(dirname "$args")"
{
    "$python" src/ctrain/matrix.py pins "$tf" "$flavour"
    echo "CTRAIN_VERSION=$version"
    if [ -n "${BASE_IMAGE:-}" ]; then
        printf 'BOOT=docker-daemon\nFROM=%s\n' "$BASE_IMAGE"
    fi
} >"$args"
# shellcheck disable=SC2086  # APPTAINER_BUILD_FLAGS is a list of flags
set -- $apptainer build ${APPTAINER_BUILD_FLAGS:-} --force --build-arg-file "$args" "$sif.new" \
    "definitions/ctrain-$flavour.def"
echo "$*"
"$@"
mv -f "$sif.new" "$sif"
