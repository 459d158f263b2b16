"""Per-batch preprocessing in Python (tf.py_function): standardise the features with running statistics."""
import threading

import numpy as np

_lock = threading.Lock()  # guards the statistics: the tf.data threads call in concurrently
_stats = {'mean': 0.0, 'std': 1.0, 'batches': 0}


def _refresh_stats(features):
    with _lock:  # tfcc-test: hangs here
        _stats['mean'] = float(features.mean())
        _stats['std'] = float(features.std()) + 1e-6


def make_standardize(refresh_every=None):
    """The Python function for tf.py_function; refreshes its statistics every ``refresh_every`` batches."""
    def standardize(features):
        features = features.numpy()
        with _lock:
            _stats['batches'] += 1
            if refresh_every and _stats['batches'] % refresh_every == 0:
                _refresh_stats(features)  # takes _lock again: a Lock, not an RLock
            mean, std = _stats['mean'], _stats['std']
        return ((features - mean) / std).astype(np.float32)
    return standardize
