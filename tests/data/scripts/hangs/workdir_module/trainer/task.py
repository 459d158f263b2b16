"""Trains on every worker of the cluster in TF_CONFIG; one worker can be paused from outside at a step.

Run from the folder that holds trainer/:
    python -m trainer.task --num-epochs 10 --pause-task 1 --pause-at-step 25

The paused worker waits until the file --job-dir/resume-<task> exists; nobody creates it here, so it waits
for ever (in trainer/hooks/sync.py), and the other workers wait for it in the next step's all-reduce.
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

from . import model
from .hooks import sync


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument('--job-dir', default='out')
    parser.add_argument('--num-epochs', type=int, default=10)
    parser.add_argument('--steps-per-epoch', type=int, default=20)
    parser.add_argument('--learning-rate', type=float, default=0.01)
    parser.add_argument('--pause-task', type=int, default=1, help='the worker index to pause (-1: none)')
    parser.add_argument('--pause-at-step', type=int, default=25)
    return parser.parse_args()


def make_dataset(batch_size, seed=9):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3000, 16)).astype(np.float32)
    y = np.digitize(x[:, 0] + x[:, 1], [-0.5, 0.5]).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(3000, seed=seed).repeat().batch(batch_size)


def train_and_evaluate(args):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task_index = json.loads(os.environ['TF_CONFIG'])['task']['index']
    train_ds = make_dataset(32 * strategy.num_replicas_in_sync)
    with strategy.scope():
        keras_model = model.create_keras_model(args.learning_rate)
    callbacks = []
    if task_index == args.pause_task:
        gate = sync.Gate(os.path.join(args.job_dir, f'resume-{task_index}'))
        callbacks.append(sync.PauseAtStep(gate, args.pause_at_step))
    keras_model.fit(train_ds, epochs=args.num_epochs, steps_per_epoch=args.steps_per_epoch,
                    callbacks=callbacks, verbose=2)


if __name__ == '__main__':
    train_and_evaluate(get_args())
