"""Prints a line at the end of each epoch."""
import tensorflow as tf


class EpochReport(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch} done, loss {logs['loss']:.4f}, best {best_loss:.4f}")
