"""How a flow run presents itself: its run id, name and tags, its failure (one log line, an artifact, the
``failed`` event), its log (tracebacks at DEBUG only, the mover pods' summary forwarded).

* run id: ``<kind>-<16 hex digits of the flow run id>`` (``backup-…``, ``restore-…``, ``maintain-…``): the
  ``cbt-mover.io/run`` label of what the run creates and the ``run:`` tag, recomputable from the flow run id;
* flow run name: ``<run id> <what>``, e.g. ``backup-0123456789abcdef shop/db``;
* tags: ``cbt-mover``, ``kind:<backup|restore|maintenance>``, ``run:<run id>``, and ``namespace:<ns>``,
  ``app:<app>``, ``source-namespace:<ns>``, ``backup-run:<run id>``, ``repository:<url>`` where they apply.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

from reporting import events
from reporting.best_effort import best_effort

RUN_PREFIX = {"backup": "backup", "restore": "restore", "files": "files", "maintenance": "maintain"}
REPORTED = "_cbt_mover_reported"  # set on an exception whose failure the flow has said in one line


def run_id_for(kind: str, flow_run_id: Any) -> str:
    """The run id of a flow run of ``kind``: derived from its id only (state hooks recompute it)."""
    return f"{RUN_PREFIX[kind]}-{uuid.UUID(str(flow_run_id)).hex[:16]}"


def current_run_id(kind: str) -> str:
    """The run id of the current flow run (a random one outside a flow run)."""
    from prefect.runtime import flow_run

    return run_id_for(kind, flow_run.id or uuid.uuid4())


def run_name(kind: str, what: str) -> str:
    """The current flow run's name: ``<run id> <what>`` (for a flow's ``flow_run_name``)."""
    return f"{current_run_id(kind)} {what}"[:200]


def run_tags(kind: str, run_id: str, **more: str | None) -> list[str]:
    """The tags of a run: ``cbt-mover``, ``kind:``, ``run:`` and one ``<key>:<value>`` per non-empty ``more``
    (``source_namespace`` becomes ``source-namespace:``)."""
    return ["cbt-mover", f"kind:{kind}", f"run:{run_id}"] + [
        f"{key.replace('_', '-')}:{value}" for key, value in more.items() if value
    ]


def tag_flow_run(tags: list[str]) -> None:
    """Add ``tags`` to the current flow run (kept: the ones it has, e.g. its deployment's). Best effort."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    if not flow_run.id:
        return
    with best_effort("could not tag the flow run", logging.getLogger(__name__)):  # a label, never why a run fails
        with get_client(sync_client=True) as client:
            current = client.read_flow_run(flow_run.id).tags or []
            client.update_flow_run(flow_run.id, tags=sorted(set(current) | set(tags)))


@dataclass(frozen=True)
class FlowRunLink:
    """A flow run: its ``id``, ``name`` and ``url`` (where PREFECT_UI_URL shows it, else None)."""

    id: str
    name: str
    url: str | None


def find_flow_run(run_id: str) -> FlowRunLink | None:
    """The flow run tagged ``run:<run_id>``, or None. Best effort."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    found = None
    with best_effort(f"could not look up the flow run of {run_id}", logging.getLogger(__name__)):
        with get_client(sync_client=True) as client:
            found = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"run:{run_id}"])), limit=1
            )
    if not found:
        return None
    return FlowRunLink(str(found[0].id), found[0].name, flow_run_url(found[0].id))


def flow_run_url(flow_run_id: Any) -> str | None:
    """The flow run's page in the UI of PREFECT_UI_URL, or None when that is not set."""
    from prefect.settings import PREFECT_UI_URL

    base = PREFECT_UI_URL.value()
    return f"{base.rstrip('/')}/runs/flow-run/{flow_run_id}" if base else None


@dataclass
class Progress:
    """What a run has done so far, for its failure report: the step it is in, the backups it committed
    (volume -> backup id), what it cleaned up, whether the application was frozen and thawed."""

    step: str = "preflight"
    committed: dict[str, str] = field(default_factory=dict)
    cleaned_up: Any = None
    thawed: str = "never frozen: the run failed before the freeze"


def error_line(err: BaseException) -> str:
    """An exception in one line: its type and message, blanks collapsed, at most 1000 characters."""
    text = " ".join(str(err).split()) or "no message"
    return f"{type(err).__name__}: {text}"[:1000]


def failure_markdown(title: str, err: BaseException, progress: Progress, links: list[str] = ()) -> str:
    """The failure artifact: what failed, what was committed, what was cleaned up, whether the app was thawed."""
    committed = "".join(f"- `{v}`: backup `{b}`\n" for v, b in sorted(progress.committed.items())) or "- nothing\n"
    if isinstance(progress.cleaned_up, dict):
        cleaned = "".join(
            f"- {kind}: {', '.join(f'`{n}`' for n in names)}\n" for kind, names in progress.cleaned_up.items() if names
        )
        cleaned = cleaned or "- nothing was left to delete\n"
    else:
        cleaned = f"- {progress.cleaned_up or 'not known (see the run logs)'}\n"
    return (
        f"# {title} FAILED\n\n"
        f"**Failed in step `{progress.step}`:** {error_line(err)}\n\n"
        f"## Committed before the failure\n\n{committed}\n"
        f"## Cleaned up\n\n{cleaned}\n"
        f"## Application\n\n- {progress.thawed}\n"
        + ("".join(f"\n{line}\n" for line in links))
        + "\nThe traceback is in the run's logs at DEBUG level (PREFECT_LOGGING_LEVEL=DEBUG).\n"
    )


@dataclass(frozen=True)
class Failed:
    """How a failed run of ``kind`` is said: its ``title`` (``backup <run id> of <ns>/<app>``), the key of its
    failure artifact, the ``failed`` event's resource, payload and related resources."""

    kind: str
    title: str
    artifact_key: str
    resource: events.Resource
    payload: dict[str, Any]
    related: list[events.Resource] | None = None


def report_failure(err: BaseException, progress: Progress, failed: Failed) -> None:
    """Say a failed run once: one ERROR line, the failure artifact, the ``failed`` event (with the payload and the
    progress); the exception is marked so that the engine's own report of it goes to DEBUG
    (``TracebacksAtDebug``). Never raises."""
    from prefect import get_run_logger
    from prefect.artifacts import create_markdown_artifact
    from prefect.exceptions import MissingContextError

    line = error_line(err)
    committed = f"; committed: {', '.join(f'{v} {b}' for v, b in sorted(progress.committed.items()))}" * bool(
        progress.committed
    )
    try:
        get_run_logger().error("%s failed in step %s: %s%s", failed.title, progress.step, line, committed)
    except MissingContextError:  # no run context
        logging.getLogger(__name__).error("%s failed in step %s: %s", failed.title, progress.step, line)
    with best_effort("could not create the failure artifact", logging.getLogger(__name__)):
        create_markdown_artifact(
            key=failed.artifact_key, markdown=failure_markdown(failed.title, err, progress), description=failed.title
        )
    full = {
        **failed.payload,
        "error": line,
        "step": progress.step,
        "committed": dict(progress.committed),
        "cleaned_up": progress.cleaned_up,
        "thawed": progress.thawed,
    }
    events.emit(failed.kind, "failed", failed.resource, full, failed.related)
    # an exception that takes no attributes keeps the engine's line
    with contextlib.suppress(AttributeError, TypeError):
        setattr(err, REPORTED, True)


class TracebacksAtDebug(logging.Filter):
    """On Prefect's run loggers: a record above DEBUG that carries a traceback (the engines log a failed run's
    or task's exception with it at ERROR) keeps its one line, and the traceback goes into a DEBUG record of its
    own; the engine's line about an exception the flow already reported (``report_failure``) goes to DEBUG
    whole."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or record.levelno <= logging.DEBUG or not isinstance(record.exc_info, tuple):
            return True
        exc = record.exc_info[1]
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(logging.DEBUG):
            debug = copy.copy(record)
            debug.levelno, debug.levelname = logging.DEBUG, "DEBUG"
            debug.msg = "%s\n%s"
            debug.args = (record.getMessage(), "".join(traceback.format_exception(*record.exc_info)).rstrip())
            debug.exc_info = debug.exc_text = None
            logger.handle(debug)
        if getattr(exc, REPORTED, False):
            return False
        record.exc_info = record.exc_text = None
        return True


RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def keep_tracebacks_at_debug() -> None:
    """Put ``TracebacksAtDebug`` on Prefect's run loggers (once)."""
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TracebacksAtDebug) for f in logger.filters):
            logger.addFilter(TracebacksAtDebug())


# a mover's or writer's log record: "2024-05-01 12:00:00,123 WARNING movers.cli: message"
_RECORD = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)$")


class PodLog:
    """A mover or writer pod's log into the task's log: its own log records (the CBT fallback reason, warnings)
    at their level but at least INFO, prefixed with ``what``; progress lines and the rest at DEBUG."""

    def __init__(self, logger: Any, what: str) -> None:
        self.logger, self.what = logger, what

    def on_line(self, line: str) -> None:
        match = _RECORD.match(line)
        if match is None:
            self.logger.debug("%s: %s", self.what, line)
            return
        level = max(logging.INFO, logging.getLevelName(match.group(1)))
        self.logger.log(level, "%s (pod): %s", self.what, match.group(3))
