"""A hand-written training loop on one machine (no strategy), reporting the way many people print:
its settings first, an "epoch N:" header with its numbers on the next line, and a sentence after
each epoch's validation."""
import argparse

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch_size", type=int, default=64)
args = parser.parse_args()
print(f"config: epochs={args.epochs} batch_size={args.batch_size} learning_rate=0.01")

digits = load_digits()
x = digits.data.astype("float32") / 16.0
y = digits.target.astype("int64")
x_train, y_train, x_val, y_val = x[:1500], y[:1500], x[1500:], y[1500:]
train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1500, seed=0).batch(args.batch_size)

tf.random.set_seed(0)
model = tf.keras.Sequential([
    tf.keras.Input((64,)),
    tf.keras.layers.Dense(32, activation="relu"),
    tf.keras.layers.Dense(10),
])
optimizer = tf.keras.optimizers.Adam(0.01)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(args.epochs):
    losses = [float(train_step(images, labels)) for images, labels in train]
    print(f"epoch {epoch}:")
    print(f"    loss={np.mean(losses):.4f}")
    predicted = np.argmax(model(x_val, training=False), axis=1)
    print(f"validation after epoch {epoch}, accuracy is {np.mean(predicted == y_val):.2f}")
