"""A keyword no estimator knows fails at construction, naming it and our replacement (driver side)."""

from __future__ import annotations

import difflib
from typing import Any, Iterable

from spark_hvd.errors import InputError

# Names users bring from Horovod, its older releases or other libraries -> what to use here.
REPLACEMENTS = {
    "num_gpus": "use_gpu (Spark assigns each task its GPU; num_proc ranks use num_proc GPUs)",
    "feature_columns": "feature_cols",
    "label_columns": "label_cols",
    "lr": "the optimizer's own learning rate (and learning_rate_scaling)",
    "learning_rate": "the optimizer's own learning rate (and learning_rate_scaling)",
    "shuffling_buffer_size": "shuffle_buffer_size",
    "compression": "gradient_compression",
    "validation_split": "validation (a fraction, or a column name)",
    "validation_col": "validation (a fraction, or a column name)",
    "steps_per_epoch": "train_steps_per_epoch",
    "validation_steps": "validation_steps_per_epoch",
}


class UnknownParamError(InputError, TypeError):
    """A keyword the estimator does not have (a TypeError too, as Python's own for a bad keyword)."""


def reject_unknown(owner: str, given: Iterable[str], known: Iterable[str],
                   replacements: dict[str, str] | None = None) -> None:
    """UnknownParamError naming every keyword of ``given`` that is not ``known``, with its replacement
    (the owner's own ``replacements`` first, then the shared table) or the closest known name."""
    known = set(known)
    table = {**REPLACEMENTS, **(replacements or {})}
    unknown = [name for name in given if name not in known]
    if not unknown:
        return
    hints = []
    for name in unknown:
        if name in table:
            hints.append(f"{name!r}: use {table[name]}")
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hints.append(f"{name!r}: did you mean {close[0]!r}?" if close else f"{name!r}")
    raise UnknownParamError(f"{owner} got unknown parameter(s): {'; '.join(hints)}")


def param_names(instance: Any) -> list[str]:
    return [param.name for param in instance.params]
