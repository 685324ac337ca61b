"""Bench: GPU hosts: NCCL within a host, the native TCP across hosts through host memory.

An allreduce of a GPU tensor in the hierarchical shape: NCCL reduce-scatter among the host's GPUs, each GPU's
1/L share copied to host memory, one TCP allreduce of that share per local rank across hosts (L at once through
the NIC), copied back, NCCL allgather. The copies are not overlapped with the network (conservative).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .cluster import Cluster, Link
from .hierarchical import cross_host_steps, local_steps
from .rounds import breakdown

# NCCL's ring within one host: per-step latency and bus bandwidth (the rate a ring step moves a chunk).
NVLINK = Link(alpha_s=5e-6, bytes_per_s=130e9)  # V100-class NVLink (DGX-1); A100/H100 boxes are faster still
PCIE3 = Link(alpha_s=10e-6, bytes_per_s=10e9)  # GPUs behind PCIe gen3 switches (Pascal-era servers)


@dataclass(frozen=True)
class GpuCluster:
    net: Cluster  # ranks, hosts, the TCP links and the host CPUs
    nccl: Link
    staging_bytes_per_s: float  # device <-> host copies (PCIe)

    def nccl_view(self) -> Cluster:
        """The host's GPUs as a cluster whose intra link is NCCL's and whose host CPU does no work."""
        return replace(self.net, intra=self.nccl, cpu_msg_s=0.0, cpu_byte_s=0.0)


def gpu_allreduce_parts(gpus: GpuCluster, nbytes: float) -> dict[str, float]:
    """Seconds per phase of one GPU allreduce of ``nbytes``."""
    local = gpus.net.local_size
    share = nbytes / local
    parts = breakdown(gpus.nccl_view(), local_steps(gpus.net, nbytes, "reduce-scatter"))
    parts = {f"NCCL {k.removeprefix('local ')}": v for k, v in parts.items()}
    if gpus.net.hosts > 1:
        parts["device to host"] = share / gpus.staging_bytes_per_s
        parts.update(breakdown(gpus.net, cross_host_steps(gpus.net, share)))
        parts["host to device"] = share / gpus.staging_bytes_per_s
    ag = breakdown(gpus.nccl_view(), local_steps(gpus.net, nbytes, "allgather"))
    parts.update({f"NCCL {k.removeprefix('local ')}": v for k, v in ag.items()})
    return parts


def gpu_allreduce_time(gpus: GpuCluster, nbytes: float) -> float:
    return sum(gpu_allreduce_parts(gpus, nbytes).values())
