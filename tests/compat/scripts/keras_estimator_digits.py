# A port of Horovod-style usage, written for spark-hvd's compatibility tests (not copied from Horovod):
# horovod.spark.keras.KerasEstimator trains a small Keras conv net on the sklearn digits, the way
# Horovod's Keras Spark MNIST example does on MNIST (SparkBackend, Store.create, a one-hot label
# vector from OneHotEncoder, metrics=['accuracy']), keeping the best model by validation loss with
# Horovod's BestModelCheckpoint as the Rossmann example does, then transforms, saves and loads it.
# It is written against Horovod 0.28's public API; tests/compat/test_ports.py rewrites only its import
# lines (horovod.spark -> spark_hvd, horovod.tensorflow.keras -> collective.keras) and checks that
# nothing else changed.
#
# For the test to compare with single-process training, the model has no dropout and the rows are not
# shuffled. It prints its results as one JSON line.
import argparse
import json
import os
import sys

import numpy as np
import pyspark.sql.types as T
from pyspark import SparkConf
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.feature import OneHotEncoder
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from sklearn.datasets import load_digits
from tensorflow import keras

import horovod.spark.keras as hvd
from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.store import Store
from horovod.tensorflow.keras.callbacks import BestModelCheckpoint

SEED = 5
LEARNING_RATE = 0.05
MOMENTUM = 0.5
BATCH_SIZE = 32
EPOCHS = 2
TRAIN_ROWS = 1500    # the first rows are for fitting (10% of them validate); the rest are the test set

parser = argparse.ArgumentParser(description='KerasEstimator on the digits data set')
parser.add_argument('--num-proc', type=int, default=2)
parser.add_argument('--work-dir', default='/tmp',
                    help='temporary working directory to write intermediate files (prefix with hdfs:// to use HDFS)')


def build_model():
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([
        keras.Input(shape=(8, 8, 1)),
        keras.layers.Conv2D(8, kernel_size=(3, 3), activation='relu'),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation='relu'),
        keras.layers.Dense(10, activation='softmax'),
    ])
    optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    return model, optimizer


def digits_frames(spark):
    digits = load_digits()
    rows = [(i, Vectors.dense(x / 16.0), float(y)) for i, (x, y) in enumerate(zip(digits.data, digits.target))]
    df = spark.createDataFrame(rows, ['id', 'features', 'label'])
    # One-hot encode labels into SparseVectors
    encoder = OneHotEncoder(inputCols=['label'], outputCols=['label_vec'], dropLast=False)
    df = encoder.fit(df).transform(df)
    return df.filter(df.id < TRAIN_ROWS), df.filter(df.id >= TRAIN_ROWS)


def as_list(value):
    return [float(v) for v in (value.toArray() if hasattr(value, 'toArray') else value)]


def predictions(df, column):
    return sorted([row.id, as_list(row[column])] for row in df.select('id', column).collect())


def main(args):
    conf = SparkConf().setAppName('keras_estimator_digits').setMaster('local[{}]'.format(args.num_proc))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()

    store = Store.create(args.work_dir)
    train_df, test_df = digits_frames(spark)

    model, optimizer = build_model()
    # Checkpoint callback to specify options for the returned Keras model
    ckpt_callback = BestModelCheckpoint(monitor='val_loss', mode='auto', save_freq='epoch')
    backend = SparkBackend(num_proc=args.num_proc,
                           stdout=sys.stdout, stderr=sys.stderr,
                           prefix_output_with_timestamp=True)
    keras_estimator = hvd.KerasEstimator(backend=backend,
                                         store=store,
                                         model=model,
                                         optimizer=optimizer,
                                         loss='categorical_crossentropy',
                                         metrics=['accuracy'],
                                         feature_cols=['features'],
                                         label_cols=['label_vec'],
                                         validation=0.1,
                                         batch_size=BATCH_SIZE,
                                         epochs=EPOCHS,
                                         shuffle=False,
                                         random_seed=SEED,
                                         verbose=1,
                                         checkpoint_callback=ckpt_callback)

    keras_model = keras_estimator.fit(train_df).setOutputCols(['label_prob'])
    history = keras_model.getHistory()
    print('Best validation loss: %f' % min(history['val_loss']))

    # Evaluate the model on the held-out test DataFrame
    pred_df = keras_model.transform(test_df)
    argmax = udf(lambda v: float(np.argmax(v)), returnType=T.DoubleType())
    pred_df = pred_df.withColumn('label_pred', argmax(pred_df.label_prob)).cache()
    evaluator = MulticlassClassificationEvaluator(predictionCol='label_pred', labelCol='label', metricName='accuracy')
    accuracy = evaluator.evaluate(pred_df)
    print('Test accuracy:', accuracy)

    # Save the trained model and load it back
    model_path = os.path.join(args.work_dir, 'keras_model')
    keras_model.save(model_path)
    loaded = hvd.KerasModel.load(model_path)
    loaded_pred_df = loaded.transform(test_df)

    print(json.dumps({'port_results': {
        'history': history,
        'accuracy': accuracy,
        'prediction_type': pred_df.schema['label_prob'].dataType.simpleString(),
        'predictions': predictions(pred_df, 'label_prob'),
        'loaded_output_cols': loaded.getOutputCols(),
        'loaded_predictions': predictions(loaded_pred_df, loaded.getOutputCols()[0]),
        'loaded_history': loaded.getHistory(),
        'loaded_learning_rate': float(keras.ops.convert_to_numpy(loaded.getModel().optimizer.learning_rate)),
        'weights': [w.tolist() for w in loaded.getModel().get_weights()],
    }}))
    spark.stop()


if __name__ == '__main__':
    main(parser.parse_args())
