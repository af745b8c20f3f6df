"""How the flows' tasks open the repository, an encrypted one with its key.

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
