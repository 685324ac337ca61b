"""Rank: lifecycle of the process-wide communicator: join, shutdown and topology queries.

``collective.init`` (collective.joining) joins through here, then adds its process sets.
"""

from __future__ import annotations

import atexit
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from collective import _native
from collective.bootstrap import Bootstrap, bootstrap_from_config
from collective.bootstrap.interfaces import check_reachable, mesh_host
from collective.config import (
    ENV_HOROVOD_HIERARCHICAL_ALLREDUCE,
    ENV_SMALL_CALL_RADIX,
    Config,
    config_from_env,
    default_host_key,
    failure_report_path,
    replace_unvalidated,
)
from collective.engine import Engine
from collective.errors import CollectiveError, MismatchError, NotInitializedError
from collective.failures.notes import NotingCollectives, noting_failures, record_failures
from collective.topology import Topology, topology_from_host_keys


@dataclass
class _Runtime:
    config: Config
    topology: Topology
    comm: Any  # collective._native.Communicator
    engine: Any = None  # Engine (or MpiEngine) once started; it owns the communicator
    # What runs a call now: the communicator, then the engine once started (both have the same run()).
    collectives: Any = None
    # The job as init() was asked to join it (before its per-init rendezvous scope): what a later
    # init() with only overrides rebuilds from, and what job_config() returns.
    requested: Config | None = None
    # The address this rank's meshes listen on (a process set builds its own mesh there); None on MPI.
    host: str | None = None
    host_key: str | None = None  # this rank's host, as its peers' topologies name it
    # A process set's runtime: the global ranks of its members, in set-rank order. None for the job's own.
    members: tuple[int, ...] | None = None
    # The job's runtime only, by process set id: each added set's members, and its runtime where this
    # rank is one of them (None where it is not).
    process_set_ranks: dict[int, tuple[int, ...]] = field(default_factory=dict)
    process_sets: dict[int, "_Runtime | None"] = field(default_factory=dict)

    def member_runtimes(self) -> list["_Runtime"]:
        return [subset for subset in self.process_sets.values() if subset is not None]

    def __post_init__(self) -> None:
        self.collectives = NotingCollectives(self.comm)


_lock = threading.Lock()
_runtime: _Runtime | None = None
_generation = 0  # inits so far; keeps rendezvous keys of successive inits apart
_atexit_registered = False


def join(config: Config | None = None, *, bootstrap: Bootstrap | None = None, **overrides: Any) -> None:
    """Joins the job (``collective.init`` without its process sets): finds the peers, authenticates to each,
    and builds the mesh; see ``collective.joining.init`` for what ``config``, ``bootstrap``, ``overrides`` and
    a second call mean."""
    global _runtime, _generation, _atexit_registered
    running = _runtime
    if running is not None:
        if config is None and bootstrap is None and not overrides:
            return
        shutdown()
        if bootstrap is None and running.requested is not None:
            # The same job, rebuilt with what changed: the identity stays the launcher's.
            config = running.requested if config is None else _with_identity(config, running.requested)
    with _lock:
        if _runtime is not None:
            raise CollectiveError("collective.init() ran in another thread at the same time")
        cfg = config_from_env(config, overrides=overrides)
        requested = cfg
        if cfg.reduce_isa is not None:
            _native.limit_reduce_isa(cfg.reduce_isa)
        _generation += 1
        cfg = replace_unvalidated(cfg, scope=f"{cfg.scope}/init{_generation}")
        own_bootstrap = bootstrap is None
        if bootstrap is None and cfg.elastic_worker is not None:
            from collective.elastic.membership import round_bootstrap  # the elastic launcher's rounds

            bootstrap = round_bootstrap(cfg)
        elif bootstrap is None:
            bootstrap = bootstrap_from_config(cfg)
        try:
            # The launcher blames the root cause from what each rank says of its own failure, from now on.
            record_failures(failure_report_path(), bootstrap.rank)
            _runtime = noting_failures(_build_runtime)(cfg, bootstrap)
            _runtime.requested = requested if own_bootstrap else None
        finally:
            if own_bootstrap:
                bootstrap.close()
        if not _atexit_registered:
            # A goodbye on exit lets peers tell a finished rank from a dead one.
            atexit.register(shutdown)
            _atexit_registered = True


def _with_identity(config: Config, job: Config) -> Config:
    """``config`` with the running job's identity wherever it leaves it unset."""
    identity = {name: getattr(job, name) for name in _IDENTITY if getattr(config, name) is None}
    return replace_unvalidated(config, **identity)


_IDENTITY = ("rank", "size", "rendezvous", "secret", "advertise_host", "host_key")


def job_config() -> Config:
    """The Config this process joined its job with (rendezvous, secret and knobs); after init()."""
    runtime = _runtime
    if runtime is None:
        raise NotInitializedError("collective.init() has not been called (or shutdown() was)")
    return runtime.requested if runtime.requested is not None else runtime.config


def _build_runtime(cfg: Config, bootstrap: Bootstrap) -> _Runtime:
    rank, size = bootstrap.rank, bootstrap.size
    host_key = cfg.host_key or bootstrap.host_key() or default_host_key()
    if cfg.secret is None and bootstrap.job_secret() is not None:
        cfg = replace_unvalidated(cfg, secret=bootstrap.job_secret())
    if cfg.backend == "mpi":
        from collective.mpi.features import check_supported
        from collective.mpi.setup import mpi_communicator  # imports mpi4py, so only when asked

        check_supported(cfg)   # at init, for the numpy API too, which never starts the engine

        comm, host_keys = mpi_communicator(bootstrap, host_key, cfg.connect_timeout_s)
        return _Runtime(config=cfg, topology=topology_from_host_keys(rank, host_keys), comm=comm, host_key=host_key)
    host = mesh_host(cfg.advertise_host, cfg.nics or (), bootstrap.local_address())
    listener = _native.listen(host)
    try:
        record = json.dumps(mesh_record(cfg, host, listener.port, host_key)).encode()
        peers = [json.loads(raw) for raw in bootstrap.allgather(record, cfg.connect_timeout_s)]
        check_reachable(peers)
        comm = connect_mesh(cfg, listener, rank, peers)
    finally:
        listener.close()
    host_keys = [p["host_key"] for p in peers]
    return _Runtime(config=cfg, topology=topology_from_host_keys(rank, host_keys), comm=comm, host=host,
                    host_key=host_key)


def mesh_record(cfg: Config, host: str, port: int, host_key: str) -> dict[str, Any]:
    """What a rank tells its peers so that they can reach it (see ``connect_mesh``)."""
    return {"host": host, "port": port, "host_key": host_key, "shm": cfg.enable_shm,
            "hierarchical_allreduce": cfg.hierarchical_allreduce, "small_call_radix": cfg.small_call_radix}


def connect_mesh(cfg: Config, listener: Any, rank: int, peers: list[dict[str, Any]]) -> Any:
    """The native communicator of one mesh (the job's, or a process set's), from every member's ``mesh_record``."""
    options = cfg.to_native().mesh
    options.rank, options.size = rank, len(peers)
    options.hosts = [p["host"] for p in peers]
    options.ports = [int(p["port"]) for p in peers]
    options.host_keys = [p["host_key"] for p in peers]
    # Shared memory only if every rank allows it, so both sides of each pair agree.
    options.enable_shm = all(p["shm"] for p in peers)
    options.hierarchical_allreduce = agreed_hierarchical_allreduce(peers)
    radix = agreed_choice(peers, "small_call_radix", f"{ENV_SMALL_CALL_RADIX} or Config.small_call_radix")
    options.small_call_radix = radix or 0  # 0: the native cost model chooses
    return _native.Communicator(listener, options)


def agreed_hierarchical_allreduce(peers: list[dict[str, Any]]) -> bool | None:
    """Every member's ``hierarchical_allreduce``, which must be one value (see ``agreed_choice``)."""
    return agreed_choice(peers, "hierarchical_allreduce",
                         f"{ENV_HOROVOD_HIERARCHICAL_ALLREDUCE} or Config.hierarchical_allreduce")


def agreed_choice(peers: list[dict[str, Any]], name: str, set_by: str) -> Any:
    """Every member's ``name`` (set by ``set_by``), which must be one value: each rank chooses its algorithms
    from it, and ranks that chose differently would wait on each other forever. Every member sees the same
    records, so a disagreement fails on all of them alike."""
    choices: dict[Any, list[int]] = {}
    for rank, record in enumerate(peers):
        choices.setdefault(record.get(name), []).append(rank)
    if len(choices) > 1:
        detail = "; ".join(f"rank(s) {', '.join(map(str, ranks))}: {value}" for value, ranks in choices.items())
        raise MismatchError(f"ranks disagree on {name} ({set_by}): {detail}")
    return next(iter(choices))


def bytes_sent() -> dict[str, int]:
    """Bytes this rank has sent to its peers since init(), per transport ({'shm': n, 'tcp': n}): which
    path the data took, for tests and benchmarks."""
    return dict(communicator().bytes_sent())


def shutdown() -> None:
    """Leaves the job. Peers still expecting data from this rank get a clear error, not a hang."""
    global _runtime
    with _lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        for subset in runtime.member_runtimes():
            close_runtime(subset)
        close_runtime(runtime)


def close_runtime(runtime: _Runtime) -> None:
    """Stops a runtime's engine, then its communicator (the job's, or a process set's)."""
    if runtime.engine is not None:
        runtime.engine.shutdown()
    runtime.comm.shutdown()


def start_engine(runtime: _Runtime | None = None) -> Engine:
    """Starts the background engine of the job (or of the process set whose ``runtime`` is given), idempotent.
    From then on every collective there goes through it. The job's engine starts every set's too."""
    with _lock:
        job = _runtime
        if job is None:
            raise NotInitializedError("collective.init() has not been called (or shutdown() was)")
        if runtime is None or runtime is job:
            for subset in job.member_runtimes():
                _start_engine_of(subset)
            return _start_engine_of(job)
        return _start_engine_of(runtime)


def _start_engine_of(runtime: _Runtime) -> Engine:
    if runtime.engine is None:
        if runtime.config.backend == "mpi":
            from collective.mpi.engine import MpiEngine

            runtime.engine = MpiEngine(runtime.comm, runtime.config)
        else:
            runtime.engine = Engine(runtime.comm, runtime.config)
        runtime.collectives = runtime.engine
    return runtime.engine


def engine() -> Engine | None:
    """The running engine, or None while collectives run directly on the communicator."""
    runtime = _runtime
    if runtime is None:
        raise NotInitializedError("collective.init() has not been called (or shutdown() was)")
    return runtime.engine


def is_initialized() -> bool:
    return _runtime is not None


def current() -> _Runtime:
    """The live runtime; raises NotInitializedError before init()."""
    runtime = _runtime
    if runtime is None:
        raise NotInitializedError("collective.init() has not been called (or shutdown() was)")
    return runtime


def communicator() -> Any:
    """The native communicator; raises NotInitializedError before init()."""
    return current().comm


def topology() -> Topology:
    runtime = _runtime
    if runtime is None:
        raise NotInitializedError("collective.init() has not been called (or shutdown() was)")
    return runtime.topology


def rank() -> int:
    return topology().rank


def size() -> int:
    return topology().size


def local_rank() -> int:
    return topology().local_rank


def local_size() -> int:
    return topology().local_size


def cross_rank() -> int:
    return topology().cross_rank


def cross_size() -> int:
    return topology().cross_size


def is_homogeneous() -> bool:
    """Whether every host runs the same number of ranks, as Horovod's ``is_homogeneous()``."""
    return topology().homogeneous


def uses_shared_memory(peer: int) -> bool:
    """Whether data to ``peer`` travels through shared memory (True) or TCP (False)."""
    return bool(communicator().uses_shm(peer))
