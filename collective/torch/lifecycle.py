"""``init`` and ``shutdown`` as Horovod scripts call them."""

from __future__ import annotations

import collective
from collective.api.framework_init import init
from collective.torch.routes.cuda_context import release_cuda_context
from collective.torch.routes.handles import forget_all


def shutdown() -> None:
    """Leaves the job; handles not yet synchronized are dropped."""
    forget_all()
    release_cuda_context()
    collective.shutdown()
