# shellcheck shell=bash
# Compute hosts for the local Slurm: sourced by scripts/services.sh (uses its log, die, wait_for,
# HOST, SLURM_LOGDIR), never run on its own. docs/cluster.md explains the layout and its limits.
#
# `scripts/services.sh start` with CTRAIN_SERVICES_NODES=N (1..50) adds N hosts cn01..cnNN:
#   - a bridge $CLUSTER_BRIDGE in this (the login host's) network namespace, address $CLUSTER_NET.1;
#   - per host a network namespace /run/netns/cnNN, a veth pair (ctrain-cnNN on the bridge, eth0
#     with $CLUSTER_NET.(10+i) inside), lo up, NO default route: compute hosts are offline;
#   - per host one slurmd (`slurmd -N cnNN`) in that network namespace plus its own UTS namespace
#     (hostname cnNN); the filesystem, /tmp included, is shared (a checkout or venv under /tmp
#     must be seen by every host). Slurm's per-node scratch (TmpFS, where the PMIx plugin makes
#     its spmix_appdir_* directories, which would clash between hosts) is $CLUSTER_ROOT/%n: under
#     /tmp, as Slurm's default TmpFS=/tmp is, so a container that binds /tmp (Apptainer does by
#     default) sees the PMIx client's directory, where Open MPI makes its session directory;
#   - /etc/hosts lines for every host and for the login host's name (-> the bridge address, so
#     srun and slurmctld on the login host are reachable from the compute hosts), each ending with
#     $HOSTS_MARK; other lines naming the login host are commented out with $HOSTS_OFF.
# The hosts made are recorded in $CLUSTER_STATE; `cluster_down` removes exactly those.

CLUSTER_BRIDGE=ctrain-br0
CLUSTER_NET=10.77.0
CLUSTER_STATE=/run/ctrain-cluster.nodes
CLUSTER_ROOT=/tmp/ctrain-cluster
CLUSTER_PARTITION=cluster
HOSTS_MARK="# ctrain-cluster"
HOSTS_OFF="#ctrain-cluster-off# "

cluster_name() { printf 'cn%02d' "$1"; }
cluster_addr() { echo "$CLUSTER_NET.$((10 + $1))"; }
cluster_hostlist() { printf 'cn[01-%02d]' "$1"; }

# slurm.conf lines for N compute hosts: one node range and partition $CLUSTER_PARTITION. HW is
# the hardware part of `slurmd -C` (every host is this machine: same CPUs, shared by all).
cluster_conf_lines() {
    local n=$1 hw=$2
    echo "TmpFS=$CLUSTER_ROOT/%n"
    echo "NodeName=$(cluster_hostlist "$n") NodeAddr=$CLUSTER_NET.[11-$((10 + n))] $hw State=UNKNOWN"
    echo "PartitionName=$CLUSTER_PARTITION Nodes=$(cluster_hostlist "$n") Default=NO MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
}

# /etc/hosts without our lines and with the login host's own lines restored.
hosts_without_cluster() {
    grep -v -- "$HOSTS_MARK\$" /etc/hosts | sed "s/^$HOSTS_OFF//"
}

# Rewrite /etc/hosts in place (it may be a bind mount): TEXT on stdin.
write_hosts() {
    local text
    text=$(cat)
    printf '%s\n' "$text" >/etc/hosts
}

hosts_up() {
    local n=$1 i text
    text=$(hosts_without_cluster | awk -v host="$HOST" -v off="$HOSTS_OFF" '
        /^[[:space:]]*#/ { print; next }
        { for (f = 2; f <= NF; f++) if ($f == host) { print off $0; next } ; print }')
    {
        printf '%s\n' "$text"
        echo "$CLUSTER_NET.1 $HOST $HOSTS_MARK"
        for ((i = 1; i <= n; i++)); do
            echo "$(cluster_addr "$i") $(cluster_name "$i") $HOSTS_MARK"
        done
    } | write_hosts
}

# Bridge, namespaces, veth pairs and addresses for N hosts; parts already there are kept.
net_up() {
    local n=$1 i name
    if ! ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
        log "cluster: bridge $CLUSTER_BRIDGE $CLUSTER_NET.1/24"
        ip link add "$CLUSTER_BRIDGE" type bridge
        ip addr add "$CLUSTER_NET.1/24" dev "$CLUSTER_BRIDGE"
    fi
    ip link set "$CLUSTER_BRIDGE" up
    for ((i = 1; i <= n; i++)); do
        name=$(cluster_name "$i")
        echo "$name" >>"$CLUSTER_STATE"
        [ -e "/run/netns/$name" ] || ip netns add "$name"
        if ! ip link show "ctrain-$name" >/dev/null 2>&1; then
            ip link add "ctrain-$name" type veth peer name "ctrain-${name}p"
            ip link set "ctrain-${name}p" netns "$name"
            ip -n "$name" link set "ctrain-${name}p" name eth0
            ip -n "$name" addr add "$(cluster_addr "$i")/24" dev eth0
        fi
        ip link set "ctrain-$name" master "$CLUSTER_BRIDGE" up
        ip -n "$name" link set lo up
        ip -n "$name" link set eth0 up
        install -d -m 1777 "$CLUSTER_ROOT/$name"
        install -d -m 0755 "/var/spool/slurmd-$name"
    done
    install -d -m 1777 "$CLUSTER_ROOT/$HOST"  # the login host's node, TmpFS too
    sort -u -o "$CLUSTER_STATE" "$CLUSTER_STATE"
}

cluster_nodes() { cat "$CLUSTER_STATE" 2>/dev/null || true; }

# Every process in host NAME's network namespace (its slurmd and whatever a job left there).
node_pids() { ip netns pids "$1" 2>/dev/null || true; }

# Host NAME's slurmd runs (its pid file, as slurm.conf's SlurmdPidFile=/run/slurmd-%n.pid names
# it, holds a live slurmd). A job's processes may outlive a dead slurmd in the namespace.
node_slurmd_up() {
    local pidfile=/run/slurmd-$1.pid pid
    [ -r "$pidfile" ] && pid=$(tr -dc '0-9' <"$pidfile") && [ -n "$pid" ] && alive slurmd "$pid"
}

# Start host NAME's slurmd in its namespaces unless one runs there already.
start_node_slurmd() {
    local name=$1
    if node_slurmd_up "$name"; then
        log "slurmd $name: already running"
        return 0
    fi
    log "slurmd $name: starting"
    # Not `ip netns exec`: it mounts a fresh /sys, hiding the cgroup mounts slurmd checks.
    # shellcheck disable=SC2016  # $0/$1 are expanded by the inner sh
    nsenter --net="/run/netns/$name" unshare --uts \
        sh -c 'hostname "$0" && exec slurmd -N "$0"' "$name" 9>&- \
        || { show_log "$SLURM_LOGDIR/slurmd-$name.log"; die "slurmd $name failed to start"; }
}

# Stop every process of every recorded host: TERM, then KILL after $WAIT seconds. Never fails.
stop_node_slurmds() {
    local name deadline
    for name in $(cluster_nodes); do
        [ -n "$(node_pids "$name")" ] || continue
        log "slurmd $name: stopping"
        # shellcheck disable=SC2046  # one pid per word
        kill -TERM $(node_pids "$name") 2>/dev/null || true
    done
    deadline=$((SECONDS + WAIT))
    for name in $(cluster_nodes); do
        while [ -n "$(node_pids "$name")" ]; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                # shellcheck disable=SC2046
                kill -KILL $(node_pids "$name") 2>/dev/null || true
                break
            fi
            sleep 0.5
        done
    done
}

# True once every compute host is idle (down ones are resumed, as in node_ready).
cluster_ready() {
    local n=$1 states
    states=$(sinfo -h -N -p "$CLUSTER_PARTITION" -o '%N %T' 2>/dev/null)
    if [ "$(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$states")" -eq "$n" ]; then
        return 0
    fi
    grep -E ' (down|drain|drained|draining|fail|failing)[*~#]?$' <<<"$states" | while read -r node _; do
        scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    done
    echo "compute hosts: ${states:-not known to sinfo yet}"
    return 1
}

# `srun -p cluster -N N hostname` prints every host's own name once.
cluster_srun_ok() {
    local n=$1 i want='' got
    for ((i = 1; i <= n; i++)); do want+="$(cluster_name "$i") "; done
    got=$(timeout 50 srun -p "$CLUSTER_PARTITION" -N "$n" -n "$n" -t 1 hostname 2>&1 | sort | tr '\n' ' ')
    [ "$got" = "$want" ] || { echo "srun -p $CLUSTER_PARTITION -N $n hostname said: $got"; return 1; }
}

# Network and hosts for N compute hosts (before slurmctld, which listens on the bridge address).
cluster_net() {
    local n=$1
    log "cluster: $n compute hosts $(cluster_hostlist "$n") on $CLUSTER_NET.0/24 (offline)"
    net_up "$n"
    hosts_up "$n"
}

# slurmds of N compute hosts, then wait until Slurm runs a step on all of them.
cluster_slurmds() {
    local n=$1 i
    for ((i = 1; i <= n; i++)); do
        start_node_slurmd "$(cluster_name "$i")"
    done
    wait_for "compute hosts $(cluster_hostlist "$n") to become idle" \
        "$SLURM_LOGDIR/slurmd-cn01.log" cluster_ready "$n"
    wait_for "srun -p $CLUSTER_PARTITION -N $n hostname" "$SLURM_LOGDIR/slurmd-cn01.log" \
        cluster_srun_ok "$n"
    log "cluster: srun -p $CLUSTER_PARTITION -N $n hostname OK"
}

# Remove everything cluster_net and cluster_slurmds made. Never fails.
cluster_down() {
    local name
    stop_node_slurmds
    for name in $(cluster_nodes); do
        ip link delete "ctrain-$name" >/dev/null 2>&1 || true
        ip netns delete "$name" >/dev/null 2>&1 || true
        log "cluster: removed host $name"
    done
    rm -rf "${CLUSTER_ROOT:?}"  # every node's Slurm scratch (TmpFS)
    ip link delete "$CLUSTER_BRIDGE" >/dev/null 2>&1 || true
    if grep -qE -- "$HOSTS_MARK\$|^$HOSTS_OFF" /etc/hosts; then
        hosts_without_cluster | write_hosts
        log "cluster: /etc/hosts restored"
    fi
    rm -f "$CLUSTER_STATE"
}

# Every path the compute hosts keep state in (scripts/services.sh paths lists them too).
cluster_paths() {
    printf '%s\n' "$CLUSTER_STATE" "$CLUSTER_ROOT" /run/netns '/var/spool/slurmd-cn*' \
        "$SLURM_LOGDIR/slurmd-cn*.log" '/run/slurmd-cn*.pid'
}

cluster_status() {
    local name rc=0
    for name in $(cluster_nodes); do
        if node_slurmd_up "$name"; then
            printf '%-16s running (netns %s)\n' "slurmd $name" "$name"
        else
            printf '%-16s stopped\n' "slurmd $name"
            rc=1
        fi
    done
    return "$rc"
}
