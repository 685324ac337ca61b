"""Where a tensor's collective runs: a pure decision, so it is tested as logic without a GPU.

- CPU tensor: the background engine (native ring or MPI).
- CUDA tensor, every rank on its own GPU and every rank has NCCL: NCCL on the current stream.
- CUDA tensor, two ranks on one host on the same GPU: NCCL cannot run there, so the tensor is staged
  through host memory and goes through the engine.
- Otherwise: an error saying what is missing, on every rank alike (every rank decides from the same
  records, so no rank takes NCCL while another waits in the engine).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence


class Route(enum.Enum):
    ENGINE = "engine"
    NCCL = "nccl"
    HOST_STAGING = "host staging"
    ERROR = "error"


@dataclass(frozen=True)
class RouteDecision:
    route: Route
    reason: str = ""


@dataclass(frozen=True)
class GpuRecord:
    """What one rank tells the others before the first CUDA collective."""

    host_key: str
    gpu_id: str              # the device UUID (or PCI bus id)
    nccl_error: str | None   # why libnccl is unusable on this rank; None when it loaded


def shared_gpus(records: Sequence[GpuRecord]) -> dict[tuple[str, str], list[int]]:
    """(host, GPU) -> ranks, for every GPU that more than one rank uses."""
    users: dict[tuple[str, str], list[int]] = {}
    for rank, record in enumerate(records):
        users.setdefault((record.host_key, record.gpu_id), []).append(rank)
    return {gpu: ranks for gpu, ranks in users.items() if len(ranks) > 1}


def decide_cuda_route(records: Sequence[GpuRecord]) -> RouteDecision:
    """The route for CUDA tensors, the same on every rank given every rank's record."""
    shared = shared_gpus(records)
    if shared:
        detail = "; ".join(f"ranks {', '.join(map(str, ranks))} on GPU {gpu}" for (_, gpu), ranks in shared.items())
        return RouteDecision(Route.HOST_STAGING, f"ranks share a GPU ({detail}), which NCCL cannot serve: "
                                                 "CUDA tensors are staged through host memory")
    lacking = [rank for rank, record in enumerate(records) if record.nccl_error is not None]
    if lacking:
        first = records[lacking[0]].nccl_error
        return RouteDecision(Route.ERROR, f"CUDA tensors need NCCL on every rank; rank(s) {lacking} cannot load it: "
                                          f"{first}")
    return RouteDecision(Route.NCCL)


def route_tensor(device_type: str, cuda_route: RouteDecision | None) -> RouteDecision:
    """The route for one tensor: ``cuda_route`` is decide_cuda_route's answer (None before any GPU
    check, e.g. when torch sees no GPU at all)."""
    if device_type == "cpu":
        return RouteDecision(Route.ENGINE)
    if device_type != "cuda":
        return RouteDecision(Route.ERROR, f"tensors on {device_type} are not supported; use CPU or CUDA tensors")
    if cuda_route is None:
        return RouteDecision(Route.ERROR, "a CUDA tensor was given but CUDA is not available in this process")
    return cuda_route
