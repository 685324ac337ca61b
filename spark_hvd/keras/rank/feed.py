"""Rank child: a rank's batches for ``model.fit``: its RankFeed's transformed numpy batches, reshaped as the
driver's sample check did, as a ``tf.data`` pipeline of exactly the feed's steps per pass.

Keras keeps one iterator over the training input for the whole fit (``steps_per_epoch`` is given), so
the training pipeline runs pass after pass without end; it makes a new iterator over the validation
input for every evaluation, so that pipeline yields one pass per iterator, and its prefetching never
reaches into the next pass.
"""

from __future__ import annotations

import time
from collections import deque
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
    prefetch: int | None              # batches tf.data prepares ahead; None: AUTOTUNE


class Feed:
    def __init__(self, feed: Any, spec: FeedSpec, first_epoch: int, skip: int = 0,
                 ready_times: deque[float] | None = None) -> None:
        """``feed``: the split's RankFeed (transformed batches, its steps an epoch); ``skip``: batches of the
        first pass left out (an elastic fit resuming mid-epoch); later passes are whole epochs.
        ``ready_times``: where the time each batch is ready (``perf_counter``) is appended, in order; tf.data
        prefetches in its own thread, so the training step that takes the batch waited only if it began
        before then (epoch_reporter.py)."""
        self.feed, self.spec = feed, spec
        self.ready_times = ready_times
        self._skip = skip
        self.error: BaseException | None = None   # the user's own error, clearer than tf.data's wrapping
        self._stopped = False
        self._epoch = first_epoch                 # the epoch the next pass draws from
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
        stream = self._stream(self._skip)
        self._skip = 0
        first = self._next(stream)
        self._pending = (first, stream)
        return first

    def _stream(self, skip: int) -> Iterator[dict[str, np.ndarray]]:
        stream = self.feed.epoch(self._epoch, skip)
        self._epoch += 1
        return stream

    def _passes(self, count: int | None) -> Iterator[tuple[Any, ...]]:
        done = 0
        while not self._stopped and (count is None or done < count):
            yield from self._one_pass()
            done += 1

    def _one_pass(self) -> Iterator[tuple[Any, ...]]:
        if self._pending is not None:
            first, stream = self._pending
            self._pending = None
            yield self._ready(first)
        else:
            stream = self._stream(0)
        while not self._stopped:
            try:
                batch = self._next(stream)
            except StopIteration:
                return
            yield self._ready(batch)

    def _ready(self, batch: tuple[Any, ...]) -> tuple[Any, ...]:
        if self.ready_times is not None:
            self.ready_times.append(time.perf_counter())
        return batch

    def _next(self, stream: Iterator[dict[str, np.ndarray]]) -> tuple[Any, ...]:
        try:
            batch = next(stream)
        except StopIteration:
            raise
        except Exception as e:   # noqa: BLE001 - kept for the trainer, then re-raised into tf.data
            self.error = self.error or e
            raise
        return self._arrays(batch)

    def _arrays(self, batch: dict[str, np.ndarray]) -> tuple[Any, ...]:
        import keras

        from spark_hvd.data.feed.transformation import require_model_ready

        spec = self.spec
        require_model_ready(batch, [*spec.feature_cols, *spec.label_cols, *filter(None, [spec.sample_weight_col])])
        floatx = keras.config.floatx()
        x = model_inputs([column_array(batch[c], floatx) for c in spec.feature_cols], spec.shapes.inputs)
        y = model_targets([column_array(batch[c], floatx) for c in spec.label_cols], spec.shapes.labels)
        if spec.sample_weight_col is None:
            return x, y
        return x, y, column_array(batch[spec.sample_weight_col], floatx)
