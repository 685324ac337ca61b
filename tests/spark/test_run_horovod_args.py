"""spark_hvd.run with Horovod 0.28's arguments (nics, prefix_output_with_timestamp, executable, the MPI
ones, start_timeout's variable), and run_elastic, on a local[2] session."""

from __future__ import annotations

import inspect
import io
import os
import re
import stat
import sys
import time
import warnings
from pathlib import Path
from typing import Iterator

import cloudpickle
import numpy as np
import pytest

import collective
import spark_hvd
from collective.bootstrap.interfaces import interface_addresses
from collective.config import ENV_SPARK_START_TIMEOUT, parse_host_port
from collective.runtime import job_config

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]

# Horovod 0.28's horovod.spark.run and run_elastic, parameter by parameter, in order.
HOROVOD_RUN_PARAMETERS = [
    "fn", "args", "kwargs", "num_proc", "start_timeout", "use_mpi", "use_gloo", "extra_mpi_args",
    "env", "stdout", "stderr", "verbose", "nics", "prefix_output_with_timestamp", "executable"]
HOROVOD_RUN_ELASTIC_PARAMETERS = [
    "fn", "args", "kwargs", "num_proc", "min_np", "max_np", "start_timeout", "elastic_timeout",
    "reset_limit", "env", "stdout", "stderr", "verbose", "nics", "prefix_output_with_timestamp"]
# time.asctime(), then the rank prefix: Horovod's "{time}[{rank}]" order.
TIMESTAMPED_LINE = re.compile(
    r"^(?P<time>\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\[(?P<rank>\d)\]<stdout>:(?P<text>.*)$")


@pytest.fixture(scope="module", autouse=True)
def ship_this_module() -> Iterator[None]:
    # The rank functions below travel by value, so ranks need not import the tests.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def mesh_addresses() -> dict:
    """The local addresses of this rank's TCP connections once init() is done: the mesh's, only."""
    import psutil

    collective.allreduce(np.ones(1), op=collective.Sum)  # the mesh is up and in use
    local = sorted({c.laddr.ip for c in psutil.Process().net_connections(kind="tcp")
                    if c.status == psutil.CONN_ESTABLISHED})
    # A rank that returned first would close its side of the mesh while the other still lists its own.
    collective.barrier()
    return {"rank": collective.rank(), "local": local,
            "rendezvous_host": parse_host_port(job_config().rendezvous)[0]}


def print_lines(count: int) -> int:
    for i in range(count):
        print(f"rank {collective.rank()} line {i}", flush=True)
    return collective.rank()


def wrapper_marker() -> str | None:
    return os.environ.get("SPARK_HVD_TEST_WRAPPER")


def rank_and_env(name: str) -> tuple[int, str | None]:
    return collective.rank(), os.environ.get(name)


def test_run_takes_horovods_parameters_in_horovods_order() -> None:
    parameters = inspect.signature(spark_hvd.run).parameters
    positional = [n for n, p in parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == HOROVOD_RUN_PARAMETERS
    assert {n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY} == {"spark", "tail_lines", "on_event",
                                                                             "torch_distributed", "keep_warm"}
    assert parameters["start_timeout"].default is None
    assert parameters["prefix_output_with_timestamp"].default is False


def test_a_positional_horovod_call_runs(local_spark) -> None:
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # use_gloo=True and use_mpi=False ask for what spark-hvd always does: no warning.
        results = spark_hvd.run(rank_and_env, ("HVD_ARG",), {}, 2, 60, False, True, None,
                                {"HVD_ARG": "set"}, out, io.StringIO(), 1, None, False, None)
    assert results == [(0, "set"), (1, "set")]
    assert not [w for w in caught if issubclass(w.category, spark_hvd.IgnoredArgumentWarning)]


def test_mpi_arguments_get_one_warning_naming_them_and_the_run_goes_on(local_spark) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = spark_hvd.run(rank_and_env, args=("X",), num_proc=2, use_mpi=True, use_gloo=False,
                                extra_mpi_args="-x NCCL_DEBUG=INFO", stdout=io.StringIO())
    assert results == [(0, None), (1, None)]
    ignored = [w for w in caught if issubclass(w.category, spark_hvd.IgnoredArgumentWarning)]
    assert len(ignored) == 1
    message = str(ignored[0].message)
    for named in ("use_mpi=True", "use_gloo=False", "extra_mpi_args='-x NCCL_DEBUG=INFO'", "native ring",
                  "mpirun"):
        assert named in message
    assert ignored[0].filename == __file__  # points at the caller's line, not at spark_hvd


def test_prefix_output_with_timestamp_puts_the_time_before_each_rank_prefix(local_spark) -> None:
    out = io.StringIO()
    began = time.time()
    assert spark_hvd.run(print_lines, args=(3,), num_proc=2, stdout=out,
                         prefix_output_with_timestamp=True) == [0, 1]
    ended = time.time()
    lines = out.getvalue().splitlines()
    assert len(lines) == 6
    seen = set()
    for line in lines:
        match = TIMESTAMPED_LINE.match(line)
        assert match, f"not a timestamped rank line: {line!r}"
        stamped = time.mktime(time.strptime(match["time"], "%a %b %d %H:%M:%S %Y"))
        assert began - 1 <= stamped <= ended + 1  # whole seconds
        assert match["text"] == f"rank {match['rank']} line {match['text'][-1]}"
        seen.add(match["text"])
    assert seen == {f"rank {r} line {i}" for r in (0, 1) for i in range(3)}


def test_without_the_flag_lines_carry_only_the_rank_prefix(local_spark) -> None:
    out = io.StringIO()
    spark_hvd.run(print_lines, args=(1,), num_proc=2, stdout=out)
    assert sorted(out.getvalue().splitlines()) == ["[0]<stdout>:rank 0 line 0", "[1]<stdout>:rank 1 line 0"]


def test_nics_lo_keeps_the_rendezvous_and_mesh_on_loopback(local_spark) -> None:
    pytest.importorskip("psutil")
    results = spark_hvd.run(mesh_addresses, num_proc=2, nics={"lo"})  # Horovod passes a set
    for result in results:
        assert result["local"] == ["127.0.0.1"]
        assert result["rendezvous_host"] == "127.0.0.1"


def test_nics_moves_the_rendezvous_and_mesh_to_the_named_interface(local_spark) -> None:
    pytest.importorskip("psutil")
    other = next(((name, address) for name, address in interface_addresses().items()
                  if address is not None and not address.startswith("127.")), None)
    if other is None:
        pytest.skip("this host has no non-loopback interface with an IPv4 address")
    name, address = other
    # Without nics everything follows the executors' address (SPARK_LOCAL_IP=127.0.0.1 here).
    assert {tuple(r["local"]) for r in spark_hvd.run(mesh_addresses, num_proc=2)} == {("127.0.0.1",)}
    for result in spark_hvd.run(mesh_addresses, num_proc=2, nics=[name]):
        assert result["local"] == [address], result
        assert result["rendezvous_host"] == address


def test_an_unknown_interface_fails_fast_naming_it_and_the_interfaces_there(local_spark) -> None:
    began = time.monotonic()
    with pytest.raises(spark_hvd.RunError) as raised:
        spark_hvd.run(print_lines, args=(1,), num_proc=2, nics=["nosuchif0"], stdout=io.StringIO(),
                      stderr=io.StringIO())
    assert time.monotonic() - began < 30
    message = str(raised.value)
    assert re.search(r"rank [01] failed", message)
    assert "no network interface named 'nosuchif0'" in message
    assert "lo (127.0.0.1)" in message


def test_executable_runs_the_ranks_with_that_interpreter(local_spark, tmp_path: Path) -> None:
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f"#!/bin/sh\nexport SPARK_HVD_TEST_WRAPPER=used\nexec '{sys.executable}' \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    assert spark_hvd.run(wrapper_marker, num_proc=2, executable=str(wrapper)) == ["used", "used"]
    assert spark_hvd.run(wrapper_marker, num_proc=2, executable=wrapper) == ["used", "used"]  # PathLike


def test_a_missing_executable_fails_naming_it(local_spark, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-python")
    with pytest.raises(spark_hvd.RunError) as raised:
        spark_hvd.run(wrapper_marker, num_proc=2, executable=missing, stdout=io.StringIO(),
                      stderr=io.StringIO())
    assert f"cannot start executable={missing!r}" in str(raised.value)
    assert re.search(r"rank [01] failed", str(raised.value))


def test_start_timeout_none_reads_horovods_variable(local_spark, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SPARK_START_TIMEOUT, "0.01")
    with pytest.raises(spark_hvd.StartTimeoutError, match=r"start_timeout=0\.01s"):
        spark_hvd.run(print_lines, args=(1,), num_proc=2)


@pytest.mark.parametrize("arguments, error, names", [
    ({"nics": "lo"}, ValueError, "nics='lo' must be a list or set"),
    ({"nics": ["lo", ""]}, ValueError, "nics="),
    ({"nics": 3}, ValueError, "nics=3"),
    ({"executable": 3}, TypeError, "executable"),
    ({"executable": ""}, ValueError, "executable"),
    ({"use_mpi": "yes"}, TypeError, "use_mpi"),
    ({"use_gloo": 1}, TypeError, "use_gloo"),
    ({"extra_mpi_args": 5}, TypeError, "extra_mpi_args"),
    ({"start_timeout": -1}, ValueError, "start_timeout"),
    ({"start_timeout": "600"}, ValueError, "start_timeout"),
    ({"start_timeout": float("nan")}, ValueError, "start_timeout must be a positive number of seconds, got nan"),
    ({"prefix_output_with_timestamp": "yes"}, TypeError, "prefix_output_with_timestamp"),
    ({"verbose": "2"}, TypeError, "verbose"),
    ({"env": {"A": 1}}, TypeError, "env"),
])
def test_bad_values_are_named_before_anything_launches(arguments: dict, error: type, names: str) -> None:
    # No session is needed: the arguments are checked first.
    with pytest.raises(error, match=re.escape(names)):
        spark_hvd.run(print_lines, num_proc=2, **arguments)


def test_a_bad_start_timeout_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SPARK_START_TIMEOUT, "soon")
    with pytest.raises(ValueError, match=f"{ENV_SPARK_START_TIMEOUT}='soon'"):
        spark_hvd.run(print_lines, num_proc=2)


def test_run_elastic_has_horovods_signature() -> None:
    parameters = list(inspect.signature(spark_hvd.run_elastic).parameters)
    assert parameters[:len(HOROVOD_RUN_ELASTIC_PARAMETERS)] == HOROVOD_RUN_ELASTIC_PARAMETERS
    # Horovod's later names for min_np and max_np, keyword-only after them.
    assert {"min_num_proc", "max_num_proc"} <= set(parameters)
