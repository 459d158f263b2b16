"""A user's own tutorial-style MultiWorkerMirroredStrategy script that adds tfcc's reporter."""

import json
import os

import numpy as np
import tensorflow as tf

from trainer.report import MetricsReporter

strategy = tf.distribute.MultiWorkerMirroredStrategy()
num_workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
global_batch = 16 * num_workers

rng = np.random.default_rng(0)
x = rng.random((1024, 28, 28), dtype="float32")
y = rng.integers(0, 10, size=1024)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=1).repeat().batch(global_batch)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.01),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
model.fit(dataset, epochs=2, steps_per_epoch=8, callbacks=[MetricsReporter()], verbose=0)
