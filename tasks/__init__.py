"""Thin Prefect tasks over ``movers`` (5-20 lines each); every module here defines tasks. They hand each other typed
objects (dataclasses: the preflight, the snapshot set, targets, write results, reports), never dicts, and turn
them into the plain data a ``movers`` function takes where it takes one. How runs show in Prefect (events,
artifacts, failure reports) is ``reporting``; the flows' shared skeleton is ``flows._run``.

Importing them protects the process's logs (``movers.logsetup.protect``): tasks open repositories and call the
Kubernetes API in the worker's own process, whatever logging configuration it runs with. It also keeps
tracebacks out of the runs' logs above DEBUG (``reporting.runs.keep_tracebacks_at_debug``).
"""

from movers.logsetup import protect

protect()


def retry_if_retriable(task, task_run, state) -> bool:
    """A ``retry_condition_fn``: retry only errors the movers mark retriable (transient store errors,
    snapshots not ready yet), never bad input or integrity failures."""
    try:
        state.result()
    except Exception as err:  # noqa: BLE001  (not best effort: the failed state's error, inspected)
        return bool(getattr(err, "retriable", False))
    return False


def _quiet_tracebacks() -> None:
    from reporting.runs import keep_tracebacks_at_debug

    keep_tracebacks_at_debug()


_quiet_tracebacks()  # a run's log says a failure in one line; its traceback only at DEBUG (reporting.runs)
