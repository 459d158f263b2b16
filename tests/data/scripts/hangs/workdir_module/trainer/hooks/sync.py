"""Pausing training from outside: a gate a Keras callback waits at, opened when a control file appears."""
import os
import threading
import time

import tensorflow as tf


class Gate:
    """Closed: whoever calls wait_open() waits until a watcher thread sees ``release_file`` appear."""

    def __init__(self, release_file, poll=0.5):
        self._cond = threading.Condition()
        self._open = True
        self._release_file, self._poll = release_file, poll

    def close(self):
        with self._cond:
            self._open = False
        threading.Thread(target=self._watch, name='gate-watcher', daemon=True).start()

    def wait_open(self):
        with self._cond:
            while not self._open:
                self._cond.wait()  # tfcc-test: hangs here

    def _watch(self):
        while not os.path.exists(self._release_file):
            time.sleep(self._poll)
        with self._cond:
            self._open = True
            self._cond.notify_all()


class PauseAtStep(tf.keras.callbacks.Callback):
    """At ``step`` the worker stops and waits for an external signal (an operator's snapshot window)."""

    def __init__(self, gate, step):
        super().__init__()
        self.gate, self.step, self.seen = gate, step, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.step:
            print(f'paused at step {self.seen}: waiting for {self.gate._release_file}', flush=True)
            self.gate.close()
        self.gate.wait_open()
