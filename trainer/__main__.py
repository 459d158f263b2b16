"""Entry point: ``python -m trainer [options]`` (see ``trainer.main``)."""

import sys

from trainer.main import main

sys.exit(main())
