# A port of Horovod-style usage, written for spark-hvd's compatibility tests (not copied from Horovod):
# horovod.spark.torch.TorchEstimator trains a small conv net on the sklearn digits, the way Horovod's
# Spark MNIST example trains one on MNIST (SparkBackend, Store.create, input_shapes on a flat vector
# column, a loss that casts the float label, validation=0.1), then transforms, saves and loads it.
# It is written against Horovod 0.28's public API; tests/compat/test_ports.py rewrites only its import
# lines (horovod.spark -> spark_hvd) and checks that nothing else changed.
#
# For the test to compare with single-process training, the model has no dropout (the ranks would
# drop different units), is float64, and the rows are not shuffled. It prints its results as one JSON line.
import argparse
import json
import os
import sys

import numpy as np
import pyspark.sql.types as T
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from pyspark import SparkConf
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from sklearn.datasets import load_digits

import horovod.spark.torch as hvd
from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.store import Store

SEED = 7
LEARNING_RATE = 0.05
MOMENTUM = 0.5
BATCH_SIZE = 32
EPOCHS = 2
TRAIN_ROWS = 1500    # the first rows are for fitting (10% of them validate); the rest are the test set

parser = argparse.ArgumentParser(description='TorchEstimator on the digits data set')
parser.add_argument('--num-proc', type=int, default=2)
parser.add_argument('--work-dir', default='/tmp',
                    help='temporary working directory to write intermediate files (prefix with hdfs:// to use HDFS)')


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


def digits_frames(spark):
    digits = load_digits()
    rows = [(i, Vectors.dense(x / 16.0), float(y)) for i, (x, y) in enumerate(zip(digits.data, digits.target))]
    train_df = spark.createDataFrame(rows[:TRAIN_ROWS], ['id', 'features', 'label'])
    test_df = spark.createDataFrame(rows[TRAIN_ROWS:], ['id', 'features', 'label'])
    return train_df, test_df


def predictions(df, column):
    return sorted([row.id, [float(v) for v in row[column]]] for row in df.select('id', column).collect())


def main(args):
    conf = SparkConf().setAppName('torch_estimator_digits').setMaster('local[{}]'.format(args.num_proc))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()

    # Setup our store for intermediate data
    store = Store.create(args.work_dir)
    train_df, test_df = digits_frames(spark)

    model, optimizer = build_model_and_optimizer()
    backend = SparkBackend(num_proc=args.num_proc,
                           stdout=sys.stdout, stderr=sys.stderr,
                           prefix_output_with_timestamp=True)
    torch_estimator = hvd.TorchEstimator(backend=backend,
                                         store=store,
                                         model=model,
                                         optimizer=optimizer,
                                         loss=lambda input, target: F.nll_loss(input, target.long()),
                                         input_shapes=[[-1, 1, 8, 8]],
                                         feature_cols=['features'],
                                         label_cols=['label'],
                                         validation=0.1,
                                         batch_size=BATCH_SIZE,
                                         epochs=EPOCHS,
                                         shuffle=False,
                                         random_seed=SEED,
                                         verbose=1)

    torch_model = torch_estimator.fit(train_df).setOutputCols(['label_prob'])
    history = torch_model.getHistory()

    # Evaluate the model on the held-out test DataFrame
    pred_df = torch_model.transform(test_df)
    argmax = udf(lambda v: float(np.argmax(v)), returnType=T.DoubleType())
    pred_df = pred_df.withColumn('label_pred', argmax(pred_df.label_prob)).cache()
    evaluator = MulticlassClassificationEvaluator(predictionCol='label_pred', labelCol='label', metricName='accuracy')
    accuracy = evaluator.evaluate(pred_df)
    print('Test accuracy:', accuracy)

    # Save the trained model and load it back
    model_path = os.path.join(args.work_dir, 'torch_model')
    torch_model.save(model_path)
    loaded = hvd.TorchModel.load(model_path)
    loaded_pred_df = loaded.transform(test_df)

    print(json.dumps({'port_results': {
        'history': history,
        'accuracy': accuracy,
        'prediction_type': pred_df.schema['label_prob'].dataType.simpleString(),
        'prediction_value_type': type(pred_df.first().label_prob).__name__,
        'predictions': predictions(pred_df, 'label_prob'),
        'loaded_output_cols': loaded.getOutputCols(),
        'loaded_predictions': predictions(loaded_pred_df, loaded.getOutputCols()[0]),
        'loaded_history': loaded.getHistory(),
        'loaded_learning_rate': loaded.getOptimizer().param_groups[0]['lr'],
        'weights': {name: value.tolist() for name, value in loaded.getModel().state_dict().items()},
    }}))
    spark.stop()


if __name__ == '__main__':
    main(parser.parse_args())
