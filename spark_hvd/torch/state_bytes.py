"""A module's weights as bytes (``torch.save`` of its state dict, on the CPU) and back."""

from __future__ import annotations

import io
from typing import Any


def state_dict_bytes(module: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({name: value.detach().cpu() for name, value in module.state_dict().items()}, buffer)
    return buffer.getvalue()


def load_state_bytes(module: Any, blob: bytes) -> Any:
    """Loads the weights into ``module`` and returns it."""
    import torch

    module.load_state_dict(torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True))
    return module
