"""Multi-worker training with Keras: MultiWorkerMirroredStrategy + Model.fit.

Run one copy per worker, each with its own TF_CONFIG, from this folder.
"""
import argparse
import json
import os

import tensorflow as tf

import mnist_setup

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=None)
parser.add_argument('--model_dir', default='saved_model')
args = parser.parse_args()

with open('config.json') as f:  # hyperparameters, relative to the working directory
  config = json.load(f)
epochs = args.epochs or config['epochs']

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker']) + len(tf_config['cluster'].get('chief', []))

tf.keras.utils.set_random_seed(42)
strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = config['per_worker_batch_size'] * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
  # Model building/compiling need to be within `strategy.scope()`.
  multi_worker_model = mnist_setup.build_and_compile_cnn_model(config['learning_rate'])

multi_worker_model.fit(multi_worker_dataset, epochs=epochs,
                       steps_per_epoch=config['steps_per_epoch'])


def _is_chief(task_type, task_id):
  # With no 'chief' in the cluster, worker 0 acts as the chief.
  return task_type == 'chief' or (task_type == 'worker' and task_id == 0) or task_type is None


def write_filepath(filepath, task_type, task_id):
  dirpath = os.path.dirname(filepath)
  base = os.path.basename(filepath)
  if not _is_chief(task_type, task_id):
    dirpath = os.path.join(dirpath, 'workertemp_' + str(task_id))
    tf.io.gfile.makedirs(dirpath)
  return os.path.join(dirpath, base)


# Every worker saves (saving may use collectives); only the chief's copy is kept.
task_type, task_id = (strategy.cluster_resolver.task_type,
                      strategy.cluster_resolver.task_id)
write_model_path = write_filepath(os.path.join(args.model_dir, 'digits'), task_type, task_id)
multi_worker_model.save(write_model_path)
if not _is_chief(task_type, task_id):
  tf.io.gfile.rmtree(os.path.dirname(write_model_path))
