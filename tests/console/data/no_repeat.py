"""A user's script whose dataset gives 4 batches a pass while fit asks for epochs of 6 steps (no .repeat())."""

import numpy as np
import tensorflow as tf

x = np.random.default_rng(0).random((128, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=2, steps_per_epoch=6, verbose=0)
