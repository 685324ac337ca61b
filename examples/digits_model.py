"""The digits classifier the demo and the quick-start notebook train: data, model and metric."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

CLASSES = 10


def digits_frames(spark: Any, held_out: float = 0.15, seed: int = 7) -> tuple[Any, Any]:
    """scikit-learn's 8x8 digits (1797 images, shipped inside the package: no download), pixels
    scaled to [0, 1], as (train, held_out) DataFrames with a ``features`` vector and a ``label``."""
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import LongType, StructField, StructType
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    rows = [(Vectors.dense((digits.data[i] / 16.0).tolist()), int(digits.target[i])) for i in order]
    cut = int(len(rows) * (1 - held_out))
    schema = StructType([StructField("features", VectorUDT()), StructField("label", LongType())])
    return spark.createDataFrame(rows[:cut], schema), spark.createDataFrame(rows[cut:], schema)


def digits_classifier(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def accuracy(output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    return (output.argmax(dim=1) == label).float().mean()


def class_loss(output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Cross entropy; labels reach the model as floats (as in Horovod), so they are cast to class indices."""
    return nn.functional.cross_entropy(output, label.long())


def local_spark_session(app_name: str = "spark-hvd-demo", master: str = "local[2]") -> Any:
    """An embedded Spark (local[2] by default) whose Python workers run this interpreter, on loopback."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return (SparkSession.builder.master(master).appName(app_name)
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate())
