"""spark-hvd's MLflow flavour (driver side, and wherever the logged model is loaded): a fitted model saved as a
real MLflow model.

The saved directory is the framework's own MLflow flavour (``pytorch`` for torch and Lightning modules,
``keras`` for Keras models: ``mlflow.pytorch.load_model`` gives the module back) plus this flavour's files,
and its ``python_function`` flavour is ours: ``mlflow.pyfunc.load_model(uri).predict(pdf)`` takes a pandas
DataFrame of the feature columns (scalars, or lists/arrays/vectors per row) and returns a DataFrame of the
output columns, computed and typed as ``model.transform`` computes and types them.

    spark_hvd/predictor.pkl   the model's predict factory (cloudpickled), the one transform ships to executors
    spark_hvd/spec.json       input specs (column, dtype, shape), output specs (column, shape, label kind, dtype)
"""

from __future__ import annotations

import json
import os
from typing import Any

import cloudpickle
import numpy as np

FLAVOR_NAME = "spark_hvd"
_DATA = "spark_hvd"
_PREDICTOR_FILE = "predictor.pkl"
_SPEC_FILE = "spec.json"


def save_model(spark_hvd_model: Any, path: str, mlflow_model: Any = None, signature: Any = None,
               pip_requirements: list[str] | None = None, **_: Any) -> None:
    """Saves ``spark_hvd_model`` (a fitted HorovodModel) as an MLflow model at ``path`` (MLflow's flavour
    protocol: ``mlflow.models.Model.log(flavor=this module, spark_hvd_model=...)`` calls it)."""
    import mlflow
    from mlflow.models import Model

    mlflow_model = Model() if mlflow_model is None else mlflow_model
    flavour, framework_model = framework_flavour(spark_hvd_model.getModel())
    requirements = [*(pip_requirements or []), *flavour.get_default_pip_requirements(),
                    *_keras_backend_requirement(flavour)]
    options = {"serialization_format": "pickle"} if flavour.__name__ == "mlflow.pytorch" else {}
    # The signature is the pyfunc's (a DataFrame of the feature columns), set below: the keras flavour
    # refuses any but tensor signatures.
    flavour.save_model(framework_model, path, mlflow_model=mlflow_model, pip_requirements=_unique(requirements),
                       **options)
    data = os.path.join(path, _DATA)
    os.makedirs(data)
    with open(os.path.join(data, _PREDICTOR_FILE), "wb") as f:
        f.write(cloudpickle.dumps(spark_hvd_model._predict_factory()))
    with open(os.path.join(data, _SPEC_FILE), "w", encoding="utf-8") as f:
        json.dump(_spec(spark_hvd_model), f, indent=1)
    # The framework flavour registered its own pyfunc loader (its input is tensors): ours replaces it,
    # keeping the environment files the framework flavour wrote.
    environment = mlflow_model.flavors[mlflow.pyfunc.FLAVOR_NAME].get(mlflow.pyfunc.ENV, {})
    mlflow.pyfunc.add_to_model(mlflow_model, loader_module=__name__, data=_DATA,
                               conda_env=environment.get("conda"), python_env=environment.get("virtualenv"))
    mlflow_model.add_flavor(FLAVOR_NAME, model_class=f"{type(spark_hvd_model).__module__}."
                                                    f"{type(spark_hvd_model).__name__}",
                            framework_flavor=flavour.__name__.rsplit(".", 1)[-1])
    if signature is not None:
        mlflow_model.signature = signature
    mlflow_model.save(os.path.join(path, "MLmodel"))


def framework_flavour(framework_model: Any) -> tuple[Any, Any]:
    """The MLflow flavour module for the trained object (torch.nn.Module or keras.Model), and the object."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(framework_model, torch.nn.Module):
        import mlflow.pytorch

        return mlflow.pytorch, framework_model
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(framework_model, keras.Model):
        import mlflow.keras

        return mlflow.keras, framework_model
    raise TypeError(f"no MLflow flavour for a {type(framework_model).__name__} model "
                    "(spark-hvd logs torch.nn.Module and keras.Model)")


def model_signature(spark_hvd_model: Any) -> Any:
    """The pyfunc's signature: a DataFrame of the feature columns in, a DataFrame of the output columns out
    (a column with values per row is an array of doubles; a scalar column has its own type)."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, DataType, Schema
    from mlflow.types.schema import Array

    def scalar(dtype: str) -> Any:
        kind = np.dtype(dtype).kind
        return {"f": DataType.double, "b": DataType.boolean}.get(kind, DataType.long)

    inputs = Schema([ColSpec(scalar(spec.dtype) if spec.shape == () else Array(DataType.double), spec.column)
                     for spec in spark_hvd_model._input_specs])
    outputs = Schema([ColSpec(scalar(spec.label_dtype) if spec.scalar else Array(DataType.double), column)
                      for column, spec in zip(spark_hvd_model.getOutputCols(), spark_hvd_model._output_specs)])
    return ModelSignature(inputs=inputs, outputs=outputs)


def _spec(model: Any) -> dict[str, Any]:
    return {"inputs": [[s.column, s.dtype, list(s.shape)] for s in model._input_specs],
            "outputs": [[column, list(s.shape), s.label_kind, s.label_dtype]
                        for column, s in zip(model.getOutputCols(), model._output_specs)],
            "batch_rows": int(model.getTransformBatchSize())}


def _keras_backend_requirement(flavour: Any) -> list[str]:
    """Keras runs on a backend the keras flavour does not pin: the installed distribution of it."""
    if flavour.__name__ != "mlflow.keras":
        return []
    from importlib import metadata

    import keras

    backend = keras.backend.backend()
    candidates = {"tensorflow": ("tensorflow", "tensorflow-cpu"), "jax": ("jax",), "torch": ("torch",)}
    for name in candidates.get(backend, ()):
        try:
            return [f"{name}=={metadata.version(name)}"]
        except metadata.PackageNotFoundError:
            continue
    return []


def _unique(requirements: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for requirement in requirements:
        name = requirement.split("=")[0].split("<")[0].split(">")[0].strip().lower()
        seen.setdefault(name, requirement)
    return list(seen.values())


class SparkHvdPyfunc:
    """What ``mlflow.pyfunc.load_model`` wraps: predicts a pandas DataFrame of the feature columns."""

    def __init__(self, predict_factory: Any, spec: dict[str, Any]) -> None:
        from spark_hvd.estimator.batch_transform import InputSpec, OutputSpec

        self._inputs = [InputSpec(column, dtype, tuple(shape)) for column, dtype, shape in spec["inputs"]]
        self._outputs = [OutputSpec(column, tuple(shape), kind, dtype) for column, shape, kind, dtype in spec["outputs"]]
        self._batch_rows = max(1, int(spec["batch_rows"]))
        self._predict = predict_factory()

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> Any:
        import pandas as pd
        import pyarrow as pa

        from spark_hvd.errors import InputError
        # transform's own conversions, so a pyfunc prediction is typed and checked exactly as transform's.
        from spark_hvd.estimator.batch_transform import _column_array, _output_array

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        missing = [spec.column for spec in self._inputs if spec.column not in frame.columns]
        if missing:
            raise InputError(f"predict: the DataFrame lacks feature column(s) {missing}; it has {list(frame.columns)}")
        features = [_column_array(_arrow_column(frame[spec.column], pa), spec) for spec in self._inputs]
        rows = len(frame)
        chunks = [self._predict([f[start:start + self._batch_rows] for f in features])
                  for start in range(0, rows, self._batch_rows)]
        columns = {}
        for i, spec in enumerate(self._outputs):
            values = (np.concatenate([np.asarray(c[i], dtype=np.float64).reshape(-1) for c in chunks])
                      if chunks else np.empty(0))
            columns[spec.column] = _output_array(values, rows, spec).to_pandas().to_numpy()
        return pd.DataFrame(columns, index=frame.index)


def _arrow_column(series: Any, pa: Any) -> Any:
    """One feature column as Arrow, as transform reads it: Spark ML vectors become arrays."""
    values = [v.toArray() if hasattr(v, "toArray") else v for v in series.tolist()]
    return pa.array([np.asarray(v, dtype=np.float64) for v in values] if values and np.ndim(values[0]) else values)


def _load_pyfunc(path: str) -> SparkHvdPyfunc:
    """MLflow's pyfunc loader entry point: ``path`` is this flavour's data folder."""
    with open(os.path.join(path, _PREDICTOR_FILE), "rb") as f:
        predict_factory = cloudpickle.loads(f.read())
    with open(os.path.join(path, _SPEC_FILE), encoding="utf-8") as f:
        spec = json.load(f)
    return SparkHvdPyfunc(predict_factory, spec)
