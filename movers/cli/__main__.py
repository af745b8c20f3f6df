"""``python -m movers.cli`` is ``cbt-mover`` (as ``python -m movers``)."""

import sys

from movers.cli import main

sys.exit(main())
