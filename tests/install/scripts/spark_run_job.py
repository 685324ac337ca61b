"""spark_hvd.run on local[2] from the installed wheel: each rank allreduces and returns its rank and its files."""

import json
import sys

from pyspark.sql import SparkSession

import spark_hvd


def train() -> dict:
    import numpy as np

    import collective as hvd

    hvd.init()
    total = float(hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="t")[0])
    rank = hvd.rank()
    hvd.shutdown()
    return {"rank": rank, "total": total, "spark_hvd": spark_hvd.__file__}


spark = (SparkSession.builder.master("local[2]").appName("installed-wheel")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
try:
    results = spark_hvd.run(train, num_proc=2, spark=spark, start_timeout=120)
finally:
    spark.stop()
print("RESULTS " + json.dumps({"driver": spark_hvd.__file__, "python": sys.executable, "ranks": results}))
