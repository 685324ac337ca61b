"""Driver: what a torch loss implies the model's outputs are, for ``classification='auto'``
(estimator/classifier_outputs.py)."""

from __future__ import annotations

from typing import Any


def scores_implied_by(loss: Any) -> str | None:
    """'logits', 'probabilities' or 'log_probabilities' for torch's classification losses (a module, its class,
    or the functional form; a list of one); None for any other loss."""
    import torch.nn as nn
    import torch.nn.functional as F

    if isinstance(loss, (list, tuple)):
        return scores_implied_by(loss[0]) if len(loss) == 1 else None
    by_class = {nn.CrossEntropyLoss: "logits", nn.BCEWithLogitsLoss: "logits", nn.BCELoss: "probabilities",
                nn.NLLLoss: "log_probabilities"}
    for cls, kind in by_class.items():
        if isinstance(loss, cls) or loss is cls:
            return kind
    by_function = {F.cross_entropy: "logits", F.binary_cross_entropy_with_logits: "logits",
                   F.binary_cross_entropy: "probabilities", F.nll_loss: "log_probabilities"}
    return next((kind for function, kind in by_function.items() if loss is function), None)
