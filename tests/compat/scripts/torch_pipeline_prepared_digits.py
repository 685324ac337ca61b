# A port of Horovod-style usage, written for spark-hvd's compatibility tests (not copied from Horovod):
# two ways Horovod's Spark users run a TorchEstimator besides a plain fit. First, inside a Spark ML
# Pipeline([VectorAssembler, TorchEstimator]) that is saved and loaded before it is fitted (Horovod saves
# neither the backend nor the store with an estimator, so they are set again), then fitted and applied.
# Second, on data materialised ahead with
# horovod.spark.common.util.prepare_data and trained with estimator.fit_on_parquet(dataset_idx=...).
# It is written against Horovod 0.28's public API; tests/compat/test_ports.py rewrites only its import
# lines (horovod.spark -> spark_hvd) and checks that nothing else changed.
#
# For the test to compare with single-process training, the model has no dropout, is float64, and the
# rows are not shuffled. It prints its results as one JSON line.
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from pyspark import SparkConf
from pyspark.ml import Pipeline
from pyspark.ml.feature import VectorAssembler
from pyspark.sql import SparkSession
from sklearn.datasets import load_digits

import horovod.spark.torch as hvd
from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.store import Store
from horovod.spark.common.util import prepare_data

SEED = 13
LEARNING_RATE = 0.05
MOMENTUM = 0.5
BATCH_SIZE = 32
EPOCHS = 1
TRAIN_ROWS = 1500    # the first rows are for fitting (10% of them validate); the rest are the test set
PIXELS = ['p%d' % i for i in range(64)]

parser = argparse.ArgumentParser(description='TorchEstimator in a Pipeline, and on prepared data')
parser.add_argument('--num-proc', type=int, default=2)
parser.add_argument('--work-dir', default='/tmp')


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3)
        self.fc1 = nn.Linear(8 * 3 * 3, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, features):
        x = features.double()
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = x.view(-1, 8 * 3 * 3)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=-1)


def build_model_and_optimizer():
    torch.manual_seed(SEED)
    model = Net().double()
    optimizer = optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    return model, optimizer


def make_estimator(backend, store, **kwargs):
    model, optimizer = build_model_and_optimizer()
    return hvd.TorchEstimator(backend=backend,
                              store=store,
                              model=model,
                              optimizer=optimizer,
                              loss=lambda input, target: F.nll_loss(input, target.long()),
                              input_shapes=[[-1, 1, 8, 8]],
                              feature_cols=['features'],
                              label_cols=['label'],
                              batch_size=BATCH_SIZE,
                              epochs=EPOCHS,
                              shuffle=False,
                              random_seed=SEED,
                              verbose=1,
                              **kwargs)


def make_backend(num_proc):
    return SparkBackend(num_proc=num_proc, stdout=sys.stdout, stderr=sys.stderr,
                        prefix_output_with_timestamp=True)


def pixel_frames(spark):
    # One column per pixel, as a table would hold them; the VectorAssembler makes the feature vector.
    digits = load_digits()
    rows = [(i, *[float(v) for v in x / 16.0], float(y)) for i, (x, y) in enumerate(zip(digits.data, digits.target))]
    columns = ['id'] + PIXELS + ['label']
    return spark.createDataFrame(rows[:TRAIN_ROWS], columns), spark.createDataFrame(rows[TRAIN_ROWS:], columns)


def predictions(df, column):
    return sorted([row.id, [float(v) for v in row[column]]] for row in df.select('id', column).collect())


def weights(torch_model):
    return {name: value.tolist() for name, value in torch_model.getModel().state_dict().items()}


def main(args):
    conf = SparkConf().setAppName('torch_pipeline_prepared_digits').setMaster('local[{}]'.format(args.num_proc))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    train_df, test_df = pixel_frames(spark)
    assembler = VectorAssembler(inputCols=PIXELS, outputCol='features')

    # 1. An unfitted Pipeline, saved and loaded before it is fitted.
    pipeline_store = Store.create(os.path.join(args.work_dir, 'pipeline_store'))
    pipeline = Pipeline(stages=[assembler, make_estimator(make_backend(args.num_proc), pipeline_store,
                                                          validation=0.1)])
    pipeline_path = os.path.join(args.work_dir, 'unfitted_pipeline')
    pipeline.save(pipeline_path)
    loaded_pipeline = Pipeline.load(pipeline_path)
    loaded_estimator = loaded_pipeline.getStages()[-1]
    loaded_estimator.setBackend(make_backend(args.num_proc))
    loaded_estimator.setStore(pipeline_store)

    pipeline_model = loaded_pipeline.fit(train_df)
    pred_df = pipeline_model.transform(test_df)
    output_col = pipeline_model.stages[-1].getOutputCols()[0]

    # 2. Data prepared ahead, then trained on with fit_on_parquet.
    prepared_store = Store.create(os.path.join(args.work_dir, 'prepared_store'))
    backend = make_backend(args.num_proc)
    estimator = make_estimator(backend, prepared_store)
    with prepare_data(backend.num_processes(), prepared_store, assembler.transform(train_df),
                      label_columns=['label'], feature_columns=['features'], validation=0.1) as dataset_idx:
        prepared_model = estimator.fit_on_parquet(dataset_idx=dataset_idx)

    print(json.dumps({'port_results': {
        'loaded_stage_types': [type(stage).__name__ for stage in loaded_pipeline.getStages()],
        'pipeline_output_col': output_col,
        'pipeline_predictions': predictions(pred_df, output_col),
        'pipeline_weights': weights(pipeline_model.stages[-1]),
        'pipeline_history': pipeline_model.stages[-1].getHistory(),
        'prepared_weights': weights(prepared_model),
        'prepared_history': prepared_model.getHistory(),
    }}))
    spark.stop()


if __name__ == '__main__':
    main(parser.parse_args())
