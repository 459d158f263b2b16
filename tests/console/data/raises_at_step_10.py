"""A user's MultiWorkerMirroredStrategy script with a bug that shows at step 10."""

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).random((512, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Check(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 9:
            raise ValueError("labels must be 0 or 1, got 7 in batch 10")


model.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), epochs=1, steps_per_epoch=20,
          callbacks=[Check()], verbose=0)
