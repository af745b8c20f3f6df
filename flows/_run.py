"""The skeleton every flow run shares, so that a flow only orchestrates (order, concurrency, retries).

* ``Run``: the run id (``<kind>-<16 hex digits of the flow run id>``, ``reporting.runs``), its tags (added to the
  flow run, and the context tags of its tasks), the ``started`` event on ``Run.start``, the ``completed`` event on
  ``Run.complete``, and ``Run.guard``: the flow's body under the run's tags whose failure is said once
  (``reporting.runs.report_failure``: one ERROR line, the failure artifact, the ``failed`` event) and re-raised;
* ``waves(items, parallelism, submit)``: the tasks of ``items``, ``parallelism`` at a time, each wave ended before
  a failure of it is raised (so the cleanup never runs beside a mover or writer of the run);
* ``cleanup_after(run, cleanup)``: the run's cleanup in every outcome; after a failure a failing cleanup is logged
  and the run's own error raised, never masked;
* ``state_hooks(kind, abandon)``: the flow's ``on_cancellation`` and ``on_crashed`` hooks from one callback;
* ``best_effort(what)``: ``reporting.best_effort``, what may fail without failing the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prefect import flow, get_run_logger, tags
from prefect.futures import PrefectFuture, wait
from prefect.task_runners import ThreadPoolTaskRunner

from reporting import events, runs
from reporting.best_effort import best_effort

__all__ = ["Abandoned", "Failure", "Run", "best_effort", "cleanup_after", "run_flow", "state_hooks", "waves"]

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class Failure:
    """What a flow adds to its failure report: to the ``failed`` event's payload (after the ``started`` payload),
    its related resources, and what to do once it is reported (e.g. the Kubernetes Events on the claims)."""

    payload: dict[str, Any] = field(default_factory=dict)
    related: list[events.Resource] | None = None
    then: Callable[[], Any] | None = None


@dataclass
class Run:
    """One flow run of ``kind``: its ``id``, ``tags``, event ``resource``, the ``started`` payload (also the base of
    the ``failed`` event's), the ``progress`` its failure report tells, and when it started (``seconds``)."""

    kind: str
    id: str
    tags: list[str]
    resource: events.Resource
    started: dict[str, Any]
    progress: runs.Progress
    t0: float = field(default_factory=time.monotonic)

    @classmethod
    def start(
        cls,
        kind: str,
        resource: Callable[[str], events.Resource],
        started: dict[str, Any],
        progress: runs.Progress,
        details: dict[str, Any] | None = None,
        **labels: str | None,
    ) -> Run:
        """The current flow run as a run of ``kind``: tags it (``runs.run_tags`` with ``labels``), emits ``started``
        about ``resource(run id)`` with ``{"run_id"} | started | details`` (``details`` only in that event)."""
        run_id = runs.current_run_id(kind)
        run_tags = runs.run_tags(kind, run_id, **labels)
        runs.tag_flow_run(run_tags)
        run = cls(kind, run_id, run_tags, resource(run_id), {"run_id": run_id, **started}, progress)
        events.emit(kind, "started", run.resource, run.started | (details or {}))
        return run

    def seconds(self) -> float:
        """Seconds since the run started, to the millisecond."""
        return round(time.monotonic() - self.t0, 3)

    @contextmanager
    def guard(
        self, title: str, artifact_key: str, on_failure: Callable[[BaseException], Failure] | None = None
    ) -> Iterator[None]:
        """The flow's body, under the run's tags. An ``Exception`` is reported once (``runs.report_failure`` with
        the artifact ``artifact_key``; the ``failed`` event's payload: ``started`` | ``on_failure(err).payload`` |
        ``duration_s``), then ``on_failure(err).then()`` runs, then it is raised."""
        try:
            with tags(*self.tags):
                yield
        except Exception as err:
            failure = on_failure(err) if on_failure else Failure()
            payload = self.started | failure.payload | {"duration_s": self.seconds()}
            failed = runs.Failed(self.kind, title, artifact_key, self.resource, payload, failure.related)
            runs.report_failure(err, self.progress, failed)
            if failure.then is not None:
                failure.then()
            raise

    def complete(self, payload: dict[str, Any], related: list[events.Resource] | None = None) -> None:
        """The ``completed`` event about the run's resource."""
        events.emit(self.kind, "completed", self.resource, payload, related)


def waves(
    items: Sequence[Item],
    parallelism: int,
    submit: Callable[[Item], PrefectFuture],
    completed: Callable[[Item, Any], None] | None = None,
) -> list[Any]:
    """``submit`` each of ``items``, ``parallelism`` at a time (the task runner has more threads than that); the
    results in the order of ``items``. Every task of a wave has ended before a failure of it is raised, so that the
    cleanup never runs beside a task of the run; ``completed(item, result)`` is called for each task of the wave
    that completed before that (e.g. to record the backups committed)."""
    results: list[Any] = []
    for start in range(0, len(items), parallelism):
        wave = [(item, submit(item)) for item in items[start : start + parallelism]]
        wait([future for _, future in wave])
        if completed is not None:
            for item, future in wave:
                if future.state.is_completed():
                    completed(item, future.result())
        results += [future.result() for _, future in wave]
    return results


@contextmanager
def cleanup_after(run: Run, cleanup: Callable[[bool], Any]) -> Iterator[None]:
    """Run the block, then ``cleanup(failed)`` in every outcome; what it returns is the run's ``cleaned_up`` (logged).
    A cleanup that fails after a success is the run's error; after a failure it is logged (and in the failure
    report) and the block's own error raised: never masked."""
    log = get_run_logger()
    failed = True
    try:
        yield
        failed = False
    finally:
        try:
            run.progress.cleaned_up = cleanup(failed)
            log.info("run %s: deleted %s", run.id, run.progress.cleaned_up)
        except Exception as cleanup_err:  # noqa: BLE001  (not best effort: raised after a success, kept after a failure)
            if not failed:
                raise
            run.progress.cleaned_up = f"the cleanup failed too: {runs.error_line(cleanup_err)}"
            log.error("run %s: cleanup after the failure failed too: %s", run.id, cleanup_err)  # not masking it


@dataclass
class Abandoned:
    """A flow run that was cancelled or crashed (``why``), for its state hook: its run ``id``, parameters and
    the logger of its state hooks (their logs reach the API and the UI even from the runner's process)."""

    kind: str
    id: str
    why: str
    params: dict[str, Any]
    log: logging.Logger | logging.LoggerAdapter

    def failed(self, resource: events.Resource) -> None:
        """The run's ``failed`` event about ``resource``: ``{"run_id", "error": "flow run <why>"}``."""
        events.emit(self.kind, "failed", resource, {"run_id": self.id, "error": f"flow run {self.why}"})


def state_hook_logger(flow_run: Any, fallback: str) -> logging.Logger | logging.LoggerAdapter:
    """The logger of a flow run for its state hooks: its logs reach the API and the UI even from the
    runner's process; the ``fallback`` module logger when ``flow_run`` is not a real FlowRun."""
    try:
        from prefect.logging.loggers import flow_run_logger

        return flow_run_logger(flow_run)
    except Exception:  # noqa: BLE001  (silent on purpose: another logger, not a failure: not a real FlowRun, or no API)
        return logging.getLogger(fallback)


StateHook = Callable[[Any, Any, Any], None]


def state_hooks(kind: str, abandon: Callable[[Abandoned], None], logger: str) -> tuple[StateHook, StateHook]:
    """The flow's ``on_cancellation`` and ``on_crashed`` hooks: each calls ``abandon`` with the run (its id
    recomputed from the flow run's, ``why`` ``cancelled`` or ``crashed``); ``logger``: the fallback logger's name.
    ``abandon`` must never raise (``best_effort``)."""

    def hook(why: str) -> StateHook:
        # Prefect's runner calls state hooks by keyword: flow, flow_run, state
        def on_state(flow: Any, flow_run: Any, state: Any) -> None:
            params = dict(getattr(flow_run, "parameters", None) or {})
            log = state_hook_logger(flow_run, logger)
            abandon(Abandoned(kind, runs.run_id_for(kind, flow_run.id), why, params, log))

        on_state.__name__ = on_state.__qualname__ = f"on_{'cancellation' if why == 'cancelled' else why}"
        return on_state

    return hook("cancelled"), hook("crashed")


def run_flow(name: str, run_name: Callable[[], str], hooks: tuple[StateHook, StateHook]) -> Callable:
    """``@flow`` of a run that creates objects in the cluster: named ``name``, its runs ``run_name()``, tasks on
    eight threads (the flow submits ``parallelism`` at a time: ``waves``), prints logged, ``hooks`` as its
    ``on_cancellation`` and ``on_crashed``."""
    on_cancellation, on_crashed = hooks
    return flow(
        name=name,
        flow_run_name=run_name,
        task_runner=ThreadPoolTaskRunner(max_workers=8),
        log_prints=True,
        on_cancellation=[on_cancellation],
        on_crashed=[on_crashed],
    )
