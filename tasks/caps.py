"""Caps on mover and writer pods that queue, on Prefect's global concurrency limits (one slot per pod).

The limits (Prefect objects: the UI's Concurrency page, ``prefect gcl ls``; an operator changes one with
``prefect gcl update NAME --limit N`` or ``python -m deploy.limits``), for ``ROLE`` ``movers`` (backup readers)
or ``writers`` (restores):

* ``cbt-mover-ROLE``: pods of that role in the whole cluster; taken before the pod and its claim are created.
  Created on first use (and by ``deploy.limits``) with ``CapSettings``' default;
* ``cbt-mover-ROLE-node-NODE``: pods of that role running on node ``NODE``; taken once the scheduler has picked the
  node, before the pod's container starts (``movers.kube.nodeslots``). Created the first time a run meets the
  node, with the per-node number of the Prefect Variable ``cbt-mover-caps`` (``deploy.limits`` writes it;
  ``CapSettings``' default without it: one per node, as Velero's node agent);
* ``cbt-mover-ROLE-class-CLASS`` / ``cbt-mover-ROLE-driver-DRIVER``: pods reading or writing volumes of that
  StorageClass / CSI driver; only where the operator created one (``deploy.limits --class``/``--driver``);
  taken with the cluster-wide one.

A pod that must wait says so: one INFO line in the run's log naming the limits that are full and what waits
(``<ns>/<pvc> waits for a slot of cbt-mover-movers-node-node-a (1/1 taken)``), and its task run's state is
``AwaitingConcurrencySlot`` (a Running state of that name, with the same message) until it has the slot; then
``Running`` again and one INFO line with the time it waited. A slot is held under a lease that Prefect renews
while the run lives; a crashed run's slots return when the lease expires. A backup's waits end with its backup
window (``WindowClosed``, ``movers.policy.window``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from prefect import get_run_logger

PREFIX = "cbt-mover"
MOVERS, WRITERS = "movers", "writers"
SETTINGS_VARIABLE = "cbt-mover-caps"
AWAITING = "AwaitingConcurrencySlot"


class WindowClosed(Exception):
    """A pod did not get its slots before its run's backup window ended (``movers.policy.window``); not retried."""

    retriable = False


@dataclass(frozen=True)
class CapSettings:
    """The operator's caps (the owner of their defaults): pods of each role in the cluster and per node."""

    movers: int = 8
    writers: int = 8
    movers_per_node: int = 1
    writers_per_node: int = 1

    def cluster(self, role: str) -> int:
        return self.movers if role == MOVERS else self.writers

    def per_node(self, role: str) -> int:
        return self.movers_per_node if role == MOVERS else self.writers_per_node

    def variable(self) -> dict[str, int]:
        """The per-node numbers as the Variable ``SETTINGS_VARIABLE`` holds them."""
        return {"movers_per_node": self.movers_per_node, "writers_per_node": self.writers_per_node}


def cluster_limit(role: str) -> str:
    return f"{PREFIX}-{role}"


def node_limit(role: str, node: str) -> str:
    return f"{PREFIX}-{role}-node-{node}"


def class_limit(role: str, storage_class: str) -> str:
    return f"{PREFIX}-{role}-class-{storage_class}"


def driver_limit(role: str, driver: str) -> str:
    return f"{PREFIX}-{role}-driver-{driver}"


def ensure_limit(client: Any, name: str, limit: int) -> bool:
    """Create global concurrency limit ``name`` with ``limit`` slots unless it exists (its limit is the
    operator's then, left as it is); whether it was created. ``client``: a sync Prefect client."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    try:
        client.read_global_concurrency_limit_by_name(name)
        return False
    except ObjectNotFound:
        pass
    try:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=limit))
    except ObjectAlreadyExists:  # another run created it meanwhile
        return False
    return True


def read_settings(client: Any) -> CapSettings:
    """The per-node numbers of the Variable ``SETTINGS_VARIABLE`` over ``CapSettings``' defaults."""
    variable = client.read_variable_by_name(SETTINGS_VARIABLE)
    value = variable.value if variable is not None and isinstance(variable.value, dict) else {}
    known = CapSettings.__dataclass_fields__
    return CapSettings(**{k: int(v) for k, v in value.items() if k in known})


@contextmanager
def cluster_slot(
    role: str, what: str, storage_class: str | None, driver: str | None, deadline: float | None = None
) -> Iterator[None]:
    """A slot of the cluster-wide limit of ``role`` (created if missing) and of the class's and driver's limits
    where they exist, held for the block; ``what`` names the pod's volume in the log and the state. ``deadline``
    (seconds since the epoch; the end of the run's backup window): no slot by then raises ``WindowClosed``."""
    from prefect.client.orchestration import get_client

    optional = [class_limit(role, storage_class)] if storage_class else []
    optional += [driver_limit(role, driver)] if driver else []
    with get_client(sync_client=True) as client:
        ensure_limit(client, cluster_limit(role), read_settings(client).cluster(role))
        names = [cluster_limit(role), *_existing(client, optional)]
    with _slots(names, what, deadline):
        yield


def node_slot(role: str, what: str, deadline: float | None = None):
    """``movers.kube.nodeslots.NodeSlot`` of ``role``: a slot of the node's limit (created, with the per-node
    number, the first time a run meets the node), held for the block; ``deadline`` as ``cluster_slot``'s."""

    @contextmanager
    def hold(node: str) -> Iterator[None]:
        from prefect.client.orchestration import get_client

        name = node_limit(role, node)
        with get_client(sync_client=True) as client:
            ensure_limit(client, name, read_settings(client).per_node(role))
        with _slots([name], f"{what} on node {node}", deadline):
            yield

    return hold


@contextmanager
def _slots(names: list[str], what: str, deadline: float | None = None) -> Iterator[None]:
    """One slot of each of ``names`` (existing limits) for the block, through Prefect's ``concurrency``. A limit
    found full just before asking is said: an INFO line and the ``AwaitingConcurrencySlot`` state until the slots
    are taken. ``deadline``: no slots by then raises ``WindowClosed``."""
    from prefect.concurrency._asyncio import AcquireConcurrencySlotTimeoutError
    from prefect.concurrency.sync import concurrency

    log = get_run_logger()
    if deadline is not None and time.time() >= deadline:
        raise WindowClosed(f"{what} had not started when the backup window ended")
    full = _full(names)
    if full:
        waiting = f"{what} waits for a slot of {full}"
        log.info("%s", waiting)
        _task_state(AWAITING, waiting)
    t0 = time.monotonic()
    left = None if deadline is None else max(0.001, deadline - time.time())
    with ExitStack() as stack:
        try:
            stack.enter_context(concurrency(names, occupy=1, timeout_seconds=left))
        except AcquireConcurrencySlotTimeoutError:
            _task_state("Running", f"{what}: the backup window ended")
            raise WindowClosed(
                f"{what} waited {time.monotonic() - t0:.0f} s for a slot of {', '.join(names)} until the backup"
                " window ended"
            ) from None
        if full:
            log.info("%s got its slot of %s after %.1f s", what, ", ".join(names), time.monotonic() - t0)
            _task_state("Running", f"{what} holds a slot of {', '.join(names)}")
        yield


def _existing(client: Any, names: list[str]) -> list[str]:
    """Those of ``names`` that are limits."""
    from prefect.exceptions import ObjectNotFound

    out = []
    for name in names:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            continue
        out.append(name)
    return out


def _full(names: list[str]) -> str:
    """The limits of ``names`` with no free slot, as ``NAME (taken/limit taken)``; "" when none is full."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    out = []
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                limit = client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                continue
            if limit.active and limit.active_slots >= limit.limit:
                out.append(f"{name} ({limit.active_slots}/{limit.limit} taken)")
    return ", ".join(out)


def _task_state(name: str, message: str) -> None:
    """The current task run's state: a Running state named ``name`` with ``message`` (no task run: nothing)."""
    from prefect.client.orchestration import get_client
    from prefect.context import TaskRunContext
    from prefect.states import Running

    ctx = TaskRunContext.get()
    if ctx is None or ctx.task_run is None:
        return
    with get_client(sync_client=True) as client:
        client.set_task_run_state(ctx.task_run.id, Running(name=name, message=message), force=True)
