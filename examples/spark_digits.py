"""The main demo (``make demo``): TorchEstimator on an embedded local[2] Spark.

Trains a small classifier on scikit-learn's digits with 2 ranks in a barrier stage, shows the
progress, checks validation accuracy, predicts a held-out DataFrame in batches, and saves and
reloads the model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import numpy as np
import torch

import digits_model
from digits_model import accuracy, class_loss, digits_classifier, digits_frames, local_spark_session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--store", default=None, help="Store prefix (default: a temporary directory)")
    args = parser.parse_args()

    import cloudpickle

    from spark_hvd import Store, TorchEstimator, TorchModel

    # The model's module lives next to this script, which the ranks do not import: ship it by value.
    cloudpickle.register_pickle_by_value(digits_model)
    spark = local_spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    workdir = tempfile.mkdtemp(prefix="spark-hvd-demo-")
    train, held_out = digits_frames(spark)
    model = digits_classifier()
    estimator = TorchEstimator(
        num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.003),
        loss=class_loss, metrics=[accuracy], feature_cols=["features"], label_cols=["label"],
        validation=0.2, batch_size=32, epochs=args.epochs, store=Store.create(args.store or f"{workdir}/store"),
        verbose=1)
    print(f"training on {train.count()} digits with 2 ranks, {args.epochs} epochs", flush=True)
    trained = estimator.fit(train)
    val_accuracy = trained.getEpochMetrics()[-1]["val_accuracy"]
    print(f"validation accuracy: {val_accuracy:.3f}")

    predicted = trained.transform(held_out).select("label", "label__output").collect()
    held_out_accuracy = float(np.mean([np.argmax(row.label__output) == row.label for row in predicted]))
    print(f"held-out accuracy ({len(predicted)} digits, batched transform): {held_out_accuracy:.3f}")

    path = f"{workdir}/digits-model"
    trained.save(path)
    reloaded = TorchModel.load(path)
    again = reloaded.transform(held_out).select("label__output").collect()
    same = all(np.array_equal(a.label__output, b.label__output) for a, b in zip(predicted, again))
    print(f"saved to {path} and reloaded: predictions {'identical' if same else 'DIFFER'}")
    spark.stop()
    if val_accuracy < 0.9 or not same:
        print("demo FAILED: validation accuracy below 0.9 or reloaded predictions differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
