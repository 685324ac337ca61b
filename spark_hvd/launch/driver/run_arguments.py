"""Driver: checks spark_hvd.run's arguments, Horovod's included, before anything launches.

Each bad value is an error that names it; each Horovod argument that spark-hvd cannot honour
gets one IgnoredArgumentWarning saying what happens instead.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Mapping, Sequence

from collective.config import normalize_nics, spark_start_timeout_s
from spark_hvd.errors import IgnoredArgumentWarning


def start_timeout_s(start_timeout: float | None) -> float:
    """``None`` means Horovod's default: HOROVOD_SPARK_START_TIMEOUT, else 600 s."""
    if start_timeout is None:
        return spark_start_timeout_s()
    return positive_seconds("start_timeout", start_timeout)


def positive_seconds(name: str, value: Any) -> float:
    """``value`` as a float when it is a finite number above 0 (a bool is not); else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def positive_int(name: str, value: Any) -> int:
    """``value`` when it is an int of at least 1 (a bool is not); else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def rank_env(env: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(env or {})
    bad = [k for k, v in env.items() if not (isinstance(k, str) and isinstance(v, str))]
    if bad:
        raise TypeError(f"env names and values must be str; not so for {bad!r}")
    return env


def nics(value: Any) -> tuple[str, ...] | None:
    """Horovod's nics (a list or set of interface names), checked here so a typo of type fails at once."""
    return normalize_nics(value, "nics")


def executable(value: str | os.PathLike | None) -> str | None:
    if value is None:
        return None
    try:
        path = os.fspath(value)
    except TypeError:
        raise TypeError(f"executable must be the path of a Python interpreter (str), got {value!r}") from None
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"executable must be the path of a Python interpreter, got {value!r}")
    return path


def verbose(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"verbose must be an int (0, 1 or 2), got {value!r}")
    return value


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def warn_about_mpi_arguments(use_mpi: bool | None, use_gloo: bool | None,
                             extra_mpi_args: str | Sequence[str] | None, *, stacklevel: int = 3) -> None:
    """One warning for the MPI-launch arguments a call gave, none when there is nothing to ignore.

    ``use_gloo=True`` and ``use_mpi=False`` ask for what spark-hvd always does (no mpirun, the
    ranks meeting through the launcher), so they pass silently.
    """
    for name, value in (("use_mpi", use_mpi), ("use_gloo", use_gloo)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{name} must be True, False or None, got {value!r}")
    if extra_mpi_args is not None and not isinstance(extra_mpi_args, str) and not (
            isinstance(extra_mpi_args, (list, tuple)) and all(isinstance(a, str) for a in extra_mpi_args)):
        raise TypeError(f"extra_mpi_args must be a string of mpirun arguments, got {extra_mpi_args!r}")
    ignored = []
    if use_mpi:
        ignored.append("use_mpi=True")
    if use_gloo is False:
        ignored.append("use_gloo=False")
    if extra_mpi_args:
        ignored.append(f"extra_mpi_args={extra_mpi_args!r}")
    if not ignored:
        return
    warnings.warn(
        f"spark_hvd.run ignores {', '.join(ignored)}: spark-hvd starts no mpirun under Spark; the "
        "ranks always talk over spark-hvd's native ring (TCP between hosts, shared memory within "
        "one), which takes the place of Horovod's Gloo and MPI controllers. To move data with MPI, "
        "run the script under mpirun and call collective.init(backend='mpi').",
        IgnoredArgumentWarning, stacklevel=stacklevel)


def module_names(name: str, value: Any) -> tuple[str, ...]:
    """A sequence of importable module names, such as ``["torch", "collective.torch"]``."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(
            isinstance(n, str) and n and all(part.isidentifier() for part in n.split(".")) for n in names):
        raise TypeError(f"{name} must be a list of module names such as ['torch'], got {value!r}")
    return tuple(dict.fromkeys(names))
