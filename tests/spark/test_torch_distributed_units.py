"""TorchDistributor's pure parts, without Spark: torchrun's variables, a script run in-process,
which torch errors are reactions to a lost peer, and the wrapper's trip through cloudpickle."""

from __future__ import annotations

import sys
from pathlib import Path

import cloudpickle
import pytest

import collective
from collective.failures.report import is_peer_failure
from spark_hvd.launch.rank.rank_context import RankContext
from spark_hvd.script_call import ScriptCall
from spark_hvd.launch.rank.torch_distributed_call import TorchDistributedCall
from spark_hvd.launch.rank.torch_distributed_env import torch_distributed_env

# Rank 3 of 4, second on its host of two ranks; the second host.
CONTEXT = RankContext(rank=3, size=4, local_rank=1, local_size=2, cross_rank=1, cross_size=2,
                      task_address="h2:1", task_addresses=("h1:1", "h2:1", "h1:2", "h2:2"),
                      gpu_addresses=("0",), stage_id=7, task_attempt_id=9)


class TestTorchDistributedEnv:
    def test_under_spark_each_task_is_a_node_of_one(self) -> None:
        env = torch_distributed_env(CONTEXT, "h1", 29500, "run-1", node_per_task=True)
        assert env == {
            "MASTER_ADDR": "h1", "MASTER_PORT": "29500", "RANK": "3", "WORLD_SIZE": "4",
            "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "3", "GROUP_WORLD_SIZE": "4",
            "ROLE_RANK": "3", "ROLE_WORLD_SIZE": "4", "ROLE_NAME": "default",
            "TORCHELASTIC_RUN_ID": "run-1", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
        }

    def test_locally_the_ranks_of_a_host_share_a_node(self) -> None:
        env = torch_distributed_env(CONTEXT, "h1", 29500, "run-1", node_per_task=False)
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("1", "2")
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == ("1", "2")

    def test_a_port_outside_the_range_is_refused(self) -> None:
        with pytest.raises(ValueError, match="master_port=0 is outside"):
            torch_distributed_env(CONTEXT, "h1", 0, "run-1", node_per_task=True)


class TestScriptCall:
    def test_the_script_runs_as_main_with_its_argv_and_directory(self, tmp_path: Path) -> None:
        script = tmp_path / "probe.py"
        script.write_text("import sys\nSEEN = (__name__, list(sys.argv), sys.path[0])\n"
                          "import json\nopen(sys.argv[1], 'w').write(json.dumps(SEEN))\n")
        out = tmp_path / "seen.json"
        argv, path = list(sys.argv), list(sys.path)
        assert ScriptCall(str(script), [str(out), "--lr=0.1"])() is None
        assert out.read_text() == f'["__main__", ["{script}", "{out}", "--lr=0.1"], "{tmp_path}"]'
        assert (sys.argv, sys.path) == (argv, path)

    @pytest.mark.parametrize("code", ["sys.exit()", "sys.exit(0)", "pass"])
    def test_exit_status_zero_is_success(self, tmp_path: Path, code: str) -> None:
        script = tmp_path / "ok.py"
        script.write_text(f"import sys\n{code}\n")
        assert ScriptCall(str(script))() is None

    def test_a_non_zero_exit_and_an_exception_are_failures(self, tmp_path: Path) -> None:
        script = tmp_path / "bad.py"
        script.write_text("import sys\nsys.exit(int(sys.argv[1]))\n")
        with pytest.raises(SystemExit) as caught:
            ScriptCall(str(script), ["4"])()
        assert caught.value.code == 4
        script.write_text("raise KeyError('missing column')\n")
        with pytest.raises(KeyError, match="missing column"):
            ScriptCall(str(script))()

    def test_a_missing_script_names_the_path_and_host(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match=r"train_object='.*gone.py' is not a file on host "):
            ScriptCall(str(tmp_path / "gone.py"))()


class TestPeerFailures:
    def test_collective_peer_failures_and_torch_lost_peers_are_reactions(self) -> None:
        assert is_peer_failure(collective.PeerFailureError("rank 1 left"))
        # What gloo raised on rank 0 of a DDP job whose rank 1 exited (torch 2.13).
        gloo = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
                "by peer [127.0.0.1]:15261. This is typically caused by a remote worker crashing.")
        assert is_peer_failure(RuntimeError(gloo))

    def test_other_errors_are_root_causes(self) -> None:
        assert not is_peer_failure(ValueError("Connection closed by peer"))  # not torch's kind
        assert not is_peer_failure(RuntimeError("CUDA out of memory"))
        assert not is_peer_failure(KeyboardInterrupt())


def _double(x: int) -> int:
    return 2 * x


def test_the_wrapper_survives_cloudpickle_and_imports_torch_on_the_way() -> None:
    pytest.importorskip("torch")
    call = cloudpickle.loads(cloudpickle.dumps(TorchDistributedCall(_double, "run-9", node_per_task=True)))
    assert isinstance(call, TorchDistributedCall)
    assert (call.fn(4), call.run_id, call.node_per_task) == (8, "run-9", True)
    assert "torch.distributed" in sys.modules
