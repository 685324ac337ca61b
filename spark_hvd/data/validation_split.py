"""Which rows are validation rows: one rule for the input checks and the materialisation (driver side).

As in Horovod, ``validation`` is a fraction in [0, 1) of rows drawn at random (0 means none), or the
name of a column whose true (boolean) or > 0 (numeric) rows are the validation rows (the input
checks refuse nulls in it).
"""

from __future__ import annotations

import numbers
from typing import Any

from spark_hvd.data.columns import column_ref


def normalized_validation(validation: Any) -> Any:
    """None when there is no validation split (None, or a fraction of 0); otherwise as given."""
    if isinstance(validation, numbers.Real) and not isinstance(validation, bool) and validation == 0:
        return None
    return validation


def validation_flag(df: Any, validation: float | str, seed: int) -> Any:
    """A boolean, never-null Spark column that is true on validation rows."""
    from pyspark.sql import functions as F

    if not isinstance(validation, str):
        return F.rand(seed) < float(validation)
    column = F.col(column_ref(validation))
    if df.schema[validation].dataType.typeName() != "boolean":
        column = column > 0
    return F.coalesce(column, F.lit(False))
