"""ColumnSpec: what one materialised column holds, and how Spark types map onto it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ColumnSpec:
    """A column as the readers return it: batches shaped (batch, *shape) of numpy dtype `dtype`."""

    name: str
    dtype: str                      # a numpy dtype name: "float32", "int64", "bool", ...; "object" for encoded
    shape: tuple[int, ...] = ()     # () for scalars, (n,) for vectors and fixed-length arrays, (8, 8) nested
    # What the DataFrame column was (one of KINDS; "" when unknown): a model's prediction column follows its
    # label column's kind, and the readers decode a column by its kind.
    kind: str = field(default="", compare=False)
    # Bytes a row takes in memory, where the dtype and shape cannot tell (encoded and ragged columns).
    mean_row_bytes: int = field(default=0, compare=False)

    @property
    def row_bytes(self) -> int:
        if self.kind in ENCODED_KINDS:
            return max(1, self.mean_row_bytes)
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))

    @property
    def encoded(self) -> bool:
        """Whether rows arrive as Python objects (bytes, str, arrays of their own shape), which only a
        ``transformation_fn`` can turn into what a model takes."""
        return self.kind in ENCODED_KINDS

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "kind": self.kind,
                "mean_row_bytes": self.mean_row_bytes}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "ColumnSpec":
        return cls(value["name"], value["dtype"], tuple(int(n) for n in value["shape"]), value.get("kind", ""),
                   int(value.get("mean_row_bytes", 0)))


# What a DataFrame column can be, as the readers return it:
# - "scalar", "array" (fixed length), "vector" (ml Vector), "nested" (fixed-shape arrays of arrays, any
#   depth): numpy arrays shaped (batch, *shape);
# - "ragged" (1-D arrays of varying lengths), "binary", "string", "image" (Spark's image struct): object
#   arrays of one value per row (an array of its own length, bytes, str, or the image's (height, width,
#   channels) uint8 pixels), for transformation_fn to decode.
KINDS = ("scalar", "array", "vector", "nested", "ragged", "binary", "string", "image")
ENCODED_KINDS = frozenset({"ragged", "binary", "string", "image"})
# The fields of Spark's image struct (spark.read.format("image")), in its order.
IMAGE_FIELDS = ("origin", "height", "width", "nChannels", "mode", "data")


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


def is_image_type(data_type: Any) -> bool:
    """Spark's image schema: a struct of exactly IMAGE_FIELDS."""
    return data_type.typeName() == "struct" and tuple(f.name for f in data_type.fields) == IMAGE_FIELDS


def column_ref(name: str) -> str:
    """A column reference for F.col that survives dots and spaces in the name."""
    return "`" + name.replace("`", "``") + "`"
