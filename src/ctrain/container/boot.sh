# shellcheck shell=sh
# ctrain's launcher in a container, carried there by `ctrain exec` (ctrain/container/carry.py):
#
#   /bin/sh /opt/ctrain-carried/api/ctrain/container/boot.sh [--explain] -- COMMAND...
#
# Finds the image's Python and runs `ctrain launch [--explain] -- COMMAND...` with it, from the
# carried copy (through bin/ctrain, which stays first on PATH for the command).
# The interpreter, named explicitly, never by /usr/bin/env: CTRAIN_IMAGE_PYTHON when set (the
# Python of an overlay's environment, say); else COMMAND's own when COMMAND starts with a Python
# (`python train.py`: the launcher runs on the interpreter the script runs on, so TensorFlow and
# Horovod are that one's); else python3, then python, on the image's PATH. A named interpreter's
# directory is put first on PATH for the command. It must be Python 3.10
# or newer. No Python, or an older one: one line on stderr with the fix, exit 2, nothing started.
# POSIX sh: the image may have no bash.
carried=/opt/ctrain-carried

fail() {
    echo "ctrain: error: $1 Fix: $2" >&2
    exit 2
}

explain=
if [ "${1:-}" = --explain ]; then
    explain=--explain
    shift
fi
[ "${1:-}" = -- ] || fail "boot.sh: expected [--explain] -- COMMAND..." "run it through ctrain exec"
shift
[ "$#" -gt 0 ] || fail "no command given." "ctrain exec IMAGE -- python train.py"

python=${CTRAIN_IMAGE_PYTHON:-}
how="CTRAIN_IMAGE_PYTHON"
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
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
    || fail "$python ($how) does not run as a Python in the image." \
        "name the image's interpreter by its path: --image-python /path/to/python"
case $version in
    3.1[0-9] | 3.[2-9][0-9]) ;;
    *) fail "$python ($how) is Python $version; ctrain's launcher needs Python 3.10 or newer." \
        "use an image with Python >= 3.10, or name a newer interpreter in it: --image-python PATH" ;;
esac

# A named interpreter's directory goes first on PATH, as activating its environment would: the
# command's own `python` is then that one.
if [ "$how" = CTRAIN_IMAGE_PYTHON ]; then
    PATH=${python%/*}:$PATH
    export PATH
fi
# ctrain on the launcher's and the script's path, and `ctrain` first on PATH: the carried copy,
# on this interpreter (bin/ctrain beside this script).
bin=${0%/*}/bin
PATH=$bin:$PATH
PYTHONPATH=$carried/api${PYTHONPATH:+:$PYTHONPATH}
CTRAIN_CARRIED="$python (Python $version, $how)"
CTRAIN_CARRIED_PYTHON=$python
export PATH PYTHONPATH CTRAIN_CARRIED CTRAIN_CARRIED_PYTHON
exec "$bin/ctrain" launch ${explain:+"$explain"} -- "$@"
