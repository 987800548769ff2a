#!/usr/bin/env bash
# Build Horovod from its sdist with ctrain's patch set (the patches that patches/horovod-VERSION/
# series lists for the TensorFlow being built against, see docs/horovod-patches.md) against the
# TensorFlow installed in a venv, once, and keep the wheel in a cache directory outside the
# repository keyed by Python, TensorFlow and Horovod versions and a hash of the patches applied (a
# changed patch builds a new wheel). Later installs take seconds. The Horovod version of each
# TensorFlow is the version matrix's (src/ctrain/matrix.toml).
#
#   scripts/horovod-wheel.sh VENV_PYTHON             build or reuse; prints the cached wheel's path
#   scripts/horovod-wheel.sh --sdist DIR TF_VERSION  writes the sdist patched for TF_VERSION as
#                                                    DIR/horovod-VERSION.tar.gz (what image builds
#                                                    compile); prints its path
#   scripts/horovod-wheel.sh --cached PY_TAG TF_VERSION
#                                                    prints the cached wheel's path (py311, 2.21.0)
#                                                    or nothing; never builds
#   scripts/horovod-wheel.sh --key PY_TAG TF_VERSION prints the cache key
#
# Environment: CTRAIN_WHEEL_CACHE (~/.cache/ctrain/wheels), HOROVOD_PATCHES (patches/horovod-VERSION
# of this checkout). The pristine sdist is downloaded from PyPI once and kept in the cache as
# sdist/horovod-VERSION.tar.gz.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${CTRAIN_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ctrain/wheels}

die() {
    echo "horovod-wheel: $*" >&2
    exit 1
}
matrix() { python3 "$root/src/ctrain/matrix.py" "$@"; }

# for_tensorflow TF_VERSION: the matrix's Horovod for TF_VERSION, its patch directory and the
# patches of its series that apply (horovod_version, patches, selected).
horovod_version='' patches='' sdist_name=''
selected=()
for_tensorflow() {
    horovod_version=$(matrix get "$1" horovod) || exit 1
    patches=${HOROVOD_PATCHES:-$root/patches/horovod-$horovod_version}
    sdist_name=horovod-${horovod_version}.tar.gz
    [ -f "$patches/series" ] || die "no patch series at $patches/series. Fix: HOROVOD_PATCHES=DIR or restore patches/"
    mapfile -t selected < <(matrix patches "$patches/series" "$1") || exit 1
}

# The patch set's hash: names and contents of the patches applied, in their order.
patch_hash() {
    (cd "$patches" && for name in "${selected[@]}"; do sha256sum "./$name"; done) \
        | sha256sum | cut -c1-12
}

key() { echo "$1-tf$2-hvd${horovod_version}-p$(patch_hash)"; }

cached_wheel() {
    find "$cache_root/$(key "$1" "$2")" -maxdepth 1 -name "horovod-${horovod_version}-*.whl" \
        -print -quit 2>/dev/null || true
}

# The pristine sdist from PyPI, downloaded once (then offline).
pristine_sdist() {
    local python=$1 dir=$cache_root/sdist
    if [ ! -f "$dir/$sdist_name" ]; then
        mkdir -p "$dir"
        local tmp
        tmp=$(mktemp -d "$dir/.download.XXXXXX")
        "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
            --no-binary :all: -d "$tmp" "horovod==${horovod_version}" >&2
        mv "$tmp/$sdist_name" "$dir/$sdist_name"
        rm -rf "$tmp"
    fi
    echo "$dir/$sdist_name"
}

# patched_tree PYTHON WORK: unpacks the sdist into WORK, applies the patch set, prints the tree.
patched_tree() {
    local python=$1 work=$2 tree name
    tar -xzf "$(pristine_sdist "$python")" -C "$work" --no-same-owner
    tree=$work/horovod-${horovod_version}
    for name in "${selected[@]}"; do
        patch -d "$tree" -p1 --forward --quiet --no-backup-if-mismatch <"$patches/$name" >&2 \
            || die "$name does not apply to horovod ${horovod_version}. Fix: update the patch (docs/horovod-patches.md)"
    done
    echo "$tree"
}

case "${1:-}" in
    --key | --cached)
        [ $# -eq 3 ] || die "usage: horovod-wheel.sh $1 PY_TAG TF_VERSION"
        for_tensorflow "$3"
        if [ "$1" = --key ]; then key "$2" "$3"; else cached_wheel "$2" "$3"; fi
        exit 0
        ;;
    --sdist)
        [ $# -eq 3 ] || die "usage: horovod-wheel.sh --sdist DIR TF_VERSION"
        dest=$2
        for_tensorflow "$3"
        mkdir -p "$dest"
        work=$(mktemp -d "$dest/.sdist.XXXXXX")
        trap 'rm -rf "$work"' EXIT
        tree=$(patched_tree "${PYTHON:-python3}" "$work")
        # The same top directory and name as the pristine sdist, so pip builds it the same way;
        # the same bytes for the same patch set (fixed order, owners, times; gzip without a
        # timestamp), so an image build's cached Horovod layer stays valid.
        tar -cf - -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@315532800 \
            "horovod-${horovod_version}" | gzip -n >"$work/$sdist_name"
        mv "$work/$sdist_name" "$dest/$sdist_name"
        echo "$dest/$sdist_name"
        exit 0
        ;;
esac

python=${1:?usage: horovod-wheel.sh VENV_PYTHON | --sdist DIR | --cached PY_TAG TF_VERSION | --key PY_TAG TF_VERSION}
tf_version=$("$python" -c 'import importlib.metadata as m; print(m.version("tensorflow"))')
py_tag=$("$python" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
for_tensorflow "$tf_version"
key=$(key "$py_tag" "$tf_version")
cache=$cache_root/$key

wheel=$(cached_wheel "$py_tag" "$tf_version")
if [ -n "$wheel" ]; then
    echo "$wheel"
    exit 0
fi

for tool in mpicc cmake g++ patch; do
    command -v "$tool" >/dev/null || {
        echo "horovod-wheel: $tool not found. Fix: apt-get install openmpi-bin libopenmpi-dev cmake g++ patch" >&2
        exit 1
    }
done

mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/.build-${key}.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "horovod-wheel: building horovod ${horovod_version} with ${#selected[@]} patches from $patches for tensorflow ${tf_version} (${py_tag}); about 5 minutes on 2 cores" >&2
# shellcheck disable=SC2046  # one name a line, none with a space
"$python" -m pip install --quiet $("$root/docker/install.sh" horovod-deps) wheel setuptools >&2
tree=$(patched_tree "$python" "$work")
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
MAKEFLAGS="-j$(nproc)" \
    "$python" -m pip wheel --quiet --no-build-isolation --no-cache-dir --no-deps \
    -w "$work/out" "$tree" >&2

built=$(find "$work/out" -maxdepth 1 -name 'horovod-*.whl' | head -n 1)
[ -n "$built" ] || die "the build produced no wheel"
# Publish atomically: a build killed half-way never leaves a wheel in the cache.
mkdir -p "$cache"
mv "$built" "$cache/.$(basename "$built").tmp"
mv "$cache/.$(basename "$built").tmp" "$cache/$(basename "$built")"
echo "$cache/$(basename "$built")"
