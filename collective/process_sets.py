"""Horovod's process sets (rank process): a set of ranks that runs collectives among themselves.

A process set is a sub-job. Adding one is collective over the whole job: every rank takes part in one
allgather of each member's fresh listener address, then the members build a mesh of their own (and an
engine of their own once the job's engine runs). Negotiation, fusion, the response cache, join and the
stall inspector therefore work per set by construction, and two sets never share a mesh or an engine
thread, so sets used at the same time cannot deadlock each other.
"""

from __future__ import annotations

import json
import operator
import threading
from typing import Any, Sequence

import numpy as np

from collective import _native
from collective._native import CollectiveKind, DType
from collective.errors import InvalidArgumentError, MismatchError
from collective.runtime import (
    _Runtime,
    close_runtime,
    connect_mesh,
    current,
    is_initialized,
    mesh_record,
    start_engine,
)
from collective.topology import topology_from_host_keys
from collective.config import replace_unvalidated

# Adding and removing sets are collective: one at a time per process keeps the set ids in step.
_lock = threading.Lock()


class ProcessSet:
    """The ranks that run collectives together; pass it to ``init(process_sets=...)`` or
    ``add_process_set``, then as ``process_set=`` to any collective. Ranks are global ranks."""

    process_set_id: int | None = None
    ranks: list[int] | None = None
    mpi_comm: Any = None

    def __init__(self, ranks_or_comm: Sequence[int] | Any) -> None:
        if hasattr(ranks_or_comm, "Get_group"):  # an mpi4py communicator
            self.mpi_comm = ranks_or_comm
            return
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm "
                             f"object, got {ranks_or_comm!r}") from None
        if any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) for r in ranks):
            raise ValueError(f"ProcessSet ranks must be integers, got {ranks_or_comm!r}")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"ProcessSet ranks must be distinct, got {ranks_or_comm!r}")
        self.ranks = [int(r) for r in ranks]

    def size(self) -> int | None:
        """The number of ranks in the set, or None before it is added."""
        if self.process_set_id is None:
            return None
        return len(_registered_ranks(self))

    def rank(self) -> int | None:
        """This process's rank within the set (its index among the members), or None before it is added.
        Collectives still take global ranks (``root_rank``), as in Horovod."""
        if self.process_set_id is None:
            return None
        return runtime_for(self).topology.rank

    def included(self) -> bool | None:
        """Whether this process is in the set, or None before it is added."""
        if self.process_set_id is None:
            return None
        return current().topology.rank in _registered_ranks(self)

    def _invalidate(self) -> None:
        self.process_set_id = None

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


class _GlobalProcessSet(ProcessSet):
    """Every rank of the job; its ranks follow the running job."""

    def __init__(self) -> None:
        self.process_set_id = 0

    @property  # type: ignore[override]
    def ranks(self) -> list[int] | None:
        return list(range(current().topology.size)) if is_initialized() else []

    def _invalidate(self) -> None:  # never removed
        pass


global_process_set: ProcessSet = _GlobalProcessSet()


def _registered_ranks(process_set: ProcessSet) -> tuple[int, ...]:
    job = current()
    if is_global(process_set):
        return tuple(range(job.topology.size))
    ranks = job.process_set_ranks.get(process_set.process_set_id)  # type: ignore[arg-type]
    if ranks is None or list(ranks) != process_set.ranks:
        raise ValueError(f"{process_set} is not a process set of the running job: add it with add_process_set() "
                         "(or init(process_sets=...)) first; it may have been removed")
    return ranks


def ranks_of_set_id(process_set_id: int) -> tuple[int, ...]:
    """The global ranks of the running job's process set ``process_set_id`` (0: every rank), for the
    queries Horovod keys by id (TensorFlow's ``size_op``, ``process_set_included_op``)."""
    job = current()
    if process_set_id == 0:
        return tuple(range(job.topology.size))
    ranks = job.process_set_ranks.get(int(process_set_id))
    if ranks is None:
        raise ValueError(f"there is no process set with id {process_set_id} (ids: 0 and "
                         f"{sorted(job.process_set_ranks) or 'none added'})")
    return tuple(ranks)


def runtime_for(process_set: ProcessSet | None) -> _Runtime:
    """The runtime a collective on ``process_set`` runs on (the job's own for the global set)."""
    job = current()
    if is_global(process_set):
        return job
    if not isinstance(process_set, ProcessSet):
        raise InvalidArgumentError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise InvalidArgumentError(f"{process_set} has not been added: call add_process_set() on every rank first")
    ranks = _registered_ranks(process_set)
    runtime = job.process_sets[process_set.process_set_id]
    if runtime is None:
        raise InvalidArgumentError(
            f"rank {job.topology.rank} is not in process set {process_set.process_set_id} (ranks {list(ranks)}): "
            "only its members may run collectives on it")
    return runtime


def is_global(process_set: ProcessSet | None) -> bool:
    """Whether ``process_set`` stands for every rank of the job (None does too)."""
    return process_set is None or (isinstance(process_set, ProcessSet) and process_set.process_set_id == 0)


def rank_number(value: Any, what: str) -> int:
    """``value`` (a ``root_rank`` or other rank argument) as an int. Only integers are ranks: a float
    such as 1.5 is refused rather than truncated, and a string rather than parsed."""
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{what} must be an integer rank, got {value!r}") from None


def set_rank_of(runtime: _Runtime, global_rank: int, what: str) -> int:
    """The set rank of ``global_rank`` (a ``root_rank``), for a call on ``runtime``."""
    global_rank = rank_number(global_rank, what)
    if runtime.members is None:
        return global_rank
    try:
        return runtime.members.index(global_rank)
    except ValueError:
        raise InvalidArgumentError(f"{what} {global_rank} is not in the process set (ranks "
                                   f"{list(runtime.members)})") from None


def global_rank_of(runtime: _Runtime, set_rank: int) -> int:
    """The global rank of a rank the set's engine names (the last rank to join)."""
    return int(set_rank) if runtime.members is None or set_rank < 0 else runtime.members[set_rank]


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Adds a process set to the running job and returns it. Every rank must call it, with the same
    ranks and in the same order as the other ranks' adds and removes, as in Horovod.

    On the MPI backend a set may also be given by an mpi4py communicator, ``ProcessSet(comm)``: each rank
    passes one it belongs to, and ranks may pass different ones (``COMM_WORLD.Split``), each becoming a set
    of its members (who must all pass it). Set ranks follow the global ranks' order, as for a list."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    job = current()
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set} has been added already")
    from_comm = process_set.ranks is None
    ranks = _ranks_of_comm(job, process_set.mpi_comm) if from_comm else tuple(process_set.ranks)  # type: ignore
    size = job.topology.size
    if (ranks or not from_comm) and (not ranks or ranks[0] < 0 or ranks[-1] >= size):
        raise ValueError(f"process set ranks {list(ranks)} must be a non-empty list of ranks in [0, {size})")
    with _lock:
        if not from_comm:
            _refuse_existing(job, [ranks])
        set_id = _join_sets(job, ranks, from_comm)
    if set_id is None:  # MPI.COMM_NULL: this rank takes part in adding the others' sets, and is in none
        return process_set
    process_set.ranks = list(ranks)  # a communicator's members, as Horovod fills them in
    process_set.process_set_id = set_id
    return process_set


def _ranks_of_comm(job: _Runtime, comm: Any) -> tuple[int, ...]:
    if job.config.backend != "mpi":
        raise NotImplementedError(
            "ProcessSet(mpi_comm) needs the MPI backend (COLLECTIVE_BACKEND=mpi under mpiexec); on the ring "
            "backend give the set's ranks instead, e.g. ProcessSet(comm.allgather(hvd.rank()))")
    return tuple(sorted(job.comm.global_ranks_of(comm)))


def _refuse_existing(job: _Runtime, sets: Sequence[tuple[int, ...]]) -> None:
    for ranks in sets:
        if ranks in job.process_set_ranks.values() or ranks == tuple(range(job.topology.size)):
            raise ValueError(f"a process set with ranks {list(ranks)} exists already")


def _join_sets(job: _Runtime, ranks: tuple[int, ...], from_comm: bool) -> int | None:
    """The one exchange over the job, then the members' own mesh (ring) or communicator (MPI). Registers
    every set the exchange names (one, or one per distinct communicator) and returns this rank's set id
    (None for a rank that passed no communicator's members)."""
    me = job.topology.rank
    on_mpi = job.config.backend == "mpi"
    first_id = max(job.process_set_ranks, default=0) + 1
    listener = _native.listen(job.host) if not on_mpi and me in ranks else None
    registered: list[int] = []
    try:
        record: dict[str, Any] = {"ranks": list(ranks), "comm": from_comm, "host_key": job.host_key}
        if listener is not None:
            record["peer"] = mesh_record(job.config, job.host, listener.port, job.host_key)
        raw = np.frombuffer(json.dumps(record).encode(), dtype=np.uint8).copy()
        flat, _shape = job.collectives.run(CollectiveKind.ALLGATHER, f"process_set.add.{first_id}", raw, DType.uint8)
        records = _split_records(job, bytes(flat))
        sets = _agreed_sets(records, me, ranks, first_id)
        if from_comm:
            _refuse_existing(job, sets)
        for set_id, members in enumerate(sets, start=first_id):
            job.process_set_ranks[set_id] = members
            job.process_sets[set_id] = None
            registered.append(set_id)
        runtime = _connect(job, sets, records, listener)
        mine = next((set_id for set_id, members in enumerate(sets, start=first_id) if members == ranks), None)
        if mine is not None:
            job.process_sets[mine] = runtime
        return mine
    except BaseException:
        for set_id in registered:
            del job.process_set_ranks[set_id]
            del job.process_sets[set_id]
        raise
    finally:
        if listener is not None:
            listener.close()


def _agreed_sets(records: list[dict[str, Any]], me: int, ranks: tuple[int, ...], set_id: int) -> list[tuple[int, ...]]:
    """The sets every rank's record names, once they agree: the same ranks everywhere for a list, and for
    communicators, the same members on every member of each. Raises MismatchError on every rank otherwise."""
    kinds = {r: "a communicator" if rec["comm"] else "ranks" for r, rec in enumerate(records)}
    if len(set(kinds.values())) > 1:
        raise MismatchError("add_process_set: ranks disagree on how the set is given: "
                            + ", ".join(f"rank {r} gave {kind}" for r, kind in kinds.items()))
    if not records[me]["comm"]:
        disagree = {r: rec["ranks"] for r, rec in enumerate(records) if rec["ranks"] != list(ranks)}
        if disagree:
            raise MismatchError(f"add_process_set: rank {me} added ranks {list(ranks)} as process set {set_id}, but "
                                + ", ".join(f"rank {r} added {other}" for r, other in disagree.items()))
        return [ranks]
    sets: list[tuple[int, ...]] = []
    for r, rec in enumerate(records):
        members = tuple(rec["ranks"])
        if not members:
            continue
        strangers = {m: records[m]["ranks"] for m in members if records[m]["ranks"] != list(members)}
        if strangers:
            raise MismatchError(
                f"add_process_set: the communicator rank {r} passed has ranks {list(members)}, but "
                + ", ".join(f"rank {m} passed one of ranks {other}" for m, other in strangers.items())
                + "; every member of a ProcessSet(mpi_comm) must pass a communicator of the same ranks")
        if members not in sets:
            sets.append(members)
    return sets


def _connect(job: _Runtime, sets: list[tuple[int, ...]], records: list[dict[str, Any]],
             listener: Any) -> _Runtime | None:
    """This rank's runtime in the set it is a member of (None in none): its own communicator, and its own
    engine once the job's engine runs."""
    me = job.topology.rank
    config = replace_unvalidated(job.config, timeline=None)  # the job's engine owns the timeline file
    if job.config.backend == "mpi":
        comm = job.comm.split(sets)  # collective over the job: before any rank may leave
    elif listener is not None:
        (ranks,) = sets
        comm = connect_mesh(config, listener, ranks.index(me), [records[r]["peer"] for r in ranks])
    else:
        comm = None
    mine = next((members for members in sets if me in members), None)
    if comm is None or mine is None:
        return None
    topology = topology_from_host_keys(mine.index(me), [records[r]["host_key"] for r in mine])
    runtime = _Runtime(config=config, topology=topology, comm=comm, host=job.host, host_key=job.host_key,
                       members=mine)
    if job.engine is not None:
        start_engine(runtime)
    return runtime


def _split_records(job: _Runtime, gathered: bytes) -> list[dict[str, Any]]:
    # Each rank's JSON object is whole and they are concatenated in rank order.
    decoder, text = json.JSONDecoder(), gathered.decode()
    records, at = [], 0
    while at < len(text):
        record, at = decoder.raw_decode(text, at)
        records.append(record)
    if len(records) != job.topology.size:
        raise MismatchError(f"add_process_set: got {len(records)} ranks' records from a job of {job.topology.size}")
    return records


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes an added process set: its members leave its mesh. Every rank must call it. Returns False
    for the global set (never removed) or a set that is not registered."""
    if process_set.process_set_id in (None, 0):
        return False
    job = current()
    with _lock:
        set_id = process_set.process_set_id
        if job.process_set_ranks.get(set_id) != tuple(process_set.ranks or ()):
            return False
        # Every member is done with the set before any leaves its mesh, and ids stay in step.
        job.collectives.run(CollectiveKind.BARRIER, "", None)
        runtime = job.process_sets.pop(set_id)
        del job.process_set_ranks[set_id]
    process_set._invalidate()
    if runtime is not None:
        close_runtime(runtime)
    return True


def add_initial_sets(process_sets: Sequence[ProcessSet | Sequence[int]] | str | None) -> None:
    """``init(process_sets=...)``: a list of sets to add at once, or Horovod's "dynamic" (sets may always be
    added later here)."""
    if process_sets is None or process_sets == "dynamic":
        return
    if isinstance(process_sets, str):
        raise ValueError(f"process_sets must be a list of ProcessSet or 'dynamic', got {process_sets!r}")
    job = current()
    every_rank = tuple(range(job.topology.size))
    listed: set[tuple[int, ...]] = set()
    duplicates: list[int] = []
    for number, entry in enumerate(process_sets):
        process_set = entry if isinstance(entry, ProcessSet) else ProcessSet(entry)
        if process_set is global_process_set:
            continue
        if process_set.mpi_comm is not None:
            add_process_set(process_set)
            continue
        ranks = tuple(process_set.ranks or ())
        # As in Horovod: a set the list repeats, or the global set's ranks, gets no id of its own; the others
        # are still added, and the error names the repeats once every rank has added them.
        if ranks == every_rank or ranks in listed:
            duplicates.append(number)
            continue
        listed.add(ranks)
        existing = next((set_id for set_id, known in job.process_set_ranks.items() if known == ranks), None)
        if existing is not None:  # from an earlier init(process_sets=...): Horovod binds to it
            process_set.ranks, process_set.process_set_id = list(ranks), existing
            continue
        add_process_set(process_set)
    if duplicates:
        raise ValueError(f"init(process_sets=...): entries {duplicates} repeat an earlier entry or the global set's "
                         "ranks; they were not added (the others were)")


class HorovodBasics:
    """What Horovod's ``mpi_ops._basics`` shows that scripts and tests read: the running job's process sets."""

    @staticmethod
    def _get_process_set_ids_and_ranks() -> dict[int, list[int]]:
        """Every process set of the job by id, the global set (0) included, with its global ranks."""
        job = current()
        return {0: list(range(job.topology.size)),
                **{set_id: list(ranks) for set_id, ranks in sorted(job.process_set_ranks.items())}}
