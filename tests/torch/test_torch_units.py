"""Single-process checks of collective.torch's pieces that need no peers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import collective.torch as hvd
from collective.torch.optimizer import _gradient_groups, _parameter_names
from collective.torch.tensors import check_device, check_tensor, from_flat


@pytest.mark.parametrize("compression, wire",
                         [(hvd.Compression.fp16, torch.float16), (hvd.Compression.bf16, torch.bfloat16)])
def test_compression_round_trip(compression, wire: torch.dtype) -> None:
    tensor = torch.linspace(-2, 2, 9, dtype=torch.float64)
    sent, ctx = compression.compress(tensor)
    assert sent.dtype == wire
    back = compression.decompress(sent, ctx)
    assert back.dtype == torch.float64 and torch.allclose(back, tensor, atol=1e-2)
    ints = torch.arange(4)
    sent, ctx = compression.compress(ints)
    assert sent is ints and compression.decompress(sent, ctx) is ints


def test_no_compression_is_identity() -> None:
    tensor = torch.ones(3)
    sent, ctx = hvd.Compression.none.compress(tensor)
    assert sent is tensor and hvd.Compression.none.decompress(sent, ctx) is tensor


def test_cuda_devices_pass_the_check_and_other_devices_are_named() -> None:
    check_device(torch.device("cuda", 0), "grad.w")  # routed to NCCL or host staging (tests/nccl)
    with pytest.raises(hvd.InvalidArgumentError, match=r"'grad.w' is on meta; only CPU and CUDA"):
        check_device(torch.device("meta"), "grad.w")


@pytest.mark.parametrize("dtype", [torch.uint32, torch.bool, torch.complex64, torch.float8_e4m3fn])  # int16 is supported
def test_unsupported_dtype_names_tensor_and_dtype(dtype: torch.dtype) -> None:
    with pytest.raises(hvd.InvalidArgumentError, match=rf"'odd'.*{dtype}"):
        check_tensor(torch.zeros(2, dtype=dtype), "odd")


def test_sparse_and_non_tensors_are_rejected() -> None:
    with pytest.raises(hvd.InvalidArgumentError, match="dense"):
        check_tensor(torch.eye(2).to_sparse(), "s")
    with pytest.raises(hvd.InvalidArgumentError, match="torch.Tensor"):
        check_tensor(np.ones(2), "n")


def test_results_keep_bfloat16_bits() -> None:
    values = torch.tensor([[1.5, -2.25], [3.0, 0.125]], dtype=torch.bfloat16)
    flat = values.view(torch.int16).numpy().view(np.uint8).reshape(-1)
    assert torch.equal(from_flat(flat, [2, 2], torch.bfloat16), values)


def test_ops_before_init_say_so() -> None:
    assert not hvd.is_initialized()
    with pytest.raises(hvd.NotInitializedError):
        hvd.allreduce(torch.ones(2))


def test_gradient_groups() -> None:
    params = [torch.zeros(1, requires_grad=True) for _ in range(5)]
    assert [len(g) for g in _gradient_groups(params, 2)] == [3, 2]
    assert [len(g) for g in _gradient_groups(params, 9)] == [1] * 5
    assert _gradient_groups(params, 0) == [] and _gradient_groups(params, None) == []
    explicit = _gradient_groups(params, [[params[0], params[4]], []])
    assert explicit == [(params[0], params[4])]
    with pytest.raises(ValueError):
        _gradient_groups(params, [[torch.zeros(1)]])


def test_parameter_names_are_checked() -> None:
    model = torch.nn.Linear(2, 2)
    groups = [{"params": list(model.parameters())}]
    assert set(_parameter_names(groups, model.named_parameters()).values()) == {"weight", "bias"}
    assert set(_parameter_names(groups, None).values()) == {"gradient.0.0", "gradient.0.1"}
    with pytest.raises(ValueError, match="tuples"):
        _parameter_names(groups, list(model.parameters()))
    with pytest.raises(ValueError, match="duplicates: weight"):
        _parameter_names(groups, [("weight", model.weight), ("weight", model.bias)])
    with pytest.raises(ValueError, match="not named"):
        _parameter_names(groups, [("weight", model.weight)])


def test_predivide_needs_average() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(optimizer, op=hvd.Sum, gradient_predivide_factor=2.0)


def test_errors_are_the_classes_horovod_scripts_catch() -> None:
    # Horovod's elastic loop catches HorovodInternalError to restore and retry after a peer fails.
    assert isinstance(hvd.PeerFailureError("rank 1 left"), hvd.HorovodInternalError)
    assert issubclass(hvd.CollectiveTimeoutError, hvd.HorovodInternalError)
    # Horovod raises ValueError for bad arguments and disagreeing ranks; ours stay RuntimeErrors too.
    for error in (hvd.InvalidArgumentError, hvd.MismatchError):
        assert issubclass(error, ValueError) and issubclass(error, RuntimeError)
        assert issubclass(error, hvd.HorovodInternalError)
    assert not issubclass(hvd.PeerFailureError, ValueError)


def test_build_queries_are_horovods_names_and_types() -> None:
    import collective
    for name in ("mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "cuda_built", "rocm_built", "ccl_built",
                 "ddl_built"):
        assert getattr(hvd, name) is getattr(collective, name) and name in hvd.__all__
        assert type(getattr(hvd, name)()) is bool, name
    assert type(hvd.nccl_built()) is int  # NCCL's version code, 0 when libnccl does not load


def test_timeline_controls_exist_in_every_api() -> None:
    """Horovod's start_timeline/stop_timeline, in each module a Horovod script imports."""
    import collective
    import collective.keras
    import collective.tensorflow
    import collective.torch
    from collective.timeline import start_timeline, stop_timeline

    for module in (collective, collective.torch, collective.tensorflow, collective.keras):
        assert (module.start_timeline, module.stop_timeline) == (start_timeline, stop_timeline), module.__name__
        assert {"start_timeline", "stop_timeline"} <= set(module.__all__), module.__name__


def test_timeline_before_init_says_so() -> None:
    import collective.torch as hvd

    with pytest.raises(hvd.NotInitializedError):
        hvd.start_timeline("/tmp/never.json")
