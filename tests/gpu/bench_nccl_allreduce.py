"""Our NCCL allreduce (collective.torch on CUDA tensors) against torch.distributed with NCCL, world size 1.

    python tests/gpu/bench_nccl_allreduce.py [--out results.json] [--sizes 4K 1M 64M]

Same tensors, same process, interleaved rounds. "blocking": one allreduce, then wait for it (what a
synchronous call costs, dominated by per-call overhead at small sizes); "pipelined": 20 allreduces
queued on the stream, then one wait. Prints time per call and ours/torch ratios (>1 means ours is slower).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import collective.torch as hvd

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def per_call(fn, calls: int, wait_each: bool) -> float:  # type: ignore[no-untyped-def]
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
        if wait_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["4K", "64K", "1M", "16M", "64M", "256M"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible to torch: nothing to benchmark")
    hvd.init()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    rows = []
    for size_text in args.sizes:
        nbytes = parse_size(size_text)
        tensor = torch.ones(nbytes // 4, device="cuda")
        calls = max(5, min(200, (256 << 20) // nbytes))
        ours_sync = lambda: hvd.allreduce_(tensor, op=hvd.Sum, name="bench")  # noqa: E731
        torch_sync = lambda: dist.all_reduce(tensor)  # noqa: E731

        def ours_pipelined() -> None:
            handles = [hvd.allreduce_async_(tensor, op=hvd.Sum, name=f"bench.{i}") for i in range(20)]
            for h in handles:
                hvd.synchronize(h)

        def torch_pipelined() -> None:
            for _ in range(20):
                dist.all_reduce(tensor)
        for fn in (ours_sync, torch_sync, ours_pipelined, torch_pipelined):  # warm-up (NCCL setup, caches)
            fn()
        samples: dict[str, list[float]] = {"ours": [], "torch": [], "ours_pipe": [], "torch_pipe": []}
        for _ in range(args.rounds):
            samples["ours"].append(per_call(ours_sync, calls, True))
            samples["torch"].append(per_call(torch_sync, calls, True))
            pipe_calls = max(1, calls // 20)
            samples["ours_pipe"].append(per_call(ours_pipelined, pipe_calls, False) / 20)
            samples["torch_pipe"].append(per_call(torch_pipelined, pipe_calls, False) / 20)
        med = {k: statistics.median(v) for k, v in samples.items()}
        rows.append({"size": size_text, "bytes": nbytes, **{f"{k}_us": v * 1e6 for k, v in med.items()},
                     "ratio_blocking": med["ours"] / med["torch"], "ratio_pipelined": med["ours_pipe"] / med["torch_pipe"]})
    print("| size | ours blocking (us) | torch.distributed blocking (us) | ratio | ours pipelined (us) | "
          "torch pipelined (us) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['size']} | {r['ours_us']:.1f} | {r['torch_us']:.1f} | {r['ratio_blocking']:.2f} | "
              f"{r['ours_pipe_us']:.1f} | {r['torch_pipe_us']:.1f} | {r['ratio_pipelined']:.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"world_size": 1, "device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
