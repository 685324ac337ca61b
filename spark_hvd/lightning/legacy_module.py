"""Horovod's "legacy" Lightning path (driver, which wraps; rank child, which trains): a plain ``torch.nn.Module`` given
to ``spark_hvd.lightning.TorchEstimator`` with an ``optimizer`` and a ``loss`` trains as a LightningModule.

What the wrapper does, as Horovod's ``to_lightning_module`` does:

- ``configure_optimizers`` builds the user's optimizer class on the module's parameters, with the given optimizer's
  groups and state (the ranks then scale its rate as for any Lightning fit);
- a step calls ``forward`` with the feature columns as keywords named after them (``forward(features=...)``), or
  positionally where ``forward`` has no such parameters; every column arrives as floats (Horovod's ``.float()``);
- the loss is TorchEstimator's (``loss_weights``, per-row ``sample_weight_col``, labels shaped to the outputs), logged
  as ``train_loss`` and ``val_loss``.

``input_shapes``: Horovod's Lightning hands the columns over as they are, so ``[[2]]`` with ``batch_size=4`` trains
there; an entry that is batch-free (``[-1, 1, 28, 28]``, see torch/input_shapes.py) reshapes each batch as
TorchEstimator does, which a convolutional net needs. The fit returns the plain module, trained.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import pytorch_lightning as pl
import torch

from spark_hvd.errors import InputError


class LegacyModule(pl.LightningModule):
    """``model`` trained with ``optimizer`` and ``loss`` on the named columns."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: Any, loss_weights: Any,
                 feature_cols: Sequence[str], label_cols: Sequence[str], sample_weight_col: str | None,
                 input_shapes: Sequence[Sequence[int]] | None) -> None:
        from spark_hvd.torch.batch_tensors import LossComputer, resolve_losses

        super().__init__()
        self.model = model
        # The optimizer as data (its class, its groups as parameter positions, its state), so that it is rebuilt on
        # whichever copy of the module a rank trains.
        position = {id(p): i for i, p in enumerate(model.parameters())}
        stray = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in position]
        if stray:
            raise InputError(f"the optimizer holds {len(stray)} tensor(s) that are not parameters of the model; "
                             "build it on model.parameters()")
        self._optimizer_class = type(optimizer)
        self._optimizer_groups = [[position[id(p)] for p in group["params"]] for group in optimizer.param_groups]
        self._optimizer_state = optimizer.state_dict()
        self._compute_loss = LossComputer(resolve_losses(loss, None, len(label_cols)), loss_weights,
                                          sample_weight_col is not None)
        self._feature_cols, self._label_cols = list(feature_cols), list(label_cols)
        self._sample_weight_col = sample_weight_col
        self._input_shapes = input_shapes
        self._by_keyword = _takes_keywords(model, self._feature_cols)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = list(self.model.parameters())
        template = self._optimizer_state["param_groups"]
        groups = [{**{k: v for k, v in hyper.items() if k != "params"}, "params": [params[i] for i in indices]}
                  for hyper, indices in zip(template, self._optimizer_groups)]
        optimizer = self._optimizer_class(groups)
        optimizer.load_state_dict(self._optimizer_state)
        return optimizer

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.step_loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.step_loss(batch), sync_dist=True)

    def step_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Horovod's legacy step: the model on the features, the loss against the labels."""
        from spark_hvd.torch.batch_tensors import align_labels, as_outputs

        dtype = next((p.dtype for p in self.model.parameters() if p.is_floating_point()), torch.get_default_dtype())
        features = training_features([batch[c].to(dtype) for c in self._feature_cols], self._input_shapes)
        labels = [batch[c].to(dtype) for c in self._label_cols]
        weights = batch[self._sample_weight_col].to(dtype) if self._sample_weight_col else None
        if self._by_keyword:
            outputs = as_outputs(self.model(**dict(zip(self._feature_cols, features))))
        else:
            outputs = as_outputs(self.model(*features))
        return self._compute_loss(outputs, align_labels(outputs, labels, None), weights)


def training_features(features: list[torch.Tensor], input_shapes: Sequence[Sequence[int]] | None
                      ) -> list[torch.Tensor]:
    """The feature batches as the legacy step gives them: reshaped where every entry is batch-free, else as read."""
    from spark_hvd.torch.batch_tensors import reshape_features
    from spark_hvd.torch.input_shapes import batch_free

    if batch_free(input_shapes, [tuple(f.shape[1:]) for f in features]):
        return reshape_features(features, input_shapes)
    return features


def _takes_keywords(model: torch.nn.Module, names: Sequence[str]) -> bool:
    """Whether ``forward`` takes every feature column by its name (Horovod calls ``model(**features)``)."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return True
    named = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                       inspect.Parameter.KEYWORD_ONLY)}
    return set(names) <= named
