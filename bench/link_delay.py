"""Small allreduce latency on links with a delay: does it take as few network steps as it should?

    sudo .venv/bin/python bench/link_delay.py [--delay-ms 0.5] [--sizes 4K 64K] [--repeat 3]

Issue #13's target: with 0.5 ms one-way delay, a 4 KiB allreduce on 4 hosts costs at most
2 x (algorithm steps x one-way delay). Ranks run inside a network namespace of their own whose loopback
delays every packet by --delay-ms (netem), so every TCP hop costs one delay while shared memory costs
none; the machine's own namespace is untouched, and the namespace is removed at the end. Hosts are
emulated by host keys (one per host): same-host pairs use shared memory, the others TCP.

Layouts: 4 hosts x 1 rank, and 4 hosts x 2 ranks (interleaved, as Spark places them) with the allreduce
forced flat and hierarchical; gloo (ring over TCP, one rank per host) is the peer. Prints per-call time,
the network steps of our algorithm, time / (steps x delay) (the target: <= 2) and ours/gloo.
Needs root (ip netns, tc).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce import collect, human_size, make_job, merge_rounds, parse_size, run_job  # noqa: E402

# The native one-round path (native/algorithms/collective_op.h kSmallCallBytes): a direct call whose tensor
# times (ranks - 1) fits goes to every peer inside the descriptor round.
SMALL_CALL_BYTES = 64 << 10
# (label, implementation, host of each rank)
LAYOUTS = (
    ("4 hosts x 1, ours", "ours-flat", "A,B,C,D"),
    ("4 hosts x 1, gloo", "gloo", "A,B,C,D"),
    ("4 hosts x 2, ours flat", "ours-flat", "A,B,C,D,A,B,C,D"),
    ("4 hosts x 2, ours hierarchical", "ours-hier", "A,B,C,D,A,B,C,D"),
)
PEER_LAYOUT = "4 hosts x 1, gloo"


def network_steps(impl: str, nbytes: int, hosts: list[str]) -> int | None:
    """One-way network trips on the critical path of our allreduce, by the rules of
    native/algorithms/allreduce.cc and hierarchical_allreduce.cc; None for a peer."""
    ranks, host_count = len(hosts), len(set(hosts))
    if impl == "gloo":
        return None
    if nbytes * (ranks - 1) <= SMALL_CALL_BYTES:
        return 1  # inside the descriptor round
    if impl == "ours-hier" and host_count > 1:
        per_host = ranks // host_count
        segment = nbytes // per_host
        return 1 if segment * (host_count - 1) <= SMALL_CALL_BYTES else 2 * (host_count - 1)
    return 2 * (ranks - 1)  # the ring; host-ordered, but with one rank per host every hop crosses


def in_namespace(namespace: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", namespace, *argv]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=0.5, help="0: no qdisc (checks the plumbing only)")
    parser.add_argument("--sizes", type=parse_size, nargs="+", default=[4096, 65536])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target-s", type=float, default=0.3)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("link_delay.py needs root: it creates a network namespace and a netem qdisc", file=sys.stderr)
        return 2
    namespace = f"shvd-delay-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        subprocess.run(in_namespace(namespace, ["ip", "link", "set", "lo", "up"]), check=True)
        if args.delay_ms > 0:
            # netem needs the kernel's sch_netem; without it tc says "Specified qdisc kind is unknown".
            subprocess.run(in_namespace(namespace, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                                                    f"{args.delay_ms}ms"]), check=True)
        worker_args = ["--target-s", str(args.target_s), "--min-iters", "20"]
        rounds: dict[str, list] = {}
        for round_no in range(1, args.repeat + 1):
            for label, impl, layout in LAYOUTS:
                hosts = layout.split(",")
                job = make_job(impl, len(hosts), args.sizes, worker_args, 120.0, layout=hosts)
                job.commands = [in_namespace(namespace, c) for c in job.commands]
                print(f"[bench] round {round_no}: {label} ...", end=" ", file=sys.stderr, flush=True)
                run_job(job, 120.0)
                rounds.setdefault(label, []).append(collect(job, args.sizes))
                print(f"{job.elapsed_s:.1f}s rc={job.rcs}", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["ip", "netns", "delete", namespace], check=False)
    results = {label: merge_rounds(r, args.sizes) for label, r in rounds.items()}
    print(f"### allreduce on links with {args.delay_ms} ms one-way delay (float32 SUM, direct calls)\n")
    print("| layout | size | time µs | network steps | time / (steps x delay) | ours/gloo |")
    print("|---|---:|---:|---:|---:|---:|")
    failed = False
    for label, impl, layout in LAYOUTS:
        hosts = layout.split(",")
        for nbytes in args.sizes:
            cell = results[label]["cells"][str(nbytes)]
            if "error" in cell:
                print(f"| {label} | {human_size(nbytes)} | ERR {cell['error'][:40]} | | | |")
                failed |= impl != "gloo"
                continue
            steps = network_steps(impl, nbytes, hosts)
            per_step = f"{cell['time_s'] * 1e3 / (steps * args.delay_ms):.2f}" if steps and args.delay_ms else "-"
            # gloo knows no hosts, so it is compared where every rank is a host of its own.
            gloo = results[PEER_LAYOUT]["cells"][str(nbytes)]
            same_ranks = impl != "gloo" and label.startswith(PEER_LAYOUT.split(",")[0])
            vs = f"{gloo['time_s'] / cell['time_s']:.2f}" if same_ranks and "time_s" in gloo else "-"
            print(f"| {label} | {human_size(nbytes)} | {cell['time_s'] * 1e6:.0f} | {steps or '-'} | {per_step} "
                  f"| {vs} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
