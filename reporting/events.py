"""The one owner of the Prefect events the flows emit, for automations (README "Prefect flows", events).

Names: ``cbt-mover.<kind>.<outcome>``, kind ``backup`` / ``restore`` / ``files`` / ``maintenance``, outcome
``started`` / ``completed`` / ``failed``: one event per run and outcome. Resources (stable ids, never a wildcard):

* backup: the application, ``cbt-mover.app.<namespace>.<app>``;
* restore: the target namespace, ``cbt-mover.namespace.<target namespace>``;
* files (``restore-files``): the namespace of the application and its target claim,
  ``cbt-mover.namespace.<namespace>``;
* maintenance: the repository, ``cbt-mover.repository.<url without credentials>``.

Every resource carries the labels ``cbt-mover.kind`` and ``cbt-mover.run`` (the run id, also the flow run's
``run:<id>`` tag). Related resources: the volumes (``cbt-mover.volume.<namespace>/<pvc>``, role ``volume``), a
restore's backup run (``cbt-mover.run.<backup run id>``, role ``backup-run``) and its flow run
(``prefect.flow-run.<id>``, role ``backup-flow-run``); Prefect adds the emitting flow run, its flow and tags.
Sent best effort: an event that cannot be sent is logged, never the reason a run fails.
"""

from __future__ import annotations

import logging
from typing import Any

from reporting.best_effort import best_effort

log = logging.getLogger(__name__)

KINDS = ("backup", "restore", "files", "maintenance")
OUTCOMES = ("started", "completed", "failed")
Resource = dict[str, str]


def event_name(kind: str, outcome: str) -> str:
    """``cbt-mover.<kind>.<outcome>``; ``ValueError`` for a kind or outcome not in the schema."""
    if kind not in KINDS or outcome not in OUTCOMES:
        raise ValueError(f"no event cbt-mover.{kind}.{outcome}: kinds {KINDS}, outcomes {OUTCOMES}")
    return f"cbt-mover.{kind}.{outcome}"


def _checked(resource_id: str) -> str:
    if not resource_id or "*" in resource_id or any(c.isspace() for c in resource_id):
        raise ValueError(f"invalid resource id {resource_id!r}: no wildcards or blanks")
    return resource_id


def app_resource(namespace: str, app: str, kind: str, run_id: str) -> Resource:
    """A backup's resource: the application ``app`` of ``namespace``."""
    return {
        "prefect.resource.id": _checked(f"cbt-mover.app.{namespace}.{app}"),
        "prefect.resource.name": f"{namespace}/{app}",
        "cbt-mover.namespace": namespace,
        "cbt-mover.app": app,
        "cbt-mover.kind": kind,
        "cbt-mover.run": run_id,
    }


def namespace_resource(namespace: str, kind: str, run_id: str, **labels: str) -> Resource:
    """A restore's resource: its target ``namespace`` (``labels``: more ``cbt-mover.<key>`` labels)."""
    return {
        "prefect.resource.id": _checked(f"cbt-mover.namespace.{namespace}"),
        "prefect.resource.name": namespace,
        "cbt-mover.namespace": namespace,
        "cbt-mover.kind": kind,
        "cbt-mover.run": run_id,
        **{f"cbt-mover.{key.replace('_', '-')}": value for key, value in labels.items() if value},
    }


def repository_resource(public_url: str, kind: str, run_id: str) -> Resource:
    """A maintenance run's resource: the repository at ``public_url`` (no credentials in it)."""
    return {
        "prefect.resource.id": _checked(f"cbt-mover.repository.{public_url}"),
        "prefect.resource.name": public_url,
        "cbt-mover.kind": kind,
        "cbt-mover.run": run_id,
    }


def volumes_related(volumes: list[str]) -> list[Resource]:
    """Related resources of the volumes ``<namespace>/<pvc>`` a run touched."""
    return [
        {"prefect.resource.id": _checked(f"cbt-mover.volume.{v}"), "prefect.resource.role": "volume"} for v in volumes
    ]


def backup_related(backup_run: str | None, backup_flow_run: str | None) -> list[Resource]:
    """Related resources of the backup run a restore took (its run id and flow run id, where known)."""
    related = []
    if backup_run:
        related.append(
            {"prefect.resource.id": _checked(f"cbt-mover.run.{backup_run}"), "prefect.resource.role": "backup-run"}
        )
    if backup_flow_run:
        related.append(
            {"prefect.resource.id": f"prefect.flow-run.{backup_flow_run}", "prefect.resource.role": "backup-flow-run"}
        )
    return related


def emit(
    kind: str, outcome: str, resource: Resource, payload: dict[str, Any], related: list[Resource] | None = None
) -> None:
    """Emit ``cbt-mover.<kind>.<outcome>`` about ``resource``. Best effort: one that cannot be sent is logged and
    dropped."""
    from prefect.events import emit_event

    name = event_name(kind, outcome)
    with best_effort(f"could not emit {name} about {resource.get('prefect.resource.id')}", log):
        emit_event(event=name, resource=resource, related=related or None, payload=payload)
