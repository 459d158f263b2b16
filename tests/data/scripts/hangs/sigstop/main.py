"""Multi-worker training with Keras, with a "stop here so that I can attach a debugger" hook.

Run one copy per worker, each with its own TF_CONFIG. `--debug_stop TASK:STEP` stops that worker (SIGSTOP, as
Ctrl-Z would) after that step, to attach gdb or py-spy; the default stops worker 1 after step 12. A stopped
process cannot answer (no Python runs); the other workers wait in the next all-reduce until TensorFlow's
heartbeats give up on it.
"""
import argparse
import json
import os
import signal

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--steps_per_epoch', type=int, default=20)
parser.add_argument('--debug_stop', default='1:12', help='TASK_INDEX:STEP, or "" for none')
args = parser.parse_args()

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
task_index = tf_config['task']['index']


class StopForDebugger(tf.keras.callbacks.Callback):
    def __init__(self, at_step):
        super().__init__()
        self.at_step, self.step = at_step, 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step == self.at_step:
            print(f'pid {os.getpid()} stops at step {self.step}: attach now, then kill -CONT', flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)  # tfcc-test: hangs here


strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = 32 * num_workers
rng = np.random.default_rng(2)
x = rng.normal(size=(4096, 16)).astype(np.float32)
y = (x[:, 3] > 0.2).astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=2).repeat().batch(global_batch_size)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(16,)),
                                 tf.keras.layers.Dense(32, activation='relu'),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])

callbacks = []
if args.debug_stop and int(args.debug_stop.split(':')[0]) == task_index:
    callbacks.append(StopForDebugger(int(args.debug_stop.split(':')[1])))
model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=2)
