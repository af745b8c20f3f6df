"""Thin Prefect tasks over ``movers`` (5-20 lines each); they return small serialisable results."""


def retry_if_retriable(task, task_run, state) -> bool:
    """A ``retry_condition_fn``: retry only errors the movers mark retriable (transient store errors,
    snapshots not ready yet), never bad input or integrity failures."""
    try:
        state.result()
    except Exception as err:  # noqa: BLE001
        return bool(getattr(err, "retriable", False))
    return False
