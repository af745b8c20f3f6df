"""The event schema (``reporting.events``) and the shipped automation example: the example is what
``prefect automation create --from-file`` accepts (Prefect's own model parses it) and it triggers on the
event and resources the backup flow emits."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reporting import events

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "automations" / "backup-failed.yaml"


def test_the_automation_example_parses_as_prefect_s_automation_and_matches_backup_failed():
    from prefect.events.schemas.automations import AutomationCore, EventTrigger
    from prefect.events.schemas.events import Event, Resource

    automation = AutomationCore.model_validate(yaml.safe_load(EXAMPLE.read_text(encoding="utf-8")))
    trigger = automation.trigger
    assert isinstance(trigger, EventTrigger) and trigger.expect == {events.event_name("backup", "failed")}
    assert [a.type for a in automation.actions] == ["send-notification"]
    resource = events.app_resource("shop", "db", "backup", "backup-0123456789abcdef")
    event = Event(event=events.event_name("backup", "failed"), resource=Resource(resource))
    assert trigger.match.matches(event.resource), (trigger.match, resource)  # Prefect's own label matching
    restore = events.namespace_resource("shop", "restore", "restore-0123456789abcdef")
    assert not trigger.match.matches(Resource(restore)), "a restore's resource is not an application"


def test_resource_ids_are_stable_and_never_wildcards():
    assert events.app_resource("shop", "db", "backup", "r")["prefect.resource.id"] == "cbt-mover.app.shop.db"
    assert (
        events.namespace_resource("shop-copy", "restore", "r")["prefect.resource.id"] == "cbt-mover.namespace.shop-copy"
    )
    assert [r["prefect.resource.id"] for r in events.volumes_related(["shop/db"])] == ["cbt-mover.volume.shop/db"]
    with pytest.raises(ValueError, match="no wildcards"):
        events.volumes_related(["shop/*"])
    with pytest.raises(ValueError, match="no event cbt-mover.backup.done"):
        events.event_name("backup", "done")
