"""Shipping the package to executors that lack it, as PySpark documents: a packed venv in spark.archives.

The venv holds the wheel under test, its runtime dependencies (numpy, cloudpickle) and pyarrow, which
pyspark's worker needs for the barrier stage's Arrow batches (pyspark itself comes with Spark), packed with
venv-pack; the session sets ``spark.archives=env.tar.gz#environment`` and
``PYSPARK_PYTHON=./environment/bin/python``. The workers' own interpreter is the one the venv was made from,
which lacks the package: the ranks import it from the unpacked archive.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from standalone_cluster import StandaloneCluster, WorkerSpec
from wheel_venvs import base_python, make_venv, wheel_option

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def packed_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheel = wheel_option(request.config)
    folder = tmp_path_factory.mktemp("packed")
    venv = make_venv(folder / "env", [str(wheel), "pyarrow"]).parent.parent
    archive = folder / "env.tar.gz"
    venv_pack = Path(sys.executable).parent / "venv-pack"   # the test venv's (requirements-dev.txt)
    subprocess.run([str(venv_pack), "-p", str(venv), "-o", str(archive)], check=True, timeout=300,
                   capture_output=True)
    print(f"packed env: {archive.stat().st_size / 1e6:.0f} MB")
    return archive


@pytest.fixture(scope="module")
def archive_spark(spark_environment: dict[str, str], spark_sessions: Any, packed_env: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # The daemons must not see this checkout: no PYTHONPATH of ours reaches the executors.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    workers = [WorkerSpec(), WorkerSpec()]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYSPARK_PYTHON", "./environment/bin/python")
        with StandaloneCluster(tmp_path_factory.mktemp("archive-cluster"), workers, env) as cluster:
            conf = {**spark_sessions.cluster_conf(len(workers)), "spark.archives": f"{packed_env}#environment"}
            with spark_sessions.session(cluster.master_url, conf) as spark:
                yield spark


def test_the_workers_own_python_lacks_the_package(archive_spark) -> None:
    python = base_python()

    def probe(_: Any) -> Iterator[int]:
        yield subprocess.run([python, "-c", "import spark_hvd"], capture_output=True).returncode

    assert archive_spark.sparkContext.parallelize([0], 1).mapPartitions(probe).collect() == [1]


def test_ranks_import_the_package_from_the_archive(archive_spark, packed_env: Path) -> None:
    import spark_hvd

    def rank() -> dict[str, Any]:
        import os
        import sys

        import numpy as np

        import collective as hvd
        import collective._native as native
        import spark_hvd as shipped

        hvd.init()
        total = float(hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="t")[0])
        hvd.shutdown()
        return {"total": total, "cwd": os.getcwd(), "python": sys.executable,
                "modules": [shipped.__file__, native.__file__, np.__file__]}

    results = spark_hvd.run(rank, num_proc=2, spark=archive_spark, start_timeout=120)
    assert [r["total"] for r in results] == [3.0, 3.0]
    for result in results:
        environment = str(Path(result["cwd"]) / "environment")
        assert result["python"].startswith(environment), result
        for module in result["modules"]:
            # Resolved through the unpacked archive in the executor's working directory.
            assert os.path.realpath(module).startswith(os.path.realpath(environment)), (module, result)
