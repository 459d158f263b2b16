"""Custom training with tf.distribute.Strategy: MirroredStrategy on one host.

Written for tf-keras (Keras 2): it asks TensorFlow for it before the import.
Prints one `name: value` line per epoch.
"""
import argparse
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is tf-keras (Keras 2)

import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

tf.keras.utils.set_random_seed(1)

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))

BATCH_SIZE_PER_REPLICA = 128
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

digits = load_digits()
train_images, test_images, train_labels, test_labels = train_test_split(
    digits.images[..., None] / 16.0, digits.target, test_size=0.2, random_state=1)
train_dataset = tf.data.Dataset.from_tensor_slices(
    (train_images.astype("float32"), train_labels)).shuffle(2000).batch(GLOBAL_BATCH_SIZE)
test_dataset = tf.data.Dataset.from_tensor_slices(
    (test_images.astype("float32"), test_labels)).batch(GLOBAL_BATCH_SIZE)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)


def create_model():
  return tf.keras.Sequential([
      tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(8, 8, 1)),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(32, activation="relu"),
      tf.keras.layers.Dense(10),
  ])


with strategy.scope():
  loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

  def compute_loss(labels, predictions):
    per_example_loss = loss_object(labels, predictions)
    return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)

  test_loss = tf.keras.metrics.Mean(name="test_loss")
  train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
  test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
  model = create_model()
  optimizer = tf.keras.optimizers.legacy.Adam(learning_rate=0.01)


def train_step(inputs):
  images, labels = inputs
  with tf.GradientTape() as tape:
    predictions = model(images, training=True)
    loss = compute_loss(labels, predictions)
  gradients = tape.gradient(loss, model.trainable_variables)
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))
  train_accuracy.update_state(labels, predictions)
  return loss


def test_step(inputs):
  images, labels = inputs
  predictions = model(images, training=False)
  test_loss.update_state(loss_object(labels, predictions))
  test_accuracy.update_state(labels, predictions)


@tf.function
def distributed_train_step(dataset_inputs):
  per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


@tf.function
def distributed_test_step(dataset_inputs):
  return strategy.run(test_step, args=(dataset_inputs,))


for epoch in range(args.epochs):
  total_loss = 0.0
  num_batches = 0
  for batch in train_dist_dataset:
    total_loss += distributed_train_step(batch)
    num_batches += 1
  train_loss = total_loss / num_batches

  for batch in test_dist_dataset:
    distributed_test_step(batch)

  print(f"Epoch: {epoch + 1}, loss: {float(train_loss):.4f}, "
        f"accuracy: {float(train_accuracy.result()):.4f}, "
        f"test_loss: {float(test_loss.result()):.4f}, "
        f"test_accuracy: {float(test_accuracy.result()):.4f}")

  test_loss.reset_states()
  train_accuracy.reset_states()
  test_accuracy.reset_states()
