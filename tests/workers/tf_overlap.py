"""The overlapped gradient allreduce's bookkeeping (collective/tensorflow/graph/overlap.py) on real ranks:
reused buffers never change a result the caller still holds, and a step that fails between its submits
and its wait leaves nothing behind once later steps succeed."""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf

import collective.tensorflow as hvd
from collective._native import CollectiveKind
from collective.runtime import start_engine
from collective.tensorflow.graph import overlap
from common import Cases
from tf_checks import in_mode

BIG = (700, 1024)  # 2.7 MiB: a bucket of its own, submitted first


def main() -> None:
    mode = sys.argv[1]
    # Buckets whatever the host's cores (by default a host with no core to spare gets one bucket).
    hvd.init(gradient_bucket_bytes=overlap.BUCKET_BYTES)
    rank, size = hvd.rank(), hvd.size()
    mean = np.mean(np.arange(1, size + 1))
    case = Cases()
    failures = case.failures
    v = tf.Variable(tf.ones(BIG))

    @case
    def init_sets_the_bucket_size() -> None:
        if overlap._bucket_bytes() != overlap.BUCKET_BYTES:
            failures.append(f"init(gradient_bucket_bytes=...) gave buckets of {overlap._bucket_bytes()} bytes")

    def gradient(scale: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * scale)
        return hvd.DistributedGradientTape(tape).gradient(loss, [v])[0]

    step = tf.function(gradient) if mode == "graph" else gradient

    @case
    def a_held_result_survives_later_steps() -> None:
        first = step(tf.constant(float(rank + 1)))
        second = step(tf.constant(10.0 * (rank + 1)))
        if not np.all(first.numpy() == mean) or not np.all(second.numpy() == 10 * mean):
            failures.append(f"held {first.numpy()[0, 0]} (want {mean}), next {second.numpy()[0, 0]}")
        del first, second
        step(tf.constant(1.0))
        buffers = {name: id(buffer) for name, buffer in overlap._buffers.items()}
        step(tf.constant(1.0))
        if not buffers or {name: id(buffer) for name, buffer in overlap._buffers.items()} != buffers:
            failures.append("a step whose results were dropped did not reuse the previous step's buffers")

    def two_buckets(big: tf.Tensor, small: tf.Tensor) -> list[tf.Tensor]:
        # Buckets go last tensor first: 'fail.0' (big) is submitted before 'fail.1'.
        return overlap.allreduce_overlapped([small, big], ["fail.1", "fail.0"], hvd.Average, 1.0, 1.0,
                                            hvd.global_process_set)

    submit_both = tf.function(two_buckets) if mode == "graph" else two_buckets

    @case
    def a_failed_step_then_good_ones_leave_nothing_behind() -> None:
        engine = start_engine()
        big, small = tf.fill(BIG, float(rank + 1)), tf.fill([4], float(rank + 1))
        for attempt in range(3):
            # 'fail.1' held in flight (the first member of an unfinished group): the step's second submit
            # is refused after its first bucket went to the engine.
            held, other = np.ones(2, np.float32), np.ones(2, np.float32)
            group = {"group": 3_000_000 + attempt, "group_size": 2}
            holder = engine.submit(CollectiveKind.ALLREDUCE, "fail.1", held, op=hvd.Sum, **group)
            try:
                submit_both(big, small)
                failures.append(f"attempt {attempt}: a name already in flight was accepted")
            except Exception as exc:  # noqa: BLE001 - eager and graph raise different classes
                if "already in flight" not in str(exc):
                    failures.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
            engine.wait(engine.submit(CollectiveKind.ALLREDUCE, "fail.other", other, op=hvd.Sum, **group))
            engine.wait(holder)
            hvd.barrier()  # every rank's 'fail.0' of the failed step is submitted, and so done
            for _ in range(2):
                out = submit_both(big, small)
                if not np.all(out[1].numpy() == mean):
                    failures.append(f"attempt {attempt}: good step gave {out[1].numpy()[0, 0]}")
            if overlap._in_flight or overlap._abandoned:
                failures.append(f"attempt {attempt}: {len(overlap._in_flight)} buckets left in flight, "
                                f"{len(overlap._abandoned)} abandoned")

    case.run_and_report(f"tf_overlap_{mode}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
