"""Horovod's learning-rate rule for a Lightning fit (rank child): scale the live optimizers and schedulers by the
number of ranks, and keep checkpoints unscaled so that a resume on another number of ranks scales anew.

Scaled together: each param group's ``lr`` (and ``initial_lr``, which schedulers start from) and each
scheduler's ``base_lrs`` and ``_last_lr``, so schedules keep their shape at the larger rate.
"""

from __future__ import annotations

from typing import Any, Iterable

_GROUP_KEYS = ("lr", "initial_lr")
_SCHEDULER_KEYS = ("base_lrs", "_last_lr")


def scale_live_learning_rates(optimizers: Iterable[Any], scheduler_configs: Iterable[Any], factor: float) -> None:
    if factor == 1:
        return
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            _scale_group(group, factor)
    for config in scheduler_configs:
        _scale_scheduler_state(vars(config.scheduler), factor)


def scale_checkpoint_learning_rates(checkpoint: dict[str, Any], factor: float) -> None:
    """In place, on a Lightning checkpoint dict (a weights-only one has nothing to scale)."""
    if factor == 1:
        return
    for state in checkpoint.get("optimizer_states", []):
        for group in state.get("param_groups", []):
            _scale_group(group, factor)
    for state in checkpoint.get("lr_schedulers", []):
        _scale_scheduler_state(state, factor)


def _scale_group(group: dict[str, Any], factor: float) -> None:
    for key in _GROUP_KEYS:
        if isinstance(group.get(key), (int, float)):
            group[key] = group[key] * factor


def _scale_scheduler_state(state: dict[str, Any], factor: float) -> None:
    # ReduceLROnPlateau has neither key: it works on the param groups alone.
    for key in _SCHEDULER_KEYS:
        if isinstance(state.get(key), list):
            state[key] = [value * factor for value in state[key]]
