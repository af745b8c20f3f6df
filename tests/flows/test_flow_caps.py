"""Caps that queue (``tasks.caps``, ``movers.kube.nodeslots``): twelve applications due at once on a three-node
cluster with the default cap of one mover per node never run more than three movers at a time, read back from the
mover containers' start and end times, and all twelve back up; a mover that waited said so in its log and its
task run's state. A backup window stops a run whose mover cannot start before it ends."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from localcluster.kubelet.testing import wait_until
from localcluster.nodes import NodeSpec
from movers.kube import manifests as m
from movers.kube.nodeslots import SLOT_GATE
from tests.flowapp import (
    APP_CLASS,
    any_run_objects,
    backup_params,
    deploy_app,
    flow_kubeconfig,
    flow_run_of,
    policy_file,
    run_logs,
)

NODES = tuple(
    NodeSpec(name, "linux", zone, {"topology.hostpath.csi/node": name, "topology.disk.csi.local/zone": zone})
    for name, zone in (("node-a", "zone-a"), ("node-b", "zone-b"), ("node-c", "zone-c"))
)
APPS = 12
NO_HOOKS = {"pre": [], "post": []}


@pytest.fixture
def cluster(make_local_cluster):
    return make_local_cluster(nodes=NODES)


def _bind_claim(core, ns: str, node: str) -> None:
    """Bind the app's WaitForFirstConsumer claim ``data`` on ``node``: a pod that uses it once and exits."""
    pod = {
        "metadata": {"name": "binder"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "c",
                    "image": "cbt-mover",
                    "command": ["true"],
                    "volumeDevices": [{"name": "v", "devicePath": "/dev/xvda"}],
                }
            ],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    core.create_namespaced_pod(ns, pod)


class MoverTimes:
    """Every mover pod's container times, watched across namespaces (the runs delete their pods)."""

    def __init__(self, core) -> None:
        self.core, self.pods, self.gated = core, {}, set()
        self._watch, self._ready, self._stopped = watch.Watch(), threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self._ready.set()
        while not self._stopped.is_set():
            try:
                self._follow()
            except ProtocolError:  # the server ended the watch: go on from the last resource version seen
                continue

    def _follow(self) -> None:
        selector = f"{m.COMPONENT_LABEL}={m.MOVER}"
        since = {"resource_version": self._watch.resource_version} if self._watch.resource_version else {}
        pods = self.core.list_pod_for_all_namespaces
        for event in self._watch.stream(pods, label_selector=selector, timeout_seconds=2, **since):
            pod = event["object"]
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            if any(c.name == SLOT_GATE for c in pod.spec.init_containers or []):
                self.gated.add(key)
            for status in (pod.status.container_statuses or []) if pod.status else []:
                done = status.state.terminated if status.state else None
                if status.name == "mover" and done is not None and done.finished_at is not None:
                    self.pods[key] = (pod.spec.node_name, done.started_at, done.finished_at, done.exit_code)

    def __enter__(self) -> MoverTimes:
        self.thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        self._watch.stop()
        self.thread.join(timeout=10)


def most_at_once(intervals) -> int:
    """The most intervals ``(start, end)`` open at one time; one that ends when another starts is not open with it
    (the API's times are whole seconds)."""
    marks = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in marks:  # at equal times the ends (-1) sort first
        now += step
        most = max(most, now)
    return most


def test_twelve_apps_due_at_once_run_one_mover_per_node(cluster, prefect_api, monkeypatch):
    api = cluster.client
    core = client.CoreV1Api(api)
    apps = [f"cap-{i:02d}" for i in range(APPS)]
    repos = {}
    for i, ns in enumerate(apps):
        repos[ns] = deploy_app(cluster, monkeypatch.setenv, ns, f"caps-{ns}", ("data",), "4Mi", False, APP_CLASS, False)
        _bind_claim(core, ns, NODES[i % len(NODES)].name)
    for ns in apps:
        bound = lambda ns=ns: core.read_namespaced_persistent_volume_claim("data", ns).status.phase == "Bound"  # noqa: E731
        wait_until(bound, 60, f"{ns}/data bound")

    from flows.backup import backup_app

    def back_up(ns: str) -> dict:
        return backup_app(**backup_params(cluster, repos[ns]["repo"], ns, hooks=NO_HOOKS))

    with MoverTimes(core) as times, ThreadPoolExecutor(APPS) as pool:
        summaries = list(pool.map(back_up, apps))

    assert [s["volumes"][0]["mode"] for s in summaries] == ["full"] * APPS, summaries
    assert len(times.pods) == APPS and set(times.gated) == set(times.pods), times.pods
    assert all(code == 0 for *_, code in times.pods.values()), times.pods
    intervals = [(start, end) for _, start, end, _ in times.pods.values()]
    at_once = most_at_once(intervals)
    print(f"{APPS} movers on {len(NODES)} nodes: at most {at_once} at once; {len(_waits(summaries))} waited")
    assert at_once <= len(NODES), sorted(times.pods.values(), key=lambda t: t[1])
    for node in {n.name for n in NODES}:  # one at a time on each node
        on_node = [(start, end) for where, start, end, _ in times.pods.values() if where == node]
        assert most_at_once(on_node) <= 1, (node, on_node)

    waited = _waits(summaries)
    node_waits = [
        msg for msg, _ in waited if re.search(r" on node node-. waits for a slot of cbt-mover-movers-node-", msg)
    ]
    assert node_waits, f"twelve movers on three nodes: some must have waited for their node's slot: {waited}"
    for message, states in waited:  # the node's cap, or the cluster's (8 by default) while 12 runs start at once
        assert re.fullmatch(
            r"cap-\d\d/data( on node node-.)? waits for a slot of cbt-mover-movers(-node-node-.)? "
            r"\((1/1|8/8) taken\)",
            message,
        ), message
        assert "AwaitingConcurrencySlot" in states and states[-1] == "Completed", states


def _waits(summaries) -> list[tuple[str, list[str]]]:
    """Each INFO line ``... waits for a slot of ...`` of the runs, with the state names of its task run."""
    from prefect.client.orchestration import get_client

    out = []
    with get_client(sync_client=True) as prefect:
        for summary in summaries:
            flow_run = flow_run_of(summary["run_id"])
            for record in run_logs(flow_run.id):
                if " waits for a slot of " in record.message:
                    assert record.level == 20, record  # INFO
                    states = prefect.read_task_run_states(record.task_run_id)
                    out.append((record.message, [s.name for s in states]))
    return out


def _hms(t: datetime) -> str:
    return t.strftime("%H:%M:%S")


def test_a_backup_window_stops_a_run_whose_mover_cannot_start_in_time(local_cluster, prefect_api, module_env, tmp_path):
    """The app's mover waits for its class's slot (held by another holder) until the window ends: the run cleans up
    and ends WindowClosed; a run started outside its window stops before it freezes or creates anything."""
    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency

    from deploy.limits import ensure_limits
    from flows.backup import backup_app
    from tasks.caps import MOVERS, class_limit

    api, ns = local_cluster.client, "capwin"
    core = client.CoreV1Api(api)
    repo = deploy_app(local_cluster, module_env.setenv, ns, "caps-window", ("data",), "4Mi", False, APP_CLASS, False)
    _bind_claim(core, ns, "node-a")
    wait_until(lambda: core.read_namespaced_persistent_volume_claim("data", ns).status.phase == "Bound", 60, "bound")
    kubeconfig = flow_kubeconfig(local_cluster)
    now = datetime.now(UTC)

    closing = {"start": _hms(now - timedelta(hours=1)), "end": _hms(now + timedelta(seconds=20)), "timezone": "UTC"}
    policy = policy_file(tmp_path / "closing.yaml", "app", ns, repo["repo"], hooks=NO_HOOKS, window=closing)
    limit = class_limit(MOVERS, APP_CLASS)
    ensure_limits(classes={APP_CLASS: 1}, roles=(MOVERS,))
    try:
        with concurrency(limit, occupy=1):  # another mover of the class holds its one slot
            state = backup_app(policy_path=policy, kubeconfig=kubeconfig, return_state=True)
    finally:
        with get_client(sync_client=True) as prefect:
            prefect.delete_global_concurrency_limit_by_name(limit)
    assert state.is_cancelled() and state.name == "WindowClosed", state
    said = state.message
    assert f"its backup window {closing['start']}-{closing['end']} UTC ended: {ns}/data waited" in said, said
    assert f"for a slot of cbt-mover-movers, {limit} until the backup window ended" in said, said
    assert "committed before that: nothing" in said, said
    assert any_run_objects(api, ns) == {}, "the run's objects were deleted"
    assert not client.CustomObjectsApi(api).list_namespaced_custom_object(
        m.SNAPSHOT_GROUP, "v1", ns, "volumesnapshots"
    )["items"], "no base snapshot kept from a run that stopped"

    shut = {"start": _hms(now - timedelta(hours=2)), "end": _hms(now - timedelta(hours=1)), "timezone": "UTC"}
    policy = policy_file(tmp_path / "shut.yaml", "app", ns, repo["repo"], hooks=NO_HOOKS, window=shut)
    state = backup_app(policy_path=policy, kubeconfig=kubeconfig, return_state=True)
    assert state.name == "WindowClosed" and "not started: outside its backup window" in state.message, state
    assert "nothing was frozen, snapshotted or created" in state.message
