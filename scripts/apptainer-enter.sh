#!/bin/sh
# /usr/local/bin/apptainer, installed by scripts/apptainer.sh: runs the Apptainer of the Debian 13
# root $ROOT (its glibc is newer than the host's) with the caller's arguments, environment,
# working directory and user. Every step execs the next, so this process becomes apptainer:
# exit codes and signals (SIGTERM from srun) reach it unchanged.
#
# Stage 1 (this file, run by the caller): re-exec itself in a private mount namespace, as root
# `unshare --mount`, as another user also in a user namespace that maps the caller's uid and gid
# to themselves (`--map-current-user`: apptainer sees the caller's own uid, not root;
# `--keep-caps`: without it util-linux's mount says "must be superuser").
# Stage 2 (CTRAIN_APPTAINER_STAGE=enter, removed again before apptainer starts): bind the host's
# directories (all but its system ones) into $ROOT, pivot_root into it (a plain chroot makes
# apptainer abort: "Running inside a weak chrooted environment"), drop the old root, cd back,
# exec apptainer.
# POSIX sh (dash), not bash: bash would read $BASH_ENV from the caller's environment.
set -euf  # -f: no globbing of the paths split below
# Every program by its full path: the caller's PATH is passed on untouched, whatever it holds.

ROOT=/opt/ctrain/apptainer/root

if [ "${CTRAIN_APPTAINER_STAGE:-}" != enter ]; then
    if [ ! -x "$ROOT/usr/bin/apptainer" ]; then
        echo "apptainer (ctrain wrapper): $ROOT/usr/bin/apptainer is missing. Fix: make system" >&2
        exit 255
    fi
    self=$(/usr/bin/readlink -f "$0")
    export CTRAIN_APPTAINER_STAGE=enter
    if [ "$(/usr/bin/id -u)" -eq 0 ]; then
        exec /usr/bin/unshare --mount --propagation private -- "$self" "$@"
    fi
    exec /usr/bin/unshare --user --map-current-user --keep-caps --mount --propagation private \
        -- "$self" "$@"
fi
unset CTRAIN_APPTAINER_STAGE

say() { echo "apptainer (ctrain wrapper): $*" >&2; }

# Directories bound from the host, each onto its own path (when it exists there): every top-level
# directory of the host but the root's system directories below (a checkout, a SIF, data or a
# job's working directory is where the caller sees it, under /work, /scratch, /gpfs or wherever a
# site keeps them), and below /var the two a job uses: /var/tmp, and /var/spool (slurmd's, where
# `srun --mpi=pmix` puts the PMIx server's directory that ctrain binds into the container).
VAR_DIRS="/var/tmp /var/spool"
# Below /usr, the host's Python packages (Debian's, and pip's for the whole system): a ctrain
# installed there carries itself and click from there into the container (ctrain exec binds
# them), so the host's paths must be the same inside. The root's own apptainer needs no Python.
PYTHON_DIRS="/usr/lib/python3/dist-packages /usr/local/lib/python3*/dist-packages"
# Files bound over the root's own: the host's users (subuid/subgid: --fakeroot) and names.
HOST_FILES="/etc/passwd /etc/group /etc/subuid /etc/subgid /etc/hosts /etc/resolv.conf"
# Top-level directories of the root itself, never bound over (the host's /usr/bin over the root's
# would replace apptainer and its libraries).
SYSTEM_DIRS=" /bin /boot /etc /lib /lib32 /lib64 /libx32 /sbin /usr /var "

bound=""
# Bind host PATH onto the same path in the root, unless PATH is (under) one bound already.
bind() {
    for b in $bound; do
        case $1/ in "$b"/*) return 0 ;; esac
    done
    [ -e "$1" ] || return 0
    bound="$bound $1"
    if [ ! -e "$ROOT$1" ]; then
        # A mount point the root lacks: only root may add it (an empty directory, kept).
        if ! { [ -d "$1" ] && /usr/bin/mkdir -p "$ROOT$1" 2>/dev/null; }; then
            say "$1 is not reachable inside: $ROOT$1 is missing. Fix: as root, mkdir $ROOT$1"
            return 0
        fi
    fi
    /usr/bin/mount --rbind "$1" "$ROOT$1"
}

# Bind every top-level directory of the host but SYSTEM_DIRS (a name with white space in it is
# skipped: $bound is split on it).
bind_top_level() {
    set +f
    set -- /*/
    set -f
    for d; do
        d=${d%/}
        case $SYSTEM_DIRS in *" $d "*) continue ;; esac
        case $d in *[[:space:]]*) continue ;; esac
        bind "$d"
    done
}

cwd=$PWD
/usr/bin/mount --rbind "$ROOT" "$ROOT"
bind_top_level
for d in $VAR_DIRS; do bind "$d"; done
set +f
for d in $PYTHON_DIRS; do [ ! -d "$d" ] || bind "$d"; done
set -f
for f in $HOST_FILES; do bind "$f"; done
/usr/sbin/pivot_root "$ROOT" "$ROOT/.oldroot"
/usr/bin/umount -l /.oldroot

# cd's OLDPWD must not leak into the container's environment.
if [ -n "${OLDPWD+set}" ]; then old_oldpwd=$OLDPWD; fi
cd "$cwd" 2>/dev/null || { say "cannot enter $cwd inside $ROOT; starting in /"; cd /; }
if [ -n "${old_oldpwd+set}" ]; then OLDPWD=$old_oldpwd; else unset OLDPWD; fi
exec /usr/bin/apptainer "$@"
