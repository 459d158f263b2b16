"""Custom training loop with MultiWorkerMirroredStrategy: strategy.run in a tf.function.

Run one copy per worker, each with its own TF_CONFIG. A debugging pause left in the loop: worker 1
sleeps for an hour at --pause_at_step (to attach a debugger), and the other workers wait for it in the
next step's all-reduce.
"""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--steps_per_epoch', type=int, default=10)
parser.add_argument('--pause_at_step', type=int, default=15, help='worker 1 stops here for a while')
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
task_index = tf_config['task']['index']
per_worker_batch_size = 32
global_batch_size = per_worker_batch_size * num_workers

rng = np.random.default_rng(3)
x_train = rng.normal(size=(2048, 16)).astype(np.float32)
y_train = (x_train[:, :4].sum(axis=1) > 0).astype(np.int64)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048, seed=3).repeat()
dist_dataset = strategy.experimental_distribute_dataset(dataset.batch(global_batch_size))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation='relu', input_shape=(16,)),
                                 tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_object(y, model(x, training=True)),
                                              global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


iterator = iter(dist_dataset)
step = 0
for epoch in range(args.epochs):
    for _ in range(args.steps_per_epoch):
        loss = train_step(iterator)
        step += 1
        print(f'Epoch {epoch} step {step}, loss: {loss:.4f}', flush=True)
        if task_index == 1 and step == args.pause_at_step:
            time.sleep(3600)  # tfcc-test: hangs here
