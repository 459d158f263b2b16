"""Parameter server training with ParameterServerStrategy and Model.fit, on workers with a time budget.

Run one copy per task with its own TF_CONFIG: the `chief` is the coordinator and calls fit; `ps` serves
until stopped; a `worker` serves for --worker_budget seconds only (a machine lent for a while), then
gives it back: it exits 0. The coordinator then waits for the worker to come back (up to an hour),
inside fit. Needs tf-keras (TF_USE_LEGACY_KERAS=1).
"""
import argparse
import multiprocessing
import os
import sys
import time

os.environ["GRPC_FAIL_FAST"] = "use_caller"

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1000)
parser.add_argument("--steps_per_epoch", type=int, default=20)
parser.add_argument("--worker_budget", type=float, default=15.0, help="seconds a worker serves")
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
num_workers = len(cluster_resolver.cluster_spec().as_dict().get("worker", []))

if cluster_resolver.task_type in ("worker", "ps"):
  config = tf.compat.v1.ConfigProto()
  if multiprocessing.cpu_count() < num_workers + 1:
    config.inter_op_parallelism_threads = num_workers + 1
  server = tf.distribute.Server(
      cluster_resolver.cluster_spec(), job_name=cluster_resolver.task_type,
      task_index=cluster_resolver.task_id, protocol=cluster_resolver.rpc_layer or "grpc",
      config=config, start=True)
  if cluster_resolver.task_type == "ps":
    server.join()
  time.sleep(args.worker_budget)
  print(f"worker {cluster_resolver.task_id}: budget of {args.worker_budget:.0f}s spent, leaving", flush=True)
  sys.exit(0)

# The chief is the coordinator.
rng = np.random.default_rng(4)
x_train = rng.normal(size=(2048, 16)).astype(np.float32)
y_train = (x_train[:, 0] > x_train[:, 1]).astype(np.int64)


def dataset_fn(input_context):
  batch_size = input_context.get_per_replica_batch_size(64)
  dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048).repeat()
  dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  return dataset.batch(batch_size).prefetch(2)


strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
with strategy.scope():
  model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
                               tf.keras.layers.Dense(2)])
  model.compile(optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=0.1),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])

model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn),  # tfcc-test: hangs here
          epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
