"""Torch objects as bytes (``torch.save``, tensors on the CPU) and back: a module's weights, an optimizer's state."""

from __future__ import annotations

import io
from typing import Any


def torch_bytes(value: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def from_torch_bytes(blob: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)


def state_dict_bytes(module: Any) -> bytes:
    return torch_bytes({name: value.detach().cpu() for name, value in module.state_dict().items()})


def load_state_bytes(module: Any, blob: bytes) -> Any:
    """Loads the weights into ``module`` and returns it."""
    module.load_state_dict(from_torch_bytes(blob))
    return module
