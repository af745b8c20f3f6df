"""The one way the flows, their tasks and their reports do what may fail without failing the run: a label, an
event, an artifact, a Kubernetes Event, a cleanup after a cancelled run.

``with best_effort("could not tag the flow run"): ...`` runs the block; an ``Exception`` it raises is logged in one
line, ``<what>: <error>``, at WARNING (or ``level``) on ``log`` (default: this module's logger), and swallowed.
A value the block sets keeps the default the caller gave it before the block when the block fails. Never raises
(``BaseException``s that are not ``Exception``s, e.g. a cancellation, go through).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_log = logging.getLogger(__name__)


@contextmanager
def best_effort(what: str, log: Any = None, level: int = logging.WARNING) -> Iterator[None]:
    """Run the block; log its failure as ``<what>: <error>`` at ``level`` on ``log`` and go on."""
    try:
        yield
    except Exception as err:  # noqa: BLE001  (the one broad except: the block is best effort by contract)
        (log or _log).log(level, "%s: %s", what, err)
