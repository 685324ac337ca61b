"""Where libnccl and libcudart are looked for, in order, and loading them (once per process).

Order: the configured path (``Config.nccl_library`` / ``COLLECTIVE_NCCL_LIBRARY``); the pip wheels
(``nvidia-nccl-cu13``/``-cu12`` install ``site-packages/nvidia/nccl/lib/libnccl.so.2``; the CUDA
runtime wheels ``nvidia/cuda_runtime/lib`` or, for CUDA 13, ``nvidia/cu13/lib``); then the system's
loader path by soname.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import threading
from typing import Any, Sequence

from collective import _native

_NCCL_SONAMES = ("libnccl.so.2",)
_CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
_lock = threading.Lock()
_loaded: dict[tuple[str, ...], Any] = {}
_failures: dict[tuple[str, ...], Exception] = {}


def nvidia_package_dirs() -> list[str]:
    """The directories of the ``nvidia`` namespace package the NVIDIA wheels install into."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def library_candidates(configured: str | None, package_dirs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(libnccl candidates, libcudart candidates), in the order to try them."""
    nccl: list[str] = [configured] if configured else []
    cudart: list[str] = []
    for root in package_dirs:
        nccl += sorted(glob.glob(os.path.join(root, "nccl", "lib", "libnccl.so*")))
        nccl += sorted(glob.glob(os.path.join(root, "cu1[0-9]", "lib", "libnccl.so*")))
        cudart += sorted(glob.glob(os.path.join(root, "cuda_runtime", "lib", "libcudart.so*")))
        cudart += sorted(glob.glob(os.path.join(root, "cu1[0-9]", "lib", "libcudart.so*")))
    return nccl + list(_NCCL_SONAMES), cudart + list(_CUDART_SONAMES)


def load_library(configured: str | None = None) -> Any:
    """The loaded ``_native.NcclLibrary``; raises InvalidArgumentError saying what is missing and how
    to install it. A failure is remembered, so a job without NCCL does not retry on every tensor."""
    nccl, cudart = library_candidates(configured, nvidia_package_dirs())
    key = tuple(nccl)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        if key in _failures:
            raise _failures[key]
        try:
            library = _native.NcclLibrary(nccl, cudart)
        except Exception as e:
            _failures[key] = e
            raise
        _loaded[key] = library
        return library
