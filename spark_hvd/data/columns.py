"""ColumnSpec: what one materialised column holds, and how Spark types map onto it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ColumnSpec:
    """A column as the readers return it: batches shaped (batch, *shape) of numpy dtype `dtype`."""

    name: str
    dtype: str                      # a numpy dtype name: "float32", "int64", "bool", ...
    shape: tuple[int, ...] = ()     # () for scalars, (n,) for vectors and fixed-length arrays
    # What the DataFrame column was ("scalar", "array" or "vector"; "" when unknown): a model's
    # prediction column follows its label column's kind.
    kind: str = field(default="", compare=False)

    @property
    def row_bytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "kind": self.kind}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "ColumnSpec":
        return cls(value["name"], value["dtype"], tuple(int(n) for n in value["shape"]), value.get("kind", ""))


# Spark SQL type name (DataType.typeName()) -> numpy dtype name.
NUMERIC_TYPES: dict[str, str] = {
    "byte": "int8",
    "short": "int16",
    "integer": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "bool",
}
# ml.linalg vectors hold doubles, dense or sparse.
VECTOR_DTYPE = "float64"


def is_vector_type(data_type: Any) -> bool:
    """True for pyspark.ml.linalg.VectorUDT and the older pyspark.mllib.linalg.VectorUDT."""
    return type(data_type).__name__ == "VectorUDT"


def column_ref(name: str) -> str:
    """A column reference for F.col that survives dots and spaces in the name."""
    return "`" + name.replace("`", "``") + "`"
