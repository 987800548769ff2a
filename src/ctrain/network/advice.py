"""The verdict of the network check, pure: the facts in, one line per check out, each problem
with its fix. The decision table is tested as a whole (tests/unit/network/test_advice.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ctrain.checkline import Check
from ctrain.network.nccl import RankReport
from ctrain.network.rdma import Device, Visibility

# The variables that steer NCCL's choice of network, shown and judged.
NCCL_VARIABLES = ("NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_NET", "NCCL_SOCKET_IFNAME")
NO_GPUS = "no GPUs: NCCL not checked"
BIND_FIX = (
    "give the container the RDMA devices: `ctrain exec --bind /dev/infiniband IMAGE ...` "
    "(Apptainer binds the host's /dev by default: drop --contain/--containall; Docker and "
    "Podman also need the devices allowed: --device /dev/infiniband)"
)
PROVIDERS_FIX = (
    "use an image with rdma-core's libibverbs and its providers (Debian: apt-get install "
    "libibverbs1 ibverbs-providers; the ctrain images have them)"
)
SOCKET_IFNAME_FIX = (
    "sockets are all there is: set NCCL_SOCKET_IFNAME to the fast interface "
    "(`ip -br addr` lists them; e.g. NCCL_SOCKET_IFNAME=ib0 or =eth1)"
)


class NcclOutcome(NamedTuple):
    """What the small allreduce gave: no GPUs (not run), an error, or its processes' reports."""

    gpus: int
    reports: tuple[RankReport, ...] = ()
    error: str = ""


class Facts(NamedTuple):
    devices: tuple[Device, ...]  # the host's (sysfs)
    seen: Visibility  # this process's
    nccl: NcclOutcome
    env: Mapping[str, str]  # at least NCCL_VARIABLES where set


def where(seen: Visibility) -> str:
    if not seen.container:
        return "on the host"
    return (
        f"inside a container ({seen.container}): /sys/class/infiniband shows the host's "
        "devices, /dev and the libraries are the container's"
    )


def ib_hca_problem(value: str, names: tuple[str, ...]) -> str:
    """Why NCCL_IB_HCA leaves NCCL no device among ``names`` ("" when it leaves some).

    NCCL reads a comma list of ``NAME[:PORT]``; names are prefixes unless the list starts with
    ``=`` (exact), and ``^`` excludes them instead."""
    text = value.strip()
    exclude, exact = text.startswith("^"), text.startswith("=")
    items = [i.split(":")[0] for i in text.lstrip("^=").split(",") if i.strip()]

    def matches(name: str) -> bool:
        return any(name == i if exact else name.startswith(i) for i in items)

    kept = [n for n in names if matches(n) != exclude]
    if kept or not names:
        return ""
    return f"NCCL_IB_HCA={value} leaves none of {', '.join(names)}"


def _flag_on(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def env_problems(env: Mapping[str, str], devices: tuple[Device, ...]) -> list[tuple[str, str]]:
    """(problem, fix) for each NCCL_* variable that keeps NCCL off the active RDMA devices."""
    active = tuple(d.name for d in devices if d.active)
    if not active:
        return []
    problems = []
    if _flag_on(env.get("NCCL_IB_DISABLE")):
        why = f"NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']} turns InfiniBand/RoCE off"
        problems.append((why, "unset NCCL_IB_DISABLE (or set it to 0)"))
    net = env.get("NCCL_NET", "").strip()
    if net and net.lower() != "ib":
        problems.append((f"NCCL_NET={net} asks for another network", "unset NCCL_NET"))
    hca = env.get("NCCL_IB_HCA", "")
    if hca.strip() and (why := ib_hca_problem(hca, active)):
        problems.append(
            (why, f"set NCCL_IB_HCA to active devices ({','.join(active)}) or unset it")
        )
    return problems


def check_host(facts: Facts) -> Check:
    devices = facts.devices
    ifname = facts.env.get("NCCL_SOCKET_IFNAME")
    if not devices:
        detail = "no RDMA devices (/sys/class/infiniband is empty): NCCL uses TCP sockets"
        if ifname:
            return Check("rdma", "PASS", f"{detail} on NCCL_SOCKET_IFNAME={ifname}")
        return Check("rdma", "WARN", detail, SOCKET_IFNAME_FIX)
    listed = "; ".join(d.describe() for d in devices)
    if not any(d.active for d in devices):
        fix = "a link is down: ask the site (ibstat shows the ports); NCCL uses sockets until then"
        return Check("rdma", "WARN", f"{listed}: no port ACTIVE", fix)
    return Check("rdma", "PASS", listed)


def check_view(facts: Facts) -> Check:
    """Whether this process can use the host's active devices: device files, libraries."""
    seen, place = facts.seen, where(facts.seen)
    if not any(d.active for d in facts.devices):
        return Check("rdma-view", "PASS", f"no active RDMA device to see; {place}")
    if not seen.uverbs:
        detail = f"the host has active RDMA devices but /dev/infiniband/uverbs* is missing; {place}"
        return Check("rdma-view", "FAIL", detail, BIND_FIX)
    if not seen.libibverbs:
        return Check("rdma-view", "FAIL", f"libibverbs.so.1 not found; {place}", PROVIDERS_FIX)
    if not seen.drivers or not seen.providers:
        missing = "/etc/libibverbs.d/*.driver" if not seen.drivers else "libibverbs/*-rdmav*.so"
        detail = f"no libibverbs providers ({missing} missing); {place}"
        return Check("rdma-view", "FAIL", detail, PROVIDERS_FIX)
    detail = (
        f"{len(seen.uverbs)} uverbs device(s), {seen.libibverbs[0]}, "
        f"{len(seen.providers)} provider(s); {place}"
    )
    return Check("rdma-view", "PASS", detail)


def check_env(facts: Facts) -> Check:
    shown = ", ".join(f"{n}={facts.env[n]}" for n in NCCL_VARIABLES if n in facts.env)
    detail = shown or "no NCCL network variable set"
    problems = env_problems(facts.env, facts.devices)
    if problems:
        why = "; ".join(p for p, _ in problems)
        return Check("nccl-env", "WARN", f"{detail}: {why}", "; ".join(f for _, f in problems))
    return Check("nccl-env", "PASS", detail)


def socket_fix(facts: Facts, reports: tuple[RankReport, ...]) -> str:
    """The likeliest cause of a socket fallback on a node with active RDMA devices, first."""
    problems = env_problems(facts.env, facts.devices)
    if problems:
        return problems[0][1]
    if not facts.seen.uverbs:
        return BIND_FIX
    if any(r.no_verbs for r in reports) or not facts.seen.libibverbs or not facts.seen.providers:
        return PROVIDERS_FIX
    return (
        "read NCCL's NET/IB lines (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET): a device NCCL "
        "cannot open, or NCCL_IB_HCA/NCCL_SOCKET_IFNAME pointing elsewhere"
    )


def check_nccl(facts: Facts) -> Check:
    outcome = facts.nccl
    if outcome.gpus == 0:
        fix = "run it on GPU nodes: srun --gpus-per-node=N ctrain exec --nv IMAGE -- ..."
        return Check("nccl", "WARN", NO_GPUS, fix)
    reports = outcome.reports
    said = "; ".join(r.describe() for r in reports)
    if outcome.error:
        warned = [w for r in reports for w in r.warnings][-1:]
        detail = f"the NCCL allreduce failed: {outcome.error}" + "".join(
            f"; NCCL: {w}" for w in warned
        )
        fix = (
            "run it in the GPU image (srun ctrain exec --nv IMAGE -- ctrain doctor --network); "
            "NCCL_DEBUG=INFO on a training run shows NCCL's own reason"
        )
        return Check("nccl", "FAIL", detail, fix)
    if not reports:
        why = f"{outcome.gpus} GPU(s), but the allreduce printed no NCCL line (one GPU needs none)"
        return Check("nccl", "WARN", why, "run it with 2 or more GPUs or ranks")
    active = [d.name for d in facts.devices if d.active]
    sockets = [r for r in reports if r.uses_socket]
    if sockets and active:
        who = ", ".join(r.who() for r in sockets)
        detail = f"{who}: NET/Socket although {', '.join(active)} active; {said}"
        return Check("nccl", "FAIL", detail, socket_fix(facts, reports))
    if not any(r.net_transports for r in reports):
        return Check("nccl", "PASS", f"{said} (one node: no network used)")
    return Check("nccl", "PASS", said)


def advise(facts: Facts) -> tuple[Check, ...]:
    """Every line of the network check, in display order."""
    return (check_host(facts), check_view(facts), check_env(facts), check_nccl(facts))
