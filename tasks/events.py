"""Prefect events for automations (``cbt-mover.<flow>.completed|failed``), sent best effort."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def emit(
    event: str, resource: dict[str, str], payload: dict[str, Any], related: list[dict[str, str]] | None = None
) -> None:
    """Emit ``event`` about ``resource``. An event is a notification, never the reason a run fails: one
    that cannot be sent is logged and dropped."""
    from prefect.events import emit_event

    try:
        emit_event(event=event, resource=resource, related=related, payload=payload)
    except Exception as err:  # noqa: BLE001
        log.warning("could not emit %s about %s: %s", event, resource.get("prefect.resource.id"), err)
