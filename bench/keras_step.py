"""Training-step benchmark: collective.keras's DistributedOptimizer against TensorFlow's
MultiWorkerMirroredStrategy, on the same Keras 3 model and optimizer.

    .venv/bin/python bench/keras_step.py [--rounds 3] [--steps 40] [--batch 32] [--ranks 2]
    .venv/bin/python bench/keras_step.py --latency [--steps 500]   # the bridge's per-call cost
    .venv/bin/python bench/keras_step.py --profile [--rounds 3]    # where ours' step overhead goes
    .venv/bin/python bench/keras_step.py --configs ours ours-fit single bare --baseline PYTHON

An MLP of about 2.6M float32 parameters trains on CPU (one intra-op thread per process) on fixed
random data. Configurations, each started as its own set of processes from here:
  ours      DistributedOptimizer.apply_gradients in a tf.function train step, ranks from collective.run
  ours-fit  the same optimizer through model.fit (the usual Keras path; compiled train step)
  mwms      tf.distribute.MultiWorkerMirroredStrategy: the same train step under strategy.run, the
            Keras optimizer all-reducing the gradients; TF_CONFIG names the workers on loopback ports.
            (Keras 3.15's model.fit fails under MultiWorkerMirroredStrategy while building the model,
            so the strategy is measured with its documented custom-loop form.)
  single    one process, plain optimizer, the custom step at the per-rank batch (compute only)
  single-fit  one process, plain optimizer, through model.fit: the reference for ours-fit, since fit's own
            per-step work (callbacks, the data iterator) is there without any communication
  pair      single's process started once per rank, side by side, with no communication: what the ranks'
            compute alone costs when they share the machine (on 2 cores, 2 ranks leave no core idle)
  pair-fit  the same for single-fit: fit's data pipeline and callbacks too, per rank, sharing the machine
  bare      the allreduce alone (Average) of the same bytes: one float32 array per model variable, all
            submitted to the same engine at once and waited for, on 2 ranks from collective.run; no
            TensorFlow, no copies (the engine reduces the arrays in place)
--baseline PYTHON adds ours@base, ours-fit@base and bare@base (those of the chosen configurations): the same
on an interpreter that imports another build of the package (see bench/_baseline.py), interleaved with the
rest, so a before/after shares one run's load.
Each process times every step after a warm-up; a configuration's time is the max over ranks of that
rank's median step, and the reported figure the median over --rounds rounds, whose order of
configurations rotates. Targets: ours / mwms <= 1.0; the step overhead (ours minus single, ours-fit minus
single-fit; ours-fit minus single is printed too) at most 3x the bare allreduce.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _baseline import SAFE_PATH, SUFFIX as BASELINE_SUFFIX, checked_baseline
from _step_runs import free_port, interleaved_medians, print_step_table, run_processes
from _thread_cpu import thread_cpu_s

MARKER = "@@keras_step "
STEP_CONFIGS = ("ours", "ours-fit", "mwms", "single", "single-fit", "pair", "pair-fit")
CONFIGS = STEP_CONFIGS + ("bare",)
ROLES = CONFIGS + ("latency", "profile")
BASELINE_CONFIGS = ("ours", "ours-fit", "bare")  # what --baseline also runs on the other build
OVERHEAD_TARGET = 3.0  # step overhead / bare allreduce of the same bytes
LAYERS = (1024, 1024, 1024, 512, 10)
WARMUP_STEPS = 10


def build_model() -> Any:
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((LAYERS[0],))] +
                             [keras.layers.Dense(n, activation="relu") for n in LAYERS[1:-1]] +
                             [keras.layers.Dense(LAYERS[-1])])
    return model


def data(rank: int, rows: int) -> tuple[Any, Any]:
    import numpy as np
    rng = np.random.default_rng(100 + rank)
    return rng.normal(size=(rows, LAYERS[0])).astype("float32"), rng.integers(0, LAYERS[-1], size=rows)


def step_timer() -> Any:
    import keras

    class StepTimer(keras.callbacks.Callback):
        """Step time = interval between consecutive batch ends, so everything fit does per step counts."""

        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []
            self._last: float | None = None

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            now = time.perf_counter()
            if self._last is not None:
                self.times.append(now - self._last)
            self._last = now
    return StepTimer()


def loss_fn(labels: Any, logits: Any) -> Any:
    import keras
    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def custom_loop(model: Any, optimizer: Any, rank: int, batch: int, steps: int, run: Any = None,
                loss_scale: float = 1.0) -> list[float]:
    """Times ``steps`` calls of a compiled train step after the warm-up; ``run`` wraps the step
    (strategy.run), ``loss_scale`` divides the loss among replicas where the strategy sums gradients."""
    import tensorflow as tf

    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) * loss_scale
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    compiled = tf.function(lambda x, y: run(step, args=(x, y))) if run else tf.function(step)
    x, y = data(rank, batch)
    x, y = tf.constant(x), tf.constant(y)
    times = []
    for i in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        compiled(x, y)
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    return times


def fit_loop(model: Any, optimizer: Any, rank: int, batch: int, steps: int, callbacks: list[Any]) -> list[float]:
    x, y = data(rank, batch * (WARMUP_STEPS + steps))
    model.compile(optimizer=optimizer, loss=loss_fn)
    timer = step_timer()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=callbacks + [timer])
    return timer.times[WARMUP_STEPS - 1:]


def emit(config: str, rank: int, times: list[float]) -> None:
    print(MARKER + json.dumps({"config": config, "rank": rank, "median_s": statistics.median(times)}), flush=True)


def limit_threads() -> None:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)


# ---- the roles each process plays ------------------------------------------------------------

def run_ours(config: str, batch: int, steps: int) -> None:
    limit_threads()
    import keras

    import collective.keras as hvd
    hvd.init()
    model = build_model()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01))
    if config == "ours":
        hvd.broadcast_variables(model.variables, root_rank=0)
        times = custom_loop(model, optimizer, hvd.rank(), batch, steps)
    else:
        times = fit_loop(model, optimizer, hvd.rank(), batch, steps, [hvd.BroadcastGlobalVariablesCallback(0)])
    emit(config, hvd.rank(), times)
    hvd.shutdown()


def run_mwms(batch: int, steps: int, ranks: int) -> None:
    limit_threads()
    import keras
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(0.01)
        times = custom_loop(model, optimizer, rank, batch, steps, run=strategy.run,
                            loss_scale=1.0 / strategy.num_replicas_in_sync)
    emit("mwms", rank, times)


def run_single(config: str, batch: int, steps: int) -> None:
    limit_threads()
    import keras
    if config == "single-fit":
        times = fit_loop(build_model(), keras.optimizers.SGD(0.01), 0, batch, steps, [])
    else:
        times = custom_loop(build_model(), keras.optimizers.SGD(0.01), 0, batch, steps)
    emit(config, 0, times)


def gradient_shapes() -> list[tuple[int, ...]]:
    """The shapes of the model's variables (so of its gradients), in order: each Dense's kernel, then bias."""
    shapes: list[tuple[int, ...]] = []
    for fan_in, fan_out in zip(LAYERS[:-1], LAYERS[1:]):
        shapes += [(fan_in, fan_out), (fan_out,)]
    return shapes


def run_bare(steps: int) -> None:
    """The allreduce a step needs and nothing else: every gradient's bytes, submitted together to the
    job's engine (as the gradient reducer submits them), averaged in place."""
    import numpy as np

    import collective
    from collective.reduce_ops import Average
    from collective.tensorflow.graph import engine_calls
    collective.init()
    rng = np.random.default_rng(collective.rank())
    arrays = [rng.normal(size=shape).astype(np.float32) for shape in gradient_shapes()]
    names = [f"bare.{i}" for i in range(len(arrays))]
    times = []
    for i in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        engine_calls.allreduce(arrays, names, Average)
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    emit("bare", collective.rank(), times)
    collective.shutdown()


def run_latency(repeats: int) -> None:
    """Per-call cost of the bridge: one allreduce through numpy (the engine directly), torch, TF eager
    and a tf.function, each on 2 ranks, for a tiny and a 1 MiB float32 tensor."""
    limit_threads()
    import numpy as np
    import tensorflow as tf
    import torch

    import collective
    import collective.tensorflow as hvd_tf
    import collective.torch as hvd_torch
    hvd_torch.init()
    hvd_tf.init()
    graph_allreduce = tf.function(lambda t: hvd_tf.allreduce(t, op=hvd_tf.Sum))
    for elements in (4, 1 << 18):
        base = np.ones(elements, np.float32)
        tf_tensor, torch_tensor = tf.constant(base), torch.from_numpy(base.copy())
        calls = {
            "numpy (engine)": lambda: collective.allreduce(base, op=collective.Sum),
            "torch": lambda: hvd_torch.allreduce(torch_tensor, op=hvd_torch.Sum),
            "tf eager": lambda: hvd_tf.allreduce(tf_tensor, op=hvd_tf.Sum),
            "tf.function": lambda: graph_allreduce(tf_tensor),
        }
        for label, call in calls.items():
            for _ in range(20):
                call()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            print(MARKER + json.dumps({"latency": label, "elements": elements, "rank": hvd_tf.rank(),
                                       "median_us": statistics.median(times) * 1e6}), flush=True)
    hvd_tf.shutdown()


def run_profile(steps: int, rounds: int) -> None:
    """In one 2-rank job, a round at a time: the plain step (both ranks computing, no communication),
    ours with the time spent in its submit ops (copies, submits) and its wait op (communication left
    exposed after backward), and the bare allreduce; the engine calls are wrapped with timers."""
    limit_threads()
    import keras
    import numpy as np
    import tensorflow as tf

    import collective.keras as hvd
    from collective.reduce_ops import Average
    from collective.tensorflow.graph import engine_calls, overlap
    hvd.init()
    spent = {"submit": 0.0, "wait": 0.0}

    def timed(key: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - start
        return call
    engine_calls.start_allreduce = timed("submit", engine_calls.start_allreduce)
    overlap._wait = timed("wait", overlap._wait)

    model = build_model()
    variables = model.trainable_variables
    x, y = (tf.constant(a) for a in data(hvd.rank(), 32))

    def make_step(optimizer: Any) -> Any:
        def step(x: Any, y: Any) -> None:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return tf.function(step)
    calls = {"plain": make_step(keras.optimizers.SGD(0.01)),
             "ours": make_step(hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)))}
    arrays = [np.ones(v.shape, np.float32) for v in variables]
    names = [f"bare.{i}" for i in range(len(arrays))]

    def timeit(fn: Any) -> float:
        for _ in range(WARMUP_STEPS):
            fn()
        spent.update(submit=0.0, wait=0.0)
        times = []
        before = thread_cpu_s()
        for _ in range(steps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        after = thread_cpu_s()
        used = {k: (v - before.get(k, 0.0)) / steps * 1e3 for k, v in after.items()}
        cpu.append(f"{sum(used.values()):.1f} (" + ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v >= 0.05) + ")")
        return statistics.median(times)
    for round_index in range(rounds):
        cpu: list[str] = []  # per configuration, CPU ms a step by thread (clock ticks: 10 ms granularity)
        row = {}
        for kind, call in calls.items():
            hvd.barrier()
            row[kind] = timeit(lambda: call(x, y)) * 1e3
        row["submit"], row["wait"] = spent["submit"] / steps * 1e3, spent["wait"] / steps * 1e3
        hvd.barrier()
        row["bare"] = timeit(lambda: engine_calls.allreduce(arrays, names, Average)) * 1e3
        print(f"rank {hvd.rank()} round {round_index + 1} (ms a step): plain {row['plain']:.1f}, "
              f"ours {row['ours']:.1f} (in engine submits {row['submit']:.2f}, in the wait op {row['wait']:.2f}), bare {row['bare']:.2f}; "
              f"CPU ms a step: plain {cpu[0]}, ours {cpu[1]}, bare {cpu[2]}", flush=True)
    hvd.shutdown()


def profile(args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "collective.run", "-np", "2", "--timeout", "600", str(Path(__file__).resolve()),
           "--role", "profile", "--steps", str(args.steps), "--rounds", str(args.rounds)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=True).stdout
    print("\n".join(line for line in out.splitlines() if "round" in line))


def latency(args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "collective.run", "-np", "2", "--timeout", "600", str(Path(__file__).resolve()),
           "--role", "latency", "--steps", str(args.steps)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=True).stdout
    rows: dict[tuple[str, int], float] = {}
    for line in out.splitlines():
        if MARKER in line:
            record = json.loads(line.split(MARKER, 1)[1])
            key = (record["latency"], record["elements"])
            rows[key] = max(rows.get(key, 0.0), record["median_us"])
    print("\n| allreduce (Sum, float32, 2 ranks) | 16 B (us) | 1 MiB (us) |")
    print("|---|---:|---:|")
    for label in dict.fromkeys(k[0] for k in rows):
        print(f"| {label} | {rows[label, 4]:.0f} | {rows[label, 1 << 18]:.0f} |")


# ---- the driver ------------------------------------------------------------------------------

def commands(config: str, args: argparse.Namespace) -> list[tuple[list[str], dict[str, str]]]:
    me = [sys.executable, str(Path(__file__).resolve())]
    role = ["--role", config, "--batch", str(args.batch), "--steps", str(args.steps), "--ranks", str(args.ranks)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    if config.endswith(BASELINE_SUFFIX):
        # The launcher, and so its ranks, on the baseline's interpreter (ranks use sys.executable).
        role[1] = config.removesuffix(BASELINE_SUFFIX)
        launcher = [str(args.baseline), *SAFE_PATH, "-m", "collective.run", "-np", str(args.ranks), "--timeout", "600"]
        return [(launcher + me[1:] + role, env)]
    if config.startswith("ours") or config == "bare":
        launcher = [sys.executable, "-m", "collective.run", "-np", str(args.ranks), "--timeout", "600"]
        return [(launcher + me[1:] + role, env)]
    if config in ("pair", "pair-fit"):
        role[1] = config.replace("pair", "single")
        return [(me + role, env) for _ in range(args.ranks)]
    if config == "mwms":
        workers = [f"127.0.0.1:{free_port()}" for _ in range(args.ranks)]
        return [(me + role, {**env, "TF_CONFIG": json.dumps({"cluster": {"worker": workers},
                                                             "task": {"type": "worker", "index": r}})})
                for r in range(args.ranks)]
    return [(me + role, env)]


def run_config(config: str, args: argparse.Namespace) -> float:
    """Starts one configuration's processes; returns the max over ranks of the median step time."""
    return run_processes(config, commands(config, args), MARKER, 1 if config.startswith("single") else args.ranks,
                         timeout_s=900)


def drive(args: argparse.Namespace) -> None:
    params = sum(a * b + b for a, b in zip(LAYERS[:-1], LAYERS[1:]))
    print(f"MLP {LAYERS}, {params / 1e6:.2f}M parameters (float32), batch {args.batch} per rank, {args.ranks} ranks, "
          f"1 intra-op thread each, {args.steps} timed steps after {WARMUP_STEPS} warm-up, {args.rounds} "
          "interleaved rounds", flush=True)
    configs = [c for c in CONFIGS if c in args.configs]
    if args.baseline is not None:
        configs += [c + BASELINE_SUFFIX for c in BASELINE_CONFIGS if c in configs]
    step = interleaved_medians(configs, args.rounds, lambda config: run_config(config, args))
    print_step_table([c for c in step if c.removesuffix(BASELINE_SUFFIX) in STEP_CONFIGS], step)
    if "mwms" in step:
        for config in ("ours", "ours-fit"):
            if config in step:
                print(f"{config} / mwms step-time ratio: {step[config] / step['mwms']:.3f} (target <= 1.0)")
    for suffix in ("", BASELINE_SUFFIX):
        bare = "bare" + suffix
        if bare not in step or "single" not in step:
            continue
        print(f"\n{bare} allreduce of the same {params * 4 / 1e6:.1f} MB (float32): {step[bare] * 1e3:.2f} ms")
        for config in ("ours" + suffix, "ours-fit" + suffix):
            if config not in step:
                continue
            reference = "single-fit" if config.startswith("ours-fit") and "single-fit" in step else "single"
            overhead = step[config] - step[reference]
            print(f"{config} step overhead over {reference} {overhead * 1e3:.1f} ms = {overhead / step[bare]:.2f} x "
                  f"the {bare} allreduce (target <= {OVERHEAD_TARGET:g})")
            if reference != "single":
                loose = step[config] - step["single"]
                print(f"  over single (fit's own per-step work counted as overhead): {loose * 1e3:.1f} ms "
                      f"= {loose / step[bare]:.2f} x")
            pair = "pair-fit" if config.startswith("ours-fit") else "pair"
            if pair in step:
                shared = step[config] - step[pair]
                print(f"  over {pair} (the ranks' work side by side, no communication): {shared * 1e3:.1f} ms "
                      f"= {shared / step[bare]:.2f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS),
                        help="which configurations to run (default all)")
    parser.add_argument("--latency", action="store_true",
                        help="instead: per-call cost of one allreduce through numpy, torch, TF eager and tf.function "
                             "(--steps calls each)")
    parser.add_argument("--profile", action="store_true",
                        help="instead: where ours' step overhead goes (submit ops, wait op) against the plain step "
                             "and the bare allreduce, in one 2-rank job")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an interpreter that imports another build: adds "
                             + ", ".join(c + BASELINE_SUFFIX for c in BASELINE_CONFIGS))
    parser.add_argument("--role", choices=ROLES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline is not None and args.role is None:
        try:
            print(f"baseline: {checked_baseline(args.baseline)}", flush=True)
        except ValueError as e:
            parser.error(str(e))
    if args.role is None:
        latency(args) if args.latency else profile(args) if args.profile else drive(args)
    elif args.role == "profile":
        run_profile(args.steps, args.rounds)
    elif args.role == "latency":
        run_latency(args.steps)
    elif args.role.startswith("ours"):
        run_ours(args.role, args.batch, args.steps)
    elif args.role == "bare":
        run_bare(args.steps)
    elif args.role == "mwms":
        run_mwms(args.batch, args.steps, args.ranks)
    else:
        run_single(args.role, args.batch, args.steps)


if __name__ == "__main__":
    main()
