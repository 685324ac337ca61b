"""The per-job decision for CUDA tensors, and the NCCL communicator when that decision is NCCL.

Made on the first CUDA collective (every rank makes it then, as collectives run in the same order
on every rank): ranks swap (host, GPU id, whether libnccl loaded), all decide the same route
(collective/nccl/routing.py), and for NCCL the unique id goes from rank 0 over the job's
communicator before every rank creates its NCCL communicator.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

import collective
from collective import _native
from collective.config import default_host_key
from collective.errors import InvalidArgumentError
from collective.nccl import GpuRecord, Route, RouteDecision, decide_cuda_route, exchange_unique_id, load_library
from collective.runtime import current

logger = logging.getLogger(__name__)
_RECORD_BYTES = 2048


@dataclass
class CudaContext:
    runtime: Any                      # the runtime this was made for; a new init() makes a new one
    device: torch.device
    decision: RouteDecision
    library: Any = None               # _native.NcclLibrary
    comm: Any = None                  # _native.NcclComm


_lock = threading.Lock()
_context: CudaContext | None = None


def gpu_id(device: torch.device) -> str:
    """The GPU's UUID, which tells two ranks on one physical GPU apart from ranks on two."""
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        return str(uuid)
    return f"pci:{getattr(props, 'pci_domain_id', 0)}:{getattr(props, 'pci_bus_id', 0)}:" \
           f"{getattr(props, 'pci_device_id', 0)}"


def _allgather_records(mine: GpuRecord) -> list[GpuRecord]:
    raw = json.dumps(asdict(mine)).encode()[:_RECORD_BYTES]
    row = np.zeros((1, _RECORD_BYTES), np.uint8)
    row[0, :len(raw)] = np.frombuffer(raw, np.uint8)
    rows = collective.allgather(row, name="nccl.gpu_records")
    return [GpuRecord(**json.loads(bytes(r).rstrip(b"\0"))) for r in rows]


def cuda_context(device: torch.device) -> CudaContext:
    """The context for this job, made on first use; raises if ``device`` is not the one NCCL uses."""
    global _context
    runtime = current()
    with _lock:
        context = _context
        if context is None or context.runtime is not runtime:
            if context is not None and context.comm is not None:
                context.comm.destroy()
            context = _context = _make_context(runtime, device)
    if context.decision.route == Route.NCCL and device != context.device:
        raise InvalidArgumentError(f"a tensor is on {device} but this rank's NCCL communicator uses {context.device}: "
                                   "one GPU per rank (set torch.cuda.set_device(local_rank) first)")
    return context


def _make_context(runtime: Any, device: torch.device) -> CudaContext:
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    library, error = None, None
    try:
        library = load_library(runtime.config.nccl_library)
    except Exception as e:  # noqa: BLE001 - becomes this rank's record; every rank then decides alike
        error = str(e)
    host = runtime.config.host_key or default_host_key()
    records = _allgather_records(GpuRecord(host, gpu_id(device), error))
    decision = decide_cuda_route(records)
    context = CudaContext(runtime, device, decision, library)
    if decision.route == Route.HOST_STAGING:
        logger.warning("rank %d: %s", collective.rank(), decision.reason)
    elif decision.route == Route.NCCL:
        rank, size = collective.rank(), collective.size()
        unique_id = exchange_unique_id(library.unique_id, rank)
        with torch.cuda.device(device):
            context.comm = _native.NcclComm(library, unique_id, size, rank)
        logger.info("rank %d: NCCL %s from %s on %s", rank, library.version, library.path, device)
    return context


def release_cuda_context() -> None:
    """Destroys the NCCL communicator, if any (collective.torch.shutdown calls this)."""
    global _context
    with _lock:
        context, _context = _context, None
    if context is not None and context.comm is not None:
        context.comm.destroy()
