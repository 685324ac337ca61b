"""The Params every estimator shares (Horovod's names), and those every trained model carries."""

from __future__ import annotations

from pyspark.ml.param import TypeConverters

from spark_hvd.estimator.param_table import ParamSpec, to_optional, to_positive_int, to_str_list

LR_SCALING_POLICIES = ("none", "linear")
READERS = ("arrow", "petastorm")

ESTIMATOR_PARAMS: list[ParamSpec] = [
    ParamSpec("num_proc", "number of ranks (one per task slot); default: every slot of the cluster",
              None, to_optional(to_positive_int)),
    ParamSpec("model", "the model to train (the framework's model object)", None),
    ParamSpec("optimizer", "the optimizer, built on the model's parameters", None),
    ParamSpec("loss", "the loss: one for every label column, or a list with one per label column", None),
    ParamSpec("loss_constructors", "functions that build the losses on the ranks (instead of loss)", None),
    ParamSpec("loss_weights", "weights of the losses when there are several label columns", None),
    ParamSpec("metrics", "metric functions metric(output, label) -> scalar, averaged across ranks", None),
    ParamSpec("feature_cols", "feature column names, one model input each", None, to_optional(to_str_list)),
    ParamSpec("label_cols", "label column names, one model output each", None, to_optional(to_str_list)),
    ParamSpec("sample_weight_col", "column of per-row weights of the loss", None,
              to_optional(TypeConverters.toString)),
    ParamSpec("validation", "fraction of rows held out for validation, or the name of a boolean column "
              "that is true for validation rows", None),
    ParamSpec("batch_size", "rows per step on each rank", 32, to_positive_int),
    ParamSpec("val_batch_size", "rows per validation step on each rank; default batch_size", None,
              to_optional(to_positive_int)),
    ParamSpec("epochs", "passes over the training data", 1, to_positive_int),
    ParamSpec("train_steps_per_epoch", "steps per epoch; default rows / (batch_size * num_proc), rounded up",
              None, to_optional(to_positive_int)),
    ParamSpec("validation_steps_per_epoch", "validation steps per epoch; default one pass", None,
              to_optional(to_positive_int)),
    ParamSpec("shuffle", "shuffle the training rows every epoch", True, TypeConverters.toBoolean),
    ParamSpec("shuffle_buffer_size", "rows in each rank's shuffle buffer", 10_000, to_positive_int),
    ParamSpec("random_seed", "seed of the model initialisation on the ranks, the split and the shuffle", 0,
              TypeConverters.toInt),
    ParamSpec("store", "the spark_hvd.Store for data, checkpoints and logs; default a local temporary "
              "directory (local masters only)", None),
    ParamSpec("run_id", "the run's name under the Store; fitting with an existing run_id resumes it", None,
              to_optional(TypeConverters.toString)),
    ParamSpec("backward_passes_per_step", "gradients accumulated locally before each allreduce", 1,
              to_positive_int),
    ParamSpec("gradient_compression", "compression of the gradients on the wire (Compression.fp16, ...)",
              None),
    ParamSpec("transformation_fn", "fn(batch: dict[column, numpy array]) -> dict, applied to every batch "
              "on the ranks before it is turned into tensors", None),
    ParamSpec("inmemory_cache_all", "keep each rank's shard in memory after the first pass", False,
              TypeConverters.toBoolean),
    ParamSpec("reader", f"how the ranks read the Parquet data: one of {READERS}", "arrow",
              TypeConverters.toString),
    ParamSpec("learning_rate_scaling", "'none' keeps the optimizer's learning rate; 'linear' multiplies it "
              "by num_proc, since every step averages num_proc batches (Goyal et al. 2017)", "none",
              TypeConverters.toString),
    ParamSpec("output_cols", "prediction column names of the model; default '<label>__output'", None,
              to_optional(to_str_list)),
    ParamSpec("verbose", "0 quiet, 1 progress bar and rank output, 2 also launch details", 1,
              TypeConverters.toInt),
    ParamSpec("use_gpu", "train on the GPU of each task when Spark assigns one", True,
              TypeConverters.toBoolean),
    ParamSpec("start_timeout", "seconds for every rank to start", 600.0, TypeConverters.toFloat),
]

MODEL_PARAMS: list[ParamSpec] = [
    ParamSpec("feature_columns", "feature column names the model reads", [], to_str_list),
    ParamSpec("label_columns", "label column names the model was trained on", [], to_str_list),
    ParamSpec("output_cols", "prediction column names transform() adds", [], to_str_list),
    ParamSpec("run_id", "the training run this model came from", "", TypeConverters.toString),
    ParamSpec("transform_batch_size", "rows per forward pass in transform()", 1024, to_positive_int),
]


def default_output_cols(label_cols: list[str]) -> list[str]:
    return [f"{label}__output" for label in label_cols]
