#!/usr/bin/env bash
# Fail unless `horovodrun --check-build` marks every named feature with [X], and, with --patches,
# unless every patch of DIR is applied to the Horovod installed beside HOROVODRUN (each patch
# reverses cleanly on its installed files).
#   scripts/check-horovod-build.sh [--patches DIR] HOROVODRUN FEATURE...
#   e.g. scripts/check-horovod-build.sh --patches patches/horovod-0.28.1 .venv/bin/horovodrun TensorFlow MPI Gloo
set -euo pipefail
patches=
if [ "${1:-}" = --patches ]; then
    patches=${2:?usage: check-horovod-build.sh [--patches DIR] HOROVODRUN FEATURE...}
    shift 2
fi
horovodrun=${1:?usage: check-horovod-build.sh [--patches DIR] HOROVODRUN FEATURE...}
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
[ -n "$patches" ] || exit 0

# the directory holding the installed horovod package (found without importing it)
site=$("$(dirname "$horovodrun")/python" -c \
    'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("horovod").submodule_search_locations[0]))')
unpatched=()
count=0
for patch in "$patches"/*.patch; do
    [ -e "$patch" ] || continue
    count=$((count + 1))
    patch -d "$site" -p1 -R --force --dry-run --quiet <"$patch" >/dev/null 2>&1 \
        || unpatched+=("$(basename "$patch")")
done
if [ "${#unpatched[@]}" -gt 0 ]; then
    echo "check-horovod-build: the Horovod in $site lacks ${unpatched[*]}. Fix: make install (builds the patched wheel, scripts/horovod-wheel.sh)" >&2
    exit 1
fi
echo "check-horovod-build: all $count patches of $patches are applied in $site"
