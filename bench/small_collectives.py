"""Small-collective latency: the cost model behind the radix of small calls' gathers, and ours against gloo.

    python bench/small_collectives.py model [--ranks 4 8 16 32 64] [--radices 2 4 8 0] [--sizes 8 1024]
                                            [--repeat R] [--iters N]
    python bench/small_collectives.py gloo  [--ranks 8 16 32 64] [--repeat R] [--iters N]

``model`` times float64 SUM allreduces through the direct numpy API (their tensors travel inside the
descriptor round, gathered by native/algorithms/block_allgather.cc) with the gather's radix forced (0 in
--radices means one round: radix = p), at each world size and size, and fits by least squares over all
cells together:

    t = c_p + rounds(p, k) * alpha_round + messages(p, k) * alpha_msg + (p - 1) * n * beta

rounds and messages (sent per rank) follow from the schedule (block_allgather.cc's schedule_of); c_p is
the per-call cost all schedules share at p ranks (Python, the agreement check, the reduction, and on an
oversubscribed host the scheduling that grows with p); beta the cost per byte gathered, the same for every
radix since each block reaches each rank once (fitted only with several sizes). It prints the constants and
the radix they choose at each world size: the constants to put in block_allgather.cc.

``gloo`` times an 8-byte allreduce (one float64), ours with the radix the model picks against
torch.distributed's gloo backend started by torchrun, one job each per world size, interleaved, and prints
the ratio ours / gloo.

A cell is the slowest rank's mean time per call over ``iters`` calls after a warm-up; with --repeat, the
median over rounds that interleave every job. The machine may be shared: compare within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
WORKER = BENCH_DIR / "_small_worker.py"
MARKER = "@@small "


def torchrun() -> str:
    beside = Path(sys.executable).parent / "torchrun"
    return str(beside) if beside.exists() else "torchrun"


def command(impl: str, ranks: int, sizes: list[int], iters: int, radix: int, timeout_s: int) -> list[str]:
    work = [str(WORKER), "--impl", impl, "--sizes", *map(str, sizes), "--iters", str(iters), "--radix", str(radix)]
    if impl == "ours":
        return [sys.executable, "-m", "collective.run", "-np", str(ranks), "--timeout", str(timeout_s), *work]
    port = str(29600 + random.randrange(300))
    return [torchrun(), "--standalone", f"--nproc_per_node={ranks}", f"--master_port={port}", *work]


def run(argv: list[str], timeout_s: int) -> list[dict]:
    """Runs one job in its own process group (killed whole if it overruns); returns rank 0's records."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                cwd=BENCH_DIR.parent)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    records = [json.loads(line[line.index(MARKER) + len(MARKER):]) for line in text.splitlines() if MARKER in line]
    if not records:
        print(f"[bench] no result from {' '.join(argv[:6])} ...: {text[-600:]}", file=sys.stderr)
    return records


def schedule_of(size: int, radix: int) -> tuple[int, int]:
    """(rounds, messages sent per rank) of a gather with this radix: block_allgather.cc's schedule_of."""
    rounds = messages = 0
    d = 1
    while d < size:
        rounds += 1
        messages += sum(1 for m in range(1, radix) if m * d < size)
        d *= radix
    return rounds, messages


def median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def fit(cells: list[dict]) -> dict[str, float]:
    """The model's constants (see the module docstring), in seconds and seconds per byte.

    Each world size gets its own constant c_p: on an oversubscribed host every wait costs more the more
    ranks share a core, which a constant alpha cannot follow, but the choice of radix only compares
    schedules at one p. Each cell is weighted by 1 / (its world size's mean time), so that the slow large-p
    cells do not drown the others. beta is fitted only when the cells hold several sizes."""
    ranks = sorted({c["ranks"] for c in cells})
    sizes = {c["bytes"] for c in cells}
    rows, times = [], []
    for c in cells:
        p, n = c["ranks"], c["bytes"]
        scale = float(np.mean([d["mean_s"] for d in cells if d["ranks"] == p]))
        rounds, messages = schedule_of(p, c["radix"] or p)
        row = [rounds, messages] + ([(p - 1) * n] if len(sizes) > 1 else []) + [float(q == p) for q in ranks]
        rows.append([v / scale for v in row])
        times.append(c["mean_s"] / scale)
    solution, *_ = np.linalg.lstsq(np.array(rows), np.array(times), rcond=None)
    names = ["alpha_round", "alpha_msg"] + (["beta"] if len(sizes) > 1 else [])
    return dict(zip(names + [f"c_{p}" for p in ranks], map(float, solution)))


def best_radix(model: dict[str, float], size: int) -> int:
    def cost(radix: int) -> float:
        rounds, messages = schedule_of(size, radix)
        return rounds * model["alpha_round"] + messages * model["alpha_msg"]
    return min(range(2, max(size, 2) + 1), key=lambda k: (cost(k), -k))  # a tie: fewer rounds


def model_command(args: argparse.Namespace) -> None:
    runs: dict[tuple[int, int, int], list[dict]] = {}
    for round_no in range(args.repeat):
        for ranks in args.ranks:
            for radix in args.radices:
                if radix >= ranks:
                    continue  # the same schedule as one round (0)
                sizes = [n for n in args.sizes if n * (ranks - 1) <= 64 << 10]  # inside the descriptor round
                print(f"[bench] round {round_no + 1}: radix {radix or 'p'} x{ranks} (load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr, flush=True)
                for c in run(command("ours", ranks, sizes, args.iters, radix, args.timeout), args.timeout + 30):
                    runs.setdefault((ranks, radix, c["bytes"]), []).append(c)
    cells = [{**group[0], "mean_s": median([c["mean_s"] for c in group]),
              "correct": all(c["correct"] for c in group)} for group in runs.values()]
    print(f"# small allreduce by gather radix (p = one round), {time.strftime('%Y-%m-%d %H:%M')}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, median of {args.repeat} rounds\n")
    radices = [r for r in args.radices]
    print("| ranks | bytes | " + " | ".join(f"radix {r or 'p'} (us)" for r in radices) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in radices) + " |")
    by_key = {(c["ranks"], c["radix"], c["bytes"]): c for c in cells}
    for ranks in args.ranks:
        for n in args.sizes:
            row = [by_key.get((ranks, r, n)) for r in radices]
            if any(row):
                print(f"| {ranks} | {n} | " + " | ".join(f"{c['mean_s'] * 1e6:.0f}" if c else "-" for c in row) + " |")
    model = fit(cells)
    print("\nfitted: " + ", ".join(f"{k} = {v * 1e9:.3g} ns/B" if k == "beta" else f"{k} = {v * 1e6:.4g} us"
                                   for k, v in model.items()))
    picks = ", ".join(f"p={p}: {best_radix(model, p)}" for p in (2, 3, 4, 5, 6, 8, 16, 32, 64, 128, 256))
    print(f"radix the fit picks: {picks}")
    wrong = [f"radix {c['radix']} x{c['ranks']} {c['bytes']}B" for c in cells if not c["correct"]]
    if wrong:
        print("WRONG RESULTS in: " + ", ".join(wrong))


def gloo_command(args: argparse.Namespace) -> None:
    runs: dict[tuple[str, int], list[dict]] = {}
    for round_no in range(args.repeat):
        for ranks in args.ranks:
            for impl in ("ours", "gloo"):
                print(f"[bench] round {round_no + 1}: {impl} x{ranks} (load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr, flush=True)
                runs.setdefault((impl, ranks), []).extend(
                    run(command(impl, ranks, [8], args.iters, 0, args.timeout), args.timeout + 30))
    results = {key: {**group[0], "mean_s": median([r["mean_s"] for r in group]),
                     "correct": all(r["correct"] for r in group), "rounds": len(group)}
               for key, group in runs.items() if group}
    print(f"# 8-byte allreduce (one float64, SUM), ours (radix chosen by the model) vs gloo (torchrun), "
          f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"median of {args.repeat} rounds\n")
    print("| ranks | ours (us) | gloo (us) | ours / gloo |\n| --- | --- | --- | --- |")
    for ranks in args.ranks:
        ours, peer = results.get(("ours", ranks)), results.get(("gloo", ranks))
        cell = lambda r: f"{r['mean_s'] * 1e6:.0f}" if r else "failed"  # noqa: E731
        ratio = f"{ours['mean_s'] / peer['mean_s']:.2f}" if ours and peer else "-"
        print(f"| {ranks} | {cell(ours)} | {cell(peer)} | {ratio} |")
    wrong = [f"{k[0]} x{k[1]}" for k, r in results.items() if not r["correct"]]
    if wrong:
        print("WRONG RESULTS in: " + ", ".join(wrong))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    model = sub.add_parser("model")
    model.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    model.add_argument("--radices", type=int, nargs="+", default=[2, 4, 8, 0], help="0: one round")
    model.add_argument("--sizes", type=int, nargs="+", default=[8, 1024])
    gloo = sub.add_parser("gloo")
    gloo.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    for p in (model, gloo):
        p.add_argument("--iters", type=int, default=200)
        p.add_argument("--repeat", type=int, default=1, help="rounds; each cell is the median")
        p.add_argument("--timeout", type=int, default=300, help="seconds per job")
    args = parser.parse_args()
    (model_command if args.what == "model" else gloo_command)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
