"""The Params only KerasEstimator has (driver side): a capability mixin over the shared table.

``HOROVOD_KERAS_ARGUMENTS`` is the constructor signature of Horovod 0.28's
``horovod.spark.keras.KerasEstimator``: every one of them is a Param here, shared or Keras's own.
"""

from __future__ import annotations

from pyspark.ml.param import Params

from spark_hvd.estimator.param_table import ParamSpec, declare_params, to_optional, to_positive_int

KERAS_PARAMS: list[ParamSpec] = [
    ParamSpec("custom_objects", "dict of name -> class or function that Keras needs to load the model "
              "(custom layers, activations, losses, metrics), as for keras.saving.load_model; default {}", None),
    ParamSpec("checkpoint_callback", "a keras.callbacks.ModelCheckpoint (or collective.keras.callbacks."
              "BestModelCheckpoint) that rank 0 runs after the user's callbacks; its filepath is replaced "
              "by the run's, and the returned model is the one it saved last (the best one, for "
              "save_best_only)", None),
    ParamSpec("tensorflow_dataset_prefetch_buffer_size", "batches the ranks' tf.data pipeline prepares ahead "
              "of the training step; default tf.data.AUTOTUNE", None, to_optional(to_positive_int)),
]

# Keywords of the other estimators, or of other libraries, that users bring to KerasEstimator.
KERAS_REPLACEMENTS = {
    "loss_constructors": "loss (loss_constructors is TorchEstimator's; give KerasEstimator a Keras loss)",
    "input_shapes": "the model's own Input shapes (KerasEstimator reshapes each feature column to "
                    "model.inputs' shape; input_shapes is TorchEstimator's)",
    "train_minibatch_fn": "callbacks (train_minibatch_fn is TorchEstimator's; Keras's step is model.fit's)",
}

HOROVOD_KERAS_ARGUMENTS = (
    "num_proc", "model", "backend", "store", "custom_objects", "optimizer", "loss", "loss_weights",
    "sample_weight_col", "gradient_compression", "metrics", "feature_cols", "label_cols", "validation",
    "callbacks", "batch_size", "val_batch_size", "epochs", "verbose", "random_seed", "shuffle_buffer_size",
    "shuffle", "partitions_per_process", "run_id", "train_steps_per_epoch", "validation_steps_per_epoch",
    "transformation_fn", "train_reader_num_workers", "val_reader_num_workers", "reader_pool_type",
    "label_shapes", "checkpoint_callback", "inmemory_cache_all", "backend_env", "use_gpu", "mp_start_method",
)


class KerasParams(Params):
    """Mixin: the Keras-only Params, with getters and setters (getCustomObjects, setCheckpointCallback, ...)."""

    def getCustomObjects(self) -> dict:
        """The custom objects (Horovod's default: an empty dict), as a new dict."""
        return dict(self.getOrDefault(self.getParam("custom_objects")) or {})


declare_params(KerasParams, KERAS_PARAMS)
