"""Keras 3 MirroredStrategy on one host: Model.fit, fine-tuning (fit again), the model saved and restored."""
import argparse

import keras
import numpy as np
import tensorflow as tf
from keras import ops
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--fine_tune_epochs", type=int, default=2)
args = parser.parse_args()

keras.utils.set_random_seed(0)

strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")

BATCH_SIZE_PER_REPLICA = 128
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

digits = load_digits()
x_train, x_test, y_train, y_test = train_test_split(
    digits.images.astype("float32"), digits.target, test_size=0.2, random_state=0)
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2000).batch(BATCH_SIZE)
eval_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE)


class Standardize(keras.layers.Layer):
  """Scales each image to zero mean and unit variance."""

  def call(self, images):
    mean = ops.mean(images, axis=(1, 2), keepdims=True)
    std = ops.std(images, axis=(1, 2), keepdims=True)
    return (images - mean) / (std + 1e-6)


with strategy.scope():
  inputs = keras.Input(shape=(8, 8))
  x = Standardize()(inputs)
  x = keras.layers.Flatten()(x)
  x = keras.layers.Dense(32, activation="relu")(x)
  outputs = keras.layers.Dense(10)(x)
  model = keras.Model(inputs, outputs)
  model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=keras.optimizers.Adam(learning_rate=0.01),
                metrics=["accuracy"])


def decay(epoch):
  return 0.01 if epoch < 2 else 0.001


class PrintLR(keras.callbacks.Callback):

  def on_epoch_end(self, epoch, logs=None):
    print(f"Learning rate for epoch {epoch + 1} is {self.model.optimizer.learning_rate.numpy():.4g}")


model.fit(train_dataset, validation_data=eval_dataset, epochs=args.epochs,
          callbacks=[keras.callbacks.LearningRateScheduler(decay), PrintLR()], verbose=2)

# Fine-tuning (as the transfer-learning guide does): compile again with a lower learning rate, fit again.
with strategy.scope():
  model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=keras.optimizers.Adam(learning_rate=1e-4),
                metrics=["accuracy"])
model.fit(train_dataset, validation_data=eval_dataset, epochs=args.fine_tune_epochs, verbose=2)

eval_loss, eval_acc = model.evaluate(eval_dataset, verbose=0)
print(f"Eval loss: {eval_loss:.4f}, Eval accuracy: {eval_acc:.4f}")

# Save the model and restore it, as the distributed-training tutorial does, then check the restored one.
path = "digits.keras"
model.save(path)
with strategy.scope():
  restored = keras.models.load_model(path, custom_objects={"Standardize": Standardize})
restored_loss, restored_acc = restored.evaluate(eval_dataset, verbose=0)
print(f"Restored model, accuracy: {100 * restored_acc:5.2f}%")
