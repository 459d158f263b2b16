"""Trains the digits classifier on every worker of the cluster in TF_CONFIG.

Run from the folder that holds trainer/ (as the platform runs it):
    python -m trainer.task --job-dir out --num-epochs 2
"""
import argparse
import json
import os

import tensorflow as tf

from . import model
from . import util


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument('--job-dir', type=str, default='out', help='where the model is written')
    parser.add_argument('--num-epochs', type=int, default=2)
    parser.add_argument('--batch-size', type=int, default=32, help='per worker')
    parser.add_argument('--steps-per-epoch', type=int, default=5)
    parser.add_argument('--learning-rate', type=float, default=0.01)
    return parser.parse_args()


def _is_chief(task_type, task_id):
    return task_type is None or task_type == 'chief' or (task_type == 'worker' and task_id == 0)


def train_and_evaluate(args):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    num_workers = strategy.num_replicas_in_sync
    (x_train, y_train), (x_eval, y_eval) = util.load_data()
    train_ds = util.make_dataset(x_train, y_train, args.batch_size * num_workers)
    eval_ds = util.make_dataset(x_eval, y_eval, args.batch_size * num_workers, shuffle=False)

    with strategy.scope():
        keras_model = model.create_keras_model(args.learning_rate)

    keras_model.fit(train_ds, epochs=args.num_epochs, steps_per_epoch=args.steps_per_epoch,
                    validation_data=eval_ds, validation_steps=2, verbose=2)

    task = json.loads(os.environ.get('TF_CONFIG', '{}')).get('task', {})
    task_type, task_id = task.get('type'), task.get('index')
    export_dir = os.path.join(args.job_dir, 'model')
    if not _is_chief(task_type, task_id):
        export_dir = os.path.join(args.job_dir, 'workertemp_%d' % task_id)
    keras_model.save(export_dir)
    if not _is_chief(task_type, task_id):
        tf.io.gfile.rmtree(export_dir)


if __name__ == '__main__':
    train_and_evaluate(get_args())
