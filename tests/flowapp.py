"""Shared set-up of the flow tests: a demo application on the local cluster with a repository.

``deploy_app`` creates a namespace with the shipped mover identity (``cbt-mover install movers`` applied
for it: ServiceAccount ``cbt-mover``, its Role, RoleBinding and ClusterRoleBinding),
Block PVCs labelled ``app=demo`` in the app's StorageClass ``APP_CLASS`` (the hostpath driver's; the
cluster's default class belongs to the other driver),
the demo app pod writing to them (freeze/thaw through ``HOOKS``), a moto bucket with an initialised
repository, ENCRYPTED with the passphrase ``PASSPHRASE`` unless asked otherwise, and the ``cbt-mover-repo``
Secret the mover pods read (the storage credentials, the repository URL and the passphrase, key ``password``,
with the trailing newline ``kubectl create secret --from-file`` keeps). The flows run as the shipped
controller identity (``flow_kubeconfig``). The flows read the repository themselves: the storage credentials
from the worker's environment (the AWS_* variables are set through ``setenv``), the key from the Secret.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from kubernetes import client

from demo.demo_app import pod_manifest as demo_pod
from localcluster.kubelet.testing import phase_in, wait_pod, wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, REPO_SECRET, apply_mover_rbac, controller_kubeconfig
from movers.kube import apply as k
from movers.kube import manifests as m

APP = ["python", "-m", "demo.demo_app"]
# the flow tests' repository passphrase: distinctive, so that a scan of logs, artifacts and events finds any copy
PASSPHRASE = "flow-tests: tr0ub4dor&3 correct horse 91c2"
KEY_ENV = {"CBT_MOVER_PASSWORD": PASSPHRASE}
FAST_KDF = {"CBT_MOVER_KDF_COST": "10"}  # scrypt N=2^10 for the tests' key slots (each slot keeps its own)
APP_CLASS = "csi-hostpath-sc"
SEL = {"matchLabels": {"app": "demo"}}


def freeze_hooks(selector: dict) -> dict:
    """A policy's ``hooks``: freeze the demo app's container ``app`` in the pods of ``selector``, thaw it after."""
    return {
        "pre": [
            {"name": "freeze", "pod_selector": selector, "container": "app", "command": [*APP, "freeze"], "timeout": 10}
        ],
        "post": [
            {
                "name": "thaw",
                "pod_selector": selector,
                "container": "app",
                "command": [*APP, "thaw"],
                "timeout": 10,
                "on_error": "continue",
            }
        ],
    }


HOOKS = freeze_hooks(SEL)


def deploy_app(
    cluster,
    setenv: Callable[[str, str], None],
    ns: str,
    bucket: str,
    pvcs=("data", "logs"),
    size: str = "16Mi",
    app_pod: bool = True,
    storage_class: str = APP_CLASS,
    encrypted: bool = True,
) -> dict:
    """The app, its repository (``s3://<bucket>/repo``, ``encrypted`` with ``PASSPHRASE``) and Secret; returns
    ``{"repo", "env"}`` (``env``: what the CLI needs to open the repository).

    The PVCs are in ``storage_class``; the app pod writes to each (device ``i`` of its records is ``pvcs[i]``)."""
    api = cluster.client
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    apply_mover_rbac(cluster, [ns])
    for pvc in pvcs:
        k.create(api, m.block_pvc(pvc, ns, size, storage_class, {"app": "demo"}))
    if app_pod:
        start_app_pod(core, ns, pvcs)
    cluster.s3.client().create_bucket(Bucket=bucket)
    repo = f"s3://{bucket}/repo"
    env = init_repo(cluster, repo, encrypted)
    core.create_namespaced_secret(ns, repo_secret(cluster, repo, encrypted))
    for key, value in cluster.s3.env.items():
        setenv(key, value)
    return {"repo": repo, "env": env}


def init_repo(cluster, repo: str, encrypted: bool = True) -> dict[str, str]:
    """``cbt-mover init`` of ``repo`` (encrypted with ``PASSPHRASE``, or not); the CLI's environment for it."""
    env = {**cluster.env(), "PATH": "/usr/bin:/bin", **(KEY_ENV if encrypted else {})}
    init = ["init"] if encrypted else ["init", "--insecure-no-encryption"]
    subprocess.run(
        [sys.executable, "-m", "movers", *init, "--repo", repo],
        check=True,
        env={**env, **FAST_KDF},
        capture_output=True,
    )
    return env


def repo_secret(cluster, repo: str, encrypted: bool = True, **data: str) -> dict:
    """The ``cbt-mover-repo`` Secret of ``repo`` (with ``PASSPHRASE`` as key ``password`` if ``encrypted``)."""
    key = {"password": PASSPHRASE + "\n"} if encrypted else {}
    string_data = {**cluster.s3.env, "CBT_MOVER_REPO": repo, **key, **data}
    return {"metadata": {"name": REPO_SECRET}, "stringData": string_data}


def open_repo(repo: str):
    """The repository ``repo`` opened in this process (its key: ``PASSPHRASE``, if it is encrypted)."""
    from movers.errors import UsageError
    from movers.repo.keys import Credentials
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    store = open_store(repo)
    try:
        return Repository.open(store, Credentials.gather(environ=KEY_ENV))
    except UsageError:  # an unencrypted one refuses a key
        return Repository.open(store)


def start_app_pod(core, ns: str, pvcs) -> None:
    """The demo app pod ``app`` writing to ``pvcs`` (device ``i`` is ``pvcs[i]``), Running and writing."""
    devices = {pvc: f"/dev/xvd{chr(ord('a') + i)}" for i, pvc in enumerate(pvcs)}
    pod = demo_pod("app", devices, labels={"app": "demo"}, interval=0.02)
    spec = pod["spec"]
    for i, volume in enumerate(spec["volumes"][: len(pvcs)]):  # a pod's volume names are DNS labels, PVC names not
        spec["containers"][0]["volumeDevices"][i]["name"] = volume["name"] = f"vol{i}"
    core.create_namespaced_pod(ns, pod)
    wait_pod(core, "app", phase_in("Running"), namespace=ns, timeout=30)
    wait_until(lambda: core.read_namespaced_pod_log("app", ns).count("write seq=") >= 5, 30, "app writes")


def backup_params(cluster, repo: str, ns: str, **given) -> dict:
    """The ``backup_app`` parameters used by the tests: ``overrides`` of the demo app (its hooks, 2 in parallel)
    without a policy file, with ``given`` over them (``policy_path``, ``forget_expired`` and ``kubeconfig`` are the
    flow's own)."""
    overrides = {
        "namespace": ns,
        "selector": SEL,
        "repo": repo,
        "repo_secret": REPO_SECRET,
        "hooks": HOOKS,
        "image": "cbt-mover",
        "service_account": MOVER_SERVICE_ACCOUNT,
        "parallelism": 2,
    }
    params = {"kubeconfig": flow_kubeconfig(cluster)}
    for key, value in given.items():
        (params if key in ("policy_path", "forget_expired", "kubeconfig") else overrides)[key] = value
    return params | {"overrides": overrides}


def flow_kubeconfig(cluster) -> str:
    """The flows' kubeconfig: the shipped controller identity (``localcluster.shipped_rbac``), never the admin."""
    return str(controller_kubeconfig(cluster))


def app_states(core, ns: str) -> list[str]:
    """``frozen`` / ``thawed`` in the order the demo app logged them."""
    lines = core.read_namespaced_pod_log("app", ns).splitlines()
    return [line.split(" ", 1)[0] for line in lines if line.startswith(("frozen", "thawed"))]


def freeze_windows(core, ns: str) -> list[float]:
    """Each frozen -> thawed window of the demo app, in seconds, from its log's timestamps (``t=NS``)."""
    lines = core.read_namespaced_pod_log("app", ns).splitlines()
    marks = [line.split(" t=") for line in lines if line.startswith(("frozen t=", "thawed t="))]
    windows, frozen = [], None
    for state, t in marks:
        if state == "frozen" and frozen is None:
            frozen = int(t)
        elif state == "thawed" and frozen is not None:
            windows.append((int(t) - frozen) / 1e9)
            frozen = None
    assert frozen is None, "the app is still frozen"
    return windows


def policy_file(path, name: str, ns: str, repo: str, **fields) -> str:
    """A policy file for the demo app (its hooks, the shipped Secret and mover identity) with ``fields`` over
    it (a mapping merged key by key into the default one: ``mover``, ``repository``)."""
    import yaml

    policy = {
        "name": name,
        "namespace": ns,
        "pvc_selector": SEL,
        "hooks": HOOKS,
        "repository": {"url": repo, "credentials_secret": REPO_SECRET},
        "mover": {"image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT},
    }
    for key, value in fields.items():
        policy[key] = {**policy[key], **value} if isinstance(value, dict) and key in policy else value
    path.write_text(yaml.safe_dump(policy))
    return str(path)


def audited_creations(cluster, ns: str) -> list[dict]:
    """The objects the flows' identity created in ``ns`` (from the cluster's audit log), as sent."""
    import json

    from localcluster.shipped_rbac import CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT

    user = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}"
    found = []
    with open(cluster.audit_log, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            authz, body = entry.get("authz") or {}, entry.get("body")
            if entry["user"] == user and entry["method"] == "POST" and entry["code"] < 300 and isinstance(body, dict):
                if authz.get("namespace") == ns and not authz.get("subresource"):
                    found.append(body)
    return found


def any_run_objects(api, ns: str) -> dict[str, list[str]]:
    """Objects of any backup run in ``ns`` (label ``cbt-mover.io/run`` present)."""
    found = {}
    for kind in ("Pod", "PersistentVolumeClaim", "VolumeSnapshot", "VolumeGroupSnapshot"):
        try:
            found[kind] = [o["metadata"]["name"] for o in k.list_objects(api, kind, ns, m.RUN_LABEL)]
        except Exception:  # noqa: BLE001
            found[kind] = []
    return {kind: names for kind, names in found.items() if names}


def prefect_record() -> str:
    """Everything the Prefect API holds about this session's runs, as JSON text: flow runs (parameters, states),
    task runs (inputs, states), logs, artifacts and events (payloads, resources)."""
    from prefect.client.orchestration import get_client

    def pages(read) -> list:
        found, offset = [], 0
        while batch := read(offset):
            found += batch
            offset += len(batch)
        return found

    with get_client(sync_client=True) as prefect:
        objects = [
            *pages(lambda at: prefect.read_flow_runs(limit=200, offset=at)),
            *pages(lambda at: prefect.read_task_runs(limit=200, offset=at)),
            *pages(lambda at: prefect.read_logs(limit=200, offset=at)),
            *pages(lambda at: prefect.read_artifacts(limit=200, offset=at)),
        ]
        page = prefect.read_events(limit=50)
        objects += page.events
        while page.next_page:
            page = prefect.read_events_page(page.next_page)
            objects += page.events
    return "\n".join(o.model_dump_json() for o in objects)


def identities_sent(cluster) -> str:
    """Every request body the product's identities (the flows' controller, the movers) sent to the API server, as
    text (from the cluster's audit log)."""
    import json

    from localcluster.shipped_rbac import CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT

    controller = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}"
    mover = f":{MOVER_SERVICE_ACCOUNT}"
    sent = []
    with open(cluster.audit_log, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            if entry["user"] == controller or entry["user"].endswith(mover):
                sent.append(json.dumps(entry.get("body")))
    return "\n".join(sent)


def pvc_events(core, ns: str, pvc: str, reason: str) -> list:
    """The Events of ``reason`` that ``kubectl describe pvc`` lists for the claim as it is now (matched by its
    uid, so a re-created claim has none of its predecessor's), oldest first."""
    claim = core.read_namespaced_persistent_volume_claim(pvc, ns)
    selector = f"involvedObject.uid={claim.metadata.uid},reason={reason}"
    return sorted(core.list_namespaced_event(ns, field_selector=selector).items, key=lambda e: e.metadata.name)


def flow_run_of(run_id: str):
    """The flow run tagged ``run:<run_id>`` (exactly one), read back through the Prefect client."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    with get_client(sync_client=True) as prefect:
        found = prefect.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"run:{run_id}"])))
    assert len(found) == 1, (run_id, found)
    return found[0]


def task_run_names(flow_run_id) -> list[str]:
    """The names of a flow run's task runs."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as prefect:
        found = prefect.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return sorted(t.name for t in found)


def run_logs(flow_run_id) -> list:
    """Every log record of a flow run and its task runs (``level``, ``message``), oldest first (the records this
    process still queues are sent first)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    found: list = []
    with get_client(sync_client=True) as prefect:
        while batch := prefect.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
            sort=LogSort.TIMESTAMP_ASC,
            limit=200,
            offset=len(found),
        ):
            found += batch
    return found


def run_events(name: str, run_id: str) -> list:
    """The events ``name`` of run ``run_id`` (its resource's ``cbt-mover.run`` label)."""
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter

    with get_client(sync_client=True) as prefect:
        page = prefect.read_events(EventFilter(event=EventNameFilter(name=[name])), limit=50)
        found = list(page.events)
        while page.next_page:
            page = prefect.read_events_page(page.next_page)
            found += page.events
    return [e for e in found if e.resource.get("cbt-mover.run") == run_id]


def artifact(key: str):
    """The latest artifact of ``key`` (None when there is none)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        found = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return max(found, key=lambda a: a.created) if found else None


def no_traceback_above_debug(logs) -> None:
    """No log record above DEBUG carries a traceback."""
    import logging

    loud = [r.message for r in logs if r.level > logging.DEBUG and "Traceback (most recent call last)" in r.message]
    assert loud == [], loud
