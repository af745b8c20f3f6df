"""Thin Prefect tasks over ``movers`` (5-20 lines each); they return small serialisable results.

Importing them protects the process's logs (``movers.logsetup.protect``): tasks open repositories and call the
Kubernetes API in the worker's own process, whatever logging configuration it runs with. It also keeps
tracebacks out of the runs' logs above DEBUG (``tasks.runs.keep_tracebacks_at_debug``).
"""

import logging

from movers.logsetup import protect

protect()


def retry_if_retriable(task, task_run, state) -> bool:
    """A ``retry_condition_fn``: retry only errors the movers mark retriable (transient store errors,
    snapshots not ready yet), never bad input or integrity failures."""
    try:
        state.result()
    except Exception as err:  # noqa: BLE001
        return bool(getattr(err, "retriable", False))
    return False


def state_hook_logger(flow_run, fallback: str) -> logging.Logger | logging.LoggerAdapter:
    """The logger of a flow run for its state hooks: its logs reach the API and the UI even from the
    runner's process; the ``fallback`` module logger when ``flow_run`` is not a real FlowRun."""
    try:
        from prefect.logging.loggers import flow_run_logger

        return flow_run_logger(flow_run)
    except Exception:  # noqa: BLE001  (not a real FlowRun, or no API)
        return logging.getLogger(fallback)


def _quiet_tracebacks() -> None:
    from tasks.runs import keep_tracebacks_at_debug

    keep_tracebacks_at_debug()


_quiet_tracebacks()  # a run's log says a failure in one line; its traceback only at DEBUG (tasks.runs)
