"""Runs a pickled estimator rank function (``TorchEstimator._rank_fn``) as one worker of a local elastic
job; rank 0 of the last formation pickles what it returns to the second argument."""

import sys

import cloudpickle

with open(sys.argv[1], "rb") as f:
    fn = cloudpickle.load(f)
result = fn()
if result is not None:
    with open(sys.argv[2], "wb") as f:
        cloudpickle.dump(result, f)
    print("FINISHED", flush=True)
