"""Input data: scikit-learn's 8x8 digits, split into train and eval."""
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def load_data():
    digits = load_digits()
    x = digits.images.reshape(-1, 64).astype(np.float32) / 16.0
    y = digits.target.astype(np.int64)
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def make_dataset(x, y, batch_size, shuffle=True):
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=7)
    return ds.repeat().batch(batch_size)
