"""NCCL without a GPU: loading (missing library, wrong library, the real one if installed), the
unique-id exchange over the job's communicator on real processes, and the routing decision."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest

import collective._native as native
from collective.errors import InvalidArgumentError
from collective.nccl import GpuRecord, Route, decide_cuda_route, library_candidates, load_library, route_tensor
from collective.nccl.unique_id import exchange_unique_id
from jobs import run_job

HERE = Path(__file__).resolve().parent


def test_missing_library_says_what_was_tried_and_how_to_install(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere" / "libnccl.so.2")
    with pytest.raises(InvalidArgumentError) as info:
        native.NcclLibrary([missing, "libnccl-not-a-real-name.so.2"], [])
    message = str(info.value)
    assert "libnccl could not be loaded" in message and missing in message
    assert "libnccl-not-a-real-name.so.2" in message
    assert "pip install nvidia-nccl-cu13" in message and "COLLECTIVE_NCCL_LIBRARY" in message


def test_a_library_without_nccl_symbols_is_named() -> None:
    libc = ctypes.util.find_library("c")
    assert libc is not None
    with pytest.raises(InvalidArgumentError, match=rf"libnccl at {libc} has no symbol ncclGetVersion"):
        native.NcclLibrary([libc], [])


def test_configured_path_first_then_wheels_then_system(tmp_path: Path) -> None:
    wheel = tmp_path / "site" / "nvidia"
    (wheel / "nccl" / "lib").mkdir(parents=True)
    (wheel / "nccl" / "lib" / "libnccl.so.2").touch()
    (wheel / "cu13" / "lib").mkdir(parents=True)
    (wheel / "cu13" / "lib" / "libcudart.so.13").touch()
    nccl, cudart = library_candidates("/opt/my/libnccl.so.2", [str(wheel)])
    assert nccl == ["/opt/my/libnccl.so.2", str(wheel / "nccl" / "lib" / "libnccl.so.2"), "libnccl.so.2"]
    assert cudart[0] == str(wheel / "cu13" / "lib" / "libcudart.so.13") and cudart[-1] == "libcudart.so"
    assert library_candidates(None, [])[0] == ["libnccl.so.2"]


def test_load_library_fails_clearly_and_remembers_it(tmp_path: Path) -> None:
    bogus = str(tmp_path / "libnccl.so.2")
    for _ in range(2):  # the second call answers from the remembered failure
        with pytest.raises(InvalidArgumentError, match="libnccl could not be loaded"):
            load_library(bogus)


def test_version_of_an_installed_nccl() -> None:
    try:
        library = load_library()
    except InvalidArgumentError:
        pytest.skip("libnccl is not installed here (pip install nvidia-nccl-cu13 to run this)")
    assert library.version >= 20000 and Path(library.path).name.startswith("libnccl")
    assert len(library.unique_id()) == 128  # ncclGetUniqueId needs no GPU


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["direct", "engine"])
@pytest.mark.parametrize("num_proc", [2, 3])
def test_unique_id_travels_from_rank_zero(num_proc: int, mode: str) -> None:
    job = run_job(str(HERE / "unique_id_worker.py"), num_proc, mode, timeout_s=90)
    assert job.returncode == 0, job.output[-3000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert record["id"] == record["want"] and len(bytes.fromhex(record["id"])) == 128
        assert record["again"] == bytes(range(128)).hex()


def test_unique_id_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="128 bytes, got 5"):
        exchange_unique_id(lambda: b"short", rank=0)


# ---- the routing decision --------------------------------------------------------------------

OK = None
MISSING = "libnccl could not be loaded; tried: libnccl.so.2"


@pytest.mark.parametrize("records, route", [
    ([GpuRecord("h1", "GPU-a", OK)], Route.NCCL),
    ([GpuRecord("h1", "GPU-a", OK), GpuRecord("h1", "GPU-b", OK)], Route.NCCL),
    ([GpuRecord("h1", "GPU-a", OK), GpuRecord("h2", "GPU-a", OK)], Route.NCCL),          # same id, other host
    ([GpuRecord("h1", "GPU-a", OK), GpuRecord("h1", "GPU-a", OK)], Route.HOST_STAGING),  # one GPU, two ranks
    ([GpuRecord("h1", "GPU-a", MISSING), GpuRecord("h1", "GPU-a", MISSING)], Route.HOST_STAGING),
    ([GpuRecord("h1", "GPU-a", OK), GpuRecord("h1", "GPU-b", MISSING)], Route.ERROR),
    ([GpuRecord("h1", "GPU-a", MISSING)], Route.ERROR),
])
def test_cuda_route_is_decided_from_every_ranks_record(records: list[GpuRecord], route: Route) -> None:
    assert decide_cuda_route(records).route == route


def test_decisions_explain_themselves() -> None:
    staging = decide_cuda_route([GpuRecord("h", "GPU-x", OK), GpuRecord("h", "GPU-y", OK), GpuRecord("h", "GPU-x", OK)])
    assert "ranks 0, 2 on GPU GPU-x" in staging.reason and "host memory" in staging.reason
    error = decide_cuda_route([GpuRecord("h", "GPU-a", OK), GpuRecord("h", "GPU-b", MISSING)])
    assert "rank(s) [1]" in error.reason and "libnccl could not be loaded" in error.reason


def test_a_tensor_routes_by_its_device() -> None:
    nccl = decide_cuda_route([GpuRecord("h", "GPU-a", OK)])
    assert route_tensor("cpu", nccl).route == Route.ENGINE
    assert route_tensor("cpu", None).route == Route.ENGINE
    assert route_tensor("cuda", nccl).route == Route.NCCL
    missing = route_tensor("cuda", None)
    assert missing.route == Route.ERROR and "CUDA is not available" in missing.reason
    other = route_tensor("mps", nccl)
    assert other.route == Route.ERROR and "mps" in other.reason


def test_integer_scaling_on_the_device_path_truncates_like_the_native_kernels() -> None:
    import numpy as np
    import torch

    from collective.torch.routes.cuda_ops import _scale

    values = np.array([-7, -5, -3, -1, 0, 1, 3, 5, 7, 100, -100, 127, -128], np.int8)
    for factor in (0.5, 1.5, 2.5, -0.5, 3.0):
        on_native = values.copy()
        native.scale_array(on_native.ctypes.data, on_native.size, 1, factor)
        tensor = torch.from_numpy(values.copy())
        _scale(tensor, factor)
        assert tensor.tolist() == on_native.tolist(), factor
