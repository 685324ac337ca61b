"""Driver: what makes two fits the same fit, so that a run's checkpoint is only ever resumed by the fit it is of.

A fit is:

- its data: the materialisation key (the DataFrame, the columns written, the validation split and its seed);
- its model: the framework's ``_identity_parts`` (the model's structure: parameter names, shapes and dtypes;
  the optimizer's class and hyperparameters; the framework's own training settings);
- the estimator params in ``TRAINING_PARAMS``, which change the weights a fit trains to.

Left out, so that a resume may change them:

- ``epochs``: fitting a run again with more epochs trains it on (Horovod's way to continue training); a fit
  with fewer epochs than the run was fitted with is another fit (run_claim.py);
- ``num_proc``, ``backend`` and the elastic bounds: a resume at another number of ranks rescales the learning
  rate, and the epoch's row order does not depend on the number of ranks;
- what does not change the weights: ``verbose``, ``store``, ``metrics``, ``callbacks``, ``val_batch_size``,
  ``validation_steps_per_epoch``, the reader settings, ``output_cols`` and the like;
- the initial weights, so that a failed fit resumes from a fresh session, where the model is built anew;
- code (``transformation_fn``, ``train_minibatch_fn``): it cannot be compared across sessions. A function
  (a loss) counts by its qualified name, an object by its class and its repr.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

TRAINING_PARAMS = ("feature_cols", "label_cols", "sample_weight_col", "validation", "label_shapes", "loss",
                   "loss_weights", "batch_size", "backward_passes_per_step", "train_steps_per_epoch", "shuffle",
                   "shuffle_buffer_size", "random_seed", "learning_rate_scaling", "gradient_compression")
# A part of this many characters or more is kept as its digest: the record stays small, and names what differs.
_LONG_PART = 200


@dataclass(frozen=True)
class FitIdentity:
    """``parts``: name -> a JSON value (or its digest); ``epochs``: the epochs the fit asks for."""

    parts: dict[str, Any]
    epochs: int

    @property
    def key(self) -> str:
        """The same for the same fit, whatever its epochs: what its checkpoints record."""
        return digest(self.parts)

    @property
    def digest(self) -> str:
        """The same for the same fit with the same epochs."""
        return digest({"parts": self.parts, "epochs": self.epochs})

    def record(self) -> bytes:
        return json.dumps({"fit": self.key, "epochs": self.epochs, "parts": self.parts}, indent=1).encode()

    def continues(self, record: dict[str, Any]) -> bool:
        """Whether this fit is the recorded one, asking for as many epochs or more (so it may resume it)."""
        return record.get("fit") == self.key and self.epochs >= int(record.get("epochs", 0))

    def differences(self, record: dict[str, Any]) -> str:
        """What differs from the recorded fit, in words ("its batch_size, model differ")."""
        theirs = record.get("parts") or {}
        names = sorted(name for name in {*self.parts, *theirs} if self.parts.get(name) != theirs.get(name))
        if names:
            return f"its {', '.join(names)} {'differs' if len(names) == 1 else 'differ'}"
        return f"it was fitted for {record.get('epochs')} epochs, this fit asks for {self.epochs}"


def identity_of(params: dict[str, Any], framework_parts: dict[str, Any], data_key: str, epochs: int) -> FitIdentity:
    """The identity of a fit of ``data_key`` with the estimator's ``params`` (name -> value) and the framework's
    parts (``_identity_parts``)."""
    parts: dict[str, Any] = {"data": data_key}
    for name in TRAINING_PARAMS:
        if name in params:
            parts[name] = described(params[name])
    for name, value in framework_parts.items():
        parts[name] = described(value)
    return FitIdentity({name: _short(value) for name, value in parts.items()}, int(epochs))


def described(value: Any) -> Any:
    """A JSON value that is the same for equal settings in any session: no memory addresses."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [described(item) for item in value]
    if isinstance(value, dict):
        return {str(key): described(item) for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, type) or callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    text = repr(value)
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    return name if " at 0x" in text else f"{name}: {text}"


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _short(value: Any) -> Any:
    text = json.dumps(value, sort_keys=True, default=str)
    return value if len(text) < _LONG_PART else f"sha256:{digest(value)}"
