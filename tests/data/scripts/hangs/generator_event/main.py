"""Multi-worker training with Keras on rows a Python generator streams (tf.data.Dataset.from_generator).

Run one copy per worker, each with its own TF_CONFIG. Worker 1's download stalls at its third shard:
its generator waits for ever, and every other worker waits for it in the next step's all-reduce.
"""
import argparse
import json
import os

import tensorflow as tf
import tf_keras as keras

import data

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--steps_per_epoch', type=int, default=20)
parser.add_argument('--batch_size', type=int, default=32, help='per worker')
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
task_index = tf_config['task']['index']

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = args.batch_size * num_workers

generator = data.make_generator(seed=task_index,
                                stall_at_shard=3 if task_index == 1 else None)
dataset = tf.data.Dataset.from_generator(
    generator,
    output_signature=(tf.TensorSpec(shape=(data.FEATURES,), dtype=tf.float32),
                      tf.TensorSpec(shape=(), dtype=tf.int64)))
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = dataset.batch(global_batch_size).with_options(options)

with strategy.scope():
    model = keras.Sequential([
        keras.Input(shape=(data.FEATURES,)),
        keras.layers.Dense(32, activation='relu'),
        keras.layers.Dense(data.CLASSES),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])

model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
