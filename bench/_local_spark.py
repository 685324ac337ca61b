"""The warm local[2] session the Spark benchmarks run on."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def local_session(app_name: str) -> Any:
    prepare_environment()
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
            .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
            .getOrCreate())


def prepare_environment() -> None:
    """Spark needs these on this kind of machine (see ENVIRONMENT.md); set them for this process before
    the JVM starts, as the test fixtures do."""
    os.environ.setdefault("JAVA_HOME", _java_home())
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


def _java_home() -> str:
    for candidate in sorted(Path("/usr/lib/jvm").glob("*17*")):
        if (candidate / "bin" / "java").exists():
            return str(candidate)
    raise SystemExit("no Java 17 under /usr/lib/jvm; set JAVA_HOME")
