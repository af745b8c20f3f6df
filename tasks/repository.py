"""The flows' tasks on the repository (preflight check, a volume's next base, its plan) and how they open it,
an encrypted one with its key.

The key comes from the repository Secret the policy names, the one the mover and writer pods mount
(``movers.kube.repokey``): read through the API with the flow's identity (``get`` on that Secret by name, which
the shipped controller role grants) once per flow run and held in memory for the run's tasks. Tasks take
only WHERE the key is (``KeySource``: kubeconfig path, namespace, Secret name: plain data, safe as a task
input, a Prefect parameter or in a log line), never the key. Without a ``KeySource`` (the maintenance flow with
no policy naming a Secret, a task called by hand) the key comes from the worker's environment, as for the CLI
(``CBT_MOVER_PASSWORD``, ``CBT_MOVER_PASSWORD_FILE``, ``CBT_MOVER_KEY_FILE``).
"""

from __future__ import annotations

import functools
from typing import Any

from prefect import get_run_logger, task

from movers.backup.plan import VolumePlan
from movers.backup.preflight import Source
from movers.repo.lineage import BaseChoice
from tasks import retry_if_retriable

KeySource = dict[str, Any]  # {"kubeconfig": str | None, "namespace": str, "secret": str}


def key_source(kubeconfig: str | None, namespace: str | None, secret: str | None) -> KeySource | None:
    """Where a run's tasks read the repository key: Secret ``namespace/secret`` (None when no Secret is named)."""
    if not namespace or not secret:
        return None
    return {"kubeconfig": kubeconfig, "namespace": namespace, "secret": secret}


def describe(key: KeySource | None) -> str:
    """Where the key comes from, for the run's log."""
    return "the worker's environment" if key is None else f"Secret {key['namespace']}/{key['secret']}"


def open_repository(repo_url: str, key: KeySource | None = None):
    """``Repository.open`` of ``repo_url`` with the key of ``key`` (``KeySource``; None: the environment's).

    An encrypted repository whose Secret holds no key is a ``RepositoryKeyError`` (exit code 6) naming the
    Secret and the keys it needs; a wrong key one naming the Secret and its key (never the value)."""
    from movers.errors import RepositoryKeyError
    from movers.kube.repokey import missing_key_message
    from movers.repo.keys import Credentials
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    store = open_store(repo_url)
    if key is None:
        return Repository.open(store, Credentials.gather())
    credentials = _credentials(key)
    try:
        return Repository.open(store, credentials)
    except RepositoryKeyError:
        if credentials is None:
            raise RepositoryKeyError(missing_key_message(repo_url, key["namespace"], key["secret"])) from None
        raise


def _credentials(key: KeySource):
    from prefect.runtime import flow_run

    run = flow_run.get_id()
    args = (key.get("kubeconfig"), key["namespace"], key["secret"])
    return _read(*args) if run is None else _read_for_run(run, *args)


@functools.lru_cache(maxsize=16)
def _read_for_run(run: str, kubeconfig: str | None, namespace: str, secret: str):
    """Once per flow run (a later run reads the Secret again: a rotated key is taken up by the next run)."""
    return _read(kubeconfig, namespace, secret)


def _read(kubeconfig: str | None, namespace: str, secret: str):
    from movers.kube.repokey import read_credentials
    from tasks.kube import api_client

    return read_credentials(api_client(kubeconfig), namespace, secret)


@task(name="check-repository", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def check_repository(repo_url: str, key: KeySource | None = None) -> None:
    """Preflight: the repository opens with the flow's own environment (storage credentials, endpoint) and the
    key of ``key`` (``tasks.repository``: the repository Secret the mover pods mount). A missing bucket, a
    bucket without a repository, rejected credentials, a wrong key or none for an encrypted repository: a
    ``PreflightError`` of one line with the cause's exit code (6 for a key), not retried; an unreachable
    endpoint is retried first."""
    from movers.errors import MoverError, PreflightError

    try:
        repo = open_repository(repo_url, key)
    except MoverError as err:
        if err.retriable:
            raise
        raise PreflightError(f"the repository {repo_url} cannot be used: {err}", err.exit_code) from None
    if repo.config.encrypted:
        get_run_logger().info("repository %s: encrypted, opened with the key of %s", repo_url, describe(key))


@task(
    name="choose-base",
    task_run_name="base {volume_id}",
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_retriable,
)
def choose_base(
    repo_url: str,
    volume_id: str,
    source: Source,
    key: KeySource | None = None,
    kubeconfig: str | None = None,
) -> BaseChoice:
    """The next CBT delta's base of ``volume_id``, whose source is now the PV of ``source`` (the preflight's claim:
    its ``PvIdentity``'s volume handle and uid): the newest backup of that volume whose snapshot still exists in the
    cluster of ``kubeconfig`` (``movers.repo.lineage.choose_base`` with ``movers.backup.bases.SnapshotCheck``);
    handle None for a full backup, snapshot the base's VolumeSnapshot name, backup_id the backup the delta builds
    on."""
    from movers.backup.bases import SnapshotCheck
    from movers.repo.lineage import choose_base as choose
    from movers.repo.manifest import VolumeIdentity
    from tasks.kube import api_client

    check = SnapshotCheck(api_client(kubeconfig))
    pv = source.identity
    current = VolumeIdentity(volume_id, pv_volume_handle=pv.pv_volume_handle, pv_uid=pv.pv_uid)
    return choose(open_repository(repo_url, key), current, check.missing)


PLANNED = {
    "cbt-delta": "incremental from the CBT delta",
    "cbt-allocated": "full from the CBT allocated blocks",
    "scan": "full by reading the whole volume (scan)",
}


@task(name="plan-member", task_run_name="plan {volume_id}")
def plan_member(
    volume_id: str,
    base: BaseChoice,
    audience: str | None,
    no_cbt: str | None = None,
    max_results: int = 4096,
    snapshot: str | None = None,
    by_name: bool = False,
) -> VolumePlan:
    """``movers.backup.plan.VolumePlan.of``, said in one line of the run's log with its reason (a plan is never
    silent): ``ns/pvc: plan incremental from the CBT delta of snapshot S: delta since backup B ...``."""
    chosen = {"handle": base.handle, "reason": base.reason, "snapshot": base.snapshot, "parent": base.backup_id}
    plan = VolumePlan.of(chosen, audience, no_cbt, max_results, by_name)
    of = f" of snapshot {snapshot}" if snapshot else ""
    get_run_logger().info("%s: plan %s%s: %s", volume_id, PLANNED[plan.change_source], of, plan.why)
    return plan
