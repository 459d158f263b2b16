"""``python3 -m agent``: serve the JSON-lines protocol on stdin/stdout (see agent.server)."""

import sys

from agent.server import main

sys.exit(main())
