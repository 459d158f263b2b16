"""Dataset and model for main.py (the "MNIST" is scikit-learn's 8x8 digits)."""
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def mnist_dataset(batch_size):
  digits = load_digits()
  x_train = digits.images.astype(np.float32) / 16.0  # 8x8 pixels in [0, 1]
  y_train = digits.target.astype(np.int64)
  train_dataset = tf.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(2000, seed=42).repeat().batch(batch_size)
  return train_dataset


def build_and_compile_cnn_model(learning_rate=0.1):
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(8, 8)),
      tf.keras.layers.Reshape(target_shape=(8, 8, 1)),
      tf.keras.layers.Conv2D(4, 3, activation='relu'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(32, activation='relu'),
      tf.keras.layers.Dense(10)
  ])
  model.compile(
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate),
      metrics=['accuracy'])
  return model
