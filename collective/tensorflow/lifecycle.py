"""``init`` and ``shutdown`` as Horovod scripts call them."""

from __future__ import annotations

import collective
from collective.api.framework_init import init


def shutdown() -> None:
    """Leaves the job."""
    collective.shutdown()
