"""Bench: scaling efficiency of data-parallel training from a model's gradient size and one GPU's speed.

Efficiency = compute / (compute + exposed communication) per step. Gradients go out in fusion buffers
(Config.fusion_threshold_bytes, 128 MiB); each cycle also pays the engine's negotiation. Overlap: gradients
become ready evenly over the backward pass (taken as 2/3 of the step's compute) and the engine ships them as
they come, in ``pieces`` fused allreduces; all can hide behind the backward pass except the last piece, which
is always exposed. ``overlap=False`` prices no overlap at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

BACKWARD_SHARE = 2 / 3
PIECES = 8  # fused allreduces per step: the engine ships gradients as the backward pass makes them


@dataclass(frozen=True)
class Model:
    """A model as the paper reports it: parameters (fp32 gradients), per-GPU batch, one GPU's images/s."""

    name: str
    params: float
    batch: int
    images_per_s: float
    source: str

    @property
    def gradient_bytes(self) -> float:
        return 4 * self.params

    @property
    def compute_s(self) -> float:
        return self.batch / self.images_per_s


# Parameter counts: the Keras Applications table; P100 throughput at batch 64: tensorflow.org's benchmark page
# (DGX-1, synthetic data): Inception V3 142 images/s; ResNet-101 is not on it, and is scaled from ResNet-50's
# 219 images/s by FLOPs (7.6 / 3.8 GFLOPs): about 110 images/s.
INCEPTION_V3 = Model("Inception V3", 23.85e6, 64, 142.0, "TF benchmarks, P100, batch 64")
RESNET_101 = Model("ResNet-101", 44.65e6, 64, 110.0, "ResNet-50's 219 img/s on P100 scaled by FLOPs")


def buffers(total_bytes: float, fusion_bytes: float, pieces: int = PIECES) -> list[float]:
    """The fused allreduces one step's gradients make: at least ``pieces``, none above the fusion threshold."""
    count = max(1, pieces, math.ceil(total_bytes / fusion_bytes))
    return [total_bytes / count] * count


def step_efficiency(model: Model, allreduce_s: Callable[[float], float], negotiation_s: float,
                    fusion_bytes: float = 128 << 20, overlap: bool = True, pieces: int = PIECES) -> dict[str, float]:
    """Compute, communication, exposed communication and efficiency of one step."""
    sizes = buffers(model.gradient_bytes, fusion_bytes, pieces)
    times = [allreduce_s(b) + negotiation_s for b in sizes]
    comm = sum(times)
    compute = model.compute_s
    exposed = max(times[-1], comm - BACKWARD_SHARE * compute) if overlap else comm
    return {"compute_s": compute, "comm_s": comm, "exposed_s": exposed,
            "efficiency": compute / (compute + exposed)}
