#!/usr/bin/env bash
# Run a command against a new machine's state, on a machine that has run everything before, and
# leave that machine as it was:
#
#   scripts/fresh-state.sh COMMAND [ARG...]          (root)
#   e.g. scripts/fresh-state.sh scripts/services.sh start
#
# COMMAND runs in namespaces of its own (mount, network, PID, UTS, IPC) in which:
#   - /etc, /opt, /usr/local, /var/lib, /var/log and /var/spool are overlays on this machine's:
#     what the installed packages put there is seen, what COMMAND writes stays in the sandbox;
#   - every path where scripts/services.sh (with scripts/cluster.sh) and scripts/apptainer.sh keep
#     state, as `services.sh paths` and `apptainer.sh paths` list them, is gone: no munge key, no
#     slurm.conf, no Slurm state or spool, no pid file, no registry store, no Docker data, no
#     Podman drop-ins, no compute hosts, no Apptainer root or wrapper;
#   - /run is an empty tmpfs, as after a boot; /tmp, /var/lib/docker and /var/lib/containers are
#     empty directories (real ones on this machine's disk: Docker's and Podman's overlay storage
#     cannot sit on an overlay), and so is every directory FRESH_STATE_HIDE names (DIR[:DIR...],
#     e.g. $HOME/.cache: scripts/cold-ci.sh's caches);
#   - this checkout is this machine's own, at its own path, wherever it lies (under /tmp, or
#     /opt, say): bound back over what the sandbox laid there, so COMMAND finds it and what it
#     writes there stays. It must not lie in a state path, which the sandbox removes.
#   - the network is loopback and one veth pair (10.78.0.1, so that the machine has an address):
#     daemons started there take their usual ports without meeting
#     this machine's (a registry on 127.0.0.1:5000 in there is not the one out here), and compute
#     hosts made there are namespaces of the sandbox's network. FRESH_STATE_NETWORK=host keeps this
#     machine's network instead, for an install step that downloads (scripts/apptainer.sh).
# What is not reset: the installed Debian packages (only a new machine tests `make system`'s apt
# step), /dev (services.sh makes /dev/nvidia0..3 there when missing), the kernel's settings.
# When COMMAND ends, every process it started ends with the PID namespace, and the sandbox's
# files are removed (FRESH_STATE_KEEP=1 keeps them and prints where). The exit status is COMMAND's.
# The FRESH_STATE_* settings are this sandbox's: COMMAND's environment has none of them, so a
# sandbox COMMAND starts (the tests' own, in scripts/cold-ci.sh's) gets a network of its own.
set -euo pipefail
shopt -s inherit_errexit  # a failure in $(layers ...) stops it too

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECKOUT=$(cd "$HERE/.." && pwd -P)
OVERLAID=(/etc /opt /usr/local /var/lib /var/log /var/spool)
EMPTY=(/tmp /var/lib/docker /var/lib/containers)
IFACE=fresh0
IFACE_ADDR=10.78.0.1/24

die() {
    echo "fresh-state: $*" >&2
    exit 1
}

# under PATH DIR...: PATH is one of the DIRs or lies under one (a DIR may be a glob).
under() {
    local path=$1 dir
    shift
    for dir; do
        # Unquoted on purpose: a state path may be a glob (/var/spool/slurmd-*).
        # shellcheck disable=SC2254
        case "$path/" in $dir/*) return 0 ;; esac
    done
    return 1
}

# layers DIR STATE: the lower directories of the sandbox's overlay on DIR. Where DIR is no overlay,
# DIR itself, bound read-only to STATE/lower/DIR first, so that the overlay's options name a path
# that stays this machine's DIR. Where DIR is an overlay already (a sandbox in a sandbox: the
# tests' sandboxes in scripts/cold-ci.sh's), that overlay's upper and lower directories: the
# kernel stacks overlays two deep at most.
layers() {
    local dir=$1 state=$2 opts opt upper='' lower=''
    # The last mount on DIR is the one seen there.
    opts=$(findmnt -n -o FSTYPE,FS-OPTIONS --mountpoint "$dir" | tail -n 1) || true  # none: 1
    if [ "${opts%% *}" != overlay ]; then
        mkdir -p "$state/lower$dir"
        mount --bind -o ro "$dir" "$state/lower$dir"
        echo "$state/lower$dir"
        return
    fi
    IFS=, read -ra opts <<<"${opts#* }"
    for opt in "${opts[@]}"; do
        case "$opt" in
            lowerdir=*) lower=${opt#lowerdir=} ;;
            upperdir=*) upper=${opt#upperdir=} ;;
        esac
    done
    echo "${upper:+$upper:}$lower"
}

# The directories the sandbox replaces with empty ones, one a line: EMPTY's and FRESH_STATE_HIDE's.
emptied() {
    printf '%s\n' "${EMPTY[@]}"
    [ -z "${FRESH_STATE_HIDE:-}" ] || tr : '\n' <<<"$FRESH_STATE_HIDE"
}

# run COMMAND...: COMMAND as a child of this shell, which stays the sandbox's first process (PID 1,
# to which every orphan goes) and reaps any child, as an init does; a program that is not written
# to be one may not (GNU make 4.3, .ci/run's, spun at full CPU in reap_children as PID 1). The
# sandbox ends with COMMAND, with its exit status.
run() {
    local rc=0
    "$@" || rc=$?
    exit "$rc"
}

# inside NETWORK STATE PATHS COMMAND...: in the new namespaces, lay the sandbox out in STATE, remove
# PATHS (one a line, globs allowed), bind the checkout back, give a network of its own
# (NETWORK=sandbox) a loopback and an address, then run COMMAND.
inside() {
    local network=$1 state=$2 paths=$3 dir path ok kept='' empty
    shift 3
    mapfile -t empty < <(emptied)
    # This sandbox's settings are its own: a sandbox COMMAND starts (the tests' own, in a cold CI
    # run's) must not inherit the host network or the hidden directories.
    unset FRESH_STATE_NETWORK FRESH_STATE_HIDE FRESH_STATE_KEEP
    # The checkout, held aside before anything is laid over it, and moved back at the end.
    if under "$CHECKOUT" "${OVERLAID[@]}" /run "${empty[@]}"; then
        kept=$state/checkout
        mkdir -p "$kept"
        mount --rbind "$CHECKOUT" "$kept"
    fi
    for dir in "${OVERLAID[@]}"; do
        mkdir -p "$state/upper$dir" "$state/work$dir"
        mount -t overlay overlay \
            -o "lowerdir=$(layers "$dir" "$state"),upperdir=$state/upper$dir,workdir=$state/work$dir" \
            "$dir"
    done
    mount -t tmpfs -o mode=0755 tmpfs /run
    for dir in "${empty[@]}"; do
        mkdir -p "$state/empty$dir" "$dir"
        # The owner and mode of the directory it replaces (/tmp's 1777, say).
        chown --reference="$dir" "$state/empty$dir"
        chmod --reference="$dir" "$state/empty$dir"
        mount --bind "$state/empty$dir" "$dir"
    done
    shopt -s nullglob
    while IFS= read -r path; do
        [ -n "$path" ] || continue
        ok=
        for dir in "${OVERLAID[@]}" "${EMPTY[@]}" /run; do
            case "$path" in "$dir"/?*) ok=1 ;; esac
        done
        [ -n "$ok" ] || die "state path $path is outside the sandbox's overlays; refusing to remove it"
        # Unquoted on purpose: a path may be a glob (/var/spool/slurmd-*).
        # shellcheck disable=SC2086
        for path in $path; do
            mountpoint -q "$path" || rm -rf --one-file-system "$path"
        done
    done <<<"$paths"
    if [ -n "$kept" ]; then
        mkdir -p "$CHECKOUT"
        mount --move "$kept" "$CHECKOUT"
    fi
    [ "$network" = sandbox ] || run "$@"
    ip link set lo up
    # A machine has an address besides loopback's, and programs that resolve names with
    # AI_ADDRCONFIG (Slurm's, for one) find no IPv4 address at all without one: a veth pair (this
    # kernel has no dummy interfaces) whose address nothing outside the sandbox can reach.
    ip link add "$IFACE" type veth peer name "$IFACE-peer"
    ip addr add "$IFACE_ADDR" dev "$IFACE"
    ip link set "$IFACE-peer" up
    ip link set "$IFACE" up
    run "$@"
}

main() {
    if [ "${1:-}" = --inside ]; then
        shift
        inside "$@"
    fi
    [ "$#" -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
    [ "$(id -u)" -eq 0 ] || die "must run as root (it mounts overlays). Fix: sudo $0 $*"
    local state paths list dir network=${FRESH_STATE_NETWORK:-sandbox} rc=0
    local namespaces=(--mount --propagation private --pid --uts --ipc --fork --mount-proc --kill-child)
    case "$network" in
        sandbox) namespaces+=(--net) ;;
        host) ;;
        *) die "FRESH_STATE_NETWORK=$network: want sandbox or host" ;;
    esac
    paths=$("$HERE/services.sh" paths; "$HERE/apptainer.sh" paths)
    # The sandbox removes every state path: a checkout in one would go with it.
    mapfile -t list <<<"$paths"
    ! under "$CHECKOUT" "${list[@]}" \
        || die "this checkout, $CHECKOUT, lies in a path where the services or Apptainer keep state, which the sandbox removes. Fix: clone it elsewhere (git clone $CHECKOUT /srv/ctrain)"
    while IFS= read -r dir; do
        case "$dir" in
            /?*) ! under /var/tmp "$dir" || die "FRESH_STATE_HIDE: $dir holds /var/tmp, where the sandbox keeps its files" ;;
            *) die "FRESH_STATE_HIDE=$FRESH_STATE_HIDE: want absolute directories, DIR[:DIR...]" ;;
        esac
    done < <(emptied)
    # Named after this shell (pid namespace and pid) as tests/support/scratch.py names its directories: a
    # test run removes the files of a sandbox that was killed, where this trap never ran.
    state=$(mktemp -d "/var/tmp/ctrain-fresh-state-pid$(readlink /proc/self/ns/pid | tr -dc 0-9).$$-XXXXXX")
    if [ "${FRESH_STATE_KEEP:-}" = 1 ]; then
        echo "fresh-state: the sandbox's files stay in $state" >&2
    else
        # shellcheck disable=SC2064  # $state is fixed now
        trap "rm -rf --one-file-system '$state'" EXIT
    fi
    unshare "${namespaces[@]}" "$HERE/fresh-state.sh" --inside "$network" "$state" "$paths" "$@" \
        || rc=$?
    return "$rc"
}

main "$@"
