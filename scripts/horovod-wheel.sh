#!/usr/bin/env bash
# Build Horovod from source against the TensorFlow installed in a venv, once, and keep the wheel
# in a cache directory outside the repository keyed by Python, TensorFlow and Horovod versions.
# Later installs reuse the wheel and take seconds.
#
#   scripts/horovod-wheel.sh VENV_PYTHON      prints the path of the cached wheel
#
# Environment: HOROVOD_VERSION (0.28.1), CTRAIN_WHEEL_CACHE (~/.cache/ctrain/wheels).
set -euo pipefail

python=${1:?usage: horovod-wheel.sh VENV_PYTHON}
horovod_version=${HOROVOD_VERSION:-0.28.1}
cache_root=${CTRAIN_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ctrain/wheels}

tf_version=$("$python" -c 'import importlib.metadata as m; print(m.version("tensorflow"))')
py_tag=$("$python" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
key="${py_tag}-tf${tf_version}-hvd${horovod_version}"
cache="$cache_root/$key"

wheel=$(find "$cache" -maxdepth 1 -name "horovod-${horovod_version}-*.whl" 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
    echo "$wheel"
    exit 0
fi

for tool in mpicc cmake g++; do
    command -v "$tool" >/dev/null || {
        echo "horovod-wheel: $tool not found. Fix: apt-get install openmpi-bin libopenmpi-dev cmake g++" >&2
        exit 1
    }
done

mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/.build-${key}.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "horovod-wheel: building horovod ${horovod_version} for tensorflow ${tf_version} (${py_tag}); about 5 minutes on 2 cores" >&2
"$python" -m pip install --quiet cloudpickle psutil pyyaml packaging wheel setuptools >&2
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
MAKEFLAGS="-j$(nproc)" \
    "$python" -m pip wheel --quiet --no-build-isolation --no-cache-dir --no-deps \
    -w "$work/out" "horovod==${horovod_version}" >&2

built=$(find "$work/out" -maxdepth 1 -name 'horovod-*.whl' | head -n 1)
[ -n "$built" ] || { echo "horovod-wheel: the build produced no wheel" >&2; exit 1; }
# Publish atomically: a build killed half-way never leaves a wheel in the cache.
mkdir -p "$cache"
mv "$built" "$cache/.$(basename "$built").tmp"
mv "$cache/.$(basename "$built").tmp" "$cache/$(basename "$built")"
echo "$cache/$(basename "$built")"
