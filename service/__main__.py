"""``python -m service``: the agentsearch command line."""

import sys

from service.cli import main

sys.exit(main())
