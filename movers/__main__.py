"""``python -m movers`` is ``cbt-mover``."""

import sys

from movers.cli import main

sys.exit(main())
