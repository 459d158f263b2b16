"""Multi-worker training with Keras (MultiWorkerMirroredStrategy + Model.fit) of a small CNN on
28x28 images, in three files like the tutorial's: main.py, images.py (the input pipeline), cnn.py.

Run one copy per worker, each with its own TF_CONFIG. It trains until stopped (--epochs, default 1000).
"""
import argparse
import json
import os

import tensorflow as tf

import cnn
import images

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=1000)
parser.add_argument('--per_worker_batch', type=int, default=32)
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
task_index = tf_config['task']['index']

strategy = tf.distribute.MultiWorkerMirroredStrategy()

# This worker's images come from a slow share (a network disk, a heavy decode) when the
# environment says so: the way one host of a cluster ends up feeding its worker slower.
slow_share = os.environ.get('SLOW_SHARE_ON_WORKER') == str(task_index)
dataset = images.train_dataset(args.per_worker_batch * num_workers, slow_share=slow_share)

with strategy.scope():
  model = cnn.build_and_compile()

model.fit(dataset, epochs=args.epochs, steps_per_epoch=50, verbose=2)
