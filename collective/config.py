"""Job configuration, and the single place where the package reads environment variables.

Keeping every ``os.environ`` lookup here means the launcher (which writes these variables for
its children, using the constants below) and the ranks (which read them) cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from collective.topology import Topology

ENV_RANK = "COLLECTIVE_RANK"
ENV_SIZE = "COLLECTIVE_SIZE"
ENV_RENDEZVOUS = "COLLECTIVE_RENDEZVOUS"
ENV_SECRET = "COLLECTIVE_SECRET"
ENV_ADVERTISE_HOST = "COLLECTIVE_ADVERTISE_HOST"
ENV_HOST_KEY = "COLLECTIVE_HOST_KEY"
ENV_TIMEOUT = "COLLECTIVE_TIMEOUT"
ENV_CONNECT_TIMEOUT = "COLLECTIVE_CONNECT_TIMEOUT"
ENV_HANDSHAKE_TIMEOUT = "COLLECTIVE_HANDSHAKE_TIMEOUT"
ENV_DISABLE_SHM = "COLLECTIVE_DISABLE_SHM"
ENV_SHM_BUFFER_BYTES = "COLLECTIVE_SHM_BUFFER_BYTES"
ENV_TCP_CHUNK_BYTES = "COLLECTIVE_TCP_CHUNK_BYTES"
ENV_SMALL_CALL_RADIX = "COLLECTIVE_SMALL_CALL_RADIX"
ENV_SPIN_US = "COLLECTIVE_SPIN_US"
ENV_YIELD_US = "COLLECTIVE_YIELD_US"
ENV_REDUCE_ISA = "COLLECTIVE_REDUCE_ISA"
ENV_FUSION_THRESHOLD = "COLLECTIVE_FUSION_THRESHOLD"
ENV_CYCLE_TIME = "COLLECTIVE_CYCLE_TIME"
ENV_GRADIENT_BUCKET_BYTES = "COLLECTIVE_GRADIENT_BUCKET_BYTES"
ENV_CACHE_CAPACITY = "COLLECTIVE_CACHE_CAPACITY"
ENV_TIMELINE = "COLLECTIVE_TIMELINE"
ENV_STALL_CHECK_TIME = "COLLECTIVE_STALL_CHECK_TIME"
ENV_STALL_SHUTDOWN_TIME = "COLLECTIVE_STALL_SHUTDOWN_TIME"
# Horovod's names for the stall inspector, honoured so ported jobs keep their settings (ours win when both are set).
ENV_HOROVOD_STALL_CHECK_TIME = "HOROVOD_STALL_CHECK_TIME_SECONDS"
ENV_HOROVOD_STALL_SHUTDOWN_TIME = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"
ENV_HOROVOD_STALL_CHECK_DISABLE = "HOROVOD_STALL_CHECK_DISABLE"  # truthy: no warning and no shutdown
ENV_BACKEND = "COLLECTIVE_BACKEND"
ENV_NCCL_LIBRARY = "COLLECTIVE_NCCL_LIBRARY"
ENV_NICS = "COLLECTIVE_NICS"  # comma-separated interface names
# Horovod's switch for the hierarchical allreduce (within hosts, then across): 1 forces it on, 0 off.
ENV_HOROVOD_HIERARCHICAL_ALLREDUCE = "HOROVOD_HIERARCHICAL_ALLREDUCE"
# Where a rank started by collective.run writes its FailureReport when an exception ends it.
ENV_FAILURE_REPORT = "COLLECTIVE_FAILURE_REPORT"
# Set by the elastic launcher instead of a rank: the worker's slot ("host:slot"); its rank comes from each round.
ENV_ELASTIC_WORKER = "COLLECTIVE_ELASTIC_WORKER"
ENV_ELASTIC_TIMEOUT = "COLLECTIVE_ELASTIC_TIMEOUT"
# Horovod's variable for spark.run's start_timeout, honoured so ported jobs keep their setting.
ENV_SPARK_START_TIMEOUT = "HOROVOD_SPARK_START_TIMEOUT"
DEFAULT_SPARK_START_TIMEOUT_S = 600.0
# Set by mpirun/mpiexec in every rank: Open MPI, then MPICH/Hydra (and PMIx-based launchers).
MPI_LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
BACKENDS = ("ring", "mpi")

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class Config:
    rank: int | None = None            # None: take from bootstrap/env
    size: int | None = None
    rendezvous: str | None = None      # "host:port" of a RendezvousServer
    secret: bytes | None = None        # per-job secret; peers authenticate with HMAC over it
    advertise_host: str | None = None  # None = local address of the rendezvous connection
    host_key: str | None = None        # physical-host identity; None = hostname + boot id
    timeout_s: float = 300.0           # deadline for any single blocking collective
    connect_timeout_s: float = 60.0    # deadline for building the mesh
    handshake_timeout_s: float = 2.0   # each unauthenticated connection's deadline to pass the challenge
    enable_shm: bool = True            # same-host peers use shared memory
    shm_buffer_bytes: int = 4 << 20
    tcp_chunk_bytes: int = 1 << 20
    # How a rank waits for its peers' data: it busy-waits spin_us microseconds, then keeps yielding its core
    # for yield_us, then sleeps. -1 spins 20 us where every rank on the host has a core of its own, else not at
    # all. Yielding pays even on an oversubscribed host (bench/oversubscribed.py).
    spin_us: int = -1
    yield_us: int = 2000
    scope: str = "collective"          # rendezvous key prefix
    reduce_isa: str | None = None      # cap the kernels' instruction set: "baseline", "avx2" or "avx512"
    # The background engine behind async ops (collective.torch), with Horovod's defaults.
    fusion_threshold_bytes: int = 128 << 20  # 0 turns tensor fusion off
    cycle_time_ms: float = 1.0
    cache_capacity: int = 1024               # response cache entries
    # TensorFlow/Keras gradients go to the engine in buckets of this size, which overlap backward; 0 = one
    # bucket after backward. None: 2 MiB where the host has more cores than ranks, else 0.
    gradient_bucket_bytes: int | None = None
    timeline: str | None = None              # Chrome trace JSON written by rank 0
    stall_check_s: float = 60.0              # warn about tensors some ranks have not submitted; 0 = off
    # Then fail them on every rank, naming the missing ranks; 0 = never. Horovod's default is never: ours
    # keeps a program-order bug from holding a Spark job until the 4 x timeout_s deadline.
    stall_shutdown_s: float = 300.0
    backend: str = "ring"                    # CPU data path: the native "ring", or "mpi" (mpi4py)
    launched_by_mpi: bool = False            # mpirun/mpiexec started us: bootstrap through MPI
    nccl_library: str | None = None          # path to libnccl.so.2; None = the nvidia-nccl wheel, then the system
    # Network interfaces the mesh may use (Horovod's nics), e.g. ("eth0",); None = any.
    nics: tuple[str, ...] | None = None
    # Allreduce within each host, then across hosts, then within again (native/algorithms/hierarchical_allreduce.cc):
    # True forces it wherever there are several hosts (except direct calls small enough to travel inside their
    # descriptor round: they are reduced already), False never; None chooses per call (several hosts with
    # several ranks, and a tensor past the one-round size). Every rank must pass the same value.
    hierarchical_allreduce: bool | None = None
    # Small calls (each direct call's descriptor round, the engine's small allreduces) reach every rank by
    # Bruck's allgather with this radix: 2 takes ceil(log2 size) rounds of one message, size or more one round
    # with a message to every peer. None: the measured model in native/algorithms/block_allgather.cc picks it
    # from the number of ranks. Every rank must pass the same value.
    small_call_radix: int | None = None
    # Elastic mode (collective.elastic): this worker's slot id, and how long it waits for a round that includes it.
    elastic_worker: str | None = None
    elastic_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        # Lists and sets are accepted (Horovod takes either) and kept as a tuple, so Config stays hashable.
        object.__setattr__(self, "nics", normalize_nics(self.nics, _field_label("nics")))
        _validate(dataclasses.asdict(self), _field_label)

    def to_native(self) -> "NativeOptions":
        """The native option structs. Each knob is copied by the name Config and the C++ struct share
        (native/transport/mesh.h, native/engine/engine.h), so a new knob is named in those two places
        only; the job's identity (rank, size, peers) is the caller's to fill in from the bootstrap."""
        from collective import _native  # the launcher and the Spark driver read Config without the extension

        native = NativeOptions(_native.MeshOptions(), _native.EngineOptions())
        for options in native:
            for name, value in self.__dict__.items():
                if value is not None and hasattr(options, name):
                    setattr(options, name, value)
        return native

    def replace(self, **changes: Any) -> "Config":
        """Returns a copy with ``changes`` applied; the copy is validated like a new Config."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"Config has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        # The secret must never end up in logs or tracebacks.
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if shown["secret"] is not None:
            shown["secret"] = f"<{len(shown['secret'])} bytes>"
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


class NativeOptions(NamedTuple):
    """What Config.to_native() gives: collective._native.MeshOptions and EngineOptions."""

    mesh: Any
    engine: Any


def config_from_env(base: Config | None = None, environ: Mapping[str, str] | None = None,
                    overrides: Mapping[str, Any] | None = None) -> Config:
    """Builds a Config from defaults, then ``environ`` (default ``os.environ``), then ``base``, then
    ``overrides``, and validates the result once.

    Fields of ``base`` that differ from the Config defaults win over the environment, so code
    that sets a value explicitly is never silently overridden by a stray variable.
    """
    environ = os.environ if environ is None else environ
    values = dict(_DEFAULTS)
    source: dict[str, str] = {}
    for field_name, (env_name, parse) in _horovod_stall_fields(environ).items():
        values[field_name] = parse(env_name, environ[env_name].strip())
        source[field_name] = env_name
    for field_name, (env_name, parse) in _ENV_FIELDS.items():
        raw = environ.get(env_name)
        if raw is None or not raw.strip():
            continue  # Launchers often export empty variables; treat them as unset.
        values[field_name] = parse(env_name, raw.strip())
        source[field_name] = env_name
    if base is not None:
        for field in dataclasses.fields(base):
            explicit = getattr(base, field.name)
            if explicit != field.default:
                values[field.name] = explicit
                source.pop(field.name, None)
    if overrides:
        unknown = set(overrides) - set(values)
        if unknown:
            raise ValueError(f"Config has no field(s) {sorted(unknown)}")
        values.update(overrides)
        for name in overrides:
            source.pop(name, None)
    if not values["launched_by_mpi"] and launched_by_mpi(environ):
        values["launched_by_mpi"] = True
    label = lambda name: source.get(name, _field_label(name))  # noqa: E731
    values["nics"] = normalize_nics(values["nics"], label("nics"))
    _validate(values, label)
    return replace_unvalidated(Config, **values)


def replace_unvalidated(base: Config | type[Config], **values: Any) -> Config:
    """``base`` (a Config, or the class for none) with ``values`` that are checked already, or derived
    by this package (the rendezvous scope, the bootstrap's secret, which the native mesh checks): init()
    validates once, at its edge, and not again for what it fills in itself."""
    config = object.__new__(Config)
    config.__dict__.update(base.__dict__ if isinstance(base, Config) else {})
    config.__dict__.update(values)
    return config


def launched_by_mpi(environ: Mapping[str, str] | None = None) -> bool:
    """Whether mpirun/mpiexec (Open MPI, MPICH/Hydra or a PMIx launcher) started this process."""
    environ = os.environ if environ is None else environ
    return any(environ.get(name, "").strip() for name in MPI_LAUNCHER_VARIABLES)


# Where a launcher puts a process's global rank and size, in the order Horovod's scripts look: horovodrun
# and collective.run, then Open MPI, then MPICH/Hydra.
LAUNCHER_RANK_SIZE_VARIABLES = (("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                ("PMI_RANK", "PMI_SIZE"))


def launcher_rank_and_size(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """The (rank, size) a launcher exported, before any init; None where no launcher did. A launcher that
    set one of a pair and not the other is a RuntimeError naming both variables."""
    environ = os.environ if environ is None else environ
    for rank_name, size_name in LAUNCHER_RANK_SIZE_VARIABLES:
        rank, size = environ.get(rank_name), environ.get(size_name)
        if rank is not None and size is not None:
            return int(rank), int(size)
        if rank is not None or size is not None:
            raise RuntimeError(f"cannot tell this process's rank and size: only one of {rank_name} and "
                               f"{size_name} is set")
    return None


def default_host_key() -> str:
    """Identifies this physical machine: the hostname plus the kernel boot id.

    The boot id distinguishes containers or VMs that share a hostname but not memory, which
    matters because the key decides whether two ranks may talk through shared memory.
    """
    hostname = socket.gethostname()
    try:
        with open(_BOOT_ID_PATH, encoding="ascii") as f:
            boot_id = f.read().strip()
    except OSError:
        return hostname
    return f"{hostname}:{boot_id}" if boot_id else hostname


def normalize_nics(value: Any, label: str = "nics") -> tuple[str, ...] | None:
    """Horovod's ``nics`` (a list or set of interface names) as a tuple; empty or None means any.

    A list keeps its order (the first named interface is preferred); a set is sorted, so every
    rank reads it the same way. A plain string is refused rather than read as one name: Horovod
    would take it letter by letter.
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{label}={value!r} must be a list or set of interface names, "
                         f"e.g. [{value!r}], not a string")
    if isinstance(value, (set, frozenset)):
        names: Iterable[Any] = sorted(value, key=str)
    elif isinstance(value, (list, tuple)):
        names = value
    else:
        raise ValueError(f"{label}={value!r} must be a list or set of interface names, e.g. ['eth0']")
    for name in names:
        # Linux refuses whitespace in interface names; a comma would split in COLLECTIVE_NICS.
        if not isinstance(name, str) or not name or "," in name or any(c.isspace() for c in name):
            raise ValueError(f"{label}={value!r}: {name!r} is not an interface name "
                             "(a non-empty string without spaces or commas)")
    return tuple(dict.fromkeys(names)) or None


def failure_report_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The file this rank's launcher reads its FailureReport from, when the launcher asked for one."""
    path = (os.environ if environ is None else environ).get(ENV_FAILURE_REPORT, "").strip()
    return path or None


def spark_start_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """spark.run's default start_timeout: HOROVOD_SPARK_START_TIMEOUT (as in Horovod), else 600 s."""
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV_SPARK_START_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_SPARK_START_TIMEOUT_S
    seconds = _parse_seconds(ENV_SPARK_START_TIMEOUT, raw)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{ENV_SPARK_START_TIMEOUT}={raw!r} must be a positive, finite number of seconds")
    return seconds


def parse_host_port(text: str) -> tuple[str, int]:
    """Splits ``host:port`` (or ``[v6addr]:port``) and checks the port range."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected 'host:port', got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port in {text!r} is not an integer") from None
    if not 0 < port < 65536:
        raise ValueError(f"port in {text!r} is outside 1..65535")
    return host, port


def format_host_port(host: str, port: int) -> str:
    """Inverse of parse_host_port; brackets IPv6 literals so the last ':' stays the separator."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def env_for_rank(
    rank: int,
    size: int,
    rendezvous: str,
    secret: bytes,
    host_key: str | None = None,
    timeline: str | None = None,
    nics: tuple[str, ...] | None = None,
    failure_report: str | None = None,
) -> dict[str, str]:
    """The variables a launcher exports so that config_from_env() in the child sees this rank.

    Lives here rather than in the launcher so the encoding (e.g. hex secret) has one owner.
    """
    env = {
        ENV_RANK: str(rank),
        ENV_SIZE: str(size),
        ENV_RENDEZVOUS: rendezvous,
        ENV_SECRET: secret.hex(),
    }
    if host_key is not None:
        env[ENV_HOST_KEY] = host_key
    if timeline is not None:
        env[ENV_TIMELINE] = timeline
    if nics:
        env[ENV_NICS] = ",".join(nics)
    if failure_report is not None:
        env[ENV_FAILURE_REPORT] = failure_report
    _validate({**_DEFAULTS, "rank": rank, "size": size,
               "rendezvous": rendezvous, "secret": secret, "host_key": host_key,
               "nics": nics}, _field_label)
    return env


def env_for_elastic_worker(worker: str, rendezvous: str, secret: bytes, host_key: str, elastic_timeout_s: float,
                           failure_report: str | None = None) -> dict[str, str]:
    """What the elastic launcher exports to a worker: no rank or size (each round assigns them), its slot id."""
    env = {
        ENV_ELASTIC_WORKER: worker,
        ENV_RENDEZVOUS: rendezvous,
        ENV_SECRET: secret.hex(),
        ENV_HOST_KEY: host_key,
        ENV_ELASTIC_TIMEOUT: repr(float(elastic_timeout_s)),
    }
    if failure_report is not None:
        env[ENV_FAILURE_REPORT] = failure_report
    _validate({**_DEFAULTS, "rendezvous": rendezvous, "secret": secret, "host_key": host_key,
               "elastic_worker": worker, "elastic_timeout_s": elastic_timeout_s}, _field_label)
    return env


def horovod_env_for_rank(topology: Topology, hostname: str) -> dict[str, str]:
    """What horovodrun exports to each rank, for scripts that read their place in the job from it.
    Written by the launcher beside env_for_rank's variables; never read by this package."""
    return {
        "HOROVOD_RANK": str(topology.rank),
        "HOROVOD_SIZE": str(topology.size),
        "HOROVOD_LOCAL_RANK": str(topology.local_rank),
        "HOROVOD_LOCAL_SIZE": str(topology.local_size),
        "HOROVOD_CROSS_RANK": str(topology.cross_rank),
        "HOROVOD_CROSS_SIZE": str(topology.cross_size),
        "HOROVOD_HOSTNAME": hostname,
    }


def inherited_environ() -> dict[str, str]:
    """A copy of this process's environment, for a launcher to hand on to its children."""
    return dict(os.environ)


def _field_label(name: str) -> str:
    return f"Config.{name}"


def _parse_int(env_name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{env_name}={raw!r} is not an integer") from None


def _parse_seconds(env_name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{env_name}={raw!r} is not a number of seconds") from None


def _parse_secret(env_name: str, raw: str) -> bytes:
    try:
        return bytes.fromhex(raw)
    except ValueError:
        raise ValueError(f"{env_name} is not valid hex (length {len(raw)})") from None


def _parse_text(env_name: str, raw: str) -> str:
    return raw


def _parse_nics(env_name: str, raw: str) -> tuple[str, ...] | None:
    return normalize_nics([name.strip() for name in raw.split(",") if name.strip()], env_name)


def _parse_flag(env_name: str, raw: str) -> bool:
    word = raw.lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"{env_name}={raw!r} is not one of 1/0/true/false/yes/no/on/off")


def _parse_shm_enabled(env_name: str, raw: str) -> bool:
    return not _parse_flag(env_name, raw)  # The variable *disables* shm, so "true" means enable_shm=False.


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Config)}

_ENV_FIELDS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "rank": (ENV_RANK, _parse_int),
    "size": (ENV_SIZE, _parse_int),
    "rendezvous": (ENV_RENDEZVOUS, _parse_text),
    "secret": (ENV_SECRET, _parse_secret),
    "advertise_host": (ENV_ADVERTISE_HOST, _parse_text),
    "host_key": (ENV_HOST_KEY, _parse_text),
    "timeout_s": (ENV_TIMEOUT, _parse_seconds),
    "connect_timeout_s": (ENV_CONNECT_TIMEOUT, _parse_seconds),
    "handshake_timeout_s": (ENV_HANDSHAKE_TIMEOUT, _parse_seconds),
    "enable_shm": (ENV_DISABLE_SHM, _parse_shm_enabled),
    "shm_buffer_bytes": (ENV_SHM_BUFFER_BYTES, _parse_int),
    "tcp_chunk_bytes": (ENV_TCP_CHUNK_BYTES, _parse_int),
    "spin_us": (ENV_SPIN_US, _parse_int),
    "yield_us": (ENV_YIELD_US, _parse_int),
    "reduce_isa": (ENV_REDUCE_ISA, _parse_text),
    "fusion_threshold_bytes": (ENV_FUSION_THRESHOLD, _parse_int),
    "cycle_time_ms": (ENV_CYCLE_TIME, _parse_seconds),
    "cache_capacity": (ENV_CACHE_CAPACITY, _parse_int),
    "gradient_bucket_bytes": (ENV_GRADIENT_BUCKET_BYTES, _parse_int),
    "timeline": (ENV_TIMELINE, _parse_text),
    "stall_check_s": (ENV_STALL_CHECK_TIME, _parse_seconds),
    "stall_shutdown_s": (ENV_STALL_SHUTDOWN_TIME, _parse_seconds),
    "backend": (ENV_BACKEND, _parse_text),
    "nccl_library": (ENV_NCCL_LIBRARY, _parse_text),
    "nics": (ENV_NICS, _parse_nics),
    "hierarchical_allreduce": (ENV_HOROVOD_HIERARCHICAL_ALLREDUCE, _parse_flag),
    "small_call_radix": (ENV_SMALL_CALL_RADIX, _parse_int),
    "elastic_worker": (ENV_ELASTIC_WORKER, _parse_text),
    "elastic_timeout_s": (ENV_ELASTIC_TIMEOUT, _parse_seconds),
}


def _horovod_stall_fields(environ: Mapping[str, str]) -> dict[str, tuple[str, Callable[[str, str], Any]]]:
    """The stall fields Horovod's variables set, as (variable, parser) per field; ours override them later."""
    fields: dict[str, tuple[str, Callable[[str, str], Any]]] = {}
    disable = environ.get(ENV_HOROVOD_STALL_CHECK_DISABLE, "").strip()
    if disable and _parse_flag(ENV_HOROVOD_STALL_CHECK_DISABLE, disable):
        off = lambda name, raw: 0.0  # noqa: E731
        return {"stall_check_s": (ENV_HOROVOD_STALL_CHECK_DISABLE, off),
                "stall_shutdown_s": (ENV_HOROVOD_STALL_CHECK_DISABLE, off)}
    for field_name, env_name in (("stall_check_s", ENV_HOROVOD_STALL_CHECK_TIME),
                                 ("stall_shutdown_s", ENV_HOROVOD_STALL_SHUTDOWN_TIME)):
        if environ.get(env_name, "").strip():
            fields[field_name] = (env_name, _parse_seconds)
    return fields


def _validate(values: Mapping[str, Any], label: Callable[[str], str]) -> None:
    """Checks field values against ``_CHECKS``, in its order; ``label`` names where each came from (env var
    or Config field)."""
    for names, check in _CHECKS:
        for name in names:
            why = check(values[name], values, label)
            if why is not None:
                shown = "<redacted>" if name == "secret" else repr(values[name])
                raise ValueError(f"{label(name)}={shown} {why}")
    normalize_nics(values["nics"], label("nics"))


# A check takes (value, all values, label) and returns why the value is wrong, or None.
_Check = Callable[[Any, Mapping[str, Any], Callable[[str], str]], "str | None"]


def _rule(accept: Callable[[Any], bool], why: str) -> _Check:
    return lambda value, values, label: None if accept(value) else why


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _optional(accept: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or accept(value)


def _rank_below_size(rank: Any, values: Mapping[str, Any], label: Callable[[str], str]) -> str | None:
    size = values["size"]
    return f"must be < {label('size')}={size}" if rank is not None and size is not None and rank >= size else None


def _rendezvous_problem(value: Any, values: Mapping[str, Any], label: Callable[[str], str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return "must be a 'host:port' string"
    try:
        parse_host_port(value)
    except ValueError as e:
        return f"is invalid: {e}"
    return None


def _seconds_problem(value: Any, values: Mapping[str, Any], label: Callable[[str], str]) -> str | None:
    if not _is_number(value):
        return "must be a number of seconds"
    return None if math.isfinite(value) and value > 0 else "must be a positive, finite number of seconds"


# Every field's checks, in the order they run: the first that fails names its field and why.
_CHECKS: tuple[tuple[tuple[str, ...], _Check], ...] = (
    (("rank", "size", "shm_buffer_bytes", "tcp_chunk_bytes"), _rule(_optional(_is_int), "must be an int")),
    (("size",), _rule(lambda v: v is None or v >= 1, "must be >= 1")),
    (("rank",), _rule(lambda v: v is None or v >= 0, "must be >= 0")),
    (("rank",), _rank_below_size),
    (("rendezvous",), _rendezvous_problem),
    (("secret",), _rule(_optional(lambda v: isinstance(v, bytes) and len(v) > 0), "must be non-empty bytes")),
    (("advertise_host", "host_key", "elastic_worker"), _rule(_optional(_is_text), "must be a non-empty string")),
    (("timeout_s", "connect_timeout_s", "handshake_timeout_s", "elastic_timeout_s"), _seconds_problem),
    (("shm_buffer_bytes", "tcp_chunk_bytes"), _rule(lambda v: not v <= 0, "must be > 0")),
    (("spin_us",), _rule(lambda v: _is_int(v) and v >= -1, "must be an int >= 0, or -1 (chosen by cores)")),
    (("yield_us",), _rule(lambda v: _is_int(v) and v >= 0, "must be an int >= 0")),
    (("enable_shm",), _rule(lambda v: isinstance(v, bool), "must be a bool")),
    (("hierarchical_allreduce",),
     _rule(_optional(lambda v: isinstance(v, bool)), "must be True, False or None (choose per call)")),
    (("small_call_radix",),
     _rule(_optional(lambda v: _is_int(v) and v >= 2), "must be an int >= 2 or None (chosen by the number of ranks)")),
    (("fusion_threshold_bytes", "cache_capacity"), _rule(lambda v: _is_int(v) and v >= 0, "must be an int >= 0")),
    (("gradient_bucket_bytes",), _rule(_optional(lambda v: _is_int(v) and v >= 0),
                                       "must be an int >= 0 (0: one bucket after backward) or None (chosen by cores)")),
    (("cycle_time_ms", "stall_check_s", "stall_shutdown_s"),
     _rule(lambda v: _is_number(v) and math.isfinite(v) and v >= 0, "must be a finite number >= 0")),
    (("reduce_isa",), _rule(lambda v: v in (None, "baseline", "avx2", "avx512"),
                            "must be one of baseline, avx2, avx512")),
    (("backend",), _rule(lambda v: v in BACKENDS, f"must be one of {', '.join(BACKENDS)}")),
    (("launched_by_mpi",), _rule(lambda v: isinstance(v, bool), "must be a bool")),
    (("nccl_library",), _rule(_optional(_is_text), "must be a non-empty path")),
    (("scope",), _rule(_is_text, "must be a non-empty string")),
)
