"""spark_hvd.TorchDistributor on a real standalone cluster (a master and two one-core workers on
127.0.0.1): DDP and FSDP over gloo, as functions and as scripts, equal single-process training."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Iterator

import cloudpickle
import pytest

import spark_hvd
import torch_training
from torch_training import STEPS

torch = pytest.importorskip("torch")

# The first test also pays for starting the cluster and the session (about 30 s).
pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

TRAIN_SCRIPT = Path(__file__).resolve().parent / "scripts" / "train_script.py"


@pytest.fixture(scope="module", autouse=True)
def ship_training_functions() -> Iterator[None]:
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


def distributor() -> spark_hvd.TorchDistributor:
    return spark_hvd.TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, stderr=io.StringIO())


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_training_function_on_two_executors(standalone_spark, parallel: str, single_process_weights) -> None:
    train = torch_training.train_ddp if parallel == "ddp" else torch_training.train_fsdp
    result = distributor().run(train, STEPS)
    assert (result["rank"], result["world_size"]) == (0, 2)
    assert_same_weights(result["weights"], single_process_weights)


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_training_script_on_two_executors(standalone_spark, tmp_path: Path, parallel: str,
                                            single_process_weights) -> None:
    out = tmp_path / "weights.json"
    assert distributor().run(str(TRAIN_SCRIPT), "--parallel", parallel, "--steps", str(STEPS),
                             "--out", str(out)) is None
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert_same_weights(result["weights"], single_process_weights)


def test_each_executor_is_a_torchrun_node_and_rank_0_hosts_the_store(standalone_spark) -> None:
    views = spark_hvd.run(torch_training.torch_environment, num_proc=2, torch_distributed=True,
                          spark=standalone_spark, stderr=io.StringIO())
    assert [(v["RANK"], v["LOCAL_RANK"], v["GROUP_RANK"]) for v in views] == [("0", "0", "0"), ("1", "0", "1")]
    assert views[0]["MASTER_ADDR"] == views[1]["MASTER_ADDR"] == "127.0.0.1"
    assert views[0]["MASTER_PORT"] == views[1]["MASTER_PORT"]
