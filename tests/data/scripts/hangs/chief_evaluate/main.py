"""Multi-worker training with Keras, evaluated on the chief alone between two rounds of fit.

Run one copy per worker, each with its own TF_CONFIG. A model built in strategy.scope() cannot be evaluated
on the chief alone (its collectives would meet the others' fit and fail: see mismatched.py), so the chief
evaluates a plain copy of it. But its validation batches come from a generator that loops for ever (Keras's
old convention for generators) and evaluate has no steps=: the chief evaluates for ever, and the other
workers wait for it in the second fit's first step.
"""
import argparse
import itertools
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=5)
parser.add_argument('--steps_per_epoch', type=int, default=20)
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
is_chief = tf_config['task']['index'] == 0  # no 'chief' task: worker 0 is the chief
global_batch_size = 32 * num_workers
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before any other TensorFlow op

rng = np.random.default_rng(21)
x = rng.normal(size=(4096, 16)).astype(np.float32)
y = (x[:, 0] * x[:, 1] > 0).astype(np.int64)


def make_dataset(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=21).repeat().batch(global_batch_size)


def batches(x, y, batch_size=64):
    """Keras's generator convention: loop over the data for ever."""
    for start in itertools.cycle(range(0, len(x), batch_size)):
        yield x[start:start + batch_size], y[start:start + batch_size]


def build_model():
    model = tf.keras.Sequential([tf.keras.Input(shape=(16,)),
                                 tf.keras.layers.Dense(32, activation='relu'),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])
    return model


with strategy.scope():
    model = build_model()

# Warm up for one epoch, look at the validation loss on the chief, then train the rest.
model.fit(make_dataset(x[:3584], y[:3584]), epochs=1, steps_per_epoch=args.steps_per_epoch, verbose=2)
if is_chief:
    eval_model = build_model()  # outside the strategy: the chief's alone
    eval_model.set_weights(model.get_weights())
    val_loss, val_accuracy = eval_model.evaluate(batches(x[3584:], y[3584:]), verbose=0)  # tfcc-test: hangs here
    print(f'after warm-up: val_loss: {val_loss:.4f}, val_accuracy: {val_accuracy:.4f}')
# Meanwhile the other workers are in this fit's first step, waiting for the chief's all-reduce.
model.fit(make_dataset(x[:3584], y[:3584]), initial_epoch=1, epochs=args.epochs,  # tfcc-test: others wait here
          steps_per_epoch=args.steps_per_epoch, verbose=2)
