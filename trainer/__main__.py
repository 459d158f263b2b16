"""Entry point: ``python -m trainer [options]`` (see ``trainer.main``)."""

import os
import sys

from trainer.main import main

code = main()
# Everything the run writes is closed by now (its metrics, backups, model and TensorBoard files: main() and
# Keras's own end of training close them). A TensorFlow process then takes about 2 s of CPU more to tear its
# interpreter down (thousands of modules, the runtime's threads): it ends at once instead (bench/end_of_run.py).
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
