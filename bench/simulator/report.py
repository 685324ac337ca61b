"""Bench: the simulator's Markdown tables: the check against this machine, predictions at scale, Horovod's
512-GPU setting."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from . import calibration, mesh
from .allreduce import allreduce_time, coordinator_round
from .gpu import GpuCluster, gpu_allreduce_time, gpu_cluster
from .rounds import schedule_time
from .small import choose_small_path, small_path
from .training import INCEPTION_V3, PIECES, RESNET_101, Model, step_efficiency


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
        ranks = ", ".join(map(str, fit_ranks))
        out.append(f"**{transport}**: fitted on p = {ranks}: call {params['call_s'] * 1e6:.1f} us, "
                   f"message {params['cpu_msg_s'] * 1e6:.2f} us, wait per rank queued ahead "
                   f"{params['wait_turn_s'] * 1e6:.2f} us, byte {params['cpu_byte_s'] * 1e9:.3f} ns in cache / "
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


def error_summary(measured: Path, fit_ranks: tuple[int, ...]) -> str:
    """Per transport and world size: the typical (geometric mean) and worst factor between prediction and
    measurement over the allreduce sizes."""
    points, _ = calibration.load(measured)
    body = []
    for transport in ("shm", "tcp"):
        mine = [m for m in points if m.transport == transport]
        if not mine:
            continue
        fitted = calibration.fit(points, transport, fit_ranks)
        for p in sorted({m.ranks for m in mine}):
            logs = [math.log(allreduce_time(calibration.at_ranks(fitted, p), m.nbytes) / m.seconds)
                    for m in mine if m.ranks == p]
            typical = math.exp(sum(abs(x) for x in logs) / len(logs))
            worst = max(logs, key=abs)
            body.append([transport, str(p), "fit" if p in fit_ranks else "check", f"{typical:.2f}x",
                         f"{math.exp(worst):.2f}"])
    return table(["transport", "p", "set", "typical error factor", "worst pred / meas"], body) + "\n"


def spread(measured: Path, repeat: Path) -> str:
    """A second measurement against the first, point by point: how much of the error is the machine's noise."""
    _, first = calibration.load(measured)
    _, second = calibration.load(repeat)
    again = {(r["transport"], r["ranks"]): r for r in second}
    body = []
    for row in sorted(first, key=lambda r: (r["transport"], r["ranks"])):
        other = again.get((row["transport"], row["ranks"]))
        if other is None:
            continue
        cells = [row["transport"], str(row["ranks"])]
        cells += [f"{other['allreduce_s'][n] / t:.2f}" for n, t in row["allreduce_s"].items()]
        cells.append(f"{other['formation_s'] / row['formation_s']:.2f}")
        body.append(cells)
    sizes = [size_label(int(n)) for n in first[0]["allreduce_s"]]
    return table(["transport", "p", *sizes, "formation"], body) + "\n"


LINK_RATES = {"unlimited": None, "1g": 1e9 / 8, "1g+0.5ms": 1e9 / 8}


def check_emulated(measured: Path, multihost: Path, fit_ranks: tuple[int, ...]) -> str:
    """bench/multihost.py's emulated hosts against the simulator, at the tcp fit's CPU prices."""
    points, _ = calibration.load(measured)
    tcp = calibration.fit(points, "tcp", fit_ranks)
    body = []
    for run in calibration.load_multihost(multihost):
        hosts, per_host = (int(x) for x in run["layout"].split("x"))
        cluster = calibration.emulated_hosts(tcp, hosts, per_host, LINK_RATES[run["link"]])
        cells = [run["link"], run["layout"]]
        for n, t in sorted(run["times"].items()):
            pred = allreduce_time(cluster, n)
            cells.append(f"{ms(t)} / {ms(pred)} ({pred / t:.2f})")
        body.append(cells)
    sizes = sorted(calibration.load_multihost(multihost)[0]["times"])
    return table(["link", "hosts x ranks", *[f"{size_label(n)}: ms meas / pred (ratio)" for n in sizes]], body) + "\n"


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
    """The descriptor round both ways and the automatic choice, a direct call's total; mesh formation full and
    lazy."""
    body = []
    for p in ranks_list:
        net = gpu_cluster(p, gbit).net
        hs = mesh.for_cluster(net)
        later = mesh.new_peers_on_first_use(net, "log")
        body.append([str(p), ms(schedule_time(net, small_path(net, 0, "direct"))),
                     ms(schedule_time(net, small_path(net, 0, "log"))), choose_small_path(net, 0),
                     ms(allreduce_time(net, nbytes, small="auto")),
                     ms(mesh.full_mesh_time(net, hs)), ms(mesh.lazy_mesh_time(net, hs)),
                     ms(mesh.first_use_time(net, hs, later["descriptor round"])),
                     ms(mesh.first_use_time(replace(net, ranks_per_host=1), hs,
                                            later["engine coordinator (rank 0)"])),
                     str(2 * (p - 1))])
    head = ["ranks", "descriptor round: one round (ms)", "in log rounds (ms)", "auto picks",
            f"{size_label(nbytes)} direct call, auto (ms)", "full mesh formation (ms)", "lazy formation (ms)",
            "lazy: first log-round call (ms)", "lazy: rank 0 meets all (ms)", "sockets per rank, full mesh"]
    return f"**{gbit:g} Gbit/s**, 8 ranks per host:\n\n" + table(head, body) + "\n"


def efficiency_rows(model: Model, gpus: GpuCluster, label: str) -> list[str]:
    negotiation = schedule_time(gpus.net, coordinator_round(gpus.net))
    both = [step_efficiency(model, lambda b: gpu_allreduce_time(gpus, b), negotiation, overlap=o)
            for o in (True, False)]
    return [label, model.name, f"{model.gradient_bytes / 1e6:.0f} MB", ms(both[0]["compute_s"]),
            ms(both[0]["comm_s"]), ms(PIECES * negotiation), f"{both[0]['efficiency']:.0%}",
            f"{both[1]['efficiency']:.0%}"]


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
    return table(["setting", "model", "gradients", "compute ms/step", "communication ms/step",
                  "of which negotiation", "efficiency (overlap)", "efficiency (no overlap)"], body) + "\n"
