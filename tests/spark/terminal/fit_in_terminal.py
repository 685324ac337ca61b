"""A fit as a user runs it in a terminal (tests/spark/test_progress_display.py runs this in tmux): their own
SparkSession with Spark's console progress on, TorchEstimator with verbose=1."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/spark: the models and data helpers

import cloudpickle  # noqa: E402
import torch  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import estimator_models  # noqa: E402
from estimator_data import blobs  # noqa: E402
from spark_conf import QUICK_JVM_OPTIONS  # noqa: E402
from spark_hvd import Store, TorchEstimator  # noqa: E402

cloudpickle.register_pickle_by_value(estimator_models)   # the ranks need not import the tests
spark = (SparkSession.builder.master("local[2]").appName("terminal-progress")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "true")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.extraJavaOptions", QUICK_JVM_OPTIONS).getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
model = estimator_models.classifier(4, 3)
estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
                           loss=estimator_models.class_loss, metrics=[estimator_models.accuracy],
                           feature_cols=["features"], label_cols=["label"], batch_size=16, epochs=3,
                           validation=0.2, store=Store.create(sys.argv[1]), verbose=1)
estimator.fit(blobs(spark, 1200))
spark.stop()
print("FIT RETURNED", flush=True)
