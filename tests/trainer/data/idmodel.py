"""Test model file: every example carries its id, and each worker records what it trained on.

The last input column is the example's id. ``IdTap`` strips it and, in
training, appends the ids of each per-replica batch to ``$TFCC_RUN_DIR/ids.txt``
(one line per step). ``DumpWeights`` saves the weights before every step, so a
test can recompute each step's loss in one process with the same weights.
"""

import os

import numpy as np
import tensorflow as tf

N = 96
FEATURES = 6
CLASSES = 4
_rng = np.random.default_rng(7)
X = _rng.normal(size=(N, FEATURES)).astype("float32")
Y = _rng.integers(0, CLASSES, size=N).astype("int64")
X_WITH_IDS = np.concatenate([X, np.arange(N, dtype="float32")[:, None]], axis=1)
LOSS = "sparse_categorical_crossentropy"


class IdTap(tf.keras.layers.Layer):
    def __init__(self, path="", **kwargs):
        super().__init__(**kwargs)
        self.path = path

    def call(self, inputs, training=None):
        if training and self.path:
            tf.print(tf.cast(inputs[:, -1], tf.int32), output_stream="file://" + self.path, summarize=-1)
        return inputs[:, :-1]

    def get_config(self):
        return {**super().get_config(), "path": self.path}


def build_model(record_ids=True):
    path = os.path.join(os.environ.get("TFCC_RUN_DIR", "."), "ids.txt") if record_ids else ""
    inputs = tf.keras.Input((FEATURES + 1,))
    hidden = tf.keras.layers.Dense(16, activation="tanh")(IdTap(path)(inputs))
    outputs = tf.keras.layers.Dense(CLASSES, activation="softmax")(hidden)
    return tf.keras.Model(inputs, outputs)


def train_dataset():
    return tf.data.Dataset.from_tensor_slices((X_WITH_IDS, Y))


class DumpWeights(tf.keras.callbacks.Callback):
    def __init__(self, folder):
        super().__init__()
        self.folder = folder
        self.step = 0

    def on_train_batch_begin(self, batch, logs=None):
        os.makedirs(self.folder, exist_ok=True)
        np.savez(os.path.join(self.folder, f"{self.step:04d}.npz"), *self.model.get_weights())
        self.step += 1


def callbacks(run_dir, task):
    return [DumpWeights(os.path.join(run_dir, "weights"))]
