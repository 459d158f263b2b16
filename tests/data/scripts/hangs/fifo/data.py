"""CSV parts on local disk, and the latest part streamed through a named pipe as the exporter decompresses it."""
import gzip
import os
import shutil
import threading

import numpy as np

FEATURES = 8


def write_part(path, rows, seed):
    """A CSV part of synthetic rows: FEATURES numbers, then the label."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES))
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    with open(path, 'w') as f:
        for row, label in zip(x, y):
            f.write(','.join(f'{v:.5f}' for v in row) + f',{label}\n')
    return path


def pipe_from_export(fifo, export):
    """A named pipe fed with the decompressed ``export`` by a thread: nothing uncompressed lands on disk."""
    if not os.path.exists(fifo):
        os.mkfifo(fifo)

    def feed():
        with gzip.open(export, 'rb') as packed, open(fifo, 'wb') as pipe:
            shutil.copyfileobj(packed, pipe)

    threading.Thread(target=feed, name='export-pipe', daemon=True).start()
    return fifo
