"""Averages gradients across ranks while backward is still running.

A hook on every parameter fires once its gradient is fully accumulated and starts that gradient's
allreduce at once, so communication overlaps the rest of backward; ``synchronize`` then waits for
all of them. The engine fuses the small allreduces that become ready in the same cycle.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from collective.reduce_ops import Average, ReduceOp
from collective.torch.compression import Compressor
from collective.process_sets import ProcessSet, global_process_set
from collective.torch.routes.handles import Work
from collective.torch.ops import allreduce_async_, submit_grouped_allreduce_, synchronize
from collective.torch.sparse import sparse_allreduce_async

TOO_MANY_BACKWARDS = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
                      "Increase backward_passes_per_step to accumulate gradients locally.")


@dataclass
class _Submission:
    params: tuple[torch.Tensor, ...]
    handle: Work
    sent: list[torch.Tensor]  # what travels: the gradients themselves, or their compressed copies
    contexts: list[Any]
    sparse: bool = False      # a sparse gradient: its result is a new tensor that replaces p.grad


class GradientSync:
    """The gradient bookkeeping of one DistributedOptimizer."""

    def __init__(self, params: Sequence[torch.Tensor], names: dict[torch.Tensor, str], compression: type[Compressor],
                 op: ReduceOp, gradient_predivide_factor: float, backward_passes_per_step: int,
                 groups: Sequence[tuple[torch.Tensor, ...]], sparse_as_dense: bool = False,
                 process_set: ProcessSet = global_process_set) -> None:
        self._params = list(params)
        self._process_set = process_set
        self._sparse_as_dense = sparse_as_dense
        self._names = names
        self._compression = compression
        self._op = op
        # Average splits its division around the sum: 1/f before, f/size after (as Horovod does).
        predivide = gradient_predivide_factor if op == Average else 1.0
        self._prescale, self._postscale = 1.0 / predivide, predivide
        self.backward_passes_per_step = backward_passes_per_step
        self._group_of = {p: group for group in groups for p in group}
        self._passes_left = {p: backward_passes_per_step for p in self._params}
        self._ready_in_group: dict[tuple[torch.Tensor, ...], set[torch.Tensor]] = {}
        self._submitted: dict[torch.Tensor, _Submission] = {}
        self._order: list[_Submission] = []
        self._densified: set[torch.Tensor] = set()  # sparse gradients sent dense (sparse_as_dense)
        self._hooks: list[Any] = []

    def register_hooks(self) -> None:
        # The hooks hold the optimizer weakly: parameters outlive optimizers, and a dropped optimizer
        # must not keep allreducing gradients nobody waits for.
        this = weakref.ref(self)

        def on_grad_ready(param: torch.Tensor) -> None:
            sync = this()
            if sync is not None:
                sync.grad_ready(param)
        self._hooks = [p.register_post_accumulate_grad_hook(on_grad_ready) for p in self._params]

    def remove_hooks(self) -> None:
        """Stops allreducing gradients as backward produces them: the parameters may go on to train under
        another optimizer (a new Lightning Trainer's, after an elastic re-form) while this one is still
        referenced, so waiting for ``__del__`` would allreduce every gradient twice."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def __del__(self) -> None:
        self.remove_hooks()

    def busy(self) -> bool:
        """Whether some gradient has been produced since the last synchronize."""
        return any(left != self.backward_passes_per_step for left in self._passes_left.values())

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.backward_passes_per_step = passes
        self.reset()

    def reset(self) -> None:
        """Forgets gradients in progress (after load_state_dict); waits for any allreduce in flight."""
        for submission in self._order:
            try:
                synchronize(submission.handle)
            except Exception:  # noqa: BLE001 - these gradients are being discarded anyway
                pass
        self._order.clear()
        self._submitted.clear()
        self._densified.clear()
        self._ready_in_group.clear()
        self._passes_left = {p: self.backward_passes_per_step for p in self._params}

    def grad_ready(self, param: torch.Tensor) -> None:
        """The hook: counts backward passes and starts the allreduce after the last one."""
        if self._passes_left[param] <= 0:
            raise AssertionError(TOO_MANY_BACKWARDS)
        self._passes_left[param] -= 1
        if self._passes_left[param] > 0:
            return
        group = self._group_of.get(param)
        if group is None:
            self._submit((param,))
            return
        ready = self._ready_in_group.setdefault(group, set())
        ready.add(param)
        if len(ready) == len(group):
            del self._ready_in_group[group]
            self._submit(group)

    def _submit(self, params: tuple[torch.Tensor, ...]) -> None:
        for p in params:
            if p.grad is None:
                # Unused in this step here, but the other ranks still send it.
                p.grad = torch.zeros_like(p)
            elif p.grad.is_sparse and self._sparse_as_dense:
                # Reduced dense, handed back sparse: an optimizer such as SparseAdam takes only sparse ones.
                p.grad = p.grad.to_dense()
                self._densified.add(p)
        # Sparse gradients travel on their own (their indices and values gathered), uncompressed.
        for p in params:
            if p.grad.is_sparse:
                handle = sparse_allreduce_async(p.grad, name=self._names[p], op=self._op,
                                                process_set=self._process_set)
                self._record(_Submission((p,), handle, [p.grad], [None], sparse=True))
        params = tuple(p for p in params if not p.grad.is_sparse)
        if params:
            self._submit_dense(params)

    def _record(self, submission: _Submission) -> None:
        self._order.append(submission)
        for p in submission.params:
            self._submitted[p] = submission

    def _submit_dense(self, params: tuple[torch.Tensor, ...]) -> None:
        sent, contexts = zip(*[self._compression.compress(p.grad) for p in params])
        names = [self._names[p] for p in params]
        if params[0] in self._group_of:
            handle = submit_grouped_allreduce_(sent, names, self._op, self._prescale, self._postscale,
                                               self._process_set)
        else:
            handle = allreduce_async_(sent[0], name=names[0], op=self._op, prescale_factor=self._prescale,
                                      postscale_factor=self._postscale, process_set=self._process_set)
        self._record(_Submission(params, handle, list(sent), list(contexts)))

    def synchronize(self) -> None:
        """Starts whatever backward did not (unused parameters, passes short of the count), then
        waits for every allreduce and leaves the averaged gradients in ``p.grad``."""
        for p in self._params:
            if p not in self._submitted:
                group = self._group_of.get(p)
                self._ready_in_group.pop(group, None)
                self._submit(group if group is not None else (p,))
        error: Exception | None = None
        for submission in self._order:
            try:
                result = synchronize(submission.handle)
            except Exception as exc:  # noqa: BLE001 - raised once every other allreduce is waited for
                error = error or exc
                continue
            if submission.sparse:
                submission.params[0].grad = result
                continue
            for p, sent, ctx in zip(submission.params, submission.sent, submission.contexts):
                result = self._compression.decompress(sent, ctx)
                if result.data_ptr() != p.grad.data_ptr():  # compressed: bring the result home
                    p.grad.copy_(result)
        for p in self._densified:
            p.grad = p.grad.to_sparse()
        self._densified.clear()
        self._order.clear()
        self._submitted.clear()
        self._passes_left = {p: self.backward_passes_per_step for p in self._params}
        if error is not None:
            try:
                raise error
            finally:
                del error  # as in collective.engine.wait_each: no cycle through this frame

