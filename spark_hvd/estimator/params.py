"""The Params every estimator shares (Horovod's ``EstimatorParams`` names and defaults), and those every
trained model carries. Driver side."""

from __future__ import annotations

from pyspark.ml.param import TypeConverters

from spark_hvd.estimator.param_table import (
    ParamSpec,
    to_non_negative_int,
    to_optional,
    to_positive_int,
    to_str_list,
)

LR_SCALING_POLICIES = ("none", "linear")
READERS = ("arrow", "petastorm")
READER_POOL_TYPES = ("thread", "process", "dummy")
# Measured on bench/estimator.py --elastic: a commit every 50 steps costs under 5% of the fit (bench/RESULTS.md).
DEFAULT_ELASTIC_COMMIT_STEPS = 50

ESTIMATOR_PARAMS: list[ParamSpec] = [
    ParamSpec("num_proc", "number of ranks (one per task slot); default: every slot of the cluster. "
              "At most one of num_proc and backend", None, to_optional(to_positive_int)),
    ParamSpec("backend", "a spark_hvd.common.backend.Backend that runs the ranks (SparkBackend(num_proc=..., "
              "env=..., stdout=..., ...)); default SparkBackend(num_proc)", None),
    ParamSpec("model", "the model to train (the framework's model object)", None),
    ParamSpec("optimizer", "the optimizer, built on the model's parameters", None),
    ParamSpec("loss", "the loss: one for every label column, or a list with one per label column", None),
    ParamSpec("loss_weights", "weights of the losses when there are several label columns (default: "
              "1 / number of labels each)", None),
    ParamSpec("metrics", "metrics recorded per epoch, averaged across ranks", []),
    ParamSpec("feature_cols", "feature column names, one model input each", None, to_optional(to_str_list)),
    ParamSpec("label_cols", "label column names, one model output each", None, to_optional(to_str_list)),
    ParamSpec("sample_weight_col", "column of per-row weights of the loss", None,
              to_optional(TypeConverters.toString)),
    ParamSpec("validation", "fraction of rows held out for validation, or the name of a column whose "
              "true / > 0 rows are the validation rows", None),
    ParamSpec("label_shapes", "the shape each label column's batch is reshaped to before the loss (e.g. "
              "[[-1, 1]]); default: the model output's shape when the sizes agree", None),
    ParamSpec("callbacks", "the framework's training callbacks, run on every rank", []),
    ParamSpec("batch_size", "rows per step on each rank", 32, to_positive_int),
    ParamSpec("val_batch_size", "rows per validation step on each rank; default batch_size", None,
              to_optional(to_positive_int)),
    ParamSpec("epochs", "passes over the training data", 1, to_positive_int),
    ParamSpec("train_steps_per_epoch", "steps per epoch; default floor(rows / (batch_size * num_proc)), "
              "at least 1", None, to_optional(to_positive_int)),
    ParamSpec("validation_steps_per_epoch", "validation steps per epoch; default "
              "ceil(rows / (val_batch_size * num_proc))", None, to_optional(to_positive_int)),
    ParamSpec("shuffle", "shuffle the training rows every epoch", True, TypeConverters.toBoolean),
    ParamSpec("shuffle_buffer_size", "rows of each window of the epoch's order whose rows are shuffled together "
              "(the shuffle buffer); default as many as fit in 64 MiB; 0 turns shuffling off", None,
              to_optional(to_non_negative_int)),
    ParamSpec("random_seed", "seed of the split, the shuffle and the model initialisation on the ranks; "
              "default 0", None, to_optional(TypeConverters.toInt)),
    ParamSpec("store", "the spark_hvd.Store for data, checkpoints and logs; default a local temporary "
              "directory (local masters only)", None),
    ParamSpec("run_id", "the run's name under the Store; the same fit (data, model, training params) fitted "
              "again with it resumes its last checkpoint, another fit trains under '<run_id>.<digest>' with a "
              "RunIdReuseWarning", None,
              to_optional(TypeConverters.toString)),
    ParamSpec("checkpoint_every_steps", "also checkpoint every this many training steps inside an epoch (rounded "
              "up to a multiple of backward_passes_per_step), with the epoch's data position and every rank's "
              "random generators, so that a refit with the same run_id goes on from that step; default: at each "
              "epoch's end only", None, to_optional(to_positive_int)),
    ParamSpec("backward_passes_per_step", "gradients accumulated locally before each allreduce", 1,
              to_positive_int),
    ParamSpec("gradient_compression", "compression of the gradients on the wire (Compression.fp16, ...)",
              None),
    ParamSpec("transformation_fn", "fn(row: dict[column, value]) -> dict, applied to every row on the ranks "
              "before batches become tensors (Petastorm TransformSpec semantics, as in Horovod)", None),
    ParamSpec("transformation_edit_fields", "fields transformation_fn adds or changes: a list of "
              "(name, numpy dtype, shape, nullable), as Petastorm's TransformSpec takes", None),
    ParamSpec("transformation_removed_fields", "column names transformation_fn removes", None,
              to_optional(to_str_list)),
    ParamSpec("inmemory_cache_all", "keep each row group a rank reads in memory (shuffled, the ranks' shares move "
              "through the split from epoch to epoch, so a rank's cache grows toward the whole split)", False,
              TypeConverters.toBoolean),
    ParamSpec("reader", f"how the ranks read the Parquet data: one of {READERS}", "arrow",
              TypeConverters.toString),
    ParamSpec("train_reader_num_workers", "worker processes per rank that run transformation_fn on the training "
              "batches ahead of the loop (None: chosen from the cores Spark gives the task)", None,
              to_optional(to_non_negative_int)),
    ParamSpec("val_reader_num_workers", "worker processes per rank that run transformation_fn on the validation "
              "batches ahead of the loop (None: chosen from the cores Spark gives the task)", None,
              to_optional(to_non_negative_int)),
    ParamSpec("reader_pool_type", f"Petastorm worker pool, one of {READER_POOL_TYPES}", "thread",
              TypeConverters.toString),
    ParamSpec("partitions_per_process", "Horovod's Parquet partitions per rank (accepted; spark-hvd sizes "
              "row groups instead)", 10, to_positive_int),
    ParamSpec("compress_sparse_cols", "Horovod's sparse-vector compression (accepted; vectors are "
              "materialised dense)", False, TypeConverters.toBoolean),
    ParamSpec("mp_start_method", "Horovod's multiprocessing start method for Petastorm's process pool "
              "(accepted; not used)", None),
    ParamSpec("backend_env", "extra environment variables for the ranks' processes", None),
    ParamSpec("learning_rate_scaling", "'linear' (default, as Horovod) multiplies the optimizer's learning "
              "rate by num_proc, since every step averages num_proc batches; 'none' keeps it as given",
              "linear", TypeConverters.toString),
    ParamSpec("output_cols", "prediction column names of the model; default '<label>__output'", None,
              to_optional(to_str_list)),
    ParamSpec("check_finite", "before launch, refuse NaN or infinite values in the feature, label and weight "
              "columns (one pass with the null check)", True, TypeConverters.toBoolean),
    ParamSpec("stop_on_nonfinite_loss", "a NaN or infinite training loss raises on the rank that saw it, naming the "
              "epoch and step; False warns once and trains on", True, TypeConverters.toBoolean),
    ParamSpec("verbose", "0 quiet, 1 progress bar and rank output, 2 also launch details", 1,
              TypeConverters.toInt),
    ParamSpec("use_gpu", "train on the GPU of each task when Spark assigns one", True,
              TypeConverters.toBoolean),
    ParamSpec("start_timeout", "seconds for every rank to start", 600.0, TypeConverters.toFloat),
    ParamSpec("prestart_ranks", "while the data is materialised, a short Spark stage starts in each Spark worker "
              "the process that imports the framework and forks the ranks' processes (keep_warm's zygote), so "
              "the launch need not wait for that import (with a SparkBackend on a classic session, without "
              "GPUs); False leaves the first fit in a worker to import at launch", True, TypeConverters.toBoolean),
    ParamSpec("elastic", "train elastically (spark_hvd.run_elastic): a lost executor costs the steps since the "
              "last commit, and training goes on at the new number of ranks", False, TypeConverters.toBoolean),
    ParamSpec("min_num_proc", "elastic=True: the fewest ranks training goes on with; default num_proc", None,
              to_optional(to_positive_int)),
    ParamSpec("max_num_proc", "elastic=True: the most ranks the job grows to; default num_proc", None,
              to_optional(to_positive_int)),
    ParamSpec("elastic_commit_steps", "elastic=True: training steps between commits of the model, optimizer "
              "and position (rounded up to a multiple of backward_passes_per_step); one more at each "
              f"epoch's end", DEFAULT_ELASTIC_COMMIT_STEPS, to_positive_int),
]

MODEL_PARAMS: list[ParamSpec] = [
    ParamSpec("feature_columns", "feature column names the model reads", [], to_str_list),
    ParamSpec("label_columns", "label column names the model was trained on", [], to_str_list),
    ParamSpec("output_cols", "prediction column names transform() adds", [], to_str_list),
    ParamSpec("run_id", "the training run this model came from", "", TypeConverters.toString),
    ParamSpec("transform_batch_size", "rows per forward pass in transform()", 1024, to_positive_int),
    ParamSpec("inference_transformation_fn", "what transform() applies to the rows of the feature columns before "
              "predicting: None (default) the estimator's transformation_fn (with its edit and removed fields) "
              "where a feature column was encoded at fit (binary, string, image struct, arrays of varying "
              "lengths), else nothing, as Horovod's transform; True the estimator's transformation_fn always; "
              "False nothing; or a function of a row (or a BatchTransformation) used instead. The rows hold the "
              "feature columns (and a binaryFile DataFrame's path), no label", None),
]

# Model params that hold code: kept with the model's files (cloudpickle), not in its JSON metadata.
MODEL_CODE_PARAMS = ("inference_transformation_fn",)


def default_output_cols(label_cols: list[str]) -> list[str]:
    return [f"{label}__output" for label in label_cols]
