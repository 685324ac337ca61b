"""Bench: GPU hosts: NCCL within a host, the native TCP across hosts through host memory.

An allreduce of a GPU tensor in the hierarchical shape: NCCL reduce-scatter among the host's GPUs, each GPU's
1/L share copied to host memory, one TCP allreduce of that share per local rank across hosts (L at once through
the NIC), copied back, NCCL allgather. The copies are not overlapped with the network (conservative).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .cluster import GBIT, Cluster, Link
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


def gpu_cluster(ranks: int, gbit: float, gpus_per_host: int = 8, nvlink: bool = True,
                stream_gbit: float = 30.0, nic_efficiency: float = 0.94) -> GpuCluster:
    """A GPU cluster: NCCL within a host (NVLink or PCIe), our TCP across hosts at ``gbit`` Gbit/s.

    Assumptions (stated in docs/how-it-works.md): one TCP flow reaches at most ``stream_gbit`` (a core's copy
    rate), the NIC gives ``nic_efficiency`` of its line rate to payload, hosts have enough cores for their ranks.
    """
    wire = gbit * GBIT * nic_efficiency
    net = Cluster(ranks=ranks, ranks_per_host=gpus_per_host, cores_per_host=32.0,
                  intra=Link(alpha_s=2e-6, bytes_per_s=10e9),
                  inter=Link(alpha_s=30e-6 if gbit >= 10 else 60e-6, bytes_per_s=min(wire, stream_gbit * GBIT)),
                  nic_bytes_per_s=wire, cpu_msg_s=3e-6, cpu_byte_s=0.1e-9, call_s=20e-6)
    return GpuCluster(net=net, nccl=NVLINK if nvlink else PCIE3, staging_bytes_per_s=12e9)
