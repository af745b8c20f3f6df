"""Create or update the two work pools that prefect.yaml's deployments use; safe to run again.

    python -m deploy.pools                       # both pools, against PREFECT_API_URL
    python -m deploy.pools --only local          # just the process pool
    python -m deploy.pools --image registry.example.com/cbt-mover:0.1.0 --namespace cbt-mover-system

* ``cbt-mover-local`` (type ``process``): flow runs are subprocesses of a worker on this machine
  (``prefect worker start --pool cbt-mover-local``), with Prefect's default process job template.
* ``cbt-mover-k8s`` (type ``kubernetes``): flow runs are Jobs of the cbt-mover image, built from
  ``configs/k8s-job-template.json``. The Prefect API accepts this pool without the
  ``prefect-kubernetes`` package; only the worker that polls it needs that package (the
  ``prefect-worker`` Helm chart's image has it; see docs/real-cluster.md).

Idempotent: a missing pool is created, an existing one of the same type gets the wanted
template and description only if they differ. An existing pool of another type is an error,
as Prefect cannot change a pool's type. Talks to the API only through the Prefect client.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

LOCAL_POOL = "cbt-mover-local"
K8S_POOL = "cbt-mover-k8s"
JOB_TEMPLATE = Path(__file__).resolve().parent.parent / "configs" / "k8s-job-template.json"

LOCAL_DESCRIPTION = "cbt-mover flow runs as processes of a worker on this machine (prefect.yaml's *local target)."
K8S_DESCRIPTION = "cbt-mover flow runs as Kubernetes Jobs of the cbt-mover image (configs/k8s-job-template.json)."


class PoolError(Exception):
    """A pool cannot be made to match: wrong type, bad template, unreachable API."""


def local_job_template() -> dict[str, Any]:
    """Prefect's default base job template of the process worker."""
    from prefect.workers.process import ProcessWorker

    return ProcessWorker.get_default_base_job_template()


def k8s_job_template(
    image: str | None = None, namespace: str | None = None, path: Path = JOB_TEMPLATE
) -> dict[str, Any]:
    """``configs/k8s-job-template.json`` with the defaults of its ``image`` / ``namespace`` variables
    replaced where given (deployments and runs can still override them)."""
    try:
        template = json.loads(path.read_text(encoding="utf-8"))
        props = template["variables"]["properties"]
    except (OSError, ValueError, KeyError) as err:
        raise PoolError(f"{path}: not a base job template ({err})") from err
    for key, value in (("image", image), ("namespace", namespace)):
        if value is not None:
            if not value:
                raise PoolError(f"--{key} must not be empty")
            props[key]["default"] = value
    return template


def wanted_pools(
    image: str | None = None, namespace: str | None = None, only: str | None = None
) -> list[dict[str, Any]]:
    """The pools to ensure as ``{"name", "type", "base_job_template", "description"}``; ``only``:
    ``"local"``, ``"k8s"`` or None (both)."""
    pools = []
    if only in (None, "local"):
        pools.append(
            {
                "name": LOCAL_POOL,
                "type": "process",
                "base_job_template": local_job_template(),
                "description": LOCAL_DESCRIPTION,
            }
        )
    if only in (None, "k8s"):
        pools.append(
            {
                "name": K8S_POOL,
                "type": "kubernetes",
                "base_job_template": k8s_job_template(image, namespace),
                "description": K8S_DESCRIPTION,
            }
        )
    return pools


def ensure_pool(client: Any, name: str, type: str, base_job_template: dict[str, Any], description: str) -> str:  # noqa: A002
    """Make pool ``name`` exist with this type, template and description, through a sync Prefect
    client. Returns ``"created"``, ``"updated"`` or ``"unchanged"``; raises PoolError for a pool of
    another type."""
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound

    try:
        pool = client.read_work_pool(name)
    except ObjectNotFound:
        client.create_work_pool(
            WorkPoolCreate(
                name=name, type=type, base_job_template=copy.deepcopy(base_job_template), description=description
            )
        )
        return "created"
    if pool.type != type:
        raise PoolError(
            f"work pool {name!r} exists with type {pool.type!r}, not {type!r}; Prefect cannot change a "
            f"pool's type: delete it (prefect work-pool delete {name}) or use another name"
        )
    if pool.base_job_template == base_job_template and (pool.description or "") == description:
        return "unchanged"
    client.update_work_pool(
        name, WorkPoolUpdate(base_job_template=copy.deepcopy(base_job_template), description=description)
    )
    return "updated"


def ensure_pools(image: str | None = None, namespace: str | None = None, only: str | None = None) -> dict[str, str]:
    """Ensure the pools (``wanted_pools``) on the API of the current Prefect settings; returns
    ``{pool name: "created" | "updated" | "unchanged"}``."""
    from prefect.client.orchestration import get_client

    pools = wanted_pools(image, namespace, only)
    with get_client(sync_client=True) as client:
        return {pool["name"]: ensure_pool(client, **pool) for pool in pools}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.pools", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("local", "k8s"), help="ensure only this pool")
    parser.add_argument("--image", help=f"default image of {K8S_POOL}'s Jobs (the cbt-mover image you pushed)")
    parser.add_argument(
        "--namespace",
        help=f"default namespace of {K8S_POOL}'s Jobs (cbt-mover install controller's --namespace: cbt-mover-system)",
    )
    args = parser.parse_args(argv)
    import httpx
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    if not api:
        print(
            "error: PREFECT_API_URL is not set: pools belong to a running Prefect server (`make ui` starts one "
            "and prints the URL)",
            file=sys.stderr,
        )
        return 2
    try:
        results = ensure_pools(args.image, args.namespace, args.only)
    except PoolError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except httpx.HTTPError as err:  # connection refused, timeouts, error statuses (PrefectHTTPStatusError)
        print(f"error: Prefect API {api}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    for name, what in results.items():
        print(f"work pool {name}: {what} ({api})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
