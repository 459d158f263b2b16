"""A user's script that trains with Keras 3 (`import keras`) under MultiWorkerMirroredStrategy."""

import os

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # what a user who never heard of tf-keras runs

import keras  # noqa: E402  (Keras 3)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).random((256, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
model.fit(dataset, epochs=1, steps_per_epoch=4, verbose=0)
