"""A one-process fit with tfcc's reporter, asked for a step-time breakdown before it starts.

usage: breakdown_fit.py MODE ASK_AT_STEP
  dataset:   a tf.data pipeline (its map sleeps 5 ms a batch), a plain model (its step instrumented: the flag)
  arrays:    numpy arrays in fit, the same model
  custom:    a model whose train_step does not call compute_loss (the flag all the same)
  noflag:    the custom model where no flag could be made: not measured, said
  mirrored:  MirroredStrategy over 2 logical CPUs, steps_per_execution=2, and a second fit after the first
  keras3:    Keras 3 (import keras), the dataset of "dataset"
  short:     the dataset of "dataset", a fit of 12 steps: it ends while real steps are being timed

Each fit may train long (its steps are there for a slow machine) but ends once its breakdown record is written
(Keras 3's trains a finite pipeline to its end instead: see below); the second fit of "mirrored" trains as long as
the first took to measure once traced (time enough to measure again, which it must not).
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
    Model, layers, Input, Callback = keras.Model, keras.layers, keras.Input, keras.callbacks.Callback
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
else:
    Model, layers, Input, Callback = tf.keras.Model, tf.keras.layers, tf.keras.Input, tf.keras.callbacks.Callback
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class Until(Callback):
    """Ends the fit once ``reporter`` has written its breakdown, or once ``seconds`` have passed."""

    def __init__(self, reporter=None, seconds=None):
        super().__init__()
        self.measured, self.seconds, self.start = False, seconds, time.perf_counter()
        self.stepped = self.measured_at = None  # when its first step ended (tracing done), when it measured
        if reporter is not None:
            write = reporter.writer.write

            def noting(record):
                write(record)
                if record.get("type") == "breakdown" and not self.measured:
                    self.measured, self.measured_at = True, time.perf_counter()
            reporter.writer.write = noting

    def on_train_batch_end(self, batch, logs=None):
        if self.stepped is None:
            self.stepped = time.perf_counter()
        if self.measured or (self.seconds is not None and time.perf_counter() - self.start >= self.seconds):
            self.model.stop_training = True


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
if mode == "keras3":
    # Keras 3 cannot be stopped early here: a fit that leaves an infinite numpy_function pipeline unfinished
    # (stop_training, or steps_per_epoch short of its end) hangs in TensorFlow 2.21 with Keras 3.15 (seen
    # without tfcc too). So a finite pipeline of 768 steps, trained to its end: more than the measuring takes.
    finite = pipeline.take(64).repeat(12)
    reporter.measure_data = finite
    model.fit(finite, epochs=1, callbacks=[reporter], verbose=0)
elif mode in ("dataset", "short"):
    reporter.measure_data = pipeline
    model.fit(pipeline, epochs=1, steps_per_epoch=12 if mode == "short" else 4000,
              callbacks=[reporter, Until(reporter)], verbose=0)
elif mode == "mirrored":
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    reporter.measure_data = data
    first = Until(reporter)
    model.fit(data, epochs=1, steps_per_epoch=20000, callbacks=[reporter, first], verbose=0)
    again = report.reporter_for(model)  # asked once: measured in the first fit only
    again.measure_data = data
    # as long as the first fit took to measure once its steps were traced (this one's are traced already)
    model.fit(data, epochs=1, steps_per_epoch=20000, callbacks=[again, Until(seconds=first.measured_at - first.stepped)],
              verbose=0)
else:
    reporter.measure_data = x
    model.fit(x, y, batch_size=32, epochs=300, callbacks=[reporter, Until(reporter)], verbose=0)
reporter.writer.close()
