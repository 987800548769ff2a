#!/usr/bin/env bash
# Gather every Python package an image installs, on the host, so that image builds run pip with
# --no-index (no PyPI, no TLS through a proxy, nothing from the internet in the build).
#
#   scripts/wheelhouse.sh cpu|gpu [DEST]    third-party wheels for a flavour, then ctrain's wheel
#   scripts/wheelhouse.sh ctrain [DEST]     ctrain's wheel only (offline, from a flavour's wheels)
#
# DEST (build/wheelhouse by default) gets:
#   DEST/FLAVOUR-tfTF_VERSION/
#                  wheels for TensorFlow (gpu: with its CUDA 12 wheels), tf-keras,
#                  tensorflow-datasets, ctrain's dependencies, Horovod's runtime and build
#                  dependencies, sdist-only packages built into wheels here, Horovod's sdist with
#                  ctrain's patch set applied (scripts/horovod-wheel.sh --sdist; what the GPU
#                  image compiles), and for cpu the host's cached patched Horovod wheel
#                  (scripts/horovod-wheel.sh); plus requirements.txt, constraints.txt, SHA256SUMS
#   DEST/ctrain/   ctrain's wheel, built reproducibly (SOURCE_DATE_EPOCH), so an unchanged source
#                  gives the same bytes and the image's ctrain layer stays cached
# Each directory is built aside and swapped in whole, under a lock of its own (DEST/.NAME.lock), so
# builds running at once (a CPU and a GPU image, a SIF) wait for each other's swap. A copy of each flavour's and TensorFlow's
# wheelhouse is kept in ~/.cache/ctrain/wheelhouse/FLAVOUR-tfTF_VERSION (CTRAIN_WHEELHOUSE_CACHE)
# and used first, offline; PyPI only when it cannot satisfy the requirements or with
# WHEELHOUSE_REFRESH=1.
#
# The pins are the version matrix's (src/ctrain/matrix.py pins TF_VERSION FLAVOUR), and pip holds
# every other package TensorFlow brings (gpu: its 12 CUDA wheels) to the matrix's constraints.
# The image's Python is Debian 12's 3.11: the host's Python must be a 3.11 too (the same cp311
# ABI). Environment: TF_VERSION (the matrix's default), PYTHON (python3), CTRAIN_WHEEL_CACHE
# (scripts/horovod-wheel.sh's cache), HOROVOD_PREBUILT (auto: put the cached Horovod wheel in the
# cpu wheelhouse, building it first with .venv's or .venv-tfTF_VERSION's Python when that venv
# has TF_VERSION; no: the sdist only, the image build compiles it).
set -euo pipefail
cd "$(dirname "$0")/.."

part=${1:?usage: wheelhouse.sh cpu|gpu|ctrain [DEST]}
dest=${2:-build/wheelhouse}
python=${PYTHON:-python3}
case "$part" in cpu | gpu | ctrain) ;; *) echo "wheelhouse: $part? expected cpu, gpu or ctrain" >&2; exit 2 ;; esac

# link_cached DIR CACHE: each wheel in DIR that CACHE holds byte for byte becomes a hard link to
# CACHE's (pip wheel copies: without this every checkout would hold its own 5 GB of wheels). Where
# the two are on different filesystems the copy stays.
link_cached() {
    local file kept
    for file in "$1"/*.whl; do
        kept=$2/${file##*/}
        if [ -f "$kept" ] && cmp -s "$file" "$kept"; then
            ln -f "$kept" "$file" 2>/dev/null || true
        fi
    done
}

abi=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
[ "$abi" = cp311 ] || {
    echo "wheelhouse: $python is $abi; the image's Python is Debian 12's 3.11 (cp311). Fix: PYTHON=python3.11" >&2
    exit 1
}
pip=("$python" -m pip --disable-pip-version-check)
t0=$SECONDS
mkdir -p "$dest"
stage=$(mktemp -d "$dest/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# How pip shows its downloads (scripts/progress-mode.sh): bar (pip's own bars, sizes and rates),
# lines (one line per wheel: how many so far, its name and size) or off.
progress=$(PYTHON=$python scripts/progress-mode.sh)

# wheel_lines FLAVOUR DIR: pip wheel's output (stdin) as one line per wheel saved or built.
wheel_lines() {
    local n=0 line file size
    while IFS= read -r line; do
        case $line in
            "Saved "*)
                file=${line#Saved }
                size=$(du -h "$2/${file##*/}" 2>/dev/null | cut -f1) ;;
            *"Created wheel for "*"filename="*)
                file=${line#*filename=}
                file=${file%% *}
                size=${line#*size=}
                size=$(numfmt --to=iec "${size%% *}" 2>/dev/null) ;;
            *) continue ;;
        esac
        n=$((n + 1))
        echo "wheelhouse: $1: $n: ${file##*/} (${size:-?})"
    done
}

# pip_wheel FLAVOUR DIR ARGS...: pip wheel -w DIR ARGS, its progress as $progress says.
pip_wheel() {
    local part=$1 out=$2
    shift 2
    case $progress in
        bar) "${pip[@]}" wheel --progress-bar on -w "$out" "$@" >&2 ;;
        lines) "${pip[@]}" wheel --progress-bar off -w "$out" "$@" | wheel_lines "$part" "$out" >&2 ;;
        *) "${pip[@]}" wheel --quiet -w "$out" "$@" ;;
    esac
}

# lock NAME: hold DEST/.NAME.lock until this script exits (another wheelhouse.sh of the same DEST
# and NAME waits here: two swaps of one directory would race).
lock() {
    local fd
    exec {fd}>>"$dest/.$1.lock"
    flock "$fd"
}

# swap NAME: replace DEST/NAME by the staged one in one rename (a killed run leaves the old one).
swap() {
    rm -rf "${dest:?}/.$1.old"
    [ ! -e "$dest/$1" ] || mv "$dest/$1" "$dest/.$1.old"
    mv "$stage/$1" "$dest/$1"
    rm -rf "${dest:?}/.$1.old"
}

if [ "$part" != ctrain ]; then
    # The pins: the version matrix's for TF_VERSION and this flavour.
    tf=${TF_VERSION:-$(python3 src/ctrain/matrix.py default)}
    pins=$(python3 src/ctrain/matrix.py pins "$tf" "$part") || exit 1
    while IFS= read -r pin; do export "${pin?}"; done <<<"$pins"
    name=$part-tf$tf
    lock "$name"
    out=$stage/$name
    mkdir -p "$out"
    python3 src/ctrain/matrix.py constraints "$tf" "$part" >"$out/constraints.txt"
    {
        docker/install.sh requirements
        # ctrain's own dependencies, from pyproject.toml
        "$python" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))'
    } >"$out/requirements.txt"
    echo "wheelhouse: $name: $(tr '\n' ' ' <"$out/requirements.txt")" >&2
    # pip wheel downloads wheels and builds the sdist-only packages into wheels, here on the host.
    # First offline from the last wheelhouse gathered on this machine (a fresh clone's CI run
    # downloads nothing, and unpinned dependencies stay as they were); PyPI when that cannot
    # satisfy the requirements (a pin changed) or WHEELHOUSE_REFRESH=1.
    cached=${CTRAIN_WHEELHOUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ctrain/wheelhouse}/$name
    gathered=0
    if [ "${WHEELHOUSE_REFRESH:-0}" != 1 ] && [ -f "$cached/SHA256SUMS" ] \
        && (cd "$cached" && sha256sum --quiet -c SHA256SUMS) \
        && "${pip[@]}" wheel --quiet --no-index --find-links "$cached" -w "$out" \
            -r "$out/requirements.txt" -c "$out/constraints.txt" 2>/dev/null; then
        echo "wheelhouse: $name: taken offline from $cached" >&2
        gathered=1
        link_cached "$out" "$cached"
    fi
    if [ "$gathered" = 0 ]; then
        find "$out" -mindepth 1 ! -name requirements.txt ! -name constraints.txt -delete
        pip_wheel "$name" "$out" -r "$out/requirements.txt" -c "$out/constraints.txt"
    fi
    # Horovod's sdist with ctrain's patches for TF_VERSION (the pristine one is kept in the wheel
    # cache)
    PYTHON=$python scripts/horovod-wheel.sh --sdist "$out" "$TF_VERSION" >/dev/null
    if [ "$part" = cpu ] && [ "${HOROVOD_PREBUILT:-auto}" = auto ]; then
        wheel=$(scripts/horovod-wheel.sh --cached py311 "$TF_VERSION")
        for venv in .venv .venv-tf"$TF_VERSION"; do
            if [ -z "$wheel" ] && [ -x "$venv/bin/python" ] \
                && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("tensorflow"))' 2>/dev/null)" = "$TF_VERSION" ]; then
                wheel=$(scripts/horovod-wheel.sh "$venv/bin/python")
            fi
        done
        if [ -n "$wheel" ]; then
            echo "wheelhouse: cpu: prebuilt $wheel" >&2
            cp "$wheel" "$out/"
        else
            echo "wheelhouse: cpu: no prebuilt Horovod wheel; the image build compiles the sdist (about 5 minutes)" >&2
        fi
    fi
    # Horovod (the cpu wheelhouse's prebuilt wheel, the patched sdist) is left out of the offline
    # cache: it is made fresh from scripts/horovod-wheel.sh's cache and the patch set every time
    (cd "$out" && sha256sum -- *.whl *.tar.gz >SHA256SUMS)
    if [ "$gathered" = 0 ]; then
        rm -rf "$cached.new"
        mkdir -p "$cached.new"
        cp -al "$out/." "$cached.new/" 2>/dev/null || cp -a "$out/." "$cached.new/"
        rm -f "$cached.new"/horovod-*-cp*.whl "$cached.new/horovod-$HOROVOD_VERSION.tar.gz"
        (cd "$cached.new" && sha256sum -- *.whl >SHA256SUMS)
        rm -rf "$cached"
        mv "$cached.new" "$cached"
    fi
    swap "$name"
    echo "wheelhouse: $dest/$name: $(find "$dest/$name" -type f | wc -l) files, $(du -sh "$dest/$name" | cut -f1), in $((SECONDS - t0)) s" >&2
fi

# ctrain's wheel: built in isolation from the wheelhouse's setuptools when there is one (offline).
lock ctrain
offline=()
for dir in "$dest"/cpu-tf* "$dest"/gpu-tf*; do
    if [ -f "$dir/SHA256SUMS" ]; then
        offline=(--no-index --find-links "$dir")
        break
    fi
done
rm -rf build/lib build/bdist.* # setuptools would package stale files left there by an older tree
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800} \
    "${pip[@]}" wheel --quiet --no-deps "${offline[@]}" -w "$stage/ctrain" .
swap ctrain
echo "wheelhouse: $dest/ctrain: $(cd "$dest/ctrain" && ls -- *.whl)" >&2
