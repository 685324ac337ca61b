"""Spark driver on an emulated host: spark_hvd.run and TorchEstimator.fit on a standalone cluster whose
workers are other emulated hosts. Prints one RESULT line per check.

    python spark_driver.py MASTER_URL DRIVER_ADDRESS STORE_DIR NUM_PROC
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers"))
sys.path.append(str(Path(__file__).resolve().parents[2] / "spark"))   # after workers/: spark_conf only
from common import report  # noqa: E402
from spark_conf import QUICK_JVM_OPTIONS  # noqa: E402

import numpy as np  # noqa: E402


def where_am_i() -> dict:
    """Runs on every rank: where it is, what its mesh uses, and an allreduce."""
    import socket

    import collective
    from collective import runtime

    total = collective.allreduce(np.array([collective.rank() + 1.0]), op=collective.Sum)
    return {"rank": collective.rank(), "hostname": socket.gethostname(), "mesh_host": runtime.current().host,
            "local_rank": collective.local_rank(), "local_size": collective.local_size(),
            "cross_rank": collective.cross_rank(), "cross_size": collective.cross_size(), "total": float(total[0])}


def blobs(spark, rows: int):
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import LongType, StructField, StructType

    rng = np.random.default_rng(0)
    centres = rng.normal(0, 4, size=(3, 4))
    labels = rng.integers(0, 3, size=rows)
    points = centres[labels] + rng.normal(0, 0.5, size=(rows, 4))
    data = [(Vectors.dense(p.tolist()), int(label)) for p, label in zip(points, labels)]
    schema = StructType([StructField("features", VectorUDT()), StructField("label", LongType())])
    return spark.createDataFrame(data, schema).repartition(2)


def class_loss(output, label):
    import torch.nn.functional as F

    return F.cross_entropy(output, label.long())


def main() -> None:
    master, driver_host, store_dir, num_proc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    from pyspark.sql import SparkSession

    import spark_hvd
    from spark_hvd import Store, TorchEstimator

    spark = (SparkSession.builder.master(master).appName("multihost")
             .config("spark.driver.host", driver_host).config("spark.driver.bindAddress", driver_host)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executor.cores", "1").config("spark.executor.memory", "512m")
             .config("spark.cores.max", str(num_proc))
             .config("spark.driver.extraJavaOptions", QUICK_JVM_OPTIONS)
             .config("spark.executor.extraJavaOptions", QUICK_JVM_OPTIONS)
             .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
             .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "180s")
             .getOrCreate())
    try:
        # With the ratio at 1.0 Spark holds a first job's tasks until every executor has registered; this
        # job is that wait. (spark_hvd.run's own slot check counts executors at once: issue 13's first
        # defect, fixed separately in spark_hvd/launch/driver/launch_checks.py.)
        spark.sparkContext.parallelize(range(num_proc), num_proc).count()
        ranks = spark_hvd.run(where_am_i, num_proc=num_proc, start_timeout=120, verbose=0)
        report(check="run", ranks=ranks)
        report(check="run-nics", ranks=spark_hvd.run(where_am_i, num_proc=num_proc, start_timeout=120, verbose=0,
                                                     nics=["eth0"]))
        import torch
        from torch import nn

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        estimator = TorchEstimator(num_proc=num_proc, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
                                   loss=class_loss, feature_cols=["features"], label_cols=["label"], batch_size=32,
                                   epochs=3, store=Store.create(store_dir), validation=0.25, verbose=0)
        fitted = estimator.fit(blobs(spark, 400))
        metrics = fitted.getEpochMetrics()
        report(check="fit", epochs=len(metrics), last=metrics[-1], first=metrics[0])
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
