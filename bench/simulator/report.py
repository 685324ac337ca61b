"""Bench: the simulator's Markdown tables: the check against this machine, predictions at scale, Horovod's
512-GPU setting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from . import calibration, mesh
from .allreduce import allreduce_time, coordinator_round
from .cluster import Cluster, gpu_cluster
from .gpu import PCIE3, gpu_allreduce_time
from .rounds import schedule_time
from .small import choose_small_path
from .training import INCEPTION_V3, RESNET_101, Model, step_efficiency


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def size_label(nbytes: float) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes:g} B"


def check(measured: Path, fit_ranks: tuple[int, ...]) -> str:
    """The fitted parameters, then every measured point against the prediction, per transport."""
    points, rows = calibration.load(measured)
    out = []
    for transport in ("shm", "tcp"):
        if not any(m.transport == transport for m in points):
            continue
        fitted = calibration.fit(points, transport, fit_ranks)
        hs = calibration.fit_handshakes(rows, transport, fit_ranks)
        params = calibration.parameters(fitted)
        out.append(f"**{transport}**: fitted on p = {', '.join(map(str, fit_ranks))}: call {params['call_s'] * 1e6:.1f} us, "
                   f"message {params['cpu_msg_s'] * 1e6:.2f} us, wake-up when oversubscribed "
                   f"{params['cpu_switch_s'] * 1e6:.2f} us, byte {params['cpu_byte_s'] * 1e9:.3f} ns in cache / "
                   f"{params['cpu_byte_mem_s'] * 1e9:.3f} ns beyond {fitted.cache_bytes / (1 << 20):g} MiB; "
                   f"handshake {hs.wire_s * 1e6:.0f} us wire + {hs.cpu_s * 1e6:.0f} us CPU per end, "
                   f"setup {hs.setup_s * 1e3:.1f} ms.\n")
        body = []
        for row in sorted((r for r in rows if r["transport"] == transport), key=lambda r: r["ranks"]):
            p = row["ranks"]
            machine = calibration.at_ranks(fitted, p)
            cells = [str(p), "fit" if p in fit_ranks else "check", f"{row['loadavg_before']:.0f}"]
            for n, t in row["allreduce_s"].items():
                pred = allreduce_time(machine, int(n))
                cells.append(f"{ms(t)} / {ms(pred)} ({pred / t:.2f})")
            form = mesh.full_mesh_time(machine, hs)
            cells.append(f"{ms(row['formation_s'])} / {ms(form)} ({form / row['formation_s']:.2f})")
            body.append(cells)
        sizes = [size_label(int(n)) for n in rows[0]["allreduce_s"]]
        out.append(table(["p", "set", "load", *[f"{s}: ms meas / pred (ratio)" for s in sizes],
                          "formation ms meas / pred (ratio)"], body) + "\n")
    return "\n".join(out)


def scale(ranks_list: list[int], gbits: list[float], sizes: list[float]) -> str:
    """Allreduce times at scale, 8 GPUs per host: the GPU hierarchy against CPU tensors' flat ring and hierarchy."""
    out = []
    for gbit in gbits:
        body = []
        for p in ranks_list:
            gpus = gpu_cluster(p, gbit)
            for n in sizes:
                cpu = gpus.net
                body.append([str(p), size_label(n), ms(gpu_allreduce_time(gpus, n)),
                             ms(allreduce_time(cpu, n, negotiation="engine", algorithm="hierarchical")),
                             ms(allreduce_time(cpu, n, negotiation="engine", algorithm="ring"))])
        out.append(f"**{gbit:g} Gbit/s**, 8 GPUs per host (ms per allreduce):\n")
        out.append(table(["ranks", "tensor", "GPU: NCCL + TCP hierarchy", "CPU tensor: hierarchy",
                          "CPU tensor: flat ring"], body) + "\n")
    return "\n".join(out)


def small_and_mesh(ranks_list: list[int], gbit: float, nbytes: float = 4096) -> str:
    """The descriptor round both ways and the automatic choice; mesh formation full and lazy."""
    body = []
    for p in ranks_list:
        net = gpu_cluster(p, gbit).net
        hs = mesh.for_cluster(net)
        direct = allreduce_time(net, nbytes, small="direct")
        log = allreduce_time(net, nbytes, small="log")
        later = mesh.new_peers_on_first_use(net, "log")
        body.append([str(p), ms(direct), ms(log), choose_small_path(net, nbytes),
                     ms(mesh.full_mesh_time(net, hs)), ms(mesh.lazy_mesh_time(net, hs)),
                     ms(mesh.first_use_time(net, hs, later["descriptor round"])),
                     ms(mesh.first_use_time(replace(net, ranks_per_host=1), hs,
                                            later["engine coordinator (rank 0)"])),
                     str(2 * (p - 1))])
    head = [f"ranks", f"{size_label(nbytes)} allreduce, one round (ms)", "log rounds (ms)", "auto picks",
            "full mesh formation (ms)", "lazy formation (ms)", "lazy: first log-round call (ms)",
            "lazy: rank 0 meets all (ms)", "sockets per rank, full mesh"]
    return f"**{gbit:g} Gbit/s**, 8 ranks per host:\n\n" + table(head, body) + "\n"


def efficiency_rows(model: Model, gpus, label: str) -> list[str]:
    negotiation = schedule_time(gpus.net, coordinator_round(gpus.net))
    both = [step_efficiency(model, lambda b: gpu_allreduce_time(gpus, b), negotiation, overlap=o)
            for o in (True, False)]
    return [label, model.name, f"{model.gradient_bytes / 1e6:.0f} MB", ms(both[0]["compute_s"]),
            ms(both[0]["comm_s"]), f"{both[0]['efficiency']:.0%}", f"{both[1]['efficiency']:.0%}"]


def horovod_and_scale(ranks_list: list[int], gbits: list[float]) -> str:
    """Predicted scaling efficiency: Horovod's 512-GPU setting, then 256..4096 GPUs at the given rates."""
    body = []
    horovod = gpu_cluster(512, 25, gpus_per_host=4, nvlink=False)
    for model in (RESNET_101, INCEPTION_V3):
        body.append(efficiency_rows(model, horovod, "Horovod's: 128 x 4 P100, PCIe, 25 Gbit/s"))
    for gbit in gbits:
        for p in ranks_list:
            for model in (RESNET_101, INCEPTION_V3):
                body.append(efficiency_rows(model, gpu_cluster(p, gbit), f"{p} GPUs, 8/host NVLink, {gbit:g} Gbit/s"))
    return table(["setting", "model", "gradients", "compute ms/step", "allreduce ms/step",
                  "efficiency (overlap)", "efficiency (no overlap)"], body) + "\n"
