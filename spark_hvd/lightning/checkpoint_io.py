"""Lightning checkpoints kept under the Store (rank child): written locally and to ``runs/<run_id>/checkpoints``.

Lightning's checkpoint callbacks reason about local paths (they look for existing files, link ``last``),
so every checkpoint is written where Lightning says, under this rank's local run directory, and the same
bytes go to the Store at the same relative path (whole, never in place: Store.write_bytes). A checkpoint
that is not on the local disk, because the fit that wrote it ran elsewhere, is read from the Store; the
local directory's path depends only on the run_id, so the paths a resumed callback remembers still map.
Each checkpoint records the fit it belongs to (recipe/checkpoint_fit.py).
"""

from __future__ import annotations

import io
import os
import posixpath
from typing import Any, Callable, Optional

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning_fabric.utilities.cloud_io import _load as pl_load
from typing_extensions import override

from spark_hvd.recipe.checkpoint_fit import FIT_KEY


class StoreCheckpointIO(TorchCheckpointIO):
    def __init__(self, store: Any, store_dir: str, local_dir: str, fit: str | None = None) -> None:
        super().__init__()
        self.store, self.store_dir, self.local_dir = store, store_dir.rstrip("/"), os.path.abspath(local_dir)
        self.fit = fit

    def store_path(self, path: Any) -> Optional[str]:
        """Where ``path`` (local, under local_dir) is kept in the Store; None for a path outside it."""
        relative = os.path.relpath(os.path.abspath(os.fspath(path)), self.local_dir)
        if relative.startswith(os.pardir):
            return None
        return posixpath.join(self.store_dir, *relative.split(os.sep))

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        super().save_checkpoint({**checkpoint, FIT_KEY: self.fit}, path, storage_options)
        target = self.store_path(path)
        if target is not None:
            with open(path, "rb") as f:
                self.store.write_bytes(target, f.read())

    @override
    def load_checkpoint(self, path: Any, map_location: Optional[Callable] = lambda storage, loc: storage,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        # This run's own checkpoints (written by its rank 0) hold callback states and hyperparameters, which
        # torch's weights-only default refuses.
        weights_only = False if weights_only is None else weights_only
        if os.path.exists(path):
            return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        target = self.store_path(path)
        if target is None or not self.store.exists(target):
            raise FileNotFoundError(f"checkpoint {path} is neither on this machine nor in the Store "
                                    f"({target or self.store_dir})")
        return pl_load(io.BytesIO(self.store.read_bytes(target)), map_location=map_location,
                       weights_only=weights_only)

    @override
    def remove_checkpoint(self, path: Any) -> None:
        super().remove_checkpoint(path)
        target = self.store_path(path)
        if target is not None:
            self.store.delete(target)
