"""spark_hvd.run and TorchEstimator.fit on a Spark standalone cluster across emulated hosts: the master
and a worker on host 0, a worker on host 1, the driver on host 2, the Store a directory all of them see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from host_jobs import WORKERS, rank_environment
from jobs import RESULT_TAG

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
pytest.importorskip("pyspark")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
from standalone_cluster import StandaloneCluster, WorkerSpec  # noqa: E402


def _java_home() -> str:
    for candidate in [os.environ.get("JAVA_HOME", ""), *map(str, sorted(Path("/usr/lib/jvm").glob("*17*")))]:
        if candidate and Path(candidate, "bin", "java").exists():
            return candidate
    pytest.skip("Spark needs Java 17 (openjdk-17)")


def test_run_and_fit_with_the_driver_on_another_host(make_hosts, tmp_path: Path) -> None:
    hosts = make_hosts(3)
    base = rank_environment({"JAVA_HOME": _java_home(), "PYSPARK_PYTHON": sys.executable,
                             "PYSPARK_DRIVER_PYTHON": sys.executable})
    workers = [WorkerSpec(host=h.address, launch_prefix=h.enter_argv(), env={"SPARK_LOCAL_IP": h.address})
               for h in hosts.hosts[:2]]
    (tmp_path / "cluster").mkdir()
    with StandaloneCluster(tmp_path / "cluster", workers, {**base, "SPARK_LOCAL_IP": hosts[0].address},
                           master_host=hosts[0].address, master_launch_prefix=hosts[0].enter_argv()) as cluster:
        driver = hosts.popen(2, [sys.executable, str(WORKERS / "spark_driver.py"), cluster.master_url,
                                 hosts[2].address, str(tmp_path / "store"), "2"],
                             env={**base, "SPARK_LOCAL_IP": hosts[2].address})
        try:
            out, _ = driver.communicate(timeout=540)
        except subprocess.TimeoutExpired:
            driver.kill()
            out, _ = driver.communicate()
        text = out.decode(errors="replace")
        assert driver.returncode == 0, text[-5000:]
    records = {r["check"]: r for r in (json.loads(line[line.index(RESULT_TAG) + len(RESULT_TAG):])
                                       for line in text.splitlines() if line.startswith(RESULT_TAG))}
    for check in ("run", "run-nics"):  # the default interface, and nics=["eth0"]
        ranks = records[check]["ranks"]
        # One rank per worker host, each with its host's address on its mesh; the driver's host runs none.
        assert sorted(r["hostname"] for r in ranks) == [hosts[0].hostname, hosts[1].hostname]
        for r in ranks:
            host = next(h for h in hosts.hosts if h.hostname == r["hostname"])
            assert r["mesh_host"] == host.address
            assert (r["local_size"], r["cross_size"], r["total"]) == (1, 2, 3.0)
    fit = records["fit"]
    assert fit["epochs"] == 3 and fit["last"]["loss"] < fit["first"]["loss"]
    assert list((tmp_path / "store").iterdir())  # the Store, written by ranks on both hosts
