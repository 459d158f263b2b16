"""Keras 3 custom training loop under MultiWorkerMirroredStrategy, each batch's labels asked of a label service.

Run one copy per worker, each with its own TF_CONFIG. Worker 1's label service stops answering after 12
requests: its main thread waits in recv for ever, and the other workers wait for it in the next all-reduce.
"""
import argparse
import json
import os

import keras
import numpy as np
import tensorflow as tf

import label_service

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--steps_per_epoch', type=int, default=10)
parser.add_argument('--batch_size', type=int, default=32, help='per worker')
args = parser.parse_args()

task_index = json.loads(os.environ['TF_CONFIG'])['task']['index']
strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = args.batch_size * strategy.num_replicas_in_sync

rng = np.random.default_rng(5 + task_index)  # each worker reads its own part of the examples
features = rng.normal(size=(1024, 16)).astype(np.float32)
labels = (features[:, :3].sum(axis=1) > 0).astype(np.int64)  # what the service knows
client = label_service.LabelClient(label_service.serve(labels, answer_first=12 if task_index == 1 else None))

with strategy.scope():
    model = keras.Sequential([keras.Input(shape=(16,)),
                              keras.layers.Dense(32, activation='relu'),
                              keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(learning_rate=0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


@tf.function
def train_step(x, y):
    def step_fn(x, y):
        with tf.GradientTape() as tape:
            per_example_loss = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    per_replica_losses = strategy.run(step_fn, args=(x, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


step = 0
for epoch in range(args.epochs):
    for _ in range(args.steps_per_epoch):
        ids = rng.choice(len(features), size=args.batch_size, replace=False)
        y = np.array(client.labels(ids), dtype=np.int64)
        loss = train_step(tf.constant(features[ids]), tf.constant(y))
        step += 1
        print(f'Step {step}, loss: {float(loss):.4f}', flush=True)
