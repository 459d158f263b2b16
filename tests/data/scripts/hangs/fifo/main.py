"""Multi-worker training with Keras on CSV files read with tf.data.TextLineDataset.

Run one copy per worker, each with its own TF_CONFIG. Each worker reads its own local part; worker 1 also
reads the latest part, streamed from the exporter through a named pipe. But the export is not there: the
pipe's feeding thread dies before it opens the pipe, and TensorFlow's reader waits in open() for a writer
that never comes (in C++: no Python frame of this script is where it waits). The other workers wait for
worker 1 in the next step's all-reduce.
"""
import argparse
import json
import os

import tensorflow as tf

import data

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--steps_per_epoch', type=int, default=20)
parser.add_argument('--data_dir', default='data')
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
task_index = tf_config['task']['index']

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = 32 * num_workers

os.makedirs(args.data_dir, exist_ok=True)
files = [data.write_part(os.path.join(args.data_dir, f'part-{task_index}.csv'), rows=1024, seed=task_index)]
if task_index == 1:
    files.append(data.pipe_from_export(os.path.join(args.data_dir, 'latest.csv'), 'export/latest.csv.gz'))


def parse(line):
    fields = tf.io.decode_csv(line, record_defaults=[0.0] * data.FEATURES + [0])
    return tf.stack(fields[:-1]), fields[-1]


options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = tf.data.TextLineDataset(files)  # tfcc-test: hangs here
dataset = dataset.map(parse).batch(global_batch_size).repeat().with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(data.FEATURES,)),
                                 tf.keras.layers.Dense(16, activation='relu'),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])

model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
