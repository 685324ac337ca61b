"""Saving and loading an unfitted estimator, so a Pipeline holding one saves and loads (driver side).

Spark ML's JSON metadata holds the class and uid; the params themselves are framework objects
(model, optimizer, losses, callbacks), so they go together in one cloudpickle, which keeps an
optimizer bound to its model's parameters. The backend is not saved: like Horovod, a loaded
estimator runs on the backend of wherever it is fitted.

    <path>/metadata/        Spark's JSON metadata
    <path>/data/params.pkl  cloudpickle of the params that were set
"""

from __future__ import annotations

from typing import Any

import cloudpickle
import fsspec
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader, MLWriter

_PARAMS_FILE = "data/params.pkl"
_NOT_SAVED = ("backend",)


class EstimatorWriter(MLWriter):
    def __init__(self, instance: Any) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        estimator = self.instance
        DefaultParamsWriter.saveMetadata(estimator, path, self.sparkSession, paramMap={},
                                         extraMetadata={"paramsFile": _PARAMS_FILE})
        params = {param.name: value for param, value in estimator._paramMap.items()
                  if param.name not in _NOT_SAVED}
        fs, root = fsspec.core.url_to_fs(path)
        target = f"{root.rstrip('/')}/{_PARAMS_FILE}"
        fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(target, "wb") as f:
            f.write(cloudpickle.dumps(params))


def load_stage_metadata(cls: type, path: str, spark: Any) -> dict[str, Any]:
    """Spark ML's metadata at ``path``, which must describe a ``cls`` (models and estimators alike)."""
    metadata = DefaultParamsReader.loadMetadata(path, spark)
    expected = f"{cls.__module__}.{cls.__name__}"
    if metadata["class"] != expected:
        raise ValueError(f"{path} holds a {metadata['class']}, not a {expected}")
    return metadata


class EstimatorReader(MLReader):
    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> Any:
        metadata = load_stage_metadata(self.cls, path, self.sparkSession)
        fs, root = fsspec.core.url_to_fs(path)
        with fs.open(f"{root.rstrip('/')}/{metadata.get('paramsFile', _PARAMS_FILE)}", "rb") as f:
            params = cloudpickle.loads(f.read())
        estimator = self.cls()
        estimator._resetUid(metadata["uid"])
        estimator._set(**params)
        return estimator
