"""Porting a Horovod script to spark-hvd by its import lines alone, checking that nothing else changed, and
running the port as a user would (a fresh Python process with its own local[2] SparkSession)."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1] / "spark"))   # for spark_conf, after tests/compat
from spark_conf import QUICK_JVM_OPTIONS  # noqa: E402

# Horovod's module -> spark-hvd's, most specific first (horovod.tensorflow.keras before horovod.tensorflow).
MODULE_MAP: tuple[tuple[str, str], ...] = (
    ("horovod.tensorflow.keras", "collective.keras"),
    ("horovod.tensorflow", "collective.tensorflow"),
    ("horovod.spark", "spark_hvd"),
    ("horovod.torch", "collective.torch"),
)

_IMPORT_STATEMENT = re.compile(r"^\s*(?:import|from)\s")
_HOROVOD_PATH = re.compile(r"\bhorovod\b(?:\.\w+)*")

RESULTS_KEY = "port_results"     # the scripts print one JSON line {"port_results": {...}}


class PortError(Exception):
    """The script cannot be ported by changing its import lines."""


def port_imports(source: str) -> str:
    """The script with every Horovod module path on its import lines replaced by spark-hvd's.

    Refuses a Horovod module with no spark-hvd counterpart, and a script that names ``horovod`` outside
    its imports (``import horovod.spark`` then ``horovod.spark.run(...)``): no import line alone can
    port that body reference, so such a script needs an alias (``import horovod.spark as hvd_spark``).
    """
    lines = source.splitlines(keepends=True)
    for number, line in enumerate(lines, 1):
        if _IMPORT_STATEMENT.match(line):
            lines[number - 1] = _HOROVOD_PATH.sub(lambda m: _mapped(m.group(0), number), line)
    ported = "".join(lines)
    for token in tokenize.generate_tokens(io.StringIO(ported).readline):
        if token.type == tokenize.NAME and token.string == "horovod":
            raise PortError(f"line {token.start[0]} names horovod outside an import statement, which changing "
                            f"import lines cannot port: {token.line.strip()!r}")
    return ported


def _mapped(path: str, line_number: int) -> str:
    for horovod, ours in MODULE_MAP:
        if path == horovod or path.startswith(horovod + "."):
            return ours + path[len(horovod):]
    raise PortError(f"line {line_number}: Horovod module {path!r} has no spark-hvd counterpart in {MODULE_MAP}")


# The checker is written independently of the rewriter: any line that differs must be an import of a
# Horovod module in the original and of a spark-hvd one in the port, identical once module paths are masked.
_HOROVOD_IMPORT = re.compile(r"^\s*(?:import|from)\s+horovod\b")
_OUR_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:spark_hvd|collective)\b")
_ANY_MODULE_PATH = re.compile(r"\b(?:horovod|spark_hvd|collective)\b(?:\.\w+)*")


def changed_lines(original: str, ported: str) -> list[tuple[int, str, str]]:
    """(line number, original, ported) for every line that differs; the line counts must agree."""
    before, after = original.splitlines(), ported.splitlines()
    if len(before) != len(after):
        raise AssertionError(f"the port has {len(after)} lines, the original {len(before)}")
    return [(n, a, b) for n, (a, b) in enumerate(zip(before, after), 1) if a != b]


def assert_only_imports_changed(original: str, ported: str) -> None:
    changes = changed_lines(original, ported)
    assert changes, "the port changed no line: the script imports nothing from Horovod"
    for number, before, after in changes:
        is_import_swap = (_HOROVOD_IMPORT.match(before) and _OUR_IMPORT.match(after)
                          and _ANY_MODULE_PATH.sub("<module>", before) == _ANY_MODULE_PATH.sub("<module>", after))
        assert is_import_swap, f"line {number} changed beyond its import: {before!r} -> {after!r}"


@dataclass
class PortRun:
    returncode: int
    output: str
    results: dict[str, Any] | None


def java_home() -> str | None:
    """Java 17 for Spark, found as tests/spark/conftest.py finds it (a JAVA_HOME that works, else /usr/lib/jvm)."""
    current = os.environ.get("JAVA_HOME")
    if current and Path(current, "bin", "java").exists():
        return current
    for candidate in sorted(Path("/usr/lib/jvm").glob("*17*")):
        if (candidate / "bin" / "java").exists():
            return str(candidate)
    return None


# Spark settings for the test machine, not the user's script: they reach the script's own
# SparkSession.builder through spark-submit's arguments. A barrier stage that lacks slots fails in
# seconds instead of ~10 minutes; no UI ports are taken from the engineers sharing this machine.
# The driver JVM (executors included, in local mode) takes the suite's JVM options and, as the suite's
# sessions do, two shuffle partitions (tests/spark/spark_conf.py). Measured on a loaded 2-core machine:
# the torch port's script ran ~7 s (13%) faster, with the same losses.
_SUBMIT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": QUICK_JVM_OPTIONS,
}


def run_port(script: Path, work_dir: Path, timeout_s: float) -> PortRun:
    """Runs the ported script with this venv's Python in its own process group; a run past its deadline
    is killed with everything it started (the Spark JVM and its Python workers)."""
    home = java_home()
    if home is None:
        raise AssertionError("the compat ports need Java 17: install openjdk-17 or set JAVA_HOME")
    env = {**os.environ, "JAVA_HOME": home, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1",
           "PYSPARK_SUBMIT_ARGS": " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in _SUBMIT_CONF.items())
           + " pyspark-shell"}
    proc = subprocess.Popen([sys.executable, str(script), "--work-dir", str(work_dir)], cwd=work_dir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        output, _ = proc.communicate(timeout=30)
        raise AssertionError(f"{script.name} ran past {timeout_s:.0f} s and was killed; its output ends:\n"
                             f"{output[-6000:]}") from None
    finally:
        # Whatever the script left behind in its group (a JVM outliving a crashed driver) goes too.
        _kill_group(proc.pid)
    return PortRun(proc.returncode, output, _results(output))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _results(output: str) -> dict[str, Any] | None:
    prefix = '{"' + RESULTS_KEY + '"'
    for line in reversed(output.splitlines()):
        if line.startswith(prefix):
            return json.loads(line)[RESULTS_KEY]
    return None
