"""The ports a step's ranks listen on, clear of the node's ephemeral port range."""

from __future__ import annotations

import pytest

from ctrain.errors import LaunchError
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.launch.ports import (
    PORT_BLOCK,
    PORT_SPAN,
    Ephemeral,
    PortWindow,
    choose_window,
    port_block,
    refuse_above_highest,
)
from tests.support.environs import slurm_step
from tests.support.helpers import refusal

LINUX = Ephemeral(32768, 60999)  # Linux's default range
LOWERED = Ephemeral(9000, 65000)  # a site's, as in the reports of NVIDIA-NeMo/RL


def test_the_proc_files_are_read_as_the_kernel_writes_them() -> None:
    assert Ephemeral.parse("9000\t65000\n") == LOWERED
    assert Ephemeral.parse("9000\t65000\n", "\n") == LOWERED
    assert Ephemeral.parse("32768 60999", "8080,20000-31999\n") == Ephemeral(
        32768, 60999, ((8080, 8080), (20000, 31999))
    )


@pytest.mark.parametrize(("port_range", "reserved"), [("", ""), ("9000", ""), ("1 2", "x-y")])
def test_an_unreadable_range_is_refused_with_the_file_to_look_at(
    port_range: str, reserved: str
) -> None:
    why, fix = refusal(lambda: Ephemeral.parse(port_range, reserved))
    assert why.startswith("cannot read the ephemeral port range")
    assert fix == "check /proc/sys/net/ipv4/ip_local_port_range on this node"


def test_takes_counts_only_unreserved_ports_of_the_range() -> None:
    assert LINUX.takes(20000, 31999) == ()
    assert LINUX.takes(32760, 32770) == (32768, 32769, 32770)
    assert Ephemeral(100, 200, ((150, 200),)).takes(140, 160) == tuple(range(140, 150))


# base, chosen by the user, range -> the window, or the refusal's (why, fix)
WINDOWS = [
    # Linux's default range: the default window is below it, as it always was.
    (20000, False, LINUX, PortWindow(20000)),
    (20000, True, LINUX, PortWindow(20000)),
    (20000, False, None, PortWindow(20000)),  # no range to read: kept
    # The site reserved the window's ports: the kernel never hands them out.
    (20000, False, Ephemeral(9000, 65000, ((20000, 31999),)), PortWindow(20000)),
    # Lowered over the window: moved above (below would be under 10000, where services listen).
    (
        20000,
        False,
        LOWERED,
        PortWindow(
            65001,
            512,
            "ports 20000-31999 lie in this node's ephemeral port range 9000-65000 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's "
            "port: moved above it",
        ),
    ),
    # Raised over part of it: the larger free side is below, a whole span.
    (
        20000,
        False,
        Ephemeral(25000, 60999),
        PortWindow(
            13000,
            PORT_SPAN // PORT_BLOCK * PORT_BLOCK,  # whole blocks
            "ports 20000-31999 lie in this node's ephemeral port range 25000-60999 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's "
            "port: moved below it",
        ),
    ),
    # A base the user chose is kept or refused, never moved.
    (
        20000,
        True,
        LOWERED,
        (
            "ports 20000-31999 lie in this node's ephemeral port range 9000-65000 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's port",
            "--port-base 65001 (CTRAIN_PORT_BASE): 512 ports above the range",
        ),
    ),
    (65001, True, LOWERED, PortWindow(65001)),
    # Room on both sides: the larger side wins, here above (448 ports below, from 10000).
    (
        20000,
        False,
        Ephemeral(10500, 50000),
        PortWindow(
            50001,
            11968,
            "ports 20000-31999 lie in this node's ephemeral port range 10500-50000 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's "
            "port: moved above it",
        ),
    ),
    # One whole block above the range is room enough.
    (
        20000,
        False,
        Ephemeral(10000, 65471),
        PortWindow(
            65472,
            PORT_BLOCK,
            "ports 20000-31999 lie in this node's ephemeral port range 10000-65471 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's "
            "port: moved above it",
        ),
    ),
    # No room on either side: 63 ports above, none below.
    (
        20000,
        False,
        Ephemeral(10000, 65472),
        (
            "ports 20000-31999 lie in this node's ephemeral port range 10000-65472 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's port",
            "ask the site to reserve ports for jobs (net.ipv4.ip_local_reserved_ports) and set "
            "--port-base (CTRAIN_PORT_BASE) to the first of them",
        ),
    ),
    (
        20000,
        False,
        Ephemeral(1024, 65500),
        (
            "ports 20000-31999 lie in this node's ephemeral port range 1024-65500 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's port",
            "ask the site to reserve ports for jobs (net.ipv4.ip_local_reserved_ports) and set "
            "--port-base (CTRAIN_PORT_BASE) to the first of them",
        ),
    ),
]


@pytest.mark.parametrize(("base", "chosen", "ephemeral", "want"), WINDOWS)
def test_the_window_keeps_clear_of_the_ephemeral_range(
    base: int,
    chosen: bool,
    ephemeral: Ephemeral | None,
    want: PortWindow | tuple[str, str],
) -> None:
    if isinstance(want, PortWindow):
        assert choose_window(base, chosen, ephemeral) == want
    else:
        assert refusal(lambda: choose_window(base, chosen, ephemeral)) == want


@pytest.mark.parametrize("ephemeral", [LINUX, LOWERED, Ephemeral(25000, 60999)])
def test_every_block_of_a_moved_window_is_clear_of_the_range(ephemeral: Ephemeral) -> None:
    window = choose_window(20000, False, ephemeral)
    blocks = window.span // PORT_BLOCK
    assert {window.block(str(job), "0") for job in range(1000, 1000 + 5 * blocks)} == set(
        range(blocks)
    )
    for block in range(blocks):
        first = window.base + block * PORT_BLOCK
        assert ephemeral.takes(first, first + PORT_BLOCK - 1) == ()
        assert first + PORT_BLOCK - 1 <= min(window.last, 65535)


def test_the_block_of_the_default_window_is_as_before() -> None:
    assert PortWindow(20000).block("10", "3") == port_block("10", "3") == 73


STEP = slurm_step(
    1, 2, "cn01", job="4242", SLURM_STEP_NUM_NODES="1", SLURM_NTASKS=None, SLURM_JOB_NODELIST=None
)


def test_a_multiworker_plan_takes_its_ports_from_the_moved_window() -> None:
    plan = make_plan(
        JobEnv.from_environ(STEP, "cn01"), LaunchOptions(), STEP, (), ephemeral=LOWERED
    )
    block = (4242 * 7) % 8
    assert plan.ports == (65001 + block * PORT_BLOCK, 65001 + block * PORT_BLOCK + 1)
    assert plan.tf_config is not None
    assert plan.tf_config["cluster"]["worker"] == [f"cn01:{p}" for p in plan.ports]
    shown = plan.explain()["port_window"]
    assert shown["first"] == 65001 and shown["last"] == 65512
    assert shown["moved"].endswith("moved above it")


def test_a_mode_that_listens_on_no_port_is_not_refused_for_the_range() -> None:
    single = {"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"}
    options = LaunchOptions(port_base_chosen=True)
    plan = make_plan(JobEnv.from_environ(single, "x"), options, single, (), ephemeral=LOWERED)
    assert plan.ports == () and plan.explain()["port_window"] is None


def test_the_last_tcp_port_is_the_highest_taken() -> None:
    refuse_above_highest(65535)
    with pytest.raises(LaunchError, match="port 65536 is above 65535") as caught:
        refuse_above_highest(65536)
    assert caught.value.fix == "lower CTRAIN_PORT_BASE"
