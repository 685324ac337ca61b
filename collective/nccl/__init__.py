"""NCCL for CUDA tensors: the library loaded at run time, the unique id over the bootstrap, and the
routing decision for a CUDA tensor (NCCL, host staging when ranks share a GPU, or a clear error).

Nothing here needs a GPU or libnccl to import; only using NCCL does.
"""

from collective.nccl.library import library_candidates, load_library
from collective.nccl.routing import GpuRecord, Route, RouteDecision, decide_cuda_route, route_tensor
from collective.nccl.unique_id import UNIQUE_ID_BYTES, exchange_unique_id

__all__ = ["GpuRecord", "Route", "RouteDecision", "UNIQUE_ID_BYTES", "decide_cuda_route", "exchange_unique_id",
           "library_candidates", "load_library", "route_tensor"]
