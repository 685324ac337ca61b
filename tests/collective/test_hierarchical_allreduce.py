"""Hierarchical allreduce and host-ordered rings, on four real processes given host keys that form two
emulated layouts on this machine: 2 x 2 interleaved as Spark places them (ranks 0 and 2 on host A, 1 and 3
on host B) and 3 + 1. Same-key pairs use shared memory and the others TCP, as on real hosts, so the bytes
each rank sent per transport show which path the data took."""

from __future__ import annotations

import time

import pytest

from collective.errors import MismatchError
from collective.config import Config, config_from_env
from collective.runtime import agreed_hierarchical_allreduce
from jobs import JobResult, ManualJob, run_job

LAYOUTS = {"2x2": "A,B,A,B", "3+1": "A,A,A,B"}
# Empty; fewer elements than slices (through the engine); inside the descriptor round; past it even for
# 1-byte types on 4 ranks.
COUNTS = "0,1,7,30011"
MIB = 1 << 20  # the worker's traffic tensor: 2^18 float32
# Besides the tensor: each direct call's descriptor blocks.
SLACK = 4096
_jobs: dict[tuple[str, str], JobResult] = {}


def job(layout: str, mode: str) -> JobResult:
    """Each layout and mode runs once per session; several tests read its records."""
    if (layout, mode) not in _jobs:
        counts = COUNTS if mode != "auto" else "7"
        _jobs[(layout, mode)] = run_job("hierarchical_cases.py", 4, LAYOUTS[layout], mode, counts, timeout_s=150)
    result = _jobs[(layout, mode)]
    assert result.returncode == 0, result.output[-4000:]
    return result


def record(result: JobResult, rank: int, kind: str) -> dict:
    (found,) = [r for r in result.records(rank) if r["kind"] == kind]
    return found


def tcp_sent(result: JobResult) -> list[int]:
    return [record(result, rank, "traffic")["tcp"] for rank in range(4)]


def near(value: int, expected: float) -> bool:
    return expected <= value <= expected + SLACK


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["on", "off"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_dtype_and_op_is_right_and_identical_on_every_rank(layout: str, mode: str) -> None:
    result = job(layout, mode)
    cases = [record(result, rank, "cases") for rank in range(4)]
    for rank, found in enumerate(cases):
        assert found["failures"] == [], (rank, found["failures"][:10])
        # Every dtype x 7 op variants x 4 counts, direct and through the engine.
        assert len(found["digests"]) == 10 * 7 * 4 * 2
        assert found["digests"] == cases[0]["digests"], f"rank {rank} got other bits than rank 0"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_integer_results_are_bit_identical_to_the_flat_ring(layout: str) -> None:
    hierarchical = record(job(layout, "on"), 0, "cases")["digests"]
    flat = record(job(layout, "off"), 0, "cases")["digests"]
    integer_cases = [key for key in flat if key.split()[1] in ("uint8", "int8", "int16", "uint16", "int32", "int64")]
    assert len(integer_cases) == 6 * 7 * 4 * 2
    differing = [key for key in integer_cases if hierarchical[key] != flat[key]]
    assert differing == []


@pytest.mark.timeout(200)
def test_topology_of_the_emulated_layouts() -> None:
    for layout, local_sizes, cross_sizes in (("2x2", [2, 2, 2, 2], [2, 2, 2, 2]), ("3+1", [3, 3, 3, 1], [2, 1, 1, 2])):
        result = job(layout, "off")
        topology = [record(result, rank, "topology") for rank in range(4)]
        assert [t["local_size"] for t in topology] == local_sizes
        assert [t["cross_size"] for t in topology] == cross_sizes
        hosts = LAYOUTS[layout].split(",")
        for rank, t in enumerate(topology):
            assert t["shm"] == [None if p == rank else hosts[p] == hosts[rank] for p in range(4)]


@pytest.mark.timeout(200)
def test_flat_ring_crosses_each_host_boundary_once() -> None:
    # 2 x 2 interleaved: the ring runs 0 -> 2 -> 1 -> 3 -> 0, so only ranks 2 and 3 send over TCP. A ring in
    # rank order would send 2(p-1)/p of the tensor over TCP from every rank.
    ring_share = 2 * 3 / 4 * MIB
    sent = tcp_sent(job("2x2", "off"))
    assert sent[0] < SLACK and sent[1] < SLACK, sent
    assert near(sent[2], ring_share) and near(sent[3], ring_share), sent
    # 3 + 1: 0 -> 1 -> 2 -> 3 -> 0; ranks 2 and 3 reach the other host.
    sent = tcp_sent(job("3+1", "off"))
    assert sent[0] < SLACK and sent[1] < SLACK, sent
    assert near(sent[2], ring_share) and near(sent[3], ring_share), sent


@pytest.mark.timeout(200)
def test_forced_hierarchy_sends_a_hosts_share_across() -> None:
    # 2 x 2: each rank allreduces its half across the 2 hosts, sending 2(H-1)/H of it: the host's link
    # carries 1 x the tensor instead of the flat ring's 1.5 x.
    sent = tcp_sent(job("2x2", "on"))
    assert all(near(s, MIB / 2) for s in sent), sent
    # 3 + 1: three segments; host A's ranks send one each, host B's only rank sends all three.
    sent = tcp_sent(job("3+1", "on"))
    assert all(near(s, MIB / 3) for s in sent[:3]) and near(sent[3], MIB), sent


@pytest.mark.timeout(200)
def test_automatic_choice_takes_the_hierarchy_on_two_hosts_of_two() -> None:
    assert tcp_sent(job("2x2", "auto")) == tcp_sent(job("2x2", "on"))


@pytest.mark.timeout(200)
def test_ranks_that_disagree_on_the_choice_fail_alike() -> None:
    result = run_job("hierarchical_cases.py", 4, LAYOUTS["2x2"], "on,auto,auto,auto", "7", timeout_s=60)
    assert result.returncode != 0
    assert "ranks disagree on hierarchical_allreduce" in result.output, result.output[-3000:]
    assert "rank(s) 0: True; rank(s) 1, 2, 3: None" in result.output


def test_agreement_of_the_records() -> None:
    assert agreed_hierarchical_allreduce([{"hierarchical_allreduce": False}] * 3) is False
    assert agreed_hierarchical_allreduce([{"hierarchical_allreduce": None}] * 2) is None
    with pytest.raises(MismatchError, match=r"rank\(s\) 1: False"):
        agreed_hierarchical_allreduce([{"hierarchical_allreduce": None}, {"hierarchical_allreduce": False}])


def test_config_field_and_horovod_variable() -> None:
    assert Config().hierarchical_allreduce is None
    assert config_from_env(environ={"HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}).hierarchical_allreduce is True
    assert config_from_env(environ={"HOROVOD_HIERARCHICAL_ALLREDUCE": "0"}).hierarchical_allreduce is False
    with pytest.raises(ValueError, match="HOROVOD_HIERARCHICAL_ALLREDUCE='maybe'"):
        config_from_env(environ={"HOROVOD_HIERARCHICAL_ALLREDUCE": "maybe"})
    with pytest.raises(ValueError, match="Config.hierarchical_allreduce"):
        Config(hierarchical_allreduce=1)


def test_config_reaches_the_native_options() -> None:
    assert Config(hierarchical_allreduce=True).to_native().mesh.hierarchical_allreduce is True
    assert Config(hierarchical_allreduce=False).to_native().mesh.hierarchical_allreduce is False
    assert Config().to_native().mesh.hierarchical_allreduce is None


@pytest.mark.timeout(90)
@pytest.mark.parametrize("layout, victim", [("2x2", 1), ("3+1", 3)])
def test_a_rank_killed_inside_the_hierarchy_is_named_by_every_survivor(layout: str, victim: int) -> None:
    # 3 + 1: the victim is alone on its host, so it is in every segment's cross-host allreduce.
    with ManualJob("kill_target.py", 4, "shm", "direct", LAYOUTS[layout]) as killed:
        for rank in range(4):
            killed.wait_for_line(rank, "looping")
        killed_at = time.time()
        killed.kill(victim)
        for rank in (r for r in range(4) if r != victim):
            record = killed.first_report(rank, timeout_s=30)
            assert record["kind"] == "peer-failure" and record["rank"] == victim, record
            assert record["at"] - killed_at < 10.0, f"rank {rank} took {record['at'] - killed_at:.1f} s"
