"""Synchronous collectives over MPI, with the native communicator's methods and signatures.

Each call first swaps its descriptor with every rank (a small pickled allgather), so a disagreement
is a MismatchError naming the tensor on every rank; then the data moves with one buffer-based call.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from collective import engine as kinds
from collective.mpi import transfers
from collective.mpi.buffers import tensor_array
from collective.mpi.calls import Call, agreement_record, calls_from_records, check_agreement, validate_call


class MpiCommunicator:
    """Wraps a duplicate of ``comm`` (so its messages never meet the user's own MPI traffic), and holds
    a second one for the engine: duplicating is collective, so it happens here, in init, on every rank,
    and starting the engine later needs no communication."""

    def __init__(self, comm: Any, host_keys: Sequence[str]) -> None:
        self._comm = comm.Dup()
        self._engine_comm = comm.Dup()
        self._host_keys = list(host_keys)
        self._calls = 0
        self._lock = threading.Lock()  # callers from several Python threads take turns, as natively
        self._closed = False

    @property
    def rank(self) -> int:
        return int(self._comm.Get_rank())

    @property
    def size(self) -> int:
        return int(self._comm.Get_size())

    @property
    def engine_comm(self) -> Any:
        """The communicator reserved for MpiEngine."""
        return self._engine_comm

    def uses_shm(self, peer: int) -> bool:
        """Whether MPI can reach ``peer`` through shared memory: both in one node's shared domain."""
        return self._host_keys[peer] == self._host_keys[self.rank]

    def _agree(self, call: Call) -> list[Call]:
        """Every rank's call; one fixed-size Allgather when they agree (the common case), and a full
        exchange of the calls only to word the MismatchError when they do not."""
        validate_call(call, self.size)
        number = self._calls
        self._calls += 1
        mine = agreement_record(call, self.size)
        records = np.empty((self.size, mine.size), np.int64)
        self._comm.Allgather(mine, records)
        if records[:, :2].tobytes() != mine[:2].tobytes() * self.size:
            calls = self._comm.allgather(call)
            check_agreement(calls, range(self.size), number, call)
        return calls_from_records(call, records)

    def allreduce(self, tensor: Any, op: int, prescale: float, postscale: float, name: str, dtype: int = -1,
                  shape: Sequence[int] | None = None) -> None:
        data, code, dims = tensor_array(tensor, dtype, shape)
        call = Call(kinds.ALLREDUCE, name, code, dims, int(op), -1, float(prescale), float(postscale))
        with self._lock:
            self._agree(call)
            transfers.allreduce(self._comm, data, call)

    def allgather(self, tensor: Any, name: str, dtype: int = -1,
                  shape: Sequence[int] | None = None) -> tuple[np.ndarray, list[int]]:
        data, code, dims = tensor_array(tensor, dtype, shape)
        with self._lock:
            calls = self._agree(Call(kinds.ALLGATHER, name, code, dims))
            return transfers.allgather(self._comm, data, calls)

    def broadcast(self, tensor: Any, root: int, name: str, dtype: int = -1, shape: Sequence[int] | None = None) -> None:
        data, code, dims = tensor_array(tensor, dtype, shape)
        with self._lock:
            self._agree(Call(kinds.BROADCAST, name, code, dims, root=int(root)))
            transfers.broadcast(self._comm, data, int(root))

    def alltoall(self, tensor: Any, splits: Sequence[int], name: str, dtype: int = -1,
                 shape: Sequence[int] | None = None) -> tuple[np.ndarray, list[int], list[int]]:
        data, code, dims = tensor_array(tensor, dtype, shape)
        split_rows = tuple(int(s) for s in splits)
        if not split_rows and dims:
            if dims[0] % self.size:
                from collective.errors import InvalidArgumentError

                raise InvalidArgumentError(f"alltoall '{name}': first dimension {dims[0]} does not divide evenly "
                                           f"by {self.size} ranks; pass splits=")
            split_rows = (dims[0] // self.size,) * self.size
        with self._lock:
            calls = self._agree(Call(kinds.ALLTOALL, name, code, dims, splits=split_rows))
            return transfers.alltoall(self._comm, data, calls, self.rank)

    def reducescatter(self, tensor: Any, op: int, prescale: float, postscale: float, name: str, dtype: int = -1,
                      shape: Sequence[int] | None = None) -> tuple[np.ndarray, list[int]]:
        data, code, dims = tensor_array(tensor, dtype, shape)
        call = Call(kinds.REDUCESCATTER, name, code, dims, int(op), -1, float(prescale), float(postscale))
        with self._lock:
            self._agree(call)
            return transfers.reducescatter(self._comm, data, call)

    def barrier(self) -> None:
        with self._lock:
            self._agree(Call(kinds.BARRIER, "barrier"))
            self._comm.Barrier()

    def shutdown(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._comm.Free()
                self._engine_comm.Free()
