"""The one decode every contender of the input-pipeline benchmark runs: JPEG bytes -> a random square crop,
flipped left-right half the time, as a (3, crop, crop) uint8 array (channels first, as torch models take).

Only numpy and Pillow: the Petastorm venv and the decode workers import it as well as the training side.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

_rng: np.random.Generator | None = None
_rng_pid = -1


def _generator() -> np.random.Generator:
    """This process's generator: a forked loader worker must not repeat its parent's crops."""
    global _rng, _rng_pid
    if _rng is None or _rng_pid != os.getpid():
        _rng, _rng_pid = np.random.default_rng([os.getpid(), int.from_bytes(os.urandom(4), "little")]), os.getpid()
    return _rng


def decode_crop_flip(content: bytes, crop: int) -> np.ndarray:
    from PIL import Image

    image = Image.open(io.BytesIO(content))
    if image.mode != "RGB":
        image = image.convert("RGB")
    width, height = image.size
    rng = _generator()
    left, top = int(rng.integers(0, width - crop + 1)), int(rng.integers(0, height - crop + 1))
    image = image.crop((left, top, left + crop, top + crop))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.ascontiguousarray(np.asarray(image).transpose(2, 0, 1))


class RowDecoder:
    """Horovod's per-row ``transformation_fn``: {"content": bytes, "label": n, ...} -> {"content": pixels,
    "label": n}. A class, not a closure, so that it pickles by reference where the bench folder is importable."""

    def __init__(self, crop: int) -> None:
        self.crop = crop

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"content": decode_crop_flip(row["content"], self.crop), "label": row["label"]}
