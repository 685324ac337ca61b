"""``DistributedOptimizer``: wraps any torch optimizer so that ``step()`` uses gradients averaged
across ranks. The result is an instance of a subclass of the wrapped optimizer's class, as in
Horovod, so ``isinstance`` checks, ``state_dict`` and LR schedulers keep working."""

from __future__ import annotations

import warnings
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from collective.reduce_ops import Average, ReduceOp, resolve_op
from collective.process_sets import ProcessSet, global_process_set, runtime_for
from collective.torch.compression import Compression, Compressor
from collective.torch.gradient_sync import GradientSync
from collective.api.wait_clock import WaitClock

_STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after optimizer.synchronize(). "
    "This can cause training slowdown. You may want to consider using optimizer.skip_synchronize() context "
    "if you use optimizer.synchronize() in your code.")
_ZERO_GRAD_TOO_EARLY = (
    "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
    "optimizer.synchronize(). This is prohibited as it can cause a race condition.")


def _parameter_names(param_groups: list[dict[str, Any]], named_parameters: Iterable[Any] | None) -> dict[Any, str]:
    """The allreduce name of every parameter; ranks agree on them, which lets the engine match
    gradients that become ready in a different order on different ranks."""
    if named_parameters is None:
        return {p: f"gradient.{g}.{i}" for g, group in enumerate(param_groups) for i, p in enumerate(group["params"])}
    named = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    duplicates = sorted(name for name, count in Counter(name for name, _ in named).items() if count > 1)
    if duplicates:
        raise ValueError(
            f"Parameter names in named_parameters must be unique. Found duplicates: {', '.join(duplicates)}")
    names = {p: name for name, p in named}
    unnamed = [p for group in param_groups for p in group["params"] if p not in names]
    if unnamed:
        raise ValueError(f"named_parameters was specified, but {len(unnamed)} optimizer parameter(s) were not named "
                         f"(shapes {[tuple(p.shape) for p in unnamed]})")
    return names


def _gradient_groups(params: list[Any], groups: int | Sequence[Sequence[Any]] | None) -> list[tuple[Any, ...]]:
    """Horovod's ``groups``: a count of equal contiguous groups, or explicit lists of parameters
    (parameters left out of every list are allreduced on their own)."""
    if not groups:
        return []
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError(f"groups must be a non-negative integer or a list of lists of parameters, got {groups}")
        count = min(groups, len(params))
        base, extra = divmod(len(params), count)
        bounds = [i * base + min(i, extra) for i in range(count + 1)]
        return [tuple(params[bounds[i]:bounds[i + 1]]) for i in range(count)]
    known = set(params)
    result = []
    for group in groups:
        members = tuple(p for p in group if p in known)
        if len(members) != len(group):
            raise ValueError("every parameter in groups must be one the optimizer updates and that requires grad")
        if members:
            result.append(members)
    return result


class _DistributedOptimizer:
    """Mixed in front of the wrapped optimizer's class; ``super()`` is that class."""

    def __init__(self, params: list[dict[str, Any]], named_parameters: Iterable[Any] | None,
                 compression: type[Compressor], backward_passes_per_step: int, op: ReduceOp,
                 gradient_predivide_factor: float, groups: int | Sequence[Sequence[Any]] | None,
                 sparse_as_dense: bool, process_set: ProcessSet) -> None:
        super().__init__(params)  # type: ignore[call-arg]
        names = _parameter_names(self.param_groups, named_parameters)
        # Horovod's attribute, read by its scripts and tests: parameter -> the name its gradient goes by.
        self._parameter_names = names
        trained = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._gradient_sync = GradientSync(trained, names, compression, op, gradient_predivide_factor,
                                           backward_passes_per_step, _gradient_groups(trained, groups), sparse_as_dense,
                                           process_set)
        self.process_set = process_set
        self._synchronized = False
        self._should_synchronize = True
        self._wait_clock = WaitClock()
        # As in Horovod, a rank outside the set trains on its own gradients: no hooks, nothing to wait for.
        self._included = process_set.process_set_id is None or bool(process_set.included())
        # With one rank there is nothing to overlap; synchronize() alone does the (trivial) allreduces.
        if self._included and runtime_for(process_set).topology.size > 1:
            self._gradient_sync.register_hooks()

    @property
    def backward_passes_per_step(self) -> int:
        return self._gradient_sync.backward_passes_per_step

    @backward_passes_per_step.setter
    def backward_passes_per_step(self, passes: int) -> None:
        self._gradient_sync.set_backward_passes_per_step(passes)

    def set_backward_passes_per_step(self, passes: int) -> None:
        self._gradient_sync.set_backward_passes_per_step(passes)

    @property
    def communication_wait_s(self) -> float:
        """Rank: seconds spent in ``synchronize`` (waiting for the gradients' allreduces, the communication
        that backward did not hide) since this optimizer was made; read it twice for an interval."""
        return self._wait_clock.seconds

    def synchronize(self) -> None:
        """Waits for every gradient's allreduce; afterwards ``p.grad`` holds the average (on a rank outside
        the optimizer's process set, its own gradient)."""
        if self._included:
            with self._wait_clock.timing():
                self._gradient_sync.synchronize()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Lets ``step()`` skip the synchronize that was already done, e.g. before gradient clipping::

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(_STEP_AFTER_SYNCHRONIZE)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)  # type: ignore[misc]

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._gradient_sync.busy():
            raise AssertionError(_ZERO_GRAD_TOO_EARLY)
        super().zero_grad(set_to_none)  # type: ignore[misc]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._gradient_sync.reset()
        self._synchronized = False
        self._should_synchronize = True
        super().load_state_dict(state_dict)  # type: ignore[misc]


def local_step(optimizer: torch.optim.Optimizer) -> None:
    """The optimizer's own step on this rank's gradients as they are: a DistributedOptimizer's reduces
    nothing, so no other rank has to take part."""
    if isinstance(optimizer, _DistributedOptimizer):
        super(_DistributedOptimizer, optimizer).step()  # type: ignore[misc]
    else:
        optimizer.step()


def release_gradient_hooks(optimizer: torch.optim.Optimizer) -> None:
    """Stops a DistributedOptimizer allreducing its parameters' gradients as backward produces them (nothing
    for another optimizer): its parameters may go on to train under a newer optimizer while this one is
    still referenced (a new Lightning Trainer's, after an elastic re-form)."""
    if isinstance(optimizer, _DistributedOptimizer):
        optimizer._gradient_sync.remove_hooks()


_classes: dict[type, type] = {}


def _distributed_class(base: type) -> type:
    if base not in _classes:
        _classes[base] = type(base.__name__, (_DistributedOptimizer, base), {})
    return _classes[base]


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters: Iterable[Any] | None = None,
                         compression: type[Compressor] = Compression.none, backward_passes_per_step: int = 1,
                         op: ReduceOp = Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                         groups: int | Sequence[Sequence[Any]] | None = None,
                         sparse_as_dense: bool = False,
                         process_set: ProcessSet = global_process_set) -> torch.optim.Optimizer:
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged (``op``) over all ranks.

    ``named_parameters`` names the allreduces (recommended: ``model.named_parameters()``);
    ``backward_passes_per_step`` accumulates that many backward passes locally before reducing;
    ``gradient_predivide_factor`` divides before the sum and multiplies after (Average only);
    ``groups`` (or the deprecated ``num_groups``) reduces parameters in fused groups;
    ``sparse_as_dense`` turns sparse gradients (``nn.Embedding(sparse=True)``) dense to reduce them, and the
    result sparse again for the step (SparseAdam takes only sparse ones); else their indices and values are
    gathered from every rank (``sparse_allreduce_async``);
    ``process_set`` averages over that set's ranks only (every member wraps its optimizer with it); a rank
    outside the set steps on its own gradients, as in Horovod.
    """
    op = resolve_op(op, None)  # Adasum's NotImplementedError now, not at the first backward
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be at least 1, got {backward_passes_per_step}")
    if num_groups != 0:
        warnings.warn("num_groups is deprecated; use groups", DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    cls = _distributed_class(optimizer.__class__)
    distributed = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
                      gradient_predivide_factor, groups, sparse_as_dense, process_set)
    # Keep any state the wrapped optimizer already has (e.g. loaded from a checkpoint before wrapping).
    distributed.state.update(optimizer.state)
    return distributed
