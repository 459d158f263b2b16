"""Training rows streamed from Python: shard after shard of a download, through a generator."""
import itertools
import threading

import numpy as np

FEATURES = 16
CLASSES = 4


def shard_rows(shard, rows, seed):
    """One shard of synthetic rows: features and a label that depends on them."""
    rng = np.random.default_rng(seed * 1000 + shard)
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    y = (np.abs(x[:, :CLASSES]).argmax(axis=1)).astype(np.int64)
    return x, y


def make_generator(seed, rows_per_shard=256, stall_at_shard=None):
    """A generator of (features, label) rows, read one shard after another.

    The next shard is downloaded in the background; ``stall_at_shard`` is a download that never ends.
    """
    def generate():
        downloaded = threading.Event()  # set by the downloader once the shard is on disk
        for shard in itertools.count():
            if shard == stall_at_shard:
                downloaded.wait()  # tfcc-test: hangs here
            x, y = shard_rows(shard, rows_per_shard, seed)
            for i in range(rows_per_shard):
                yield x[i], y[i]
    return generate
