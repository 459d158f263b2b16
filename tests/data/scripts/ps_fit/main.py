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
args = parser.parse_args()

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
      optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=0.1),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=["accuracy"],
      steps_per_execution=5)

model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn),
          epochs=args.epochs, steps_per_epoch=20)
