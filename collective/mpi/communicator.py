"""Synchronous collectives over MPI, with the native communicator's methods and signatures.

Each call first checks that every rank asked for the same (one Allreduce of a 32-byte digest), so a
disagreement is a MismatchError naming the tensor on every rank; then the data moves with one
buffer-based call. What a repeated call needs (its descriptor, digest, MPI op) is worked out once and
kept, as training repeats the same calls.
"""

from __future__ import annotations

import threading
from typing import Any, NoReturn, Sequence

import numpy as np

from collective._native import CollectiveKind, DType, ReduceOp
from collective.bootstrap.base import FixedMembership
from collective.errors import MismatchError
from collective.mpi import transfers
from collective.mpi.buffers import tensor_array
from collective.mpi.calls import Call, agreement_words, calls_from_records, check_agreement, rows_record, \
    validate_call
from collective.reduce_ops import scale_factors

_PLAN_CAPACITY = 4096  # distinct calls remembered; past it the memory starts over


class MpiCommunicator(FixedMembership):
    """Wraps a duplicate of ``comm`` (so its messages never meet the user's own MPI traffic), and holds
    a second one for the engine: duplicating is collective, so it happens here, in init, on every rank,
    and starting the engine later needs no communication."""

    def __init__(self, comm: Any, host_keys: Sequence[str]) -> None:
        from mpi4py import MPI

        self._comm = comm.Dup()
        self._engine_comm = comm.Dup()
        self._host_keys = list(host_keys)
        self._rank, self._size = int(self._comm.Get_rank()), int(self._comm.Get_size())
        self._calls = 0
        self._lock = threading.Lock()  # callers from several Python threads take turns, as natively
        self._closed = False
        self._min, self._in_place = MPI.MIN, MPI.IN_PLACE
        self._verdict = np.empty(4, np.int64)  # scratch for the agreement Allreduce (used under the lock)
        # Call fields -> (Call, its agreement words as bytes and as an array, MPI op of a plain allreduce).
        self._plans: dict[tuple, tuple[Call, np.ndarray, bytes, Any]] = {}

    @property
    def engine_comm(self) -> Any:
        """The communicator reserved for MpiEngine."""
        return self._engine_comm

    def uses_shm(self, peer: int) -> bool:
        """Whether MPI can reach ``peer`` through shared memory: both in one node's shared domain."""
        return self._host_keys[peer] == self._host_keys[self.rank]

    def _plan(self, fields: tuple) -> tuple[Call, np.ndarray, bytes, Any]:
        """The call with these fields (validated) and what checking and running it needs, cached."""
        plan = self._plans.get(fields)
        if plan is None:
            kind, name, code, dims, op, root, prescale, postscale, splits = fields
            call = Call(kind, name, code, dims, op, int(root), float(prescale), float(postscale), splits)
            call = validate_call(call, self._size)
            words = agreement_words(call)
            plain = transfers.plain_op(call) if kind == CollectiveKind.ALLREDUCE else None
            plan = (call, words, words.tobytes(), plain)
            if len(self._plans) >= _PLAN_CAPACITY:
                self._plans.clear()
            self._plans[fields] = plan
        return plan

    def _agree(self, call: Call, words: np.ndarray, expected: bytes) -> None:
        """Returns once every rank has made the same call (one Allreduce MIN of the digest words, the
        same for every kind, so even a kind mismatch meets the same MPI call); raises MismatchError on
        every rank otherwise."""
        number = self._calls
        self._calls += 1
        self._comm.Allreduce(words, self._verdict, op=self._min)
        if self._verdict.tobytes() != expected:
            self._explain_mismatch(call, number)

    def _explain_mismatch(self, call: Call, number: int) -> NoReturn:
        calls = self._comm.allgather(call)  # only to word the error: every rank saw the digests differ
        check_agreement(calls, range(self._size), number, call)
        raise MismatchError(f"ranks disagree on {call.kind_name} '{call.name}' (call #{number}): {calls}")

    def _gather_rows(self, call: Call) -> list[Call]:
        """Every rank's call for allgather/alltoall, whose first dimension (and splits) may differ."""
        records = np.empty((self._size, 1 + self._size), np.int64)
        self._comm.Allgather(rows_record(call, self._size), records)
        return calls_from_records(call, records)

    def run(self, kind: CollectiveKind, name: str, tensor: Any, dtype: DType | None = None,
            shape: Sequence[int] | None = None, op: ReduceOp = ReduceOp.SUM, root: int = -1, prescale: float = 1.0,
            postscale: float = 1.0, splits: Sequence[int] = ()) -> Any:
        """One collective now: takes and returns what the native communicator's ``run`` does."""
        prescale, postscale = scale_factors(prescale, postscale)
        data, code, dims = tensor_array(tensor, dtype, shape) if tensor is not None else (None, -1, ())
        with self._lock:
            call, words, expected, plain = self._plan((kind, name, code, dims, op, root, prescale, postscale,
                                                       tuple(splits)))
            self._agree(call, words, expected)
            return self._move(call, data, plain)

    def _move(self, call: Call, data: Any, plain: Any) -> Any:
        """The data movement of a call every rank agreed on."""
        kind = call.kind
        if kind == CollectiveKind.ALLREDUCE:
            if plain is None:
                transfers.allreduce(self._comm, data, call)
            elif data.size:
                self._comm.Allreduce(self._in_place, data, op=plain)
            return None
        if kind == CollectiveKind.BROADCAST:
            transfers.broadcast(self._comm, data, call.root)
            return None
        if kind == CollectiveKind.REDUCESCATTER:
            return transfers.reducescatter(self._comm, data, call)
        if kind == CollectiveKind.BARRIER:
            return None  # the agreement Allreduce is itself the barrier: no rank leaves it before all entered
        calls = self._gather_rows(call)
        if kind == CollectiveKind.ALLGATHER:
            return transfers.allgather(self._comm, data, calls)
        return transfers.alltoall(self._comm, data, calls, self._rank)

    def global_ranks_of(self, comm: Any) -> tuple[int, ...]:
        """The ranks (in this communicator) of ``comm``'s members, in ``comm``'s rank order: what a
        ``ProcessSet(mpi_comm)`` names; none for ``COMM_NULL``. Raises ValueError for a communicator
        reaching outside the job."""
        from mpi4py import MPI

        if comm == MPI.COMM_NULL:  # MPI's "not in any": Split(MPI.UNDEFINED) on a rank left out
            return ()
        theirs, ours = comm.Get_group(), self._comm.Get_group()
        try:
            ranks = MPI.Group.Translate_ranks(theirs, list(range(theirs.Get_size())), ours)
        finally:
            theirs.Free()
            ours.Free()
        if any(r == MPI.UNDEFINED for r in ranks):
            raise ValueError(f"rank {self._rank}: the communicator of ProcessSet(mpi_comm) has processes outside "
                             "this job")
        return tuple(int(r) for r in ranks)

    def split(self, sets: Sequence[Sequence[int]]) -> "MpiCommunicator | None":
        """The communicator of the set (of disjoint ``sets``, each in set-rank order) this rank is in, or
        None on a rank in none of them. Collective over every rank of this communicator: one MPI Split,
        whatever the number of sets, as adding process sets is collective over the job."""
        from mpi4py import MPI

        mine = next((members for members in sets if self._rank in members), None)
        color = MPI.UNDEFINED if mine is None else next(i for i, members in enumerate(sets) if members is mine)
        with self._lock:
            part = self._comm.Split(color, 0 if mine is None else list(mine).index(self._rank))
        if mine is None:
            return None
        try:
            return MpiCommunicator(part, [self._host_keys[r] for r in mine])  # duplicates what it is given
        finally:
            part.Free()

    def shutdown(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._comm.Free()
                self._engine_comm.Free()
