"""Parameter server training with ParameterServerStrategy and Model.fit.

Run one copy per task with its own TF_CONFIG: `ps` and `worker` tasks only
serve; the `chief` is the coordinator that builds the model and calls fit.
Needs tf-keras: run with TF_USE_LEGACY_KERAS=1 so that tf.keras is Keras 2.
"""
import argparse
import multiprocessing
import os

os.environ["GRPC_FAIL_FAST"] = "use_caller"

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--learning_rate", type=float, default=0.1)
parser.add_argument("--eval_steps", type=int, default=40)
args = parser.parse_args()
print(args)

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
num_workers = len(cluster_resolver.cluster_spec().as_dict().get("worker", []))

if cluster_resolver.task_type in ("worker", "ps"):
  config = tf.compat.v1.ConfigProto()
  if multiprocessing.cpu_count() < num_workers + 1:
    # Small machines: a worker needs enough inter-op threads or it stalls.
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
import numpy as np
from sklearn.datasets import load_digits

digits = load_digits()
x_train = digits.data.astype(np.float32) / 16.0
y_train = digits.target.astype(np.int64)


def dataset_fn(input_context):
  global_batch_size = 64
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)
  dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2000).repeat()
  dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  return dataset.batch(batch_size).prefetch(2)


strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)

with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(32, activation="relu", input_shape=(64,)),
      tf.keras.layers.Dense(10),
  ])
  model.compile(
      optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=args.learning_rate),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=["accuracy"],
      steps_per_execution=5)

model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn),
          epochs=args.epochs, steps_per_epoch=20)

# Evaluation with the coordinator (the tutorial's custom evaluation loop).
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
  eval_accuracy = tf.keras.metrics.Accuracy()


@tf.function
def eval_step(iterator):

  def replica_fn(batch_data, labels):
    pred = model(batch_data, training=False)
    eval_accuracy.update_state(labels, tf.argmax(pred, axis=1))

  batch_data, labels = next(iterator)
  strategy.run(replica_fn, args=(batch_data, labels))


def eval_dataset_fn():
  return tf.data.Dataset.from_tensor_slices((x_train, y_train)).repeat().batch(16)


per_worker_eval_dataset = coordinator.create_per_worker_dataset(eval_dataset_fn)
per_worker_eval_iterator = iter(per_worker_eval_dataset)
for _ in range(args.eval_steps):
  coordinator.schedule(eval_step, args=(per_worker_eval_iterator,))
coordinator.join()
print("Evaluation accuracy: %f" % eval_accuracy.result())
