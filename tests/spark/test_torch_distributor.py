"""spark_hvd.TorchDistributor on local[2]: DDP and FSDP (CPU, gloo) as functions and as scripts, on
Spark and in local mode, against single-process training; torchrun's environment; pyspark's
documented usage after only its import changes; failures, output, events and the start timeout."""

from __future__ import annotations

import io
import json
import runpy
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import cloudpickle
import pytest

import spark_hvd
import torch_training
from torch_training import STEPS

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TRAIN_SCRIPT = SCRIPTS / "train_script.py"
PYSPARK_IMPORT = "from pyspark.ml.torch.distributor import TorchDistributor"


@pytest.fixture(scope="module", autouse=True)
def ship_training_functions() -> Iterator[None]:
    # The ranks need not import the tests: the functions travel by value.
    cloudpickle.register_pickle_by_value(torch_training)
    yield
    cloudpickle.unregister_pickle_by_value(torch_training)


@pytest.fixture(scope="module")
def single_process_weights() -> dict[str, list[float]]:
    return torch_training.train_single(STEPS)


def assert_same_weights(got: dict[str, list[float]], want: dict[str, list[float]]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        difference = (torch.tensor(got[name]) - torch.tensor(want[name])).abs().max().item()
        assert difference < 1e-12, f"{name} differs from single-process training by {difference}"


def distributor(local_mode: bool, **options: Any) -> spark_hvd.TorchDistributor:
    return spark_hvd.TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False,
                                      stderr=io.StringIO(), **options)


@pytest.mark.parametrize("local_mode", [False, True], ids=["spark", "local_mode"])
def test_ddp_function_trains_as_one_process_on_the_whole_batch(local_spark, local_mode: bool,
                                                               single_process_weights) -> None:
    result = distributor(local_mode).run(torch_training.train_ddp, STEPS)
    assert (result["rank"], result["world_size"]) == (0, 2)   # rank 0's result
    assert_same_weights(result["weights"], single_process_weights)


def test_fsdp_function_shards_and_trains_as_one_process(local_spark, single_process_weights) -> None:
    result = distributor(False).run(torch_training.train_fsdp, STEPS)
    assert result["local_numel"] < result["total_numel"]
    assert_same_weights(result["weights"], single_process_weights)


@pytest.mark.parametrize(("parallel", "local_mode"), [("ddp", False), ("fsdp", False), ("fsdp", True)],
                         ids=["ddp-spark", "fsdp-spark", "fsdp-local_mode"])
def test_a_training_script_runs_with_its_arguments(local_spark, tmp_path: Path, parallel: str,
                                                   local_mode: bool, single_process_weights) -> None:
    out = tmp_path / "weights.json"
    assert distributor(local_mode).run(str(TRAIN_SCRIPT), "--parallel", parallel, "--steps", STEPS,
                                       "--out", out) is None   # pyspark returns None for a script
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert_same_weights(result["weights"], single_process_weights)


def test_pyspark_documentation_example_runs_after_only_its_import_changes(local_spark, tmp_path: Path) -> None:
    original = (SCRIPTS / "pyspark_docs_example.py").read_text()
    assert original.count(PYSPARK_IMPORT) == 1
    ported = tmp_path / "ported_example.py"
    ported.write_text(original.replace(PYSPARK_IMPORT, "from spark_hvd import TorchDistributor"))
    namespace = runpy.run_path(str(ported), run_name="__main__")
    assert isinstance(namespace["distributor"], spark_hvd.TorchDistributor)
    # One process on both ranks' batches of every step (their DistributedSamplers' shares).
    from torch.utils.data import DataLoader, DistributedSampler

    dataset = namespace["create_dataset"]()
    loaders = [DataLoader(dataset, batch_size=namespace["BATCH_SIZE"],
                          sampler=DistributedSampler(dataset, num_replicas=2, rank=r)) for r in (0, 1)]
    model = namespace["create_model"]()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-1)
    for (x0, y0), (x1, y1) in zip(*loaders):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(torch.cat([x0, x1])), torch.cat([y0, y1])).backward()
        optimizer.step()
    want = {name: value.tolist() for name, value in model.state_dict().items()}
    got = namespace["output"]
    assert sorted(got) == sorted(want)
    for name in want:
        assert torch.allclose(torch.tensor(got[name]), torch.tensor(want[name]), rtol=0, atol=1e-12), name


def test_ranks_get_torchruns_environment_with_a_live_master_port(local_spark) -> None:
    views = spark_hvd.run(torch_training.torch_environment, num_proc=2, torch_distributed=True,
                          stderr=io.StringIO())
    for rank, view in enumerate(views):
        # Each Spark task is one torchrun node, as in pyspark's TorchDistributor.
        assert (view["RANK"], view["WORLD_SIZE"], view["LOCAL_RANK"], view["LOCAL_WORLD_SIZE"]) == \
            (str(rank), "2", "0", "1")
        assert (view["GROUP_RANK"], view["GROUP_WORLD_SIZE"]) == (str(rank), "2")
        assert (view["dist_rank"], view["dist_world_size"]) == (rank, 2)
        assert view["is_torchelastic_launched"] and view["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert views[0]["MASTER_ADDR"] == views[1]["MASTER_ADDR"]
    assert views[0]["MASTER_PORT"] == views[1]["MASTER_PORT"]
    assert views[0]["TORCHELASTIC_RUN_ID"] == views[1]["TORCHELASTIC_RUN_ID"]
    # spark_hvd.run leaves the GPUs alone; TorchDistributor(use_gpu=False) hides them, as pyspark does.
    assert views[0]["CUDA_VISIBLE_DEVICES"] is None
    hidden = distributor(False).run(torch_training.torch_environment)
    assert hidden["CUDA_VISIBLE_DEVICES"] == ""


def test_local_mode_is_one_torchrun_node_on_the_driver(local_spark) -> None:
    view = distributor(True).run(torch_training.torch_environment)
    assert (view["RANK"], view["LOCAL_RANK"], view["LOCAL_WORLD_SIZE"], view["GROUP_WORLD_SIZE"]) == \
        ("0", "0", "2", "1")
    assert view["MASTER_ADDR"] == "127.0.0.1"


def test_two_jobs_at_once_never_share_a_master_port(local_spark) -> None:
    results: dict[int, Any] = {}

    def launch(index: int, address: tuple[str, int]) -> None:
        try:
            results[index] = distributor(True).run(torch_training.hold_master_port_until_released, address)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            results[index] = e

    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(180)
        threads = [threading.Thread(target=launch, args=(i, server.getsockname()), daemon=True)
                   for i in range(2)]
        for thread in threads:
            thread.start()
        held = [server.accept()[0] for _ in threads]
        try:
            # Both jobs' rank 0 are inside fn now, each holding its store open.
            ports = [int(conn.makefile().readline()) for conn in held]
            assert ports[0] != ports[1]
            for port in ports:
                socket.create_connection(("127.0.0.1", port), timeout=10).close()
        finally:
            for conn in held:
                conn.sendall(b"x")
                conn.close()
            for thread in threads:
                thread.join(120)
    assert sorted(int(r) for r in results.values()) == sorted(ports), results


@pytest.mark.parametrize("local_mode", [False, True], ids=["spark", "local_mode"])
def test_a_rank_that_dies_is_named_not_the_peer_that_lost_it(local_spark, local_mode: bool) -> None:
    with pytest.raises(spark_hvd.RunError) as caught:
        distributor(local_mode, stdout=io.StringIO()).run(torch_training.ddp_then_kill_rank, 1)
    assert caught.value.rank == 1, str(caught.value)
    assert "SIGKILL" in caught.value.failure.summary
    assert "about to die" in caught.value.last_lines
    for other in caught.value.other_failures:
        # Rank 0 saw gloo's "Connection closed by peer": a reaction, not a cause.
        assert other.peer_failure, other


def test_an_exception_names_its_rank_with_its_traceback(local_spark) -> None:
    with pytest.raises(spark_hvd.RunError) as caught:
        distributor(False, stdout=io.StringIO()).run(torch_training.raise_after_init_on_rank, 1)
    assert caught.value.rank == 1
    assert "ValueError: boom from rank 1" in caught.value.failure.summary
    assert 'raise ValueError(f"boom from rank {bad_rank}")' in caught.value.failure.traceback
    assert caught.value.last_lines == ["about to raise"]


@pytest.mark.parametrize("local_mode", [False, True], ids=["spark", "local_mode"])
def test_a_result_that_arrived_stands_when_its_process_then_aborts(local_spark, local_mode: bool) -> None:
    err = io.StringIO()
    result = spark_hvd.TorchDistributor(2, local_mode, False, stderr=err).run(
        torch_training.return_then_abort_at_exit, 1)
    # Rank 0 was still running when rank 1 died: nothing stopped it.
    assert result == "rank 0 outlived rank 1: True"
    assert ("rank 1: fn returned its result; then its process ended while exiting (killed by signal "
            "SIGABRT (6)); the result stands") in err.getvalue()


def test_a_script_that_exits_non_zero_is_named_with_its_code(local_spark) -> None:
    out = io.StringIO()
    with pytest.raises(spark_hvd.RunError) as caught:
        distributor(False, stdout=out).run(str(SCRIPTS / "exit_on_rank.py"), 1, 3)
    assert caught.value.rank == 1
    assert "SystemExit: 3" in caught.value.failure.summary
    assert f"rank 1 of 2 running {SCRIPTS / 'exit_on_rank.py'}" in caught.value.last_lines


def test_a_missing_script_is_named_with_the_host_that_lacks_it(local_spark, tmp_path: Path) -> None:
    missing = tmp_path / "no_such_train.py"
    with pytest.raises(spark_hvd.RunError, match=r"train_object='.*no_such_train.py' is not a file on host"):
        distributor(False).run(str(missing))


def test_bad_arguments_fail_before_anything_launches(local_spark) -> None:
    with pytest.raises(ValueError, match="takes command-line arguments only; got keyword arguments"):
        distributor(False).run(str(TRAIN_SCRIPT), steps=3)
    with pytest.raises(TypeError, match="train_object must be a function or the path"):
        distributor(False).run(42)
    with pytest.raises(ValueError, match="num_processes has to be a positive integer"):
        spark_hvd.TorchDistributor(num_processes=0)
    with pytest.raises(TypeError, match="local_mode must be True or False"):
        spark_hvd.TorchDistributor(2, local_mode="no")


def test_pyspark_gpu_checks_and_messages(local_spark) -> None:
    # pyspark's defaults are local_mode=True, use_gpu=True; this driver has no GPU resources.
    with pytest.raises(RuntimeError, match="GPUs were unable to be found on the driver"):
        spark_hvd.TorchDistributor(num_processes=2)
    with pytest.raises(RuntimeError, match="'spark.task.resource.gpu.amount' was unset"):
        spark_hvd.TorchDistributor(num_processes=2, local_mode=False)
    # pyspark's private _ssl_conf is accepted (and honoured when spark.ssl.enabled is true).
    assert spark_hvd.TorchDistributor(2, False, False, "my.ignoreSsl").ssl_conf == "my.ignoreSsl"
    with pytest.raises(NotImplementedError, match="_train_on_dataframe"):
        distributor(False)._train_on_dataframe(torch_training.train_ddp, local_spark.range(2))


@pytest.mark.parametrize("local_mode", [False, True], ids=["spark", "local_mode"])
def test_output_streams_to_the_driver_prefixed_with_the_rank(local_spark, local_mode: bool) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert spark_hvd.TorchDistributor(2, local_mode, False, stdout=out, stderr=err).run(
        torch_training.chatty, 2) == 0
    for rank in (0, 1):
        assert f"[{rank}]<stdout>:rank {rank} line 0\n[{rank}]<stdout>:rank {rank} line 1\n" in _lines_of(out, rank)
        assert f"[{rank}]<stderr>:rank {rank} to stderr\n" in err.getvalue()


def _lines_of(stream: io.StringIO, rank: int) -> str:
    return "".join(line for line in stream.getvalue().splitlines(keepends=True) if line.startswith(f"[{rank}]"))


@pytest.mark.parametrize("local_mode", [False, True], ids=["spark", "local_mode"])
def test_progress_events_reach_the_driver_in_order(local_spark, local_mode: bool) -> None:
    received: list[tuple[int, dict]] = []
    result = distributor(local_mode, on_event=lambda rank, data: received.append((rank, data))).run(
        torch_training.report_progress, 5)
    assert result == 0
    for rank in (0, 1):
        assert [d["step"] for r, d in received if r == rank] == list(range(5))


def test_ranks_that_do_not_start_in_time_end_the_run(local_spark) -> None:
    with pytest.raises(spark_hvd.StartTimeoutError, match=r"did not start within start_timeout=0.01s"):
        distributor(False, start_timeout=0.01).run(torch_training.chatty, 1)


def test_a_run_after_failures_works(local_spark) -> None:
    assert distributor(False).run(torch_training.chatty, 0) == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
