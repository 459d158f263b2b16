"""A Keras callback that ships each batch's metrics to a metrics store from a background thread."""
import threading
import time

from tensorflow import keras


class MetricsUploader(keras.callbacks.Callback):
    """Buffers each batch's logs; a background thread uploads them every ``interval`` seconds.

    Two locks, taken in opposite orders: the callback takes the buffer's, then the connection's (to note
    the step); the uploader takes the connection's, then the buffer's. ``race_at_batch`` makes the two meet
    at that batch (the Events only make the unlucky interleaving certain).
    """

    def __init__(self, interval=0.05, race_at_batch=None):
        super().__init__()
        self._buffer_lock = threading.Lock()
        self._conn_lock = threading.Lock()
        self._buffer, self._uploaded, self._last_step = [], 0, 0
        self._interval, self._race_at_batch = interval, race_at_batch
        self._racing = threading.Event()
        self._callback_has_buffer = threading.Event()
        self._uploader_has_conn = threading.Event()
        threading.Thread(target=self._upload_loop, name='metrics-uploader', daemon=True).start()

    def on_train_batch_end(self, batch, logs=None):
        with self._buffer_lock:
            self._buffer.append(dict(logs or {}))
            if batch == self._race_at_batch:
                self._racing.set()
                self._callback_has_buffer.set()
                self._uploader_has_conn.wait()
            with self._conn_lock:  # tfcc-test: hangs here
                self._last_step += 1

    def _upload_loop(self):
        while True:
            time.sleep(self._interval)
            with self._conn_lock:
                if self._racing.is_set():
                    self._uploader_has_conn.set()
                    self._callback_has_buffer.wait()
                with self._buffer_lock:  # tfcc-test: hangs here
                    batch, self._buffer = self._buffer, []
                self._uploaded += len(batch)  # (a real one would POST them here)
