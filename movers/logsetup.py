"""The CLI's logging: what a mover pod writes to its log, and so to the cluster's log store.

Contract of ``configure(level)``:

* records go to stderr as ``TIME LEVEL LOGGER: MESSAGE`` (or to the root handlers already set up);
* the ``movers`` loggers log at ``level``; every other library at ``level`` but never below INFO, so
  no library's DEBUG output is printed (botocore's request dumps carry the Authorization header, the
  session token and the access key id; urllib3, kubernetes and s3transfer log URLs and headers);
* every record, at every root handler, passes ``movers.redaction.RedactingFilter(KNOWN)``, after the values of
  ``SECRET_ENV_VARS`` were added to ``KNOWN``: no known credential, credential header or URL
  userinfo is printed at any level, tracebacks included.

Calling it again only changes the levels.
"""

from __future__ import annotations

import logging
import os
import sys

from movers.redaction import KNOWN, SECRET_ENV_VARS, RedactingFilter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OWN_LOGGERS = "movers"


def configure(level: int) -> None:
    KNOWN.add(*(os.environ.get(name) for name in SECRET_ENV_VARS))
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter(KNOWN))
    root.setLevel(max(level, logging.INFO))
    logging.getLogger(OWN_LOGGERS).setLevel(level)
