"""Custom training loop with Keras and MultiWorkerMirroredStrategy.

Run one copy per worker, each with its own TF_CONFIG. Prints one line per epoch.
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=3)
parser.add_argument('--steps_per_epoch', type=int, default=10)
args = parser.parse_args()

per_worker_batch_size = 32
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
global_batch_size = per_worker_batch_size * num_workers


def dataset_fn(global_batch_size, input_context):
  digits = load_digits()
  x = digits.images.astype(np.float32) / 16.0
  y = digits.target.astype(np.int64)
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2000, seed=1).repeat()
  dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  return dataset.batch(batch_size)


def build_cnn_model():
  return tf.keras.Sequential([
      tf.keras.Input(shape=(8, 8)),
      tf.keras.layers.Reshape(target_shape=(8, 8, 1)),
      tf.keras.layers.Conv2D(4, 3, activation='relu'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(32, activation='relu'),
      tf.keras.layers.Dense(10)
  ])


tf.random.set_seed(7)
strategy = tf.distribute.MultiWorkerMirroredStrategy()

with strategy.scope():
  multi_worker_dataset = strategy.distribute_datasets_from_function(
      lambda input_context: dataset_fn(global_batch_size, input_context))
  multi_worker_model = build_cnn_model()
  optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.01)
  train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='train_accuracy')


@tf.function
def train_step(iterator):
  """Training step function."""

  def step_fn(inputs):
    x, y = inputs
    with tf.GradientTape() as tape:
      predictions = multi_worker_model(x, training=True)
      per_example_loss = tf.keras.losses.sparse_categorical_crossentropy(
          y, predictions, from_logits=True)
      loss = tf.nn.compute_average_loss(per_example_loss,
                                        global_batch_size=global_batch_size)
    grads = tape.gradient(loss, multi_worker_model.trainable_variables)
    optimizer.apply_gradients(zip(grads, multi_worker_model.trainable_variables))
    train_accuracy.update_state(y, predictions)
    return loss

  per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


iterator = iter(multi_worker_dataset)
for epoch in range(args.epochs):
  total_loss = 0.0
  num_batches = 0
  for _ in range(args.steps_per_epoch):
    total_loss += train_step(iterator)
    num_batches += 1
  train_loss = total_loss / num_batches
  print('Epoch: %d, accuracy: %f, train_loss: %f.' % (epoch, train_accuracy.result(), train_loss))
  train_accuracy.reset_state()
