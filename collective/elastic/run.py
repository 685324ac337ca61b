"""The ``@hvd.elastic.run`` wrapper: runs a training function and, when the job loses or gains a worker,
re-forms the job and calls the function again from the last commit."""

from __future__ import annotations

import functools
import traceback
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from collective import runtime
from collective.elastic import durable
from collective.elastic.errors import ElasticTimeoutError, HostsUpdatedInterrupt, is_peer_loss
from collective.elastic.state import State

T = TypeVar("T")


@dataclass(frozen=True)
class Lifecycle:
    """How a framework leaves and rejoins the job: its ``shutdown`` (drops pending handles, then the
    runtime) and its ``init`` (joins, starts the engine); ``peer_loss`` recognises a lost peer in errors the
    framework rebuilt without a cause (TensorFlow's graph errors)."""

    shutdown: Callable[[], None]
    init: Callable[[], None]
    peer_loss: Callable[[BaseException], bool] = is_peer_loss


def elastic_run(lifecycle: Lifecycle) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """The framework's ``run`` decorator: ``@hvd.elastic.run`` over ``func(state, *args, **kwargs)``."""

    def decorate(func: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(func)
        def wrapper(state: State, *args: Any, **kwargs: Any) -> T:
            """``func`` re-run from the last ``state.commit()`` each time the job re-forms (a lost or added
            worker)."""
            if not isinstance(state, State):
                raise TypeError(f"an elastic.run function takes a State first, got {type(state).__name__}")
            skip_sync = False
            commits = durable.installed()
            if commits is not None:
                _start_from_kept_commit(state, commits)
                skip_sync = True  # done there
            while True:
                if not skip_sync:
                    state.sync()
                try:
                    return func(state, *args, **kwargs)
                except HostsUpdatedInterrupt as interrupt:
                    # Raised at a commit: the state is what was just committed, on every rank.
                    skip_sync = interrupt.skip_sync
                except Exception as error:
                    if not lifecycle.peer_loss(error) or commits is not None:
                        # The caller's bug (every retry would raise it again), or a launcher that replaces the
                        # whole job after a lost peer: this process's run ends here.
                        raise
                    state.restore()
                    skip_sync = False
                    _clear_frames(error)
                reform(lifecycle)
                state.reset()
                state.on_reset()

        return wrapper

    return decorate


def _start_from_kept_commit(state: State, commits: durable.DurableCommits) -> None:
    """The first sync of a job that replaced a lost one: rank 0 restores the commit the launcher kept, every
    rank takes it from rank 0, and the reset callbacks run, as after an in-process re-form (the learning rate
    follows the new size)."""
    initial = commits.take_initial()
    if initial is not None and runtime.rank() == 0:
        state.load_snapshot(initial)
        state.restore()
    state.sync()
    if initial is not None:
        state.reset()
        state.on_reset()


def _clear_frames(error: BaseException) -> None:
    """Clears the locals of the finished frames that a retried ``error`` and the errors behind it went
    through. A frame that named the error (to raise it after waiting for the rest) forms a reference cycle
    with it, which would keep the broken formation's engine and mesh alive until a full collection."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)  # skips the frames still running (this one's callers)
        current = current.__cause__ or current.__context__


def reform(lifecycle: Lifecycle) -> None:
    """Leaves the broken formation and joins the next one the driver forms, retrying while that one breaks
    too (a member lost before its mesh was built)."""
    config = runtime.job_config() if runtime.is_initialized() else None
    while True:
        # The broken mesh (its sockets and shared-memory mappings) goes with its last reference: no full
        # garbage collection here, which costs about 0.3 s of CPU per process with torch loaded, on every
        # rank of a host at once. What held it in a reference cycle (an error kept in a local to be raised
        # later) is broken where it was made, and by _clear_frames.
        lifecycle.shutdown()
        try:
            runtime.join(config)
            lifecycle.init()
            return
        except ElasticTimeoutError:
            raise  # no round formed for this worker at all: the driver gave up or is gone
        except Exception as error:
            # A TimeoutError here is a member that never joined this round: try the next one.
            if not lifecycle.peer_loss(error) and not isinstance(error, TimeoutError):
                raise
            _clear_frames(error)  # the half-joined formation goes too
