"""Driver: what a Keras loss implies the model's outputs are, for ``classification='auto'``
(estimator/classifier_outputs.py)."""

from __future__ import annotations

from typing import Any

# Keras's crossentropies take probabilities unless built with from_logits=True.
_CROSSENTROPIES = ("sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy")


def scores_implied_by(loss: Any) -> str | None:
    """'logits' or 'probabilities' for Keras's crossentropy losses (a name, a loss object, or the function;
    a list of one); None for any other loss."""
    if isinstance(loss, (list, tuple)):
        return scores_implied_by(loss[0]) if len(loss) == 1 else None
    if isinstance(loss, str):
        return "probabilities" if loss in _CROSSENTROPIES else None
    config = getattr(loss, "get_config", None)
    if callable(config):
        settings = config()
        name = _snake(type(loss).__name__)
        if name in _CROSSENTROPIES:
            return "logits" if settings.get("from_logits") else "probabilities"
        return None
    return "probabilities" if getattr(loss, "__name__", None) in _CROSSENTROPIES else None


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
