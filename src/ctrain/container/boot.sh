# shellcheck shell=sh
# ctrain's launcher in a container, carried there by `ctrain exec`; container/carry.py says where
# and writes this command line:
#
#   /bin/sh BOOT --lib DIR [--python PATH] [--explain] -- COMMAND...
#
# Chooses the image's Python and runs `ctrain launch [--explain] -- COMMAND...` with it, from the
# carried copy: the ctrain package this script is part of; the command gets the carried `ctrain`
# (bin/ctrain, with the command line's own packages, in DIR) first on PATH.
# The interpreter is the image_python setting's rule (its help, settings_table.py): --python PATH
# when given (a named interpreter's directory then goes first on PATH for the command, as
# activating its environment would); else COMMAND's own when COMMAND starts with a Python
# (`python train.py`: TensorFlow and Horovod are then that one's); else python3, then python, on
# the image's PATH; named by its path, never through /usr/bin/env. It must be Python 3.10 or newer.
# No Python, or an older one: one line on stderr with the fix, exit 2, nothing started.
# POSIX sh: the image may have no bash.

fail() {
    echo "ctrain: error: $1 Fix: $2" >&2
    exit 2
}
usage="expected --lib DIR [--python PATH] [--explain] -- COMMAND..."

lib=
python=
explain=
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
        --lib) [ "$#" -gt 1 ] || fail "boot.sh: $usage" "run it through ctrain exec"; lib=$2; shift 2 ;;
        --python) [ "$#" -gt 1 ] || fail "boot.sh: $usage" "run it through ctrain exec"; python=$2; shift 2 ;;
        --explain) explain=--explain; shift ;;
        *) fail "boot.sh: $usage" "run it through ctrain exec" ;;
    esac
done
if [ "${1:-}" != -- ] || [ -z "$lib" ]; then
    fail "boot.sh: $usage" "run it through ctrain exec"
fi
shift
[ "$#" -gt 0 ] || fail "no command given." "ctrain exec IMAGE -- python train.py"

how="--image-python"
if [ -z "$python" ]; then
    case ${1##*/} in
        python | python3 | python3.[0-9] | python3.[0-9][0-9])
            python=$1
            how="the command's interpreter"
            ;;
    esac
fi
if [ -z "$python" ]; then
    for name in python3 python; do
        if python=$(command -v "$name" 2>/dev/null) && [ -n "$python" ]; then
            how="the first of python3, python on the image's PATH"
            break
        fi
        python=
    done
    [ -n "$python" ] || fail "the image has no Python (no python3 or python on its PATH, $PATH)." \
        "use an image with Python >= 3.10, or name the interpreter: --image-python /path/to/python"
fi
case $python in
    /*) ;;
    *)
        found=$(command -v "$python" 2>/dev/null) \
            || fail "$python ($how) is not in the image (PATH $PATH)." \
                "name the image's interpreter by its path: --image-python /path/to/python"
        python=$found
        ;;
esac
if [ ! -f "$python" ] || [ ! -x "$python" ]; then
    fail "$python ($how) is not an executable file in the image." \
        "name the image's interpreter by its path: --image-python /path/to/python"
fi
# -E -S: nothing of the environment, no site: the question alone (and any Python answers it)
version=$("$python" -E -S -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
    || fail "$python ($how) does not run as a Python in the image." \
        "name the image's interpreter by its path: --image-python /path/to/python"
case $version in
    3.1[0-9] | 3.[2-9][0-9]) ;;
    *) fail "$python ($how) is Python $version; ctrain's launcher needs Python 3.10 or newer." \
        "use an image with Python >= 3.10, or name a newer interpreter in it: --image-python PATH" ;;
esac

if [ "$how" = --image-python ]; then
    PATH=${python%/*}:$PATH
    export PATH
fi
# ctrain on the launcher's and the script's path (the directory that holds this package), and
# `ctrain` first on PATH for the command: the carried copy, on this interpreter (bin/ctrain
# beside this script, with the packages of DIR).
here=${0%/*}
api=${here%/ctrain/container}
PATH=$here/bin:$PATH
PYTHONPATH=$api${PYTHONPATH:+:$PYTHONPATH}
CTRAIN_CARRIED="$python (Python $version, $how)"
CTRAIN_CARRIED_PYTHON=$python
CTRAIN_CARRIED_LIB=$lib
export PATH PYTHONPATH CTRAIN_CARRIED CTRAIN_CARRIED_PYTHON CTRAIN_CARRIED_LIB
# The launch itself without Click (launch/carried.py), the current directory off sys.path (`-c`
# puts it first): a train.py beside a ctrain.py must not shadow the carried copy.
exec "$python" -c '
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
from ctrain.launch.carried import main
main(sys.argv[1:])
' ${explain:+"$explain"} -- "$@"
