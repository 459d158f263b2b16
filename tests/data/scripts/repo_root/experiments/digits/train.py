"""Custom training loop on one worker. From the repository's root:

    python -m experiments.digits.train --epochs 2
"""
import argparse

import tensorflow as tf

from myproject import data
from myproject.models import net

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=2)
parser.add_argument('--steps', type=int, default=5)
parser.add_argument('--batch_size', type=int, default=32)
args = parser.parse_args()

model = net.build()
optimizer = tf.keras.optimizers.Adam(0.01)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
iterator = iter(data.digits(args.batch_size))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    accuracy.update_state(y, logits)
    return loss


for epoch in range(args.epochs):
    accuracy.reset_state()
    for _ in range(args.steps):
        loss = train_step(*next(iterator))
    print(f"Epoch {epoch}: loss={float(loss):.4f} accuracy={float(accuracy.result()):.4f}")
