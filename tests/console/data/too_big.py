"""A user's step that needs more memory than the task may have (the test sets a memory limit)."""

import tensorflow as tf

big = tf.ones([64 * 1024, 64 * 1024])  # 16 GiB of float32
print(float(tf.reduce_sum(big)))
