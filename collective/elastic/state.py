"""Horovod's elastic state objects: what a job commits, restores after a lost peer, and syncs from rank 0."""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable

from collective.elastic import durable
from collective.elastic.errors import HostsUpdatedInterrupt
from collective.elastic.membership import hosts_updated, joined_round

BroadcastObject = Callable[[Any, int], Any]


class _Committable:
    """What a state, and each framework object inside one, does: keep a copy, put it back, take rank 0's."""

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """After a re-form, before the reset callbacks (a sampler re-partitions for the new size); none by default."""

    def snapshot(self) -> Any:
        """The last commit as one picklable object (what ``save`` kept; later saves replace it, never mutate
        it), for a launcher that keeps commits outside the job's processes (``durable``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot hand its commit to another process")

    def load_snapshot(self, snapshot: Any) -> None:
        """Makes ``snapshot`` (another process's ``snapshot()``) the last commit; ``restore`` then applies it."""
        raise NotImplementedError(f"{type(self).__name__} cannot start from another process's commit")


class State(_Committable):
    """The base of every elastic state. ``bcast_object(obj, root_rank)`` broadcasts a picklable object (each
    framework gives its own); subclasses define ``save``, ``restore`` and ``sync``."""

    def __init__(self, bcast_object: BroadcastObject, get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Functions called, in order, after every re-form (e.g. to rescale the learning rate to the new size)."""
        callbacks = list(callbacks)
        for callback in callbacks:
            if not callable(callback):
                raise TypeError(f"reset callbacks must be callable, got {type(callback).__name__}")
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by ``run`` once the job has re-formed and the state is synced."""
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state in memory as the point to restore after a lost peer, then checks for added
        workers (which raises ``HostsUpdatedInterrupt`` on every rank alike)."""
        self.save()
        commits = durable.installed()
        if commits is not None and self._rank() == 0:
            commits.sink(self.snapshot())
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt`` on every rank when the driver has formed a round with added
        workers. Rank 0 asks the driver and broadcasts the answer, so that all ranks decide alike."""
        current = joined_round()
        if current == 0:
            return  # not started by the elastic launcher: there is nobody to add
        updated = hosts_updated(current) if self._rank() == 0 else False
        if self._bcast_object(updated, 0):
            raise HostsUpdatedInterrupt(skip_sync=False)


class ObjectState(State):
    """Picklable attributes given as keyword arguments (``epoch=0, batch=0``), readable and assignable as
    ``state.epoch``; ``commit`` keeps a deep copy, ``restore`` puts it back, ``sync`` takes rank 0's."""

    def __init__(self, bcast_object: BroadcastObject, get_rank: Callable[[], int], **kwargs: Any) -> None:
        super().__init__(bcast_object, get_rank)
        self._saved_state = dict(kwargs)
        self._set_attrs()

    def save(self) -> None:
        self._saved_state = {name: copy.deepcopy(getattr(self, name)) for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, 0)
            self._set_attrs()

    def snapshot(self) -> Any:
        return self._saved_state

    def load_snapshot(self, snapshot: Any) -> None:
        self._saved_state = dict(snapshot)

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))



class StateHandler(_Committable):
    """Commits, restores and syncs one framework object (a model, an optimizer, a sampler) for a state."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self._saved: Any = None   # what save() copied; a handler's save() replaces it

    def snapshot(self) -> Any:
        return self._saved

    def load_snapshot(self, snapshot: Any) -> None:
        self._saved = snapshot


class HandlerState(ObjectState):
    """An ObjectState whose framework objects (given as ``handlers``, by attribute name) commit through
    their handler; the framework states (TorchState, TensorFlowKerasState) are built on it."""

    def __init__(self, bcast_object: BroadcastObject, get_rank: Callable[[], int], handlers: dict[str, StateHandler],
                 **kwargs: Any) -> None:
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object, get_rank, **kwargs)
        for handler in handlers.values():
            handler.save()

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in self._handlers.values():
            handler.sync()
        super().sync()
        # What a lost peer rolls back to is the state every rank now shares, not this rank's own last commit.
        self.save()

    def reset(self) -> None:
        for handler in self._handlers.values():
            handler.reset()

    def snapshot(self) -> Any:
        return {"handlers": {name: handler.snapshot() for name, handler in self._handlers.items()},
                "attrs": super().snapshot()}

    def load_snapshot(self, snapshot: Any) -> None:
        handlers = snapshot["handlers"]
        if set(handlers) != set(self._handlers):
            raise ValueError(f"cannot start from a commit of {sorted(handlers)}: this state holds "
                             f"{sorted(self._handlers)}")
        for name, handler in self._handlers.items():
            handler.load_snapshot(handlers[name])
        super().load_snapshot(snapshot["attrs"])
