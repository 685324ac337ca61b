"""Driver: the SparkSession a launch uses when the caller passes none."""

from __future__ import annotations

from typing import Any

from spark_hvd.errors import LaunchError


def find_session() -> Any | None:
    """The thread's active session, else the default one (a new thread has no active one); None if neither."""
    from pyspark.sql import SparkSession

    try:
        return SparkSession.active()
    except Exception:  # noqa: BLE001 - PySparkRuntimeError when there is none
        return None


def active_session(caller: str, why: str = "") -> Any:
    """``find_session()``, or a LaunchError that names ``caller`` (and ``why`` it needs one)."""
    session = find_session()
    if session is None:
        raise LaunchError(f"{caller} needs a SparkSession{why}: create one, or pass spark=...")
    return session
