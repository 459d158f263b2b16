"""Test-wide settings: no display, tf-keras, quiet TensorFlow, no real home directory."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before any test imports TensorFlow
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
