"""Lightning 1.x hooks that Horovod-era modules and callbacks still define, run on Lightning 2 (rank child).

Horovod 0.28 ran Lightning 1.x; Lightning 2 removed some hooks. Lightning 2 refuses a module that defines
``training_epoch_end`` / ``validation_epoch_end`` / ``test_epoch_end``, and silently never calls a callback's
``on_init_start``, ``on_init_end``, ``on_epoch_start``/``_end``, ``on_batch_start``/``_end`` or
``on_pretrain_routine_start``/``_end``. So that such a script runs unchanged, the objects are given, for the
fit only, a subclass that calls the old hooks where Lightning 1.x did:

- ``<stage>_epoch_end(outputs)`` at the end of the stage's epoch, with the list of the epoch's non-None step
  outputs (a training step's tensor becomes ``{'loss': tensor}``, as 1.x gave it);
- ``on_epoch_start``/``on_epoch_end`` around every training and validation epoch, ``on_batch_start``/
  ``on_batch_end`` around every training batch, the pretrain routine hooks before ``on_train_start``;
- ``on_init_start``/``on_init_end`` once the Trainer exists (``run_init_hooks``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from pytorch_lightning import Callback, LightningModule

# legacy module hook -> (the batch hook that collects outputs, the epoch hook that calls it)
_MODULE_HOOKS = {
    "training_epoch_end": ("on_train_batch_end", "on_train_epoch_end"),
    "validation_epoch_end": ("on_validation_batch_end", "on_validation_epoch_end"),
    "test_epoch_end": ("on_test_batch_end", "on_test_epoch_end"),
}
# Lightning 2 hook -> (legacy hooks called before it, legacy hooks called after it)
_CALLBACK_HOOKS = {
    "on_train_start": (("on_pretrain_routine_start", "on_pretrain_routine_end"), ()),
    "on_train_epoch_start": (("on_epoch_start",), ()),
    "on_validation_epoch_start": (("on_epoch_start",), ()),
    "on_train_epoch_end": ((), ("on_epoch_end",)),
    "on_validation_epoch_end": ((), ("on_epoch_end",)),
    "on_train_batch_start": (("on_batch_start",), ()),
    "on_train_batch_end": ((), ("on_batch_end",)),
}
_INIT_HOOKS = ("on_init_start", "on_init_end")


def adapt_module(module: LightningModule) -> Callable[[], None]:
    """Makes ``module`` run its 1.x epoch-end hooks; returns what undoes it."""
    original = type(module)
    legacy = {name: getattr(original, name) for name in _MODULE_HOOKS if callable(getattr(original, name, None))}
    if not legacy:
        return lambda: None
    # None hides the legacy names from Lightning 2's check; the originals are called from the new hooks.
    namespace: dict[str, Any] = {name: None for name in legacy}
    for name, legacy_fn in legacy.items():
        batch_hook, epoch_hook = _MODULE_HOOKS[name]
        namespace[batch_hook] = _collecting(original, batch_hook, name)
        namespace[epoch_hook] = _ending(original, epoch_hook, name, legacy_fn)
    module.__class__ = type(original.__name__, (original,), namespace)

    def restore() -> None:
        module.__class__ = original
    return restore


def _collecting(original: type, hook: str, legacy_name: str) -> Callable[..., Any]:
    def collect(self: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if outputs is not None:
            if legacy_name == "training_epoch_end" and not isinstance(outputs, dict):
                outputs = {"loss": outputs}
            self.__dict__.setdefault("_shvd_epoch_outputs", {}).setdefault(legacy_name, []).append(_detached(outputs))
        return getattr(original, hook)(self, outputs, *args, **kwargs)
    return collect


def _ending(original: type, hook: str, legacy_name: str, legacy_fn: Callable[..., Any]) -> Callable[..., Any]:
    def end(self: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = self.__dict__.setdefault("_shvd_epoch_outputs", {}).pop(legacy_name, [])
        legacy_fn(self, outputs)
        return getattr(original, hook)(self, *args, **kwargs)
    return end


def _detached(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, dict):
        return {key: _detached(item) for key, item in value.items()}
    return value


def adapt_callback(callback: Callback) -> Callback:
    """Makes ``callback`` run the 1.x hooks it defines (the same object, returned for convenience)."""
    original = type(callback)
    defined = {name for before, after in _CALLBACK_HOOKS.values() for name in (*before, *after)
               if _defines(original, name)}
    if not defined:
        return callback
    namespace = {}
    for hook, (before, after) in _CALLBACK_HOOKS.items():
        calls_before = [name for name in before if name in defined]
        calls_after = [name for name in after if name in defined]
        if calls_before or calls_after:
            namespace[hook] = _around(original, hook, calls_before, calls_after)
    callback.__class__ = type(original.__name__, (original,), namespace)
    return callback


def _around(original: type, hook: str, before: list[str], after: list[str]) -> Callable[..., Any]:
    def call(self: Any, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> Any:
        for name in before:
            getattr(original, name)(self, trainer, pl_module)
        result = getattr(original, hook)(self, trainer, pl_module, *args, **kwargs)
        for name in after:
            getattr(original, name)(self, trainer, pl_module)
        return result
    return call


def run_init_hooks(callbacks: Iterable[Callback], trainer: Any) -> None:
    """1.x called these while the Trainer was being built; here they run once it exists."""
    for callback in callbacks:
        for name in _INIT_HOOKS:
            if _defines(type(callback), name):
                getattr(callback, name)(trainer)


def _defines(cls: type, name: str) -> bool:
    return callable(getattr(cls, name, None)) and not hasattr(Callback, name)
