"""Parameter server training with a custom loop and ClusterCoordinator.

Run one copy per task with its own TF_CONFIG: `ps` and `worker` tasks only
serve; the `chief` is the coordinator, schedules the steps and prints one line
per epoch. Written for tf-keras (run with TF_USE_LEGACY_KERAS=1).
"""
import argparse
import multiprocessing
import os

os.environ["GRPC_FAIL_FAST"] = "use_caller"

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps_per_epoch", type=int, default=10)
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
num_workers = len(cluster_resolver.cluster_spec().as_dict().get("worker", []))

if cluster_resolver.task_type in ("worker", "ps"):
  config = tf.compat.v1.ConfigProto()
  if multiprocessing.cpu_count() < num_workers + 1:
    config.inter_op_parallelism_threads = num_workers + 1
  server = tf.distribute.Server(
      cluster_resolver.cluster_spec(),
      job_name=cluster_resolver.task_type,
      task_index=cluster_resolver.task_id,
      protocol=cluster_resolver.rpc_layer or "grpc",
      config=config,
      start=True)
  server.join()

# The chief is the coordinator.
from sklearn.datasets import load_digits

digits = load_digits()
features = digits.data.astype(np.float32) / 16.0
labels = digits.target.astype(np.int64)
GLOBAL_BATCH_SIZE = 64

strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)


def dataset_fn(input_context):
  batch_size = input_context.get_per_replica_batch_size(GLOBAL_BATCH_SIZE)
  dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(2000).repeat()
  dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  return dataset.batch(batch_size).prefetch(2)


with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(32, activation="relu", input_shape=(64,)),
      tf.keras.layers.Dense(10),
  ])
  optimizer = tf.keras.optimizers.legacy.RMSprop(learning_rate=0.01)
  accuracy = tf.keras.metrics.SparseCategoricalAccuracy()


@tf.function
def step_fn(iterator):

  def replica_fn(batch_data, batch_labels):
    with tf.GradientTape() as tape:
      logits = model(batch_data, training=True)
      per_example_loss = tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(batch_labels, logits)
      loss = tf.nn.compute_average_loss(per_example_loss)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    accuracy.update_state(batch_labels, logits)
    return loss

  batch_data, batch_labels = next(iterator)
  losses = strategy.run(replica_fn, args=(batch_data, batch_labels))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)


@tf.function
def per_worker_dataset_fn():
  return strategy.distribute_datasets_from_function(dataset_fn)


per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
per_worker_iterator = iter(per_worker_dataset)

for epoch in range(args.epochs):
  accuracy.reset_states()
  step_losses = [coordinator.schedule(step_fn, args=(per_worker_iterator,))
                 for _ in range(args.steps_per_epoch)]
  coordinator.join()  # wait at the epoch boundary
  loss = np.mean([remote.fetch() for remote in step_losses])
  print(f"Epoch: {epoch}, accuracy: {accuracy.result().numpy():.4f}, loss: {loss:.4f}")
