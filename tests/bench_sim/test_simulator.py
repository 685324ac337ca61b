"""The schedule simulator (bench/simulator) against the closed forms it must reduce to, and its monotonicity."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from simulator import mesh  # noqa: E402
from simulator.allreduce import allreduce_rounds, allreduce_time  # noqa: E402
from simulator.cluster import Cluster, Link  # noqa: E402
from simulator.gpu import gpu_allreduce_time, gpu_cluster  # noqa: E402
from simulator.ring import ring_allreduce, ring_closed_form  # noqa: E402
from simulator.rounds import schedule_time  # noqa: E402
from simulator.small import choose_small_path, log_rounds  # noqa: E402
from simulator.training import RESNET_101, step_efficiency  # noqa: E402

ALPHA, BANDWIDTH = 25e-6, 10e9


def network_only(ranks: int, ranks_per_host: int = 1) -> Cluster:
    """A contention-free network: no CPU prices, a NIC as fast as a flow."""
    link = Link(alpha_s=ALPHA, bytes_per_s=BANDWIDTH)
    return Cluster(ranks=ranks, ranks_per_host=ranks_per_host, cores_per_host=64, intra=link, inter=link,
                   nic_bytes_per_s=BANDWIDTH, cpu_msg_s=0.0, cpu_byte_s=0.0)


@pytest.mark.parametrize("ranks", [2, 3, 8, 100, 4096])
@pytest.mark.parametrize("nbytes", [4096, 1 << 20, 256 << 20])
def test_ring_matches_the_textbook_cost_without_contention(ranks: int, nbytes: int) -> None:
    cluster = network_only(ranks)
    got = schedule_time(cluster, ring_allreduce(cluster, nbytes))
    assert got == pytest.approx(ring_closed_form(ranks, nbytes, ALPHA, 1 / BANDWIDTH), rel=1e-9)


def test_an_interleaved_ring_makes_every_rank_of_a_host_share_its_nic() -> None:
    cluster = network_only(64, ranks_per_host=8)
    ordered = schedule_time(cluster, ring_allreduce(cluster, 64 << 20, host_ordered=True))
    interleaved = schedule_time(cluster, ring_allreduce(cluster, 64 << 20, host_ordered=False))
    assert interleaved > 5 * ordered


@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 255, 256, 257, 4096])
def test_the_log_path_takes_ceil_log2_p_rounds_and_moves_p_minus_1_blocks(ranks: int) -> None:
    steps = log_rounds(network_only(ranks), 1000)
    assert len(steps) == math.ceil(math.log2(ranks))
    block = steps[0].bytes
    assert sum(s.bytes for s in steps) == pytest.approx((ranks - 1) * block)


def test_the_automatic_choice_keeps_one_round_for_few_ranks_and_takes_log_rounds_for_many() -> None:
    def picks(p: int) -> str:
        return choose_small_path(replace(network_only(p), cpu_msg_s=3e-6), 1024)

    assert picks(2) == "direct"
    assert picks(4096) == "log"
    choices = [picks(p) for p in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)]
    assert choices == sorted(choices, key=lambda c: c == "log"), "one switch, from direct to log"


@pytest.mark.parametrize("nbytes", [256, 64 << 10, 16 << 20])
def test_more_ranks_never_make_an_allreduce_faster(nbytes: int) -> None:
    times = [allreduce_time(gpu_cluster(p, 100).net, nbytes) for p in (16, 64, 256, 1024, 4096)]
    assert times == sorted(times)


@pytest.mark.parametrize("ranks", [64, 512, 4096])
def test_more_bytes_never_make_an_allreduce_faster(ranks: int) -> None:
    gpus = gpu_cluster(ranks, 100)
    times = [gpu_allreduce_time(gpus, n) for n in (1 << 10, 1 << 16, 1 << 20, 1 << 26)]
    assert times == sorted(times)
    cpu = [allreduce_time(gpus.net, n) for n in (1 << 10, 1 << 16, 1 << 20, 1 << 26)]
    assert cpu == sorted(cpu)


def test_sharing_cores_slows_the_ranks_down_in_proportion() -> None:
    one_core_each = replace(network_only(16, 16), cores_per_host=16, cpu_byte_s=1e-9)
    two_cores = replace(one_core_each, cores_per_host=2)
    nbytes = 8 << 20
    slow = schedule_time(two_cores, ring_allreduce(two_cores, nbytes))
    fast = schedule_time(one_core_each, ring_allreduce(one_core_each, nbytes))
    assert slow > 4 * fast


def test_the_hierarchy_is_chosen_across_hosts_and_beats_the_flat_ring_on_a_slow_network() -> None:
    net = gpu_cluster(256, 1).net
    names = {r.name for r in allreduce_rounds(net, 64 << 20)}
    assert "cross-host ring reduce-scatter" in names and "local reduce-scatter" in names
    hier = allreduce_time(net, 64 << 20, algorithm="hierarchical")
    flat = allreduce_time(net, 64 << 20, algorithm="ring")
    assert hier < flat


def test_a_small_tensor_is_one_round() -> None:
    rounds = allreduce_rounds(gpu_cluster(16, 100).net, 1024)
    assert [r.messages for r in rounds] == [15]


def test_lazy_formation_does_not_grow_with_the_world_and_the_full_mesh_does() -> None:
    small, large = gpu_cluster(64, 100).net, gpu_cluster(4096, 100).net
    hs = mesh.for_cluster(small)
    assert mesh.lazy_mesh_time(small, hs) == pytest.approx(mesh.lazy_mesh_time(large, hs))
    assert mesh.full_mesh_time(large, hs) > 20 * mesh.full_mesh_time(small, hs)


def test_efficiency_is_a_fraction_and_overlap_only_helps() -> None:
    gpus = gpu_cluster(512, 25, gpus_per_host=4, nvlink=False)
    with_overlap = step_efficiency(RESNET_101, lambda b: gpu_allreduce_time(gpus, b), 0.0)
    without = step_efficiency(RESNET_101, lambda b: gpu_allreduce_time(gpus, b), 0.0, overlap=False)
    assert 0 < without["efficiency"] <= with_overlap["efficiency"] <= 1


def test_the_cli_prints_every_table_from_a_measurement_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import simulate

    rows = [{"ranks": p, "transport": t, "formation_s": 0.01 * p, "loadavg_before": 1.0,
             "allreduce_s": {"256": 3e-5 * p, "1048576": 6e-4 * p, "8388608": 1e-2 * p}}
            for p in (2, 4, 8, 16) for t in ("shm", "tcp")]
    measured = tmp_path / "cal.json"
    measured.write_text(json.dumps({"cores": 2, "rows": rows}))
    assert simulate.main(["all", "--measured", str(measured), "--ranks", "256", "--gbit", "100"]) == 0
    out = capsys.readouterr().out
    for heading in ("Measured against predicted", "Allreduce at scale", "Small messages", "Scaling efficiency"):
        assert heading in out
    assert "| 16 | check |" in out


def test_a_bad_small_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="small-message mode"):
        allreduce_rounds(gpu_cluster(16, 100).net, 1024, small="tree")
