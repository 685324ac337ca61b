"""Rank child: the errors of a rank's ``model.fit`` as the user and the driver should see them."""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator


@contextlib.contextmanager
def clearer_fit_errors(feeds: Iterable[Any]) -> Iterator[None]:
    """Around a ``model.fit`` over ``feeds``: an error in transformation_fn reaches fit wrapped by tf.data,
    so the user's own is raised instead, and a peer's failure stays one (``_as_peer_failure``); the feeds
    stop at the end."""
    feeds = list(feeds)
    try:
        yield
    except Exception as e:
        for feed in feeds:
            if feed.error is not None:
                raise feed.error from None
        peer_failure = _as_peer_failure(e)
        if peer_failure is not None:
            raise peer_failure from e
        raise
    finally:
        for feed in feeds:
            feed.stop()


def _as_peer_failure(error: BaseException) -> BaseException | None:
    """model.fit runs the allreduce inside tf.function, where a collective error reaches Python as a
    tf.errors.OpError whose message names the collective error's class (collective.tensorflow.graph.bridge).
    A peer's failure must stay recognisable as one, or the driver would blame this rank for it."""
    import collective

    if isinstance(error, collective.PeerFailureError):
        return None
    message = str(error)
    marker = f"{collective.PeerFailureError.__name__}: "
    if marker not in message:
        return None
    return collective.PeerFailureError(message[message.index(marker) + len(marker):].splitlines()[0])
