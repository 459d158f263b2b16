"""MultiWorkerMirrored fit with a callback in a file beside it; after the first epoch the callback's
report uses a name that was renamed (a NameError), on every worker."""
import argparse

import numpy as np
import tensorflow as tf

from reporting import EpochReport

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=3)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((512, 8)).astype('float32')
y = (x.sum(axis=1) > 4).astype('int64')
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer='sgd', loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

model.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), epochs=args.epochs, steps_per_epoch=4,
          callbacks=[EpochReport()], verbose=0)
