"""Driver: the fits Spark ML's tuners ask for (``Estimator.fitMultiple``), each under its own fit context.

CrossValidator and TrainValidationSplit call ``fitMultiple`` in the caller's thread and draw the models from
pool threads, ``parallelism`` at a time. The caller's MLflow run is visible only in the caller's thread, so it
is taken here, when the tuner asks, and each fit then logs to a run of its own nested under it; each fit's
progress lines carry its param map, so side-by-side fits stay apart on the console.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Sequence

from spark_hvd.estimator.fit_context import FitContext, MlflowParent, fitting_as, param_map_label


class TunedFits:
    """A thread-safe iterator of ``(index, model)``, as Spark ML's own: any thread may draw the next fit."""

    def __init__(self, estimator: Any, dataset: Any, param_maps: Sequence[Any],
                 mlflow_parent: MlflowParent | None) -> None:
        self._estimator = estimator
        self._dataset = dataset
        self._param_maps = list(param_maps)
        self._mlflow_parent = mlflow_parent
        self._next = 0
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return self

    def __next__(self) -> tuple[int, Any]:
        with self._lock:
            index = self._next
            if index >= len(self._param_maps):
                raise StopIteration("no models remaining")
            self._next += 1
        param_map = self._param_maps[index]
        context = FitContext(label=param_map_label(param_map), mlflow_parent=self._mlflow_parent,
                             tags={"spark_hvd.param_map_index": str(index)})
        with fitting_as(context):
            return index, self._estimator.fit(self._dataset, param_map)
