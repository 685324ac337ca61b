"""A rank's batches for ``model.fit`` (runs in the rank child): the reader's numpy batches, transformed
and reshaped as the driver's sample check did, as a ``tf.data`` pipeline of exactly ``steps`` batches
per pass over this rank's shard.

Keras keeps one iterator over the training input for the whole fit (``steps_per_epoch`` is given), so
the training pipeline runs pass after pass without end; it makes a new iterator over the validation
input for every evaluation, so that pipeline yields one pass per iterator, and its prefetching never
reaches into the next pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from spark_hvd.keras.batch_arrays import ArrayShapes, column_array, model_inputs, model_targets


@dataclass(frozen=True)
class FeedSpec:
    feature_cols: list[str]
    label_cols: list[str]
    sample_weight_col: str | None
    shapes: ArrayShapes
    transformation: Any               # (fn, edit_fields, removed_fields), or None
    prefetch: int | None              # batches tf.data prepares ahead; None: AUTOTUNE


class Feed:
    def __init__(self, reader: Any, spec: FeedSpec, steps: int, first_epoch: int, skip: int = 0) -> None:
        """``skip``: batches of the first pass's shard left out before its ``steps`` (an elastic fit resuming
        mid-epoch); later passes start at their shard's first batch."""
        self.reader, self.spec, self.steps = reader, spec, steps
        self._skip = skip
        self.error: BaseException | None = None   # the user's own error, clearer than tf.data's wrapping
        self._stopped = False
        self._epoch = first_epoch                 # the reader pass the next pass draws from
        self._pending: tuple[Any, Iterator[dict[str, np.ndarray]]] | None = None

    def stop(self) -> None:
        self._stopped = True

    def dataset(self, endless: bool) -> Any:
        """A tf.data.Dataset of this rank's passes (endless, or one per iterator), its signature taken
        from the first batch."""
        import tensorflow as tf

        first = self._peek()
        signature = tf.nest.map_structure(
            lambda a: tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)), first)
        dataset = tf.data.Dataset.from_generator(lambda: self._passes(None if endless else 1),
                                                 output_signature=signature)
        return dataset.prefetch(self.spec.prefetch or tf.data.AUTOTUNE)

    def _peek(self) -> tuple[Any, ...]:
        stream = iter(self.reader.batches(self._epoch))
        self._epoch += 1
        for _ in range(self._skip):
            next(stream)
        self._skip = 0
        first = self._next(stream)
        self._pending = (first, stream)
        return first

    def _passes(self, count: int | None) -> Iterator[tuple[Any, ...]]:
        done = 0
        while not self._stopped and (count is None or done < count):
            yield from self._one_pass()
            done += 1

    def _one_pass(self) -> Iterator[tuple[Any, ...]]:
        remaining = self.steps
        if self._pending is not None:
            first, stream = self._pending
            self._pending = None
            yield first
            remaining -= 1
        else:
            stream = iter(self.reader.batches(self._epoch))
            self._epoch += 1
        for _ in range(remaining):
            if self._stopped:
                return
            yield self._next(stream)

    def _next(self, stream: Iterator[dict[str, np.ndarray]]) -> tuple[Any, ...]:
        try:
            return self._arrays(next(stream))
        except Exception as e:   # noqa: BLE001 - kept for the trainer, then re-raised into tf.data
            self.error = self.error or e
            raise

    def _arrays(self, batch: dict[str, np.ndarray]) -> tuple[Any, ...]:
        import keras

        from spark_hvd.data.transformation import apply_transformation

        spec = self.spec
        if spec.transformation is not None:
            batch = apply_transformation(batch, *spec.transformation)
        floatx = keras.config.floatx()
        x = model_inputs([column_array(batch[c], floatx) for c in spec.feature_cols], spec.shapes.inputs)
        y = model_targets([column_array(batch[c], floatx) for c in spec.label_cols], spec.shapes.labels)
        if spec.sample_weight_col is None:
            return x, y
        return x, y, column_array(batch[spec.sample_weight_col], floatx)
