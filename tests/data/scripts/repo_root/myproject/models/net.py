"""A small classifier for 8x8 digits."""
import tensorflow as tf


def build(hidden=64):
    return tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(8, 8)),
        tf.keras.layers.Dense(hidden, activation='relu'),
        tf.keras.layers.Dense(10),
    ])
