"""A one-process fit with tfcc's reporter, asked for a step-time breakdown before it starts.

usage: breakdown_fit.py MODE ASK_AT_STEP
  dataset:   a tf.data pipeline (its map sleeps 5 ms a batch), a plain model (its step instrumented: the flag)
  arrays:    numpy arrays in fit, the same model
  custom:    a model whose train_step does not call compute_loss (the flag all the same)
  noflag:    the custom model where no flag could be made: not measured, said
  mirrored:  MirroredStrategy over 2 logical CPUs, steps_per_execution=2, and a second fit after the first
  keras3:    Keras 3 (import keras), the dataset of "dataset"
  short:     the dataset of "dataset", a fit of 12 steps: it ends while real steps are being timed
"""
import json
import os
import sys
import time

mode, at_step = sys.argv[1], int(sys.argv[2])
if mode != "keras3":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from trainer import report  # noqa: E402

run_dir = os.environ["TFCC_RUN_DIR"]
with open(os.path.join(run_dir, "measure.json"), "w") as f:
    json.dump({"ask": "why-test", "at_step": at_step}, f)
if mode == "noflag":
    report._asked_flag = lambda: None
if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
else:
    strategy = tf.distribute.get_strategy()

x = np.random.default_rng(0).random((2048, 16, 16, 1), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 2048)


def slow(batch):
    time.sleep(0.005)
    return batch


if mode == "keras3":
    import keras
    Model, layers, Input = keras.Model, keras.layers, keras.Input
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
else:
    Model, layers, Input = tf.keras.Model, tf.keras.layers, tf.keras.Input
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class Custom(Model):
    def train_step(self, data):
        images, labels = data
        with tf.GradientTape() as tape:
            step_loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, self(images), True))
        self.optimizer.apply_gradients(zip(tape.gradient(step_loss, self.trainable_variables),
                                           self.trainable_variables))
        return {"loss": step_loss}


with strategy.scope():
    inputs = Input((16, 16, 1))
    outputs = inputs
    for layer in [layers.Conv2D(8, 3, activation="relu"), layers.BatchNormalization(), layers.Flatten(),
                  layers.Dense(10)]:
        outputs = layer(outputs)
    model = (Custom if mode in ("custom", "noflag") else Model)(inputs, outputs)
    model.compile("adam", loss, steps_per_execution=2 if mode == "mirrored" else 1)
reporter = report.reporter_for(model)
pipeline = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).map(
    lambda a, b: (tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32), [None, 16, 16, 1]), b)).repeat()
if mode in ("dataset", "keras3", "short"):
    reporter.measure_data = pipeline
    model.fit(pipeline, epochs=1, steps_per_epoch=12 if mode == "short" else 800, callbacks=[reporter], verbose=0)
elif mode == "mirrored":
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    for _ in range(2):  # asked once: measured in the first fit only
        reporter = report.reporter_for(model)
        reporter.measure_data = data
        model.fit(data, epochs=1, steps_per_epoch=3000, callbacks=[reporter], verbose=0)
else:
    reporter.measure_data = x
    model.fit(x, y, batch_size=32, epochs=60, callbacks=[reporter], verbose=0)
reporter.writer.close()
