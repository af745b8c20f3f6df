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

``protect()`` is the same guarantee for a process whose logging someone else configured (a Prefect worker running
the tasks, which open repositories in-process): it leaves the levels and handlers as they are, except that the
libraries that log credentials never log below INFO, and every handler of every logger gets the filter.
"""

from __future__ import annotations

import logging
import os
import sys

from movers.redaction import KNOWN, SECRET_ENV_VARS, RedactingFilter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OWN_LOGGERS = "movers"
CREDENTIAL_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "kubernetes")  # log headers, URLs, credentials


def configure(level: int) -> None:
    KNOWN.add(*(os.environ.get(name) for name in SECRET_ENV_VARS))
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    _filter_handlers(root.handlers)
    root.setLevel(max(level, logging.INFO))
    logging.getLogger(OWN_LOGGERS).setLevel(level)


def _filter_handlers(handlers) -> None:
    for handler in handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter(KNOWN))


def protect() -> None:
    """Keep credentials out of a process's logs without taking over its logging (see the module docstring)."""
    KNOWN.add(*(os.environ.get(name) for name in SECRET_ENV_VARS))
    for name in CREDENTIAL_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.getEffectiveLevel(), logging.INFO))
    _filter_handlers(logging.getLogger().handlers)
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            _filter_handlers(logger.handlers)
