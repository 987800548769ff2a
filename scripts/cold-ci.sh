#!/usr/bin/env bash
# CI's run from a new machine's state, timed, on a machine that has run everything before, which
# is left as it was:
#
#   scripts/cold-ci.sh [DIR [COMMAND [ARG...]]]       (root)
#   e.g. scripts/cold-ci.sh                           CI's run in /ctrain-cold-ci (about an hour)
#        scripts/cold-ci.sh /tmp/ctrain-cold-ci       the same, the clone under /tmp
#        scripts/cold-ci.sh /ctrain-cold-ci ls -A     a stand-in for CI's run (seconds)
#
# 1. DIR (default /ctrain-cold-ci; it must not exist) is a new clone of this checkout's HEAD (what
#    is not committed is not in it): no .venv, no build/.
# 2. This machine's services stop (scripts/services.sh stop): the sandbox below shares this
#    machine's network, as CI downloads from PyPI and Debian's mirror, and the services it starts
#    would meet these (slurmctld's and slurmd's ports, the registry on 127.0.0.1:5000, the
#    compute hosts' bridge).
# 3. COMMAND (default CI's run, `bash .ci/run`) runs in DIR, in DIR's scripts/fresh-state.sh
#    sandbox with FRESH_STATE_NETWORK=host: none of the state the services and Apptainer keep,
#    an empty /run, /tmp, /var/lib/docker and /var/lib/containers, and an empty
#    ${XDG_CACHE_HOME:-$HOME/.cache} (FRESH_STATE_HIDE): no pip cache, no Horovod wheel cache
#    (~/.cache/ctrain/wheels), no wheelhouse, base images or build contexts. What it writes there
#    goes with the sandbox (tens of GB in /var/tmp/ctrain-fresh-state-* while it runs).
# 4. However COMMAND ends (Ctrl-C included): the network devices the sandbox left in this
#    machine's namespace (the compute hosts' bridge) are removed, this machine's services start
#    again (with CTRAIN_SERVICES_NODES compute hosts, 3 unless set, as `make services`), DIR is
#    removed unless COMMAND failed or COLD_CI_KEEP=1, and the last lines are the most disk COMMAND
#    took (the free space on DIR's and /var/tmp's filesystems, sampled every COLD_CI_DISK_EVERY
#    seconds, 10 unless set) and its wall time. The disk figure is what CI needs free on a new
#    machine, give or take what other writers on the same filesystem did meanwhile.
# What is not reset: the installed Debian packages (only a new machine tests `make system`'s apt
# step), /dev, the kernel's settings, $HOME but its cache (pyenv's Python, .gitconfig), /var/cache
# and /var/tmp. The exit status is COMMAND's, or 1 where the services did not start again.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECKOUT=$(cd "$HERE/.." && pwd -P)
NODES=${CTRAIN_SERVICES_NODES:-3}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}

log() { echo "cold-ci: $*"; }
die() { echo "cold-ci: $*" >&2; exit 1; }

# This machine's network devices, one name a line (a veth's without its @peer).
links() { ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort; }

# Remove the devices that are not in BEFORE (the sandbox's, whose processes are gone: the compute
# hosts' bridge; their veths go with their namespaces, in a moment); say what is left.
remove_links() {
    local before=$1 link tries
    for tries in 1 2 3 4 5; do
        for link in $(comm -13 <(printf '%s\n' "$before") <(links)); do
            ip link delete "$link" 2>/dev/null && log "removed network device $link"
        done
        [ -n "$(comm -13 <(printf '%s\n' "$before") <(links))" ] || return 0
        [ "$tries" = 5 ] || sleep 1
    done
    echo "cold-ci: WARNING: network devices left: $(comm -13 <(printf '%s\n' "$before") <(links) | tr '\n' ' ')" >&2
}

# free_mib DIR...: MiB free on the filesystems of DIR..., each counted once
free_mib() { df -P -BM "$@" | awk 'NR > 1 && !seen[$1]++ { sub(/M$/, "", $4); s += $4 } END { print s }'; }

# watch_disk FILE DIR...: every COLD_CI_DISK_EVERY (10) s, write the least MiB free on DIR...'s
# filesystems to FILE
watch_disk() {
    local file=$1 every=${COLD_CI_DISK_EVERY:-10} least now
    shift
    least=$(free_mib "$@")
    echo "$least" >"$file"
    while sleep "$every"; do
        now=$(free_mib "$@")
        if [ "$now" -lt "$least" ]; then
            least=$now
            echo "$least" >"$file"
        fi
    done
}

# minutes and seconds: 61 -> 1m01s
duration() { printf '%dm%02ds' "$(($1 / 60))" "$(($1 % 60))"; }

# Set by main for finish: the clone, the network devices before the sandbox, when COMMAND began,
# the MiB free then, the disk watcher and its file.
DIR=/ctrain-cold-ci
BEFORE=
STARTED=$SECONDS
FREE=
WATCHER=
LEAST=

main() {
    local head
    if [ "$#" -gt 0 ]; then
        DIR=$1
        shift
    fi
    [ "$#" -gt 0 ] || set -- bash .ci/run
    [ "$(id -u)" -eq 0 ] || die "must run as root (it stops and starts the services). Fix: sudo $0"
    case "$DIR" in /?*) ;; *) die "DIR $DIR: want an absolute path (/ctrain-cold-ci)" ;; esac
    [ ! -e "$DIR" ] || die "$DIR exists. Fix: rm -rf $DIR, or name another DIR"
    head=$(git -C "$CHECKOUT" rev-parse HEAD)
    git clone -q "$CHECKOUT" "$DIR"
    [ "$(git -C "$DIR" rev-parse HEAD)" = "$head" ] || die "the clone in $DIR is not at HEAD $head"
    log "$DIR: a new clone of $CHECKOUT at ${head:0:12}"

    # From here on, however it ends, finish puts this machine back.
    BEFORE=$(links)
    trap finish EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    log "stopping this machine's services (the sandbox shares its network)"
    "$HERE/services.sh" stop
    BEFORE=$(links)
    log "$*, in $DIR, from a new machine's state ($CACHE empty)"
    LEAST=$(mktemp /run/ctrain-cold-ci-disk.XXXXXX)
    FREE=$(free_mib "$DIR" /var/tmp)
    watch_disk "$LEAST" "$DIR" /var/tmp &
    WATCHER=$!
    STARTED=$SECONDS
    cd "$DIR"
    FRESH_STATE_NETWORK=host FRESH_STATE_HIDE=$CACHE "$DIR/scripts/fresh-state.sh" "$@"
}

# After COMMAND (its status in $?): put this machine back and say how long COMMAND took. Every
# step is tried, whatever failed before it or wherever the output went (a tee that Ctrl-C ended).
finish() {
    local rc=$? took=$((SECONDS - STARTED))
    set +e
    trap - EXIT INT TERM
    trap '' PIPE
    cd /
    if [ -n "$WATCHER" ]; then
        kill "$WATCHER" 2>/dev/null
        wait "$WATCHER" 2>/dev/null
        log "disk: at most $(((FREE - $(cat "$LEAST")) / 1024)) GiB more in use than at the start ($((FREE / 1024)) GiB free then, on the filesystems of $DIR and /var/tmp)"
        rm -f "$LEAST"
    fi
    remove_links "$BEFORE"
    log "starting this machine's services again ($NODES compute hosts)"
    CTRAIN_SERVICES_NODES=$NODES "$HERE/services.sh" start || {
        echo "cold-ci: ERROR: this machine's services did not start again (above). Fix: CTRAIN_SERVICES_NODES=$NODES scripts/services.sh start" >&2
        [ "$rc" != 0 ] || rc=1
    }
    if [ "$rc" = 0 ] && [ "${COLD_CI_KEEP:-}" != 1 ]; then
        rm -rf --one-file-system "$DIR"
    else
        log "$DIR stays (remove it with rm -rf $DIR)"
    fi
    log "took $(duration "$took") (exit $rc) from a new machine's state"
    exit "$rc"
}

main "$@"
