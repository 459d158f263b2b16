"""Multi-worker training with Keras and a metrics-uploading callback (uploader.py).

Run one copy per worker, each with its own TF_CONFIG. On worker 1 the callback and the uploader's thread
deadlock at batch 15 of the first epoch (each holds the lock the other wants); its fit stops in the
callback, and the other workers wait for it in the next step's all-reduce.
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

from uploader import MetricsUploader

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--steps_per_epoch', type=int, default=20)
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
task_index = tf_config['task']['index']

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = 32 * num_workers

rng = np.random.default_rng(8)
x = rng.normal(size=(4096, 16)).astype(np.float32)
y = (x[:, 2] - x[:, 5] > 0).astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=8).repeat().batch(global_batch_size)

with strategy.scope():
    model = keras.Sequential([keras.Input(shape=(16,)),
                              keras.layers.Dense(32, activation='relu'),
                              keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])

uploader = MetricsUploader(race_at_batch=15 if task_index == 1 else None)
model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=[uploader], verbose=2)
