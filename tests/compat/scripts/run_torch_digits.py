# A port of Horovod-style usage, written for spark-hvd's compatibility tests (not copied from Horovod):
# horovod.spark.run runs a horovod.torch training function on two Spark tasks, the way Horovod's Spark
# docs show it, and returns each rank's result. It is written against Horovod 0.28's public API;
# tests/compat/test_ports.py rewrites only its import lines (horovod.spark -> spark_hvd,
# horovod.torch -> collective.torch) and checks that nothing else changed.
#
# For the test to compare with single-process training, the model has no dropout, is float64, and
# every rank takes equal batches. It prints its results as one JSON line.
import argparse
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from pyspark import SparkConf
from pyspark.sql import SparkSession
from sklearn.datasets import load_digits

import horovod.spark as hvd_spark

SEED = 11
LEARNING_RATE = 0.05
MOMENTUM = 0.9
BATCH_SIZE = 16
EPOCHS = 2
TRAIN_ROWS = 512

parser = argparse.ArgumentParser(description='horovod.spark.run with PyTorch on the digits data set')
parser.add_argument('--num-proc', type=int, default=2)
parser.add_argument('--work-dir', default='/tmp')


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def make_model(rank):
    # Each rank starts from different weights: broadcast_parameters must make them rank 0's.
    torch.manual_seed(SEED + rank)
    return Net().double()


def load_shard(rank, size):
    digits = load_digits()
    x = torch.tensor(digits.data[:TRAIN_ROWS] / 16.0)
    y = torch.tensor(digits.target[:TRAIN_ROWS])
    # Horovod: each rank trains on its own slice of the data.
    return x[rank::size], y[rank::size]


def train(learning_rate, epochs, batch_size):
    import horovod.torch as hvd

    hvd.init()
    x, y = load_shard(hvd.rank(), hvd.size())
    model = make_model(hvd.rank())

    # Horovod: scale the learning rate by the number of workers.
    optimizer = optim.SGD(model.parameters(), lr=learning_rate * hvd.size(), momentum=MOMENTUM)

    # Horovod: broadcast parameters & optimizer state, then wrap the optimizer.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    losses = []
    for epoch in range(epochs):
        for step in range(len(x) // batch_size):
            batch = slice(step * batch_size, (step + 1) * batch_size)
            optimizer.zero_grad()
            loss = F.nll_loss(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        # Horovod: average the last loss over the workers.
        average = hvd.allreduce(torch.tensor(losses[-1]), name='epoch_loss')
        print('rank %d epoch %d loss %.4f (averaged %.4f)' % (hvd.rank(), epoch, losses[-1], average.item()))

    return {'rank': hvd.rank(), 'size': hvd.size(), 'losses': losses,
            'weights': {name: value.tolist() for name, value in model.state_dict().items()}}


def main(args):
    conf = SparkConf().setAppName('run_torch_digits').setMaster('local[{}]'.format(args.num_proc))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()

    results = hvd_spark.run(train, args=(LEARNING_RATE, EPOCHS, BATCH_SIZE), num_proc=args.num_proc,
                            stdout=sys.stdout, stderr=sys.stderr, prefix_output_with_timestamp=True,
                            verbose=1)
    print('ranks returned:', [result['rank'] for result in results])
    print(json.dumps({'port_results': {'results': results}}))
    spark.stop()


if __name__ == '__main__':
    main(parser.parse_args())
