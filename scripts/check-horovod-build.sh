#!/usr/bin/env bash
# Fail unless `horovodrun --check-build` marks every named feature with [X], and, with --patches,
# unless every patch that DIR/series lists for the installed TensorFlow is applied to the Horovod
# installed beside HOROVODRUN: each patch of Python files reverses cleanly on the installed
# files; a patch of build files only (CMake, C++) shows in the build having succeeded. With
# --allreduce, a 2-rank allreduce must also come out right under each controller: mpirun and
# horovodrun --gloo (python -m ctrain.train.allreduce_check).
#   scripts/check-horovod-build.sh [--patches DIR] [--allreduce] HOROVODRUN FEATURE...
#   e.g. scripts/check-horovod-build.sh --patches patches/horovod-0.28.1 --allreduce .venv/bin/horovodrun TensorFlow MPI Gloo
set -euo pipefail
usage="usage: check-horovod-build.sh [--patches DIR] [--allreduce] HOROVODRUN FEATURE..."
patches=
allreduce=0
if [ "${1:-}" = --patches ]; then
    patches=${2:?$usage}
    shift 2
fi
if [ "${1:-}" = --allreduce ]; then
    allreduce=1
    shift
fi
horovodrun=${1:?$usage}
shift
report=$("$horovodrun" --check-build)
echo "$report"
missing=()
for feature in "$@"; do
    grep -qE "\[X\] ${feature}\$" <<<"$report" || missing+=("$feature")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "check-horovod-build: not built with: ${missing[*]}. Fix: rebuild the wheel (rm the cache entry, make horovod) with the missing dependencies installed" >&2
    exit 1
fi
python=$(dirname "$horovodrun")/python

if [ "$allreduce" = 1 ]; then
    check=("$python" -m ctrain.train.allreduce_check 2)
    export TF_CPP_MIN_LOG_LEVEL=2
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "${check[@]}" \
        || { echo "check-horovod-build: the 2-rank allreduce under mpirun failed. Fix: see its output above; rebuild the wheel (make horovod)" >&2; exit 1; }
    timeout 300 "$horovodrun" -np 2 -H localhost:2 --gloo --network-interfaces lo "${check[@]}" \
        || { echo "check-horovod-build: the 2-rank allreduce under horovodrun --gloo failed. Fix: see its output above; rebuild the wheel (make horovod)" >&2; exit 1; }
fi
[ -n "$patches" ] || exit 0

# the directory holding the installed horovod package (found without importing it)
site=$("$python" -c \
    'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("horovod").submodule_search_locations[0]))')
tf_version=$("$python" -c 'import importlib.metadata as m; print(m.version("tensorflow"))')
mapfile -t selected < <(python3 "$(dirname "$0")/../src/ctrain/matrix.py" patches "$patches/series" "$tf_version") || exit 1
unpatched=()
checked=0 build_only=0
for name in "${selected[@]}"; do
    if ! grep -qE '^\+\+\+ b/.*\.py$' "$patches/$name"; then
        build_only=$((build_only + 1))
        continue
    fi
    checked=$((checked + 1))
    patch -d "$site" -p1 -R --force --dry-run --quiet <"$patches/$name" >/dev/null 2>&1 \
        || unpatched+=("$name")
done
if [ "${#unpatched[@]}" -gt 0 ]; then
    echo "check-horovod-build: the Horovod in $site lacks ${unpatched[*]}. Fix: make install (builds the patched wheel, scripts/horovod-wheel.sh)" >&2
    exit 1
fi
echo "check-horovod-build: the ${#selected[@]} patches of $patches/series for TensorFlow $tf_version: $checked applied in $site, $build_only to build files only"
