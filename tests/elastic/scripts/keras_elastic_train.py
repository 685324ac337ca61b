"""An elastic Keras job for the tests: ``model.fit`` on elastic_data's problem, --steps batches an epoch,
committed by CommitStateCallback every --commit-every batches and at each epoch's end.

Rank 0 reports each (re)start (``RESUMED epoch=E batch=B size=N``) and the final weights. ``--victim-rank R
--victim-step S``: in the first formation, rank R reports ``VICTIM pid=P`` after global step S, then blocks
until the test kills it.
"""

import argparse
import json
import os
import threading

import keras
import numpy as np

import collective.keras as hvd
from elastic_data import BASE_LR, FEATURES, GLOBAL_BATCH, shard

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--commit-every", type=int, default=2)
parser.add_argument("--victim-rank", type=int, default=-1)
parser.add_argument("--victim-step", type=int, default=-1)
args = parser.parse_args()

hvd.init()
model = keras.Sequential([keras.Input((FEATURES,), dtype="float64"),
                          keras.layers.Dense(1, dtype="float64", kernel_initializer="zeros", bias_initializer="zeros")])
optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(learning_rate=BASE_LR * hvd.size()))
model.compile(optimizer=optimizer, loss="mse")
state = hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0, sizes=[])


resets = 0  # this process's own count, not state: sync() would take rank 0's


def on_reset():
    global resets
    resets += 1
    optimizer.learning_rate.assign(BASE_LR * hvd.size())


state.register_reset_callbacks([on_reset])


class RecordSteps(keras.callbacks.Callback):
    """Records each global step's world size; the victim rank stops after its step."""

    def on_train_batch_end(self, batch, logs=None):
        state.sizes.append(hvd.size())
        if resets == 0 and hvd.rank() == args.victim_rank and len(state.sizes) == args.victim_step:
            print(f"VICTIM pid={os.getpid()} step={len(state.sizes)}", flush=True)
            threading.Event().wait()  # until the test kills this process


@hvd.elastic.run
def train(state):
    if hvd.rank() == 0:
        print(f"RESUMED epoch={state.epoch} batch={state.batch} size={hvd.size()}", flush=True)
    callbacks = [RecordSteps(), hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=args.commit_every)]
    while state.epoch < args.epochs:
        # This rank's rows of the batches left in the epoch, in order (a resumed epoch starts mid-way).
        steps = range(state.epoch * args.steps + state.batch, (state.epoch + 1) * args.steps)
        parts = [shard(step, hvd.rank(), hvd.size()) for step in steps]
        x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        model.fit(x, y, batch_size=GLOBAL_BATCH // hvd.size(), epochs=1, shuffle=False, verbose=0,
                  callbacks=callbacks)


train(state)
if hvd.rank() == 0:
    kernel, bias = model.get_weights()
    print("FINAL " + json.dumps({"w": kernel[:, 0].tolist(), "b": float(bias[0]), "sizes": state.sizes,
                                 "size": hvd.size()}), flush=True)
