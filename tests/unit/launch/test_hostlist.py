"""Golden cases for Slurm hostlist and tasks-per-node expansion (Slurm's documented behaviour)."""

from __future__ import annotations

import pytest

from ctrain.errors import EnvironmentParseError
from ctrain.launch.hostlist import MAX_HOSTS, expand_hostlist, expand_tasks_per_node


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", []),
        ("   ", []),
        ("node1", ["node1"]),
        (" node1 ", ["node1"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[001-10]", [f"n{i:03d}" for i in range(1, 11)]),
        ("n[1-3,7,09-10]", ["n1", "n2", "n3", "n7", "n09", "n10"]),
        ("n[7]", ["n7"]),
        ("n[007]", ["n007"]),
        ("[1-2]", ["1", "2"]),
        ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
        ("r[1-2]n[01-02]x[5]", ["r1n01x5", "r1n02x5", "r2n01x5", "r2n02x5"]),
        ("gpu-a100-[1-2]", ["gpu-a100-1", "gpu-a100-2"]),
        ("cn1.cluster", ["cn1.cluster"]),
        ("cn[1-2].cluster.org", ["cn1.cluster.org", "cn2.cluster.org"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
        ("a, b", ["a", "b"]),
        ("gpu[01-02],cpu[1,3]", ["gpu01", "gpu02", "cpu1", "cpu3"]),
        ("n[10,2]", ["n10", "n2"]),
        ("b,a", ["b", "a"]),
        ("n[3-4,1-2]", ["n3", "n4", "n1", "n2"]),
        ("n[1,1]", ["n1", "n1"]),
        ("n1,n1", ["n1", "n1"]),
        ("n[1-2],n2", ["n1", "n2", "n2"]),
        ("node_a[0-1]", ["node_a0", "node_a1"]),
    ],
)
def test_expand_hostlist_golden(value: str, expected: list[str]) -> None:
    assert expand_hostlist(value) == expected


def test_expand_hostlist_at_the_cap() -> None:
    hosts = expand_hostlist(f"n[1-{MAX_HOSTS}]")
    assert len(hosts) == MAX_HOSTS
    assert hosts[-1] == f"n{MAX_HOSTS}"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("n[1-2", "without a matching ']'"),
        ("n[1-2,m", "without a matching ']'"),
        ("n1-2]", "without a matching '['"),
        ("n[1-2]]", "without a matching '['"),
        ("n[[1-2]]", "nested brackets"),
        ("n[1[2]]", "nested brackets"),
        ("n[]", "empty range"),
        ("n[1,]", "not N or N-M"),
        ("n[,1]", "not N or N-M"),
        ("n[1-]", "not N or N-M"),
        ("n[-1]", "not N or N-M"),
        ("n[1--2]", "not N or N-M"),
        ("n[3-1]", "descending"),
        ("n[10-09]", "descending"),
        ("n[a-c]", "not N or N-M"),
        ("n[1-b]", "not N or N-M"),
        ("n[0x3]", "not N or N-M"),
        ("n[+1]", "not N or N-M"),
        ("n[\u0661-\u0663]", "not N or N-M"),
        ("a,,b", "empty host name"),
        ("a,", "empty host name"),
        (",a", "empty host name"),
        ("a, ,b", "empty host name"),
        ("a b", "whitespace"),
        ("n[1 -2]", "whitespace"),
        (f"n[0-{MAX_HOSTS}]", "more than"),
        ("a[1-1000]b[1-1000]", "more than"),
        (f"a[1-{MAX_HOSTS // 2}],b[0-{MAX_HOSTS // 2}]", "more than"),
        ("n[0-99999999999999999999]", "more than"),
    ],
)
def test_expand_hostlist_malformed(value: str, reason: str) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        expand_hostlist(value, "SLURM_JOB_NODELIST")
    error = caught.value
    assert f"SLURM_JOB_NODELIST={value!r}" in error.message
    assert reason in error.message
    assert "node[01-04],gpu1" in error.fix
    assert error.exit_code == 3


def test_expand_hostlist_default_variable_name() -> None:
    with pytest.raises(EnvironmentParseError, match=r"hostlist='n\[3-1\]'"):
        expand_hostlist("n[3-1]")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", []),
        ("2", [2]),
        (" 2 ", [2]),
        ("2,1", [2, 1]),
        ("1(x4)", [1, 1, 1, 1]),
        ("3(x2),1", [3, 3, 1]),
        ("1,3(x2)", [1, 3, 3]),
        ("2(x1)", [2]),
        ("4(x2),2(x3)", [4, 4, 2, 2, 2]),
        ("0", [0]),
        ("10(x2), 1", [10, 10, 1]),
    ],
)
def test_expand_tasks_per_node_golden(value: str, expected: list[int]) -> None:
    assert expand_tasks_per_node(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a", "not N or N(xR)"),
        ("-1", "not N or N(xR)"),
        ("2,", "not N or N(xR)"),
        ("2,,1", "not N or N(xR)"),
        ("(x2)", "not N or N(xR)"),
        ("2(x)", "not N or N(xR)"),
        ("2(2)", "not N or N(xR)"),
        ("2x2", "not N or N(xR)"),
        ("2(x2", "not N or N(xR)"),
        ("2(x2)3", "not N or N(xR)"),
        ("2 (x2)", "not N or N(xR)"),
        ("2(x0)", "repeats zero times"),
        (f"1(x{MAX_HOSTS + 1})", "more than"),
        (f"1(x{MAX_HOSTS}),1", "more than"),
    ],
)
def test_expand_tasks_per_node_malformed(value: str, reason: str) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        expand_tasks_per_node(value, "SLURM_STEP_TASKS_PER_NODE")
    error = caught.value
    assert f"SLURM_STEP_TASKS_PER_NODE={value!r}" in error.message
    assert reason in error.message
    assert "2(x3),1" in error.fix


def test_expand_tasks_per_node_default_variable_name() -> None:
    with pytest.raises(EnvironmentParseError, match="SLURM_TASKS_PER_NODE='x'"):
        expand_tasks_per_node("x")
