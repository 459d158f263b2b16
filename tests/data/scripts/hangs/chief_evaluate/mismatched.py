"""Multi-worker training with Keras, evaluated between two rounds of fit on the chief only: it FAILS, not hangs.

Run one copy per worker, each with its own TF_CONFIG. Worker 0 (the chief) evaluates the distributed model
after the first fit while the others go on into the second fit: mismatched collectives. TensorFlow 2.21 gives
each collective its instance key when it is called, in order, so the chief's first evaluate collective and the
others' first fit collective get the same key, and within a second both fail with an InternalError
("Collective instance N expected type 0 and data_type 1 but got type 0 and data_type 9"; with a repeated
validation set and steps=: "Shape mismatch in the collective instance N"). main.py is the shape that hangs.
"""
import argparse
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
train = tf.data.Dataset.from_tensor_slices((x[:3584], y[:3584])).shuffle(3584, seed=21).repeat()
validation = tf.data.Dataset.from_tensor_slices((x[3584:], y[3584:])).batch(global_batch_size)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(16,)),
                                 tf.keras.layers.Dense(32, activation='relu'),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])

# Warm up for one epoch, look at the validation loss, then train the rest.
model.fit(train.batch(global_batch_size), epochs=1, steps_per_epoch=args.steps_per_epoch, verbose=2)
if is_chief:
    val_loss, val_accuracy = model.evaluate(validation, verbose=0)  # fails here
    print(f'after warm-up: val_loss: {val_loss:.4f}, val_accuracy: {val_accuracy:.4f}')
# The other workers are at the next line, in fit: their first collective fails too.
model.fit(train.batch(global_batch_size), initial_epoch=1, epochs=args.epochs,
          steps_per_epoch=args.steps_per_epoch, verbose=2)
