"""DistributedOptimizer for Keras 3: any Keras optimizer, with gradients averaged across ranks before
they are applied.

The wrapper is a subclass of the optimizer's own class, made on the fly, whose ``apply`` (the method
``apply_gradients`` and ``model.fit``'s train step call) reduces the gradients first. Being the same
class by name and module, it saves into a ``.keras`` file as the plain optimizer, so any Keras can load
the file; ``collective.keras.load_model`` wraps it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import keras
import tensorflow as tf

from collective.process_sets import ProcessSet, global_process_set
from collective.reduce_ops import Average, ReduceOp
from collective.tensorflow.graph.bridge import not_converted
from collective.tensorflow.compression import Compression, Compressor
from collective.tensorflow.gradient_tape import local_layer_variables
from collective.tensorflow.gradients import GradientReducer, check_groups, scale_local


@dataclass(frozen=True)
class Settings:
    reducer: GradientReducer
    backward_passes_per_step: int = 1
    average_aggregated_gradients: bool = False
    scale_local_gradients: bool = True

    def __post_init__(self) -> None:
        if self.backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be at least 1, got {self.backward_passes_per_step}")


@dataclass(frozen=True)
class _AggregationView:
    """What Horovod's ``optimizer._agg_helper`` shows of local gradient aggregation: ``counter``, the
    backward passes summed locally since the last reduction (scripts and tests read it)."""
    optimizer: Any

    @property
    def counter(self) -> tf.Tensor:
        passes = getattr(self.optimizer, "_collective_passes", None)
        if passes is None:  # not built: no pass yet
            return tf.constant(0, tf.int64)
        return passes % self.optimizer._collective_settings.backward_passes_per_step


class _Distributed:
    """Mixed in before the optimizer's class; ``_collective_settings`` is set on each generated class."""

    _collective_settings: Settings

    @property
    def communication_wait_s(self) -> float:
        """Rank: seconds this optimizer's steps spent waiting for the gradients' allreduces (the
        communication that backward did not hide) since it was made; read it twice for an interval."""
        return self._collective_settings.reducer.wait_clock.seconds

    @property
    def _agg_helper(self) -> _AggregationView | None:
        """Horovod's handle on local aggregation: None unless ``backward_passes_per_step`` > 1."""
        if self._collective_settings.backward_passes_per_step == 1:
            return None
        return _AggregationView(self)

    def build(self, variables: Sequence[Any]) -> None:
        super().build(variables)  # type: ignore[misc]
        if self._collective_settings.backward_passes_per_step > 1:
            self._collective_accumulators_for(list(variables))

    def _collective_accumulators_for(self, variables: list[Any]) -> list[tf.Variable]:
        """Local gradient sums between reductions. Plain tf.Variables, so the optimizer's saved state
        stays that of the unwrapped optimizer (the sums are transient, like Horovod's)."""
        if getattr(self, "_collective_accumulators", None) is None:
            with tf.init_scope():
                self._collective_accumulators = {
                    id(v): tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in variables}
                self._collective_passes = tf.Variable(0, dtype=tf.int64, trainable=False)
        return [self._collective_accumulators[id(v)] for v in variables]

    def register_local_var(self, var: Any) -> None:
        """Keeps ``var``'s gradient local: it is not reduced across ranks (it is divided by the set's
        size with ``scale_local_gradients``, as Horovod does)."""
        if getattr(self, "_collective_local_vars", None) is None:
            # Past Keras's attribute tracking, which would count these variables as the optimizer's own.
            object.__setattr__(self, "_collective_local_vars", {})
        self._collective_local_vars[id(var)] = var

    def _compute_gradients(self, loss: Any, var_list: Sequence[Any], grad_loss: Any = None,
                           tape: tf.GradientTape | None = None) -> list[tuple[Any, Any]]:
        """Horovod's ``(gradient, variable)`` pairs for ``loss`` (a tensor taped on ``tape``, or a callable),
        reduced across ranks as ``apply`` would reduce them. ``apply``/``apply_gradients`` then takes them
        as they are. With ``backward_passes_per_step`` > 1 they stay local: ``apply`` sums them and reduces
        every that many passes, as Horovod's aggregation does."""
        variables = tf.nest.flatten(var_list)  # Keras 2 took nested lists of variables; so does Horovod's
        if callable(loss):
            tape = tf.GradientTape() if tape is None else tape
            with tape:
                tape.watch(variables)
                loss = loss()
        elif tape is None:
            raise ValueError("_compute_gradients needs the tape that recorded a tensor loss (or a callable loss)")
        grads = tape.gradient(loss, variables, grad_loss)
        if self._collective_settings.backward_passes_per_step == 1:
            grads = self._collective_reduce(list(grads), variables)
            # Past Keras's attribute tracking: the gradients already reduced, which apply passes on. Held
            # (not just their ids) so that no other tensor can come to share an id with them meanwhile.
            object.__setattr__(self, "_collective_reduced", [g for g in grads if g is not None])
        return list(zip(grads, variables))

    def _collective_reduce(self, grads: list[Any], variables: Sequence[Any] | None) -> list[Any]:
        """The gradients reduced across ranks, except those of variables registered as local."""
        already = getattr(self, "_collective_reduced", None)
        if already:
            object.__setattr__(self, "_collective_reduced", None)
            ids = {id(g) for g in already}
            if all(id(g) in ids for g in grads if g is not None):  # from _compute_gradients: reduced once
                return grads
        settings = self._collective_settings
        local_vars = getattr(self, "_collective_local_vars", None)
        if not local_vars:
            return settings.reducer(grads)
        if variables is None:
            variables = self._trainable_variables
        local = [id(v) in local_vars for v in variables]
        reduced = iter(settings.reducer([g for g, is_local in zip(grads, local) if not is_local]))
        return [(scale_local(g, settings.reducer.process_set) if settings.scale_local_gradients else g)
                if is_local else next(reduced)
                for g, is_local in zip(grads, local)]

    def apply_gradients(self, grads_and_vars: Any, name: str | None = None,
                        experimental_aggregate_gradients: bool = True, **kwargs: Any) -> Any:
        """Keras 3's ``apply_gradients``, also taking the Keras 2 arguments Horovod scripts pass (``name``,
        ``experimental_aggregate_gradients``), which change nothing here: the gradients are reduced in
        ``apply`` either way."""
        return super().apply_gradients(grads_and_vars, **kwargs)  # type: ignore[misc]

    @not_converted
    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None) -> Any:
        settings = self._collective_settings
        grads = list(grads)
        if settings.backward_passes_per_step == 1:
            return super().apply(self._collective_reduce(grads, trainable_variables),  # type: ignore[misc]
                                 trainable_variables)
        return self._collective_accumulate(grads, trainable_variables)

    def _collective_accumulate(self, grads: list[Any], trainable_variables: Sequence[Any] | None) -> Any:
        """Horovod's local aggregation: sum gradients locally, reduce across ranks every N passes."""
        settings = self._collective_settings
        passes = settings.backward_passes_per_step
        variables = list(trainable_variables) if trainable_variables is not None else list(self._trainable_variables)
        if not self.built:
            self.build(variables)
            self.built = True
        accumulators = self._collective_accumulators_for(variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            accumulators[i].assign_add(tf.convert_to_tensor(grads[i]))
        count = self._collective_passes.assign_add(1)

        def reduce_and_apply() -> tf.Tensor:
            scale = 1.0 / passes if settings.average_aggregated_gradients else 1.0
            totals: list[Any] = [None] * len(grads)
            for i in present:
                totals[i] = accumulators[i] * tf.cast(scale, accumulators[i].dtype) if scale != 1.0 \
                    else tf.identity(accumulators[i])
            reduced = self._collective_reduce(totals, variables)
            super(_Distributed, self).apply(reduced, variables)  # type: ignore[misc]
            for accumulator in accumulators:
                accumulator.assign(tf.zeros_like(accumulator))
            return tf.constant(True)

        def count_pass() -> tf.Tensor:
            # Iterations count backward passes, as Horovod's aggregation does.
            self.iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(count % passes == 0, reduce_and_apply, count_pass)


def distributed_class(base: type, settings: Settings) -> type:
    """A subclass of ``base`` (a Keras optimizer class) that reduces gradients with ``settings``."""
    if not (isinstance(base, type) and issubclass(base, keras.optimizers.Optimizer)):
        raise ValueError(f"DistributedOptimizer needs a Keras 3 optimizer, got {base!r}")
    if issubclass(base, _Distributed):
        raise ValueError(f"{base.__name__} is already a DistributedOptimizer")
    return type(base.__name__, (_Distributed, base),
                {"_collective_settings": settings, "__module__": base.__module__, "__qualname__": base.__qualname__})


def make_settings(compression: type[Compressor], sparse_as_dense: bool, gradient_predivide_factor: float,
                  op: ReduceOp, backward_passes_per_step: int, average_aggregated_gradients: bool,
                  scale_local_gradients: bool = True, process_set: ProcessSet = global_process_set) -> Settings:
    reducer = GradientReducer("DistributedOptimizer", op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                              gradient_predivide_factor=gradient_predivide_factor, process_set=process_set)
    return Settings(reducer, int(backward_passes_per_step), bool(average_aggregated_gradients),
                    bool(scale_local_gradients))


def DistributedOptimizer(optimizer: keras.optimizers.Optimizer, name: str | None = None, device_dense: str = "",
                         device_sparse: str = "", compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0, op: ReduceOp = Average,
                         backward_passes_per_step: int = 1, average_aggregated_gradients: bool = False,
                         num_groups: int = 0, groups: Any = None, process_set: ProcessSet = global_process_set,
                         scale_local_gradients: bool = True) -> keras.optimizers.Optimizer:
    """Returns a new optimizer of ``optimizer``'s class and configuration whose gradients are reduced
    across the ranks of ``process_set`` (``op`` Average or Sum) before they are applied, as Horovod's
    does; a rank outside the set applies its local gradients.

    ``backward_passes_per_step`` > 1 sums gradients locally and reduces them once every that many
    passes (averaged over the passes with ``average_aggregated_gradients``); ``sparse_as_dense`` turns
    IndexedSlices gradients dense before reducing them. ``name`` renames the optimizer; ``device_*``
    are accepted for Horovod compatibility. Like Horovod's, the new optimizer starts without state.
    ``register_local_var(variable)`` keeps a variable's gradient local (divided by size() with
    ``scale_local_gradients``). ``num_groups``/``groups`` are checked and need nothing more: a step's
    gradients go to the engine together.
    """
    if isinstance(optimizer, _Distributed):
        raise ValueError("the optimizer is already a DistributedOptimizer")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"DistributedOptimizer needs a Keras 3 optimizer, got {type(optimizer).__name__}")
    check_groups(num_groups, groups)
    settings = make_settings(compression, sparse_as_dense, gradient_predivide_factor, op, backward_passes_per_step,
                             average_aggregated_gradients, scale_local_gradients, process_set)
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    return distributed_class(type(optimizer), settings).from_config(config)


def PartialDistributedOptimizer(optimizer: keras.optimizers.Optimizer, name: str | None = None,
                                device_dense: str = "", device_sparse: str = "",
                                compression: type[Compressor] = Compression.none, sparse_as_dense: bool = False,
                                gradient_predivide_factor: float = 1.0, op: ReduceOp = Average,
                                backward_passes_per_step: int = 1, average_aggregated_gradients: bool = False,
                                groups: Any = None, process_set: ProcessSet = global_process_set,
                                local_layers: Any = None,
                                scale_local_gradients: bool = True) -> keras.optimizers.Optimizer:
    """A DistributedOptimizer that keeps the gradients of ``local_layers`` (a Keras layer or a list of
    them) local: they are not reduced across ranks, and with ``scale_local_gradients`` they are
    divided by size(), as Horovod does."""
    distributed = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                       gradient_predivide_factor, op, backward_passes_per_step,
                                       average_aggregated_gradients, groups=groups, process_set=process_set,
                                       scale_local_gradients=scale_local_gradients)
    for variable in local_layer_variables(local_layers):
        distributed.register_local_var(variable)
    return distributed


def wrap_in_place(optimizer: keras.optimizers.Optimizer, settings: Settings) -> keras.optimizers.Optimizer:
    """Turns an existing optimizer (a loaded one, with its state) into a distributed one."""
    if not isinstance(optimizer, _Distributed):
        optimizer.__class__ = distributed_class(type(optimizer), settings)
    return optimizer


def is_distributed(optimizer: Any) -> bool:
    return isinstance(optimizer, _Distributed)
