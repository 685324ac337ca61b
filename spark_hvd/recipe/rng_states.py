"""Rank child: the states of the random number generators a rank's next training steps draw from.

A checkpoint or commit keeps every rank's (``capture``, gathered in rank order), and a resume at the same
number of ranks gives each rank its own back (``restore``), so that dropout, and whatever else draws from
them, continues as if the fit had never stopped: Python's ``random``, numpy's global generator, torch's CPU
and CUDA generators, and Keras's global seed generator and those of a Keras model's layers (``model``).
The epochs' data order needs none: it is a function of the seed and the epoch (data/read/epoch_order.py).
"""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np


def capture(model: Any = None) -> dict[str, Any]:
    """This process's generators' states, picklable; ``model``: a Keras model whose layers' seed generators
    (dropout's) are kept too."""
    states: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state()}
    torch = sys.modules.get("torch")
    if torch is not None:
        states["torch"] = torch.get_rng_state().numpy()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["cuda"] = [state.numpy() for state in torch.cuda.get_rng_state_all()]
    generators = _keras_seed_generators(model)
    if generators:
        states["keras"] = [np.asarray(generator.state.numpy()) for generator in generators]
    return states


def restore(states: dict[str, Any], model: Any = None) -> None:
    """Set this process's generators to ``states`` (what ``capture`` gave, for the same ``model``)."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch = sys.modules.get("torch")
    if torch is not None and "torch" in states:
        torch.set_rng_state(torch.from_numpy(np.asarray(states["torch"])))
        if "cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([torch.from_numpy(np.asarray(s)) for s in states["cuda"]])
    saved = states.get("keras")
    if saved is not None:
        generators = _keras_seed_generators(model)
        if len(generators) == len(saved):
            for generator, state in zip(generators, saved):
                generator.state.assign(state)


def restore_own(states: list[Any] | None, rank: int, size: int, model: Any = None) -> bool:
    """Rank ``rank`` of ``size`` takes up its own of ``states`` (every rank's, in rank order) when they come
    from as many ranks; otherwise the ranks draw anew (a resume at another size trains other batches
    anyway). Whether it did."""
    if not states or len(states) != size:
        return False
    restore(states[rank], model)
    return True


def _keras_seed_generators(model: Any) -> list[Any]:
    """Keras's global seed generator (where one was made) and ``model``'s layers', in a fixed order."""
    if "keras" not in sys.modules:
        return []
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import SeedGenerator

    generators = []
    shared = global_state.get_global_attribute("global_seed_generator")
    if shared is not None:
        generators.append(shared)
    if model is not None:
        for layer in model._flatten_layers(include_self=True):
            generators.extend(g for g in getattr(layer, "_seed_generators", []) if isinstance(g, SeedGenerator))
    return generators
