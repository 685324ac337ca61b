"""``horovod.common.util`` and ``horovod.runner.common.util.env`` as Horovod scripts and tests import them,
under ``collective``: their answers, and the errors they name."""

from __future__ import annotations

import os

import pytest

import collective
from collective.common import util
from collective.config import launcher_rank_and_size
from collective.runner.common.util.env import get_env_rank_and_size
from collective.runner.util.threads import in_thread, on_event


def test_build_queries_are_the_packages_own() -> None:
    for name in ("mpi_built", "gloo_built", "nccl_built", "cuda_built", "rocm_built", "ccl_built", "ddl_built",
                 "sycl_built"):
        assert getattr(util, name)() == getattr(collective, name)(), name


def test_check_extension_passes_for_an_installed_framework_and_names_a_missing_one() -> None:
    util.check_extension("horovod.torch", "HOROVOD_WITH_PYTORCH", __file__, "mpi_lib")
    util.check_extension("collective.tensorflow")
    with pytest.raises(ImportError, match="horovod.mxnet needs mxnet, which is not installed"):
        util.check_extension("horovod.mxnet", "HOROVOD_WITH_MXNET", __file__, "mpi_lib")


def test_gpu_available_is_false_on_this_cpu_machine_and_true_only_with_a_device() -> None:
    import torch

    assert util.gpu_available("torch") is torch.cuda.is_available()
    assert util.gpu_available("mxnet") is False


def test_env_sets_and_restores_variables_even_when_the_block_raises(monkeypatch) -> None:
    monkeypatch.setenv("HOROVOD_STALL_CHECK_TIME_SECONDS", "60")
    monkeypatch.delenv("HOROVOD_CYCLE_TIME", raising=False)
    with pytest.raises(KeyError):
        with util.env(HOROVOD_STALL_CHECK_TIME_SECONDS=300, HOROVOD_CYCLE_TIME="0.5"):
            assert os.environ["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "300"
            assert os.environ["HOROVOD_CYCLE_TIME"] == "0.5"
            raise KeyError("inside")
    assert os.environ["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "60"
    assert "HOROVOD_CYCLE_TIME" not in os.environ


def test_split_list_keeps_order_and_balances_the_parts() -> None:
    assert util.split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert util.split_list([1, 2], 4) == [[1], [2], [], []]
    with pytest.raises(ValueError, match="at least one part, got 0"):
        util.split_list([1], 0)


def test_versions_compare_as_numbers() -> None:
    assert util.is_version_greater_equal_than("2.13.0+cpu", "2.13")
    assert util.is_version_greater_equal_than("2.10.1", "2.9.9")
    assert not util.is_version_greater_equal_than("1.13.1", "2.0.0")
    with pytest.raises(ValueError, match="not a version number: 'nightly'"):
        util.is_version_greater_equal_than("nightly", "1.0")


def test_rank_and_size_come_from_the_first_launcher_that_set_them() -> None:
    assert launcher_rank_and_size({}) is None
    assert launcher_rank_and_size({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                                   "PMI_RANK": "0", "PMI_SIZE": "1"}) == (2, 4)
    assert launcher_rank_and_size({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "PMI_RANK": "0", "PMI_SIZE": "1"}) \
        == (1, 2)
    with pytest.raises(RuntimeError, match="only one of PMI_RANK and PMI_SIZE is set"):
        launcher_rank_and_size({"PMI_RANK": "3"})


def test_get_env_rank_and_size_reads_this_process(monkeypatch) -> None:
    for rank_name, size_name in (("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                 ("PMI_RANK", "PMI_SIZE")):
        monkeypatch.delenv(rank_name, raising=False)
        monkeypatch.delenv(size_name, raising=False)
    assert get_env_rank_and_size() is None
    monkeypatch.setenv("HOROVOD_RANK", "3")
    monkeypatch.setenv("HOROVOD_SIZE", "5")
    assert get_env_rank_and_size() == (3, 5)


def test_in_thread_runs_the_target_and_silent_swallows_what_it_raises() -> None:
    import threading

    got: list[int] = []
    in_thread(got.append, (7,)).join(timeout=30)
    assert got == [7]
    failures: list[BaseException] = []
    previous, threading.excepthook = threading.excepthook, lambda hook_args: failures.append(hook_args.exc_value)
    try:
        in_thread(lambda: 1 / 0, silent=True).join(timeout=30)
        assert failures == []
        in_thread(lambda: 1 / 0).join(timeout=30)
        assert [type(f) for f in failures] == [ZeroDivisionError]
    finally:
        threading.excepthook = previous
    with pytest.raises(ValueError, match="args must be a tuple, not list"):
        in_thread(got.append, [1])


def test_on_event_calls_once_the_event_is_set_and_not_after_stop() -> None:
    import threading

    event, stop, got = threading.Event(), threading.Event(), []
    waiting = on_event(event, got.append, ("called",), stop=stop, check_stop_interval_s=0.01)
    assert waiting.is_alive() and got == []
    event.set()
    waiting.join(timeout=30)
    assert got == ["called"]
    stopped = on_event(threading.Event(), got.append, ("never",), stop=stop, check_stop_interval_s=0.01)
    stop.set()
    stopped.join(timeout=30)
    assert not stopped.is_alive() and got == ["called"]


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_mpi_ops_is_the_packages_ops_with_horovods_basics(framework: str, one_rank: None) -> None:
    import importlib

    package = importlib.import_module(f"collective.{framework}")
    mpi_ops = importlib.import_module(f"collective.{framework}.mpi_ops")
    assert package.mpi_ops is mpi_ops
    for name in ("allreduce", "allgather", "broadcast", "Sum", "Average", "ProcessSet", "init", "rank"):
        assert getattr(mpi_ops, name) is getattr(package, name), name
    assert mpi_ops._basics._get_process_set_ids_and_ranks() == {0: list(range(collective.size()))}
