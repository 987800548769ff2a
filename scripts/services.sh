#!/usr/bin/env bash
# Start, stop or check the local services ctrain's real tests use, on ONE Debian 12 machine (root):
#
#   munged          as user munge, socket in /run/munge (Slurm authenticates with it)
#   slurmctld       + slurmd: a one-node cluster "ctrain", config generated from `slurmd -C`
#   dockerd         with --bridge=none --iptables=false --ip-masq=false (no default bridge, ever)
#   docker-registry a local image registry on 127.0.0.1:5000 only
#
# Disk: every test run pushes new layers and SIFs under the same tags and builds images again, so
# start also takes back what earlier runs left: the registry is garbage-collected (manifests no tag
# names, and their blobs) before it starts, dockerd's BuildKit keeps at most CTRAIN_BUILD_CACHE
# (default 20GB) of build cache, least recently used first, and images no tag names are removed
# from docker's and podman's stores; where less than CTRAIN_SERVICES_MIN_FREE_GIB (default 40: a
# test run from a new clone builds every image again, and a cold run took up to 48 GiB, a few of
# them copies a real machine's hard links avoid) is free after that, BuildKit's cache goes too. It
# ends with the free space where tests write, and a warning under CTRAIN_SERVICES_MIN_FREE_GIB.
#
# Usage: scripts/services.sh start|stop|status|paths|hosts
#   start   starts whatever is not running (safe to repeat), then verifies every service:
#           `munge -n | unmunge`, node idle, `srun -n 2`, `srun --mpi=pmix -n 2`, `docker info`,
#           GET http://127.0.0.1:5000/v2/. Every wait is bounded; on timeout the tail of the
#           relevant log is printed and the script exits non-zero.
#   stop    stops registry, dockerd, slurmd, slurmctld, munged (whatever runs) and removes the
#           compute hosts, if any; never fails.
#   status  one line per service; exits 0 only if all of them run.
#   paths   every path where start keeps state, one a line (globs allowed): a new machine has none
#           of them. scripts/fresh-state.sh removes them all to start the services as on a new
#           machine (docs/development.md).
#   hosts   only the compute hosts' slurmds that do not run (a host brought back after its slurmd
#           died, as a test's lost host), then the same wait until every host runs a step;
#           nothing else is started, and no disk is taken back (a test run's build cache stays).
#
# Every start is the same from any state: a new machine's, a used one's, or one left stopped,
# half-started or damaged (a daemon killed with its pid file and socket left, a registry store
# without blobs): each daemon that does not run is started, after its stale pid file is removed.
#
# CTRAIN_SERVICES_NODES=N (default 0 here; `make services` passes NODES, 3 by default) adds N compute hosts cn01..cnNN in
# partition `cluster` (scripts/cluster.sh, docs/cluster.md): the one-node partition `debug` on
# this host stays the default. N=0 removes compute hosts an earlier start made.
#
# Logs: /var/log/ctrain/{dockerd,registry}.log, /var/log/slurm/{slurmctld,slurmd}.log,
# /var/log/munge/munged.log. Environment: CTRAIN_SERVICES_WAIT (seconds per wait, default 60).
# Without compute hosts, nodes and clients talk over 127.0.0.1 only: slurmd, srun and the registry
# bind 127.0.0.1; slurmctld (no bind option in Slurm 22.05) listens on all addresses but is reached
# via 127.0.0.1. With compute hosts, slurmctld is reached via the cluster bridge's address and
# slurmd and srun listen on every address (the compute hosts must reach srun on the login host).
set -euo pipefail

WAIT=${CTRAIN_SERVICES_WAIT:-60}
BUILD_CACHE=${CTRAIN_BUILD_CACHE:-20GB}
MIN_FREE_GIB=${CTRAIN_SERVICES_MIN_FREE_GIB:-40}
NODES=${CTRAIN_SERVICES_NODES:-0}
export PATH=$PATH:/usr/sbin:/sbin  # munged, slurmctld, slurmd, dockerd live in sbin
LOGDIR=/var/log/ctrain
HOST=$(hostname -s)

# -------------------------------------------------------------------------------------- helpers
log() { echo "services: $*"; }
die() { echo "services: ERROR: $*" >&2; exit 1; }

# Print the last lines of a log file (for a failed wait).
show_log() {
    echo "---- tail of $1 ----" >&2
    tail -n 40 "$1" >&2 2>/dev/null || echo "(no log at $1)" >&2
    echo "----" >&2
}

# alive NAME PID: PID is a live (not zombie) process called NAME.
alive() {
    local stat state
    stat=$(cat "/proc/$2/stat" 2>/dev/null) || return 1
    # /proc/PID/stat is "PID (COMM) STATE ..."; COMM may contain spaces, so cut at the last ") ".
    state=${stat##*) }
    state=${state%% *}
    [ "$state" != Z ] && [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "$1" ]
}

# pid_of NAME PIDFILE: print the pid of the running daemon NAME (exact process name), preferring
# its pidfile; fail if it is not running. Stale pidfiles (dead pid, other process) are ignored.
pid_of() {
    local name=$1 pidfile=$2 pid
    if [ -r "$pidfile" ]; then
        pid=$(tr -dc '0-9' <"$pidfile")
        if [ -n "$pid" ] && alive "$name" "$pid"; then
            echo "$pid"
            return 0
        fi
    fi
    # Only this network namespace: a compute host's slurmd is not this host's.
    for pid in $(pgrep -x "$name"); do
        if alive "$name" "$pid" \
            && [ "$(readlink "/proc/$pid/ns/net")" = "$(readlink /proc/self/ns/net)" ]; then
            echo "$pid"
            return 0
        fi
    done
    return 1
}

# runs_with PID TEXT: TEXT is part of PID's command line.
runs_with() { tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"; }

# wait_for DESCRIPTION LOGFILE COMMAND...: retry COMMAND every second for up to $WAIT seconds;
# on timeout print COMMAND's last output and the tail of LOGFILE, and exit 1.
wait_for() {
    local what=$1 logfile=$2 deadline=$((SECONDS + WAIT)) out
    shift 2
    until out=$("$@" 2>&1); do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "services: ERROR: timed out after ${WAIT}s waiting for $what" >&2
            [ -z "$out" ] || printf 'last attempt said:\n%s\n' "$out" >&2
            show_log "$logfile"
            exit 1
        fi
        sleep 1
    done
}

# start_daemon NAME PIDFILE LOGFILE COMMAND...: unless NAME runs, remove its stale PIDFILE (dockerd
# refuses to start while the process its pid file names lives, and after a crash that pid may be
# any process's) and run COMMAND: the daemon, which forks, or `background`
# for one that does not. On failure the tail of LOGFILE is printed and the script stops.
start_daemon() {
    local name=$1 pidfile=$2 logfile=$3 pid
    shift 3
    if pid=$(pid_of "$name" "$pidfile"); then
        log "$name: already running (pid $pid)"
        return 0
    fi
    rm -f "$pidfile"
    log "$name: starting (log $logfile)"
    "$@" 9>&- || { show_log "$logfile"; die "$name failed to start"; }
}

# background PIDFILE LOGFILE COMMAND...: COMMAND in a session of its own, so that it outlives this
# script and the caller's terminal or CI step, its output appended to LOGFILE and, unless PIDFILE
# is empty, its pid written there.
background() {
    local pidfile=$1 logfile=$2
    shift 2
    setsid "$@" </dev/null >>"$logfile" 2>&1 9>&- &
    [ -z "$pidfile" ] || echo $! >"$pidfile"
}

# stop_daemon NAME PIDFILE: SIGTERM, wait up to $WAIT seconds, then SIGKILL. Never fails.
stop_daemon() {
    local name=$1 pidfile=$2 pid deadline
    if ! pid=$(pid_of "$name" "$pidfile"); then
        log "$name: not running"
        return 0
    fi
    log "$name: stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + WAIT))
    while alive "$name" "$pid"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "$name: still alive after ${WAIT}s, SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
            break
        fi
        sleep 0.5
    done
    rm -f "$pidfile"
}

# replace_foreign NAME PIDFILE MARK WHY UNIT...: where NAME runs without MARK on its command line
# (not started by this script), say WHY, stop the systemd UNITs if systemd runs, and stop NAME, so
# that start_daemon starts ours. Succeeds only if it stopped one.
replace_foreign() {
    local name=$1 pidfile=$2 mark=$3 why=$4 pid
    shift 4
    if ! pid=$(pid_of "$name" "$pidfile") || runs_with "$pid" "$mark"; then
        return 1
    fi
    log "$name: pid $pid $why; replacing it"
    if [ -d /run/systemd/system ]; then
        systemctl stop "$@" >/dev/null 2>&1 || true
    fi
    stop_daemon "$name" "$pidfile"
}

# write_if_changed FILE TEXT: write TEXT and a newline to FILE, unless FILE holds TEXT already
# (trailing newlines aside). Succeeds only if it wrote.
write_if_changed() {
    local file=$1 text=$2
    if [ -f "$file" ] && [ "$(cat "$file")" = "$text" ]; then
        return 1
    fi
    # `|| exit`: callers test this function's status, which turns `set -e` off in here.
    printf '%s\n' "$text" >"$file" || exit
}

# ---------------------------------------------------------------------------------------- munge
MUNGED_PID=/run/munge/munged.pid
MUNGED_LOG=/var/log/munge/munged.log

munge_ok() { munge -n | unmunge | grep -q 'STATUS: *Success'; }

start_munge() {
    # The Debian package creates the key; recreate it only if it is missing (fresh /etc).
    if [ ! -s /etc/munge/munge.key ]; then
        log "munge: creating /etc/munge/munge.key"
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    # /run is a tmpfs: the socket directory vanishes at boot and must belong to munge.
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge
    install -d -o munge -g munge -m 0711 /var/lib/munge
    start_daemon munged "$MUNGED_PID" "$MUNGED_LOG" runuser -u munge -- /usr/sbin/munged
    wait_for "munge -n | unmunge" "$MUNGED_LOG" munge_ok
    log "munge: credential round trip OK"
}

# ---------------------------------------------------------------------------------------- slurm
SLURM_CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf
SLURM_LOGDIR=/var/log/slurm
SLURMCTLD_PID=/run/slurmctld.pid
# With compute hosts (main sets these four for them), slurmctld is reached on the cluster bridge
# and every slurmd has its own pid file, log and spool (Slurm expands %n to the node name); this
# host's slurmd is node $HOST.
CTLD_ADDR=127.0.0.1
SLURMD_FILES=
SLURMD_PID=/run/slurmd.pid
SLURMD_LOG=$SLURM_LOGDIR/slurmd.log
# Set to 1 where setup_gpus or write_slurm_conf wrote a new gres.conf or slurm.conf.
SLURM_CONF_CHANGED=0

# The node line of this machine as Slurm sees it (CPUs, sockets, cores, threads, RealMemory), with
# NodeName forced to `hostname -s` and addressed via loopback, so no DNS or network is involved.
hw_line() {
    local line
    line=$(slurmd -C | grep -m1 '^NodeName=') || die "slurmd -C printed no NodeName line"
    echo "${line#NodeName=* }"
}

node_line() {
    echo "NodeName=$HOST NodeAddr=127.0.0.1 NodeHostname=$HOST $HW_LINE Gres=gpu:$GPUS State=UNKNOWN"
}

# GPUs for Slurm's bookkeeping. With real NVIDIA GPUs, those. Without (the test machines),
# CTRAIN_FAKE_GPUS (4) character devices /dev/nvidia0..3 are made so that Slurm allocates GPUs
# and sets CUDA_VISIBLE_DEVICES / SLURM_STEP_GPUS per step exactly as on a GPU cluster; nothing
# can compute on them (TensorFlow finds no CUDA driver and runs on the CPU).
setup_gpus() {
    local count i
    if count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') && [ "$count" -gt 0 ]; then
        GPUS=$count
    else
        GPUS=${CTRAIN_FAKE_GPUS:-4}
        for ((i = 0; i < GPUS; i++)); do
            [ -e "/dev/nvidia$i" ] || mknod -m 0666 "/dev/nvidia$i" c 195 "$i"
        done
    fi
    if write_if_changed "$GRES_CONF" "Name=gpu File=/dev/nvidia[0-$((GPUS - 1))]"; then
        SLURM_CONF_CHANGED=1
    fi
}

slurm_conf_text() {
    cat <<EOF
# Generated by ctrain scripts/services.sh; rewritten on every start when it differs.
# One-node cluster for real Slurm tests. The previous file, if any, was kept as slurm.conf.bak.
ClusterName=ctrain
SlurmctldHost=$HOST($CTLD_ADDR)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile=$SLURMCTLD_PID
SlurmdPidFile=/run/slurmd$SLURMD_FILES.pid
SlurmctldLogFile=$SLURM_LOGDIR/slurmctld.log
SlurmdLogFile=$SLURM_LOGDIR/slurmd$SLURMD_FILES.log
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd$SLURMD_FILES
# No cgroups: plain process tracking, no task binding (works in containers and small VMs).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# A node that was down comes back by itself once slurmd registers with a valid config.
ReturnToService=2
MpiDefault=none
# GPUs as generic resources (see setup_gpus).
GresTypes=gpu
$(comm_params)
# No mail on this machine (the default /usr/bin/mail is absent: "MailProg is invalid").
MailProg=/bin/true
# Jobs may be requeued (scontrol requeue, sbatch --requeue); signals before the time limit
# (sbatch --signal=B:USR2@60) need nothing more than a time limit on the job.
JobRequeue=1
InactiveLimit=0
KillWait=30
MinJobAge=300
# Preemption by partition (docs/preemption.md): a job of a partition with a higher PriorityTier
# takes the cores it needs from running jobs of partitions with a lower one, which Slurm ends
# as their partition's PreemptMode says. REQUEUE, not SUSPEND or GANG: no time-slicing, nothing
# suspended. The partitions that set no mode (debug, cluster) are never preempted all the same:
# no partition above them shares their nodes.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
$NODE_LINE
# FORCE:4 lets up to 4 tasks share each of the cores, so 2-task jobs (and two of them at once)
# fit on a 2-core machine. PriorityTier=2, the top: nothing preempts a debug job. (Not
# PreemptMode=OFF, which would do it too: cons_tres lets no two jobs of such a partition share a
# core, FORCE:4 or not.)
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=2
# For the preemption tests only: a job of high, which takes whole cores (OverSubscribe=NO) and
# is never preempted (PreemptMode=OFF), preempts the jobs of low (requeued) and low-cancel
# (cancelled) that hold cores it needs: SIGTERM to their tasks, the end GraceTime seconds later.
# A high job waits for debug jobs; a debug job waits for a high job's cores and shares a low job's.
PartitionName=low Nodes=$HOST MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1 PreemptMode=REQUEUE GraceTime=30
PartitionName=low-cancel Nodes=$HOST MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1 PreemptMode=CANCEL GraceTime=10
PartitionName=high Nodes=$HOST MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=2 PreemptMode=OFF
EOF
    [ "$NODES" = 0 ] || cluster_conf_lines "$NODES" "$HW_LINE"
}

comm_params() {
    if [ "$NODES" = 0 ]; then
        echo "# slurmd and srun bind to the node's address (127.0.0.1), not to every interface (slurmctld 22.05"
        echo "# still listens on all of them)."
        echo "CommunicationParameters=NoInAddrAny"
    else
        echo "# Compute hosts: srun on the login host must be reachable on the bridge (no NoInAddrAny)."
    fi
}

# Write slurm.conf if it differs (keeping the original once as slurm.conf.bak); sets
# SLURM_CONF_CHANGED=1 when it wrote a new file. Not write_if_changed: the new file replaces the
# old one whole (written beside it as slurm.conf.tmp, mode 0644, then renamed).
write_slurm_conf() {
    local new
    HW_LINE=$(hw_line)  # a separate step, so that a failing `slurmd -C` stops the script
    NODE_LINE=$(node_line)
    new=$(slurm_conf_text)
    if [ -f "$SLURM_CONF" ] && [ "$(cat "$SLURM_CONF")" = "$new" ]; then
        return 0
    fi
    mkdir -p "$(dirname "$SLURM_CONF")"
    # Keep a foreign (not generated here) config once, as slurm.conf.bak.
    if [ -f "$SLURM_CONF" ] && [ ! -e "$SLURM_CONF.bak" ] \
        && ! grep -q '^# Generated by ctrain scripts/services.sh' "$SLURM_CONF"; then
        cp -p "$SLURM_CONF" "$SLURM_CONF.bak"
        log "slurm: kept the previous config as $SLURM_CONF.bak"
    fi
    printf '%s\n' "$new" >"$SLURM_CONF.tmp"
    chmod 0644 "$SLURM_CONF.tmp"
    mv -f "$SLURM_CONF.tmp" "$SLURM_CONF"
    SLURM_CONF_CHANGED=1
    log "slurm: wrote $SLURM_CONF"
}

slurmctld_up() { scontrol ping | grep -q 'is UP'; }

node_state() { sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | head -n1; }

# True once the node can take jobs. A down/drained node is resumed (a no-op failure while slurmd
# has not registered yet, so errors are ignored); unknown/not-responding states just wait.
node_ready() {
    local state
    state=$(node_state)
    case "$state" in
        idle | mixed | allocated | completing) return 0 ;;
        down | drained | draining | drain | fail | failing)
            scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
    esac
    echo "node $HOST is ${state:-not known to sinfo yet}"
    return 1
}

# `srun -n 2` prints ranks 0 and 1 on stdout and nothing on stderr except srun's note that the
# job waited a moment for the previous one's cleanup ("queued and waiting for resources").
srun_ok() {
    local out err rc=0
    err=$(mktemp)
    out=$(timeout 50 srun "$@" -n 2 -t 1 bash -c "echo \$$RANKVAR" 2>"$err") || rc=$?
    sed -i -E '/^srun: job [0-9]+ (queued and waiting for resources|has been allocated resources)$/d' "$err"
    if [ "$rc" -ne 0 ] || [ "$(sort <<<"$out" | tr '\n' ' ')" != "0 1 " ] || [ -s "$err" ]; then
        echo "srun $* exited $rc; stdout: $out"
        cat "$err"
        rm -f "$err"
        return 1
    fi
    rm -f "$err"
}

# This host's slurmd (under either config's pid file), then slurmctld. Never fails.
stop_slurm() {
    stop_daemon slurmd /run/slurmd.pid
    stop_daemon slurmd "/run/slurmd-$HOST.pid"
    stop_daemon slurmctld "$SLURMCTLD_PID"
}

start_slurm() {
    install -d -m 0755 /var/spool/slurmctld "/var/spool/slurmd${SLURMD_FILES//%n/$HOST}" "$SLURM_LOGDIR"
    setup_gpus
    # Compute hosts' network first: slurmctld's address is on the cluster bridge.
    [ "$NODES" = 0 ] || cluster_net "$NODES"
    write_slurm_conf
    # A changed config on running daemons: restart them so the new one is in force.
    if [ "$SLURM_CONF_CHANGED" = 1 ]; then
        stop_node_slurmds
        stop_slurm
    fi
    # Back to one node: whatever an earlier start with compute hosts left goes, the /etc/hosts lines
    # that give this host the bridge's address included, even where /run forgot the hosts (a
    # reboot): slurmd cannot bind an address this host no longer has.
    [ "$NODES" != 0 ] || cluster_down
    start_daemon slurmctld "$SLURMCTLD_PID" "$SLURM_LOGDIR/slurmctld.log" slurmctld
    wait_for "slurmctld to answer scontrol ping" "$SLURM_LOGDIR/slurmctld.log" slurmctld_up
    start_daemon slurmd "$SLURMD_PID" "$SLURMD_LOG" slurmd
    wait_for "node $HOST to become idle" "$SLURMD_LOG" node_ready
    log "slurm: node $HOST is $(node_state)"
    RANKVAR=SLURM_PROCID wait_for "srun -n 2 to print ranks 0 and 1" "$SLURMD_LOG" srun_ok
    log "slurm: srun -n 2 OK"
    RANKVAR=PMIX_RANK wait_for "srun --mpi=pmix -n 2 to print PMIX_RANK 0 and 1" \
        "$SLURMD_LOG" srun_ok --mpi=pmix
    log "slurm: srun --mpi=pmix -n 2 OK"
    [ "$NODES" = 0 ] || cluster_slurmds "$NODES"
}

# -------------------------------------------------------------------------------- compute hosts
# The CTRAIN_SERVICES_NODES=N compute hosts cn01..cnNN are scripts/cluster.sh's (docs/cluster.md):
# start_slurm makes them around this host's Slurm, cmd_stop removes them, cmd_status lists them.
# shellcheck source=scripts/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

# --------------------------------------------------------------------------------------- docker
DOCKERD_PID=/run/ctrain-dockerd.pid
DOCKERD_LOG=$LOGDIR/dockerd.log
DOCKERD_CONF=/etc/ctrain/dockerd.json

# dockerd's settings file: this machine's own /etc/docker/daemon.json where there is one (it may
# move the data root, say), else ours, which only bounds BuildKit's cache; without a bound,
# Docker 20.10 keeps every build's cache forever.
dockerd_conf_text() {
    cat <<EOF
{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "$BUILD_CACHE"}}}
EOF
}

dockerd_config_file() {
    if [ -f /etc/docker/daemon.json ]; then
        echo /etc/docker/daemon.json
        return
    fi
    install -d -m 0755 "$(dirname "$DOCKERD_CONF")"
    write_if_changed "$DOCKERD_CONF" "$(dockerd_conf_text)" || true  # false: it was up to date
    echo "$DOCKERD_CONF"
}

start_docker() {
    install -d -m 0755 "$LOGDIR"
    local conf pid
    conf=$(dockerd_config_file)
    # dockerd started elsewhere (e.g. by systemd after `apt-get install docker.io`) has the default
    # bridge and iptables rules; it is replaced by ours, which has none.
    if replace_foreign dockerd "$DOCKERD_PID" --bridge=none "runs with a bridge" \
        docker.socket docker.service; then
        ip link delete docker0 >/dev/null 2>&1 || true
    elif pid=$(pid_of dockerd "$DOCKERD_PID") && ! runs_with "$pid" "--config-file=$conf"; then
        log "dockerd: pid $pid runs without $conf; restarting it"
        stop_daemon dockerd "$DOCKERD_PID"
    fi
    # dockerd writes its pid file itself.
    start_daemon dockerd "$DOCKERD_PID" "$DOCKERD_LOG" background "" "$DOCKERD_LOG" \
        dockerd --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
        --config-file="$conf" --pidfile="$DOCKERD_PID"
    wait_for "docker info" "$DOCKERD_LOG" docker info
    log "docker: engine answers"
}

# ------------------------------------------------------------------------------------- registry
REGISTRY_CONF=/etc/ctrain/registry.yml
REGISTRY_DIR=/var/lib/ctrain-registry
REGISTRY_PID=/run/ctrain-registry.pid
REGISTRY_LOG=$LOGDIR/registry.log
REGISTRY_ADDR=127.0.0.1
REGISTRY_PORT=5000

registry_conf_text() {
    cat <<EOF
# Generated by ctrain scripts/services.sh: local registry on loopback only, no auth.
version: 0.1
log:
  level: info
  fields:
    service: registry
storage:
  filesystem:
    rootdirectory: $REGISTRY_DIR
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR:$REGISTRY_PORT
  headers:
    X-Content-Type-Options: [nosniff]
EOF
}

# GET /v2/ with bash's /dev/tcp (no curl needed); the registry answers 200 to it.
registry_ok() {
    # shellcheck disable=SC2016  # $0/$1 are expanded by the inner bash (address and port)
    timeout 5 bash -c '
        exec 3<>"/dev/tcp/$0/$1" || exit 1
        printf "GET /v2/ HTTP/1.0\r\nHost: %s\r\n\r\n" "$0:$1" >&3
        head -n1 <&3 | grep -q " 200 "' "$REGISTRY_ADDR" "$REGISTRY_PORT"
}

# Garbage-collect the stopped registry: a push under a tag that was already there leaves the old
# manifest untagged and its layers in place; the registry's own collector removes both (it must
# not run while the registry serves). The collector fails on a directory without
# docker/registry/v2/repositories or .../blobs, which the registry makes only at its first push:
# a new machine's registry has neither, so both are made first (empty, as the registry makes
# them). A collection that fails all the same (a damaged store: a manifest whose blob is gone) is
# a warning, not a stop: the registry serves without it, and the next push of an image uploads
# the blobs it lacks.
collect_registry_garbage() {
    local before after out
    install -d -m 0755 "$REGISTRY_DIR/docker/registry/v2/repositories" "$REGISTRY_DIR/docker/registry/v2/blobs"
    before=$(du -sm "$REGISTRY_DIR" | cut -f1)
    if ! out=$(/usr/bin/docker-registry garbage-collect --delete-untagged "$REGISTRY_CONF" 2>&1); then
        printf '%s\n' "$out" | tail -n 20 >&2
        echo "services: WARNING: docker-registry garbage-collect failed (above); starting the registry without it. Fix: if pushes or pulls fail, move $REGISTRY_DIR aside and run services.sh start again" >&2
        return 0
    fi
    after=$(du -sm "$REGISTRY_DIR" | cut -f1)
    log "registry: garbage-collected $REGISTRY_DIR: $before MB before, $after MB after"
}

start_registry() {
    install -d -m 0755 "$LOGDIR" "$REGISTRY_DIR" "$(dirname "$REGISTRY_CONF")"
    # The Debian package's own service (systemd, all interfaces, htpasswd auth) is replaced by ours.
    replace_foreign docker-registry "$REGISTRY_PID" "$REGISTRY_CONF" "is not ours ($REGISTRY_CONF)" \
        docker-registry.service || true  # false: none or ours runs
    if write_if_changed "$REGISTRY_CONF" "$(registry_conf_text)"; then
        stop_daemon docker-registry "$REGISTRY_PID"  # restart with the new config if running
    fi
    pid_of docker-registry "$REGISTRY_PID" >/dev/null || collect_registry_garbage
    start_daemon docker-registry "$REGISTRY_PID" "$REGISTRY_LOG" background "$REGISTRY_PID" \
        "$REGISTRY_LOG" /usr/bin/docker-registry serve "$REGISTRY_CONF"
    wait_for "the registry on http://$REGISTRY_ADDR:$REGISTRY_PORT/v2/" "$REGISTRY_LOG" registry_ok
    log "registry: http://$REGISTRY_ADDR:$REGISTRY_PORT/v2/ answers"
}

# --------------------------------------------------------------------------------------- podman
# Podman has no daemon: this machine's settings for it are two drop-ins, written by start and
# removed by stop (never edits of the packaged files). What a site with a plain-HTTP registry
# writes too: the registry on loopback is insecure (podman, unlike docker, trusts no address by
# default). What this test machine needs and a site usually does not: tini-static (the tini
# package) as podman's --init, as catatonit is not installed; runc, as crun 1.8 refuses a hybrid
# cgroup layout; nofile/nproc no higher than the podman process may set without
# CAP_SYS_RESOURCE (rootful podman asks for 1048576 by default and lowers its own nproc to 32768);
# and /dev/mqueue, which rootless `--ipc host` binds (mounted, as on any systemd host; left so).
PODMAN_CONF=/etc/containers/containers.conf.d/ctrain-services.conf
PODMAN_REGISTRIES=/etc/containers/registries.conf.d/ctrain-services.conf

podman_conf_text() {
    local nofile nproc
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then
        nproc=32768
    fi
    cat <<EOF
# Generated by ctrain scripts/services.sh (removed by services.sh stop): podman on this test machine.
[containers]
init_path = "/usr/bin/tini-static"
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
EOF
}

podman_registries_text() {
    cat <<EOF
# Generated by ctrain scripts/services.sh (removed by services.sh stop): the local registry is
# plain HTTP on loopback.
[[registry]]
location = "$REGISTRY_ADDR:$REGISTRY_PORT"
insecure = true
EOF
}

configure_podman() {
    if ! command -v podman >/dev/null; then
        log "podman: not installed, not configured"
        return
    fi
    install -d -m 0755 "$(dirname "$PODMAN_CONF")" "$(dirname "$PODMAN_REGISTRIES")"
    if ! mountpoint -q /dev/mqueue; then
        install -d -m 1777 /dev/mqueue
        mount -t mqueue mqueue /dev/mqueue
    fi
    podman_conf_text >"$PODMAN_CONF"
    podman_registries_text >"$PODMAN_REGISTRIES"
    wait_for "podman info" "$PODMAN_CONF" podman info
    log "podman: $PODMAN_CONF and $PODMAN_REGISTRIES written"
}

unconfigure_podman() {
    rm -f "$PODMAN_CONF" "$PODMAN_REGISTRIES"
}

# ----------------------------------------------------------------------------------------- disk
# free_gib DIR: GiB free on DIR's filesystem
free_gib() { df -P -BG "$1" | awk 'NR == 2 { sub(/G$/, "", $4); print $4 }'; }

# Take back what earlier runs left in the engines' stores: images no tag names (the earlier build
# of a tag that was built again: the GPU image alone is 9 GB) that no container uses, in docker's
# store and podman's. Tagged images, containers and volumes are never touched. Where the disk is
# still short of CTRAIN_SERVICES_MIN_FREE_GIB, BuildKit's whole cache goes too: the next image
# build is cold (minutes), where a full disk fails every test that writes.
reclaim_disk() {
    local before
    before=$(free_gib /var/lib/docker)
    docker image prune --force >/dev/null
    if command -v podman >/dev/null; then
        podman image prune --force >/dev/null
    fi
    if [ "$(free_gib /var/lib/docker)" -lt "$MIN_FREE_GIB" ]; then
        log "disk: under $MIN_FREE_GIB GiB free; removing BuildKit's cache (the next image build is cold)"
        # (a client without the buildx plugin says on stderr that its legacy builder is deprecated)
        docker builder prune --all --force >/dev/null 2>&1 \
            || echo "services: WARNING: docker builder prune failed. Fix: docker builder prune --all" >&2
    fi
    log "disk: images no tag names removed: $before GiB free before, $(free_gib /var/lib/docker) GiB after"
}

# Free space where the tests write (temporary files, images, the registry): one line each, and a
# warning where it is short, so that a run that fills the disk says so before it starts.
report_disk() {
    local dir dev mount free seen=" "
    for dir in "${TMPDIR:-/tmp}" /var/lib/docker "$REGISTRY_DIR"; do
        dev=$(stat -c %d "$dir")  # a bind mount of the same filesystem has the same device
        case "$seen" in *" $dev "*) continue ;; esac
        seen="$seen$dev "
        mount=$(df -P "$dir" | awk 'NR == 2 { print $6 }')
        free=$(free_gib "$dir")
        log "disk: $free GiB free on $mount (for $dir)"
        if [ "$free" -lt "$MIN_FREE_GIB" ]; then
            echo "services: WARNING: $mount has $free GiB free, under $MIN_FREE_GIB GiB: image builds, SIFs and the tests may fill it. Fix: free space there (docker builder prune; old SIFs in build/)" >&2
        fi
    done
}

# ----------------------------------------------------------------------------------------- main
cmd_start() {
    local t0=$SECONDS cmd
    for cmd in munged slurmctld slurmd srun sinfo scontrol dockerd docker /usr/bin/docker-registry; do
        command -v "$cmd" >/dev/null || die "$cmd not found. Fix: scripts/system-packages.sh"
    done
    start_munge
    start_slurm
    start_docker
    start_registry
    configure_podman
    reclaim_disk
    report_disk
    log "all services up ($((SECONDS - t0)) s)"
}

cmd_stop() {
    unconfigure_podman
    stop_daemon docker-registry "$REGISTRY_PID"
    stop_daemon dockerd "$DOCKERD_PID"
    cluster_down
    stop_slurm
    stop_daemon munged "$MUNGED_PID"
}

status_line() {
    local name=$1 pidfile=$2 pid
    if pid=$(pid_of "$name" "$pidfile"); then
        printf '%-16s running (pid %s)\n' "$name" "$pid"
    else
        printf '%-16s stopped\n' "$name"
        return 1
    fi
}

cmd_hosts() {
    [ "$NODES" != 0 ] || die "no compute hosts to bring back (CTRAIN_SERVICES_NODES=0). Fix: CTRAIN_SERVICES_NODES=3 $0 hosts"
    cluster_slurmds "$NODES"
}

cmd_status() {
    local rc=0
    status_line munged "$MUNGED_PID" || rc=1
    status_line slurmctld "$SLURMCTLD_PID" || rc=1
    status_line slurmd "$SLURMD_PID" || rc=1
    cluster_status || rc=1
    status_line dockerd "$DOCKERD_PID" || rc=1
    status_line docker-registry "$REGISTRY_PID" || rc=1
    return "$rc"
}

# Every path where start keeps state (written, or read back by a later start), one a line; a
# pattern stands for every path it matches. A new machine has none of them but /etc/munge's key
# and /var/lib/munge, which Debian's munge package makes.
cmd_paths() {
    printf '%s\n' /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge "$MUNGED_PID" \
        "$SLURM_CONF" "$SLURM_CONF.bak" "$SLURM_CONF.tmp" "$GRES_CONF" "$SLURM_LOGDIR" \
        /var/spool/slurmctld '/var/spool/slurmd*' "$SLURMCTLD_PID" '/run/slurmd*.pid' \
        "$LOGDIR" "$DOCKERD_CONF" "$DOCKERD_PID" /var/lib/docker /run/docker /run/docker.sock \
        "$REGISTRY_CONF" "$REGISTRY_DIR" "$REGISTRY_PID" "$PODMAN_CONF" "$PODMAN_REGISTRIES" \
        /run/ctrain-services.lock
    cluster_paths
}

main() {
    case "${1:-}" in
        start | stop | status | hosts) ;;
        paths) cmd_paths; return ;;
        *) echo "usage: $0 start|stop|status|paths|hosts" >&2; exit 2 ;;
    esac
    case "$NODES" in
        [0-9] | [1-4][0-9] | 50) NODES=$((10#$NODES)) ;;
        *) die "CTRAIN_SERVICES_NODES=$NODES: want 0..50 compute hosts. Fix: make services NODES=3" ;;
    esac
    if [ "$NODES" != 0 ]; then
        CTLD_ADDR=$CLUSTER_NET.1
        SLURMD_FILES=-%n
        SLURMD_PID=/run/slurmd-$HOST.pid
        SLURMD_LOG=$SLURM_LOGDIR/slurmd-$HOST.log
    fi
    [ "$(id -u)" -eq 0 ] || die "must run as root (it starts system daemons). Fix: sudo $0 $1"
    if [ "$1" = status ]; then
        cmd_status
        return
    fi
    # One start/stop at a time (CI and a developer, or two terminals). Daemons are started with
    # fd 9 closed so that they do not hold the lock after this script exits.
    exec 9>/run/ctrain-services.lock
    flock -w "$((WAIT * 3))" 9 || die "another scripts/services.sh holds /run/ctrain-services.lock"
    "cmd_$1"
}

main "$@"
