"""The elastic errors, and which collective errors a job survives by re-forming."""

from __future__ import annotations

from collective.errors import CollectiveError, CollectiveTimeoutError, PeerFailureError
from collective.failures.picklable import PicklableError


class HostsUpdatedInterrupt(PicklableError, RuntimeError):
    """Raised on every rank by ``State.check_host_updates`` (so at ``commit``) when workers were added: the job
    re-forms with them at this commit. As Horovod's, ``skip_sync`` says the state needs no broadcast."""

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the elastic driver added workers; the job re-forms at this commit")
        self.skip_sync = skip_sync


class RoundSupersededError(CollectiveError):
    """A round was re-formed again before this worker finished joining it (a member was lost meanwhile)."""


class ElasticTimeoutError(TimeoutError):
    """No round including this worker (or too few slots, on the driver) within the elastic timeout."""


def is_peer_loss(error: BaseException) -> bool:
    """Whether ``error`` means the job lost a member (retry on the ranks left), not a bug in the caller's use.

    A bad argument or a shape mismatch is raised again on every retry, so it is never retried. Framework
    adapters may wrap the native error: its cause is looked at too.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, (PeerFailureError, CollectiveTimeoutError, RoundSupersededError)):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False
