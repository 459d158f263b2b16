"""The input pipeline: synthetic 28x28 "images" with 10 classes, decoded one by one."""
import time

import numpy as np
import tensorflow as tf

# a slow share: reading and decoding one image takes this long (its wait must outlast the training step even
# when a busy machine makes the step slower: at 2 ms it fell below a quarter of the step there)
DECODE_SECONDS = 0.004


def _arrays(count=4096, seed=0):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, size=count).astype(np.int64)
  pixels = rng.random((count, 28, 28, 1), dtype=np.float32) * 0.5
  pixels[np.arange(count), labels * 2, :, 0] += 0.5  # a class shows as a bright row
  return pixels, labels


def _slow_read(image):
  time.sleep(DECODE_SECONDS)
  return image


def train_dataset(global_batch_size, slow_share=False):
  x, y = _arrays()
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat()
  if slow_share:
    dataset = dataset.map(
        lambda image, label: (tf.ensure_shape(tf.numpy_function(_slow_read, [image], tf.float32), [28, 28, 1]),
                              label))
  return dataset.batch(global_batch_size).prefetch(2)
