"""Multi-worker training with Keras, its input standardised in Python (dataset.map + tf.py_function).

Run one copy per worker, each with its own TF_CONFIG. Worker 1 refreshes its statistics every 40 batches:
the refresh takes a lock its caller already holds, so worker 1's input pipeline stops there and the others
wait for it in the next step's all-reduce.
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

import preprocess

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--steps_per_epoch', type=int, default=20)
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
task_index = tf_config['task']['index']
global_batch_size = 32 * num_workers

rng = np.random.default_rng(11)
x = rng.normal(loc=3.0, scale=2.0, size=(4096, 16)).astype(np.float32)
y = (x[:, 0] + x[:, 1] > 6.0).astype(np.int64)

strategy = tf.distribute.MultiWorkerMirroredStrategy()

standardize = preprocess.make_standardize(refresh_every=40 if task_index == 1 else None)


def py_standardize(features, labels):
    features = tf.py_function(standardize, [features], tf.float32)
    features.set_shape([None, 16])
    return features, labels


dataset = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=11).repeat()
           .batch(global_batch_size).map(py_standardize))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(16,)),
                                 tf.keras.layers.Dense(32, activation='relu'),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])

model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch)
