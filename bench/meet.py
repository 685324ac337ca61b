"""How the ranks of ``spark_hvd.run`` meet: at the driver's rendezvous store against one
``BarrierTaskContext.allGather``, on a warm local[2] session, in the same run.

    .venv/bin/python bench/meet.py [--rounds 6]

Each round launches a function that returns 1 twice, in turn: as ``spark_hvd.run`` does by default (the tasks
meet at the store the driver serves) and with ``nics=["lo"]``, which keeps the earlier way (rank 0's task
serves the store; its address travels in one allGather). Both with ``keep_warm``, as the estimators launch:
a cold rank process takes longer to start than the ranks take to meet, which would hide the difference. On local[2] every address is loopback already, so
nics changes nothing else. One untimed launch of each first. Reported: medians and minima of the launch-to-
return time, and their difference (what the allGather costs a launch).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _local_spark import local_session


def one() -> int:
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    import cloudpickle

    import spark_hvd

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark = local_session("bench-meet")
    spark.sparkContext.setLogLevel("ERROR")
    ways = {"driver store": {}, "allGather (nics=lo)": {"nics": ["lo"]}}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(args.rounds + 1):
        for name, options in ways.items():
            began = time.monotonic()
            assert spark_hvd.run(one, num_proc=2, spark=spark, verbose=0, keep_warm=["collective"],
                                 **options) == [1, 1]
            if round_ > 0:
                times[name].append(time.monotonic() - began)
    for name, values in times.items():
        print(f"{name:22s} median {statistics.median(values):.3f} s  min {min(values):.3f} s  "
              f"(runs: {', '.join(f'{v:.2f}' for v in values)})")
    saved = statistics.median(times["allGather (nics=lo)"]) - statistics.median(times["driver store"])
    print(f"difference of the medians (allGather - driver store): {saved:.3f} s")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
