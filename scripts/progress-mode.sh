#!/usr/bin/env bash
# Prints bar, lines or off: how a make target shows its progress on stderr, by ctrain's one rule
# (ctrain.util.progress.choose_mode: CTRAIN_PROGRESS=auto|bar|lines|off, and whether stderr is a
# terminal), read from the checkout's source. Run it as `mode=$(scripts/progress-mode.sh)`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=src exec "${PYTHON:-python3}" -c 'import os, sys
from ctrain.util.progress import choose_mode
setting = os.environ.get("CTRAIN_PROGRESS", "auto")
print(choose_mode(setting, sys.stderr.isatty(), os.environ.get("TERM")))'
