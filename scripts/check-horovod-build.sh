#!/usr/bin/env bash
# Fail unless `horovodrun --check-build` marks every named feature with [X].
#   scripts/check-horovod-build.sh HOROVODRUN FEATURE...    e.g. .venv/bin/horovodrun TensorFlow MPI Gloo
set -euo pipefail
horovodrun=${1:?usage: check-horovod-build.sh HOROVODRUN FEATURE...}
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
