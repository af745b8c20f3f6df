"""Watches on the Kubernetes API emulator through ``kubernetes.watch.Watch``: order, resume from a
resourceVersion, 410 for a too old one, selector transitions, timeouts, bookmarks, shutdown."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi.testing import serve

SNAP = "snapshot.storage.k8s.io"


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path) as k:
        yield k


def take(stream, n):
    """The first ``n`` events of a watch stream, then stop it."""
    out = []
    for event in stream:
        out.append(event)
        if len(out) == n:
            break
    return out


def test_events_in_order_and_resume_from_a_resource_version(kube):
    core = kube.core
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("a", "default", {"data": {"v": "2"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    core.delete_namespaced_config_map("a", "default")

    w = watch.Watch()
    events = take(w.stream(core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=10), 4)
    w.stop()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 4 and rvs[0] > int(start)
    assert events[1]["object"].data == {"v": "2"}

    # resume after the second event: the rest, nothing before
    w = watch.Watch()
    rest = take(
        w.stream(core.list_namespaced_config_map, "default", resource_version=str(rvs[1]), timeout_seconds=10), 2
    )
    w.stop()
    assert [(e["type"], e["object"].metadata.name) for e in rest] == [("ADDED", "b"), ("DELETED", "a")]


def test_current_state_first_then_live_changes(kube):
    core = kube.core
    for name in ("y", "x"):
        core.create_namespaced_config_map("default", {"metadata": {"name": name}})
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_namespaced_config_map, "default", timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:  # the initial state is complete: change something while the stream is open
            core.patch_namespaced_config_map("x", "default", {"metadata": {"labels": {"k": "v"}}})
            core.delete_namespaced_config_map("y", "default")
        if len(seen) == 4:
            w.stop()
    assert seen == [("ADDED", "x"), ("ADDED", "y"), ("MODIFIED", "x"), ("DELETED", "y")]


def test_too_old_resource_version_is_gone(tmp_path):
    with serve(tmp_path, watch_history=5) as kube:
        start = kube.core.list_namespaced_config_map("default").metadata.resource_version
        for i in range(8):
            kube.core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as info:
            take(
                watch.Watch().stream(
                    kube.core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=5
                ),
                1,
            )
        assert info.value.status == 410
        # recent enough: fine
        recent = str(int(kube.core.list_namespaced_config_map("default").metadata.resource_version) - 3)
        events = take(
            watch.Watch().stream(
                kube.core.list_namespaced_config_map, "default", resource_version=recent, timeout_seconds=5
            ),
            3,
        )
        assert [e["object"].metadata.name for e in events] == ["c5", "c6", "c7"]


def test_selected_watch_sees_objects_enter_and_leave(kube):
    core = kube.core
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "m", "labels": {"app": "db"}}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "other", "labels": {"app": "web"}}})
    core.patch_namespaced_config_map("m", "default", {"metadata": {"labels": {"app": "web"}}})
    core.patch_namespaced_config_map("m", "default", {"metadata": {"labels": {"app": "db"}}})
    core.delete_namespaced_config_map("m", "default")
    events = take(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            label_selector="app=db",
            resource_version=start,
            timeout_seconds=10,
        ),
        4,
    )
    assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED", "DELETED"]
    assert {e["object"].metadata.name for e in events} == {"m"}


def test_custom_object_watch_by_name_sees_readiness(kube):
    co = kube.custom
    co.create_namespaced_custom_object(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        {
            "apiVersion": f"{SNAP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "s"},
            "spec": {"source": {"persistentVolumeClaimName": "d"}},
        },
    )
    co.create_namespaced_custom_object(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        {
            "apiVersion": f"{SNAP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "unrelated"},
            "spec": {"source": {"persistentVolumeClaimName": "d"}},
        },
    )
    w = watch.Watch()
    states = []
    for event in w.stream(
        co.list_namespaced_custom_object,
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        field_selector="metadata.name=s",
        timeout_seconds=10,
    ):
        states.append(
            (
                event["type"],
                event["object"]["metadata"]["name"],
                (event["object"].get("status") or {}).get("readyToUse"),
            )
        )
        if len(states) == 1:
            co.patch_namespaced_custom_object_status(
                SNAP, "v1", "default", "volumesnapshots", "unrelated", {"status": {"readyToUse": True}}
            )
            co.patch_namespaced_custom_object_status(
                SNAP, "v1", "default", "volumesnapshots", "s", {"status": {"readyToUse": True}}
            )
        else:
            w.stop()
    assert states == [("ADDED", "s", None), ("MODIFIED", "s", True)]


def test_timeout_seconds_ends_the_stream(kube):
    began = time.monotonic()
    events = list(watch.Watch().stream(kube.core.list_namespaced_pod, "default", timeout_seconds=1))
    took = time.monotonic() - began
    assert events == [] and 0.9 <= took < 5


def test_bookmarks_when_allowed(tmp_path):
    with serve(tmp_path, bookmark_interval=0.1) as kube:
        rv = kube.core.list_namespaced_pod("default").metadata.resource_version
        w = watch.Watch()
        events = take(
            w.stream(
                kube.core.list_namespaced_pod,
                "default",
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=10,
            ),
            1,
        )
        assert events[0]["type"] == "BOOKMARK" and w.resource_version == rv


def test_stopping_the_server_ends_open_watches(tmp_path):
    with serve(tmp_path) as kube:
        url = f"{kube.api.url}/api/v1/namespaces/default/configmaps?watch=true"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {kube.api.token}"})
        kube.core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
        started, lines = threading.Event(), []

        def read():
            with urllib.request.urlopen(request, timeout=30) as resp:
                for line in resp:
                    lines.append(json.loads(line))
                    started.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(10)
        kube.api.stop()
        reader.join(10)
        assert not reader.is_alive() and lines[0]["type"] == "ADDED"
