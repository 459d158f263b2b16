"""Digits as a tf.data pipeline."""
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def digits(batch_size):
    d = load_digits()
    x = d.images.astype(np.float32) / 16.0
    y = d.target.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2000, seed=1).repeat().batch(batch_size)
