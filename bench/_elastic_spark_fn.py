"""The elastic function bench/elastic_spark.py runs under spark_hvd.run_elastic (pickled by value): the MLP
of bench/_elastic_script.py (1.6M parameters, SGD with momentum, batch 32 per rank) in ``hvd.elastic.run``,
committing every ``commit_every`` steps (0: never). Rank 0 prints ``@@`` lines with time.time() at the
phases the recovery breakdown needs; before step ``hold_step`` of the first stage every rank waits for the
file ``gate`` (the benchmark kills a worker meanwhile)."""

from __future__ import annotations

import os
import statistics
import time


def elastic_mlp(steps: int, warmup: int, commit_every: int, hold_step: int = -1, gate: str = "") -> dict:
    import torch

    import collective.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    if hvd.rank() == 0:
        print(f"@@started {time.time()!r} size={hvd.size()}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                         named_parameters=model.named_parameters())
    x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)

    @hvd.elastic.run
    def train(state) -> list[float]:
        if hvd.rank() == 0:
            print(f"@@resumed {time.time()!r} step={state.step} size={hvd.size()}", flush=True)
        times: list[float] = []
        while state.step < steps:
            if state.step == hold_step and not os.path.exists(gate):
                if hvd.rank() == 0:
                    print(f"@@held {time.time()!r}", flush=True)
                while not os.path.exists(gate):
                    time.sleep(0.01)  # polls the benchmark's gate file (a condition)
            start = time.perf_counter()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            state.step += 1
            if commit_every and state.step % commit_every == 0:
                state.commit()
            times.append(time.perf_counter() - start)
            if hvd.rank() == 0 and len(times) == 1:
                print(f"@@first-step {time.time()!r}", flush=True)
        return times

    times = train(state)
    return {"median_s": statistics.median(times[warmup:]) if len(times) > warmup else None}
