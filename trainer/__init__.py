"""The tfcc trainer: ``python -m trainer`` trains one task of a cluster from TF_CONFIG.

Importing this package imports no TensorFlow, so ``trainer.main`` can set
``TF_USE_LEGACY_KERAS=1`` (tf-keras, see README) before TensorFlow loads.
A user's own script that reads TF_CONFIG itself needs nothing from here; it may
use ``trainer.report.MetricsReporter`` to write the same metrics records.
"""
