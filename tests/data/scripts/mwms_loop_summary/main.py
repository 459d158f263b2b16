"""MultiWorkerMirroredStrategy custom training loop that logs to TensorBoard.

Run one copy per worker, each with its own TF_CONFIG. The chief writes its
summaries to ./logs, the other workers to a throwaway temporary folder.
"""
import argparse
import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=3)
parser.add_argument('--steps_per_epoch', type=int, default=10)
parser.add_argument('--logdir', default='logs')
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
GLOBAL_BATCH_SIZE = 32 * num_workers

tf.random.set_seed(3)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task_type = strategy.cluster_resolver.task_type
task_id = strategy.cluster_resolver.task_id
is_chief = task_type == 'chief' or (task_type == 'worker' and task_id == 0)

digits = load_digits()
images = digits.images.reshape(-1, 64).astype(np.float32) / 16.0
labels = digits.target.astype(np.int64)
dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
           .shuffle(2000, seed=3).repeat().batch(GLOBAL_BATCH_SIZE))
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(64,)),
      tf.keras.layers.Dense(32, activation='relu'),
      tf.keras.layers.Dense(10),
  ])
  optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)
  train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()


def step_fn(inputs):
  x, y = inputs
  with tf.GradientTape() as tape:
    logits = model(x, training=True)
    per_example_loss = tf.keras.losses.sparse_categorical_crossentropy(
        y, logits, from_logits=True)
    loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)
  grads = tape.gradient(loss, model.trainable_variables)
  optimizer.apply_gradients(zip(grads, model.trainable_variables))
  train_accuracy.update_state(y, logits)
  return loss


@tf.function
def train_step(iterator):
  per_replica_loss = strategy.run(step_fn, args=(next(iterator),))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)


# Only the chief's summaries are kept.
logdir = args.logdir if is_chief else tempfile.mkdtemp(prefix='worker%d-logs-' % task_id)
writer = tf.summary.create_file_writer(logdir)

iterator = iter(dist_dataset)
with writer.as_default():
  for epoch in range(args.epochs):
    train_accuracy.reset_state()
    for _ in range(args.steps_per_epoch):
      loss = train_step(iterator)
      tf.summary.scalar('train_loss', loss, step=optimizer.iterations)
      tf.summary.scalar('accuracy', train_accuracy.result(), step=optimizer.iterations)
    # and one point per epoch, as the TensorBoard guide writes them
    tf.summary.scalar('epoch_accuracy', train_accuracy.result(), step=epoch)
writer.close()

if not is_chief:
  tf.io.gfile.rmtree(logdir)
