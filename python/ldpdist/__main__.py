"""``python -m ldpdist``: the command line (see ``ldpdist.cli``)."""

import sys

from .cli import main

sys.exit(main())
