"""The Kubernetes API emulator through the real ``kubernetes`` client over HTTP: discovery, CRUD of
every kind family, patches, status subresources, selectors, conflicts, deletion semantics, errors,
and kubectl."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess

import pytest
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi.testing import serve

SNAP = "snapshot.storage.k8s.io"
VGS = "groupsnapshot.storage.k8s.io"
CBT = "cbt.storage.k8s.io"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path) as k:
        yield k


def pod(name, labels=None, **spec):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "mover"}], **spec},
    }


def pvc(name, size="1Gi"):
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block", "resources": {"requests": {"storage": size}}},
    }


def status_of(call, *args, **kwargs) -> ApiException:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value


# ---- discovery ------------------------------------------------------------------------------------


def test_discovery_documents(kube):
    assert client.VersionApi(kube.client).get_code().major == "1"
    assert client.CoreApi(kube.client).get_api_versions().versions == ["v1"]
    groups = {g.name: [v.version for v in g.versions] for g in client.ApisApi(kube.client).get_api_versions().groups}
    assert groups[VGS] == ["v1", "v1beta2", "v1beta1"]
    assert groups[SNAP] == ["v1"] and groups[CBT] == ["v1beta1"] and groups["storage.k8s.io"] == ["v1"]
    assert {"authentication.k8s.io", "authorization.k8s.io"} <= set(groups)

    core = {r.name: r for r in kube.core.get_api_resources().resources}
    assert {"pods/status", "pods/log", "pods/exec", "serviceaccounts/token", "persistentvolumeclaims/status"} <= set(
        core
    )
    assert core["pods"].namespaced and core["pods"].kind == "Pod" and core["pods"].short_names == ["po"]
    assert not core["persistentvolumes"].namespaced and "watch" in core["persistentvolumes"].verbs
    assert core["serviceaccounts/token"].verbs == ["create"]

    snap = {r["name"]: r for r in kube.custom.get_api_resources(SNAP, "v1").to_dict()["resources"]}
    assert snap["volumesnapshots"]["namespaced"] and snap["volumesnapshots"]["short_names"] == ["vs"]
    assert not snap["volumesnapshotcontents"]["namespaced"] and "volumesnapshotcontents/status" in snap
    assert "volumesnapshotclasses/status" not in snap


def test_dynamic_client_resolves_kinds_through_discovery(kube):
    dyn = dynamic.DynamicClient(kube.client)
    vs_api = dyn.resources.get(api_version=f"{SNAP}/v1", kind="VolumeSnapshot")
    vs_api.create(
        body={
            "apiVersion": f"{SNAP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "s"},
            "spec": {"source": {"persistentVolumeClaimName": "data"}},
        },
        namespace="default",
    )
    assert [i.metadata.name for i in vs_api.get(namespace="default").items] == ["s"]
    assert dyn.resources.get(api_version="v1", kind="Pod").namespaced


# ---- CRUD of each kind family ---------------------------------------------------------------------


def test_core_kinds_crud(kube):
    core = kube.core
    core.create_namespace({"metadata": {"name": "work"}})
    assert core.read_namespace("work").status.phase == "Active"
    assert core.read_namespaced_service_account("default", "work").metadata.name == "default"

    created = core.create_namespaced_pod("work", pod("p"))
    assert created.status.phase == "Pending" and created.spec.restart_policy == "Always"
    assert created.metadata.uid and created.metadata.creation_timestamp and created.metadata.generation == 1
    core.create_namespaced_persistent_volume_claim("work", pvc("data"))
    core.create_persistent_volume(
        {
            "metadata": {"name": "pv1"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "d", "volumeHandle": "h"},
            },
        }
    )
    secret = core.create_namespaced_secret("work", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert secret.data == {"k": base64.b64encode(b"v").decode()} and secret.type == "Opaque"
    core.create_namespaced_config_map("work", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    core.create_namespaced_service_account("work", {"metadata": {"name": "mover"}})
    involved = {"kind": "Pod", "name": "p", "namespace": "work"}  # an Event's namespace must be its object's
    core.create_namespaced_event(
        "work",
        {
            "metadata": {"name": "e1"},
            "involvedObject": involved,
            "reason": "Started",
            "type": "Normal",
            "message": "hi",
        },
    )

    assert core.read_namespaced_persistent_volume_claim("data", "work").status.phase == "Pending"
    assert core.read_persistent_volume("pv1").spec.persistent_volume_reclaim_policy == "Retain"
    assert [c.metadata.name for c in core.list_namespaced_config_map("work").items] == ["cm"]
    assert {s.metadata.name for s in core.list_namespaced_service_account("work").items} == {"default", "mover"}
    assert core.list_namespaced_event("work", field_selector="involvedObject.name=p").items[0].reason == "Started"
    assert {p.metadata.namespace for p in core.list_pod_for_all_namespaces().items} == {"work"}

    cm = core.read_namespaced_config_map("cm", "work")
    cm.data = {"a": "2"}
    assert core.replace_namespaced_config_map("cm", "work", cm).data == {"a": "2"}

    deleted = core.delete_namespaced_pod("p", "work")
    assert deleted.metadata.name == "p"  # pods answer the deleted object
    core.delete_namespaced_config_map("cm", "work")
    assert status_of(core.read_namespaced_config_map, "cm", "work").status == 404
    core.delete_persistent_volume("pv1")
    assert core.list_persistent_volume().items == []


def test_storage_class_crud(kube):
    kube.storage.create_storage_class(
        {"metadata": {"name": "fast"}, "provisioner": "local.csi", "volumeBindingMode": "Immediate"}
    )
    assert kube.storage.read_storage_class("fast").provisioner == "local.csi"
    assert [s.metadata.name for s in kube.storage.list_storage_class().items] == ["fast"]
    kube.storage.delete_storage_class("fast")
    assert kube.storage.list_storage_class().items == []


SNAPSHOT_KINDS = [
    (SNAP, "v1", "volumesnapshots", "VolumeSnapshot", True, {"spec": {"source": {"persistentVolumeClaimName": "d"}}}),
    (
        SNAP,
        "v1",
        "volumesnapshotcontents",
        "VolumeSnapshotContent",
        False,
        {
            "spec": {
                "deletionPolicy": "Delete",
                "driver": "local.csi",
                "source": {"volumeHandle": "vol-1"},
                "volumeSnapshotRef": {"name": "s", "namespace": "default"},
            }
        },
    ),
    (
        SNAP,
        "v1",
        "volumesnapshotclasses",
        "VolumeSnapshotClass",
        False,
        {"driver": "local.csi", "deletionPolicy": "Delete"},
    ),
    (
        VGS,
        "v1",
        "volumegroupsnapshots",
        "VolumeGroupSnapshot",
        True,
        {"spec": {"source": {"selector": {"matchLabels": {"app": "db"}}}}},
    ),
    (
        VGS,
        "v1beta2",
        "volumegroupsnapshotcontents",
        "VolumeGroupSnapshotContent",
        False,
        {
            "spec": {
                "deletionPolicy": "Delete",
                "driver": "local.csi",
                "source": {"volumeHandles": ["a", "b"]},
                "volumeGroupSnapshotRef": {"name": "g", "namespace": "default"},
            }
        },
    ),
    (
        VGS,
        "v1beta1",
        "volumegroupsnapshotclasses",
        "VolumeGroupSnapshotClass",
        False,
        {"driver": "local.csi", "deletionPolicy": "Delete"},
    ),
    (
        CBT,
        "v1beta1",
        "snapshotmetadataservices",
        "SnapshotMetadataService",
        False,
        {"spec": {"address": "sms.local:6443", "audience": "local-sms", "caCert": CA}},
    ),
]


@pytest.mark.parametrize(
    ("group", "version", "plural", "kind", "namespaced", "body"), SNAPSHOT_KINDS, ids=[k[2] for k in SNAPSHOT_KINDS]
)
def test_custom_kinds_crud(kube, group, version, plural, kind, namespaced, body):
    co = kube.custom
    obj = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": "x", "labels": {"a": "1"}}, **body}
    ns_args = ("default",) if namespaced else ()
    scope = "namespaced" if namespaced else "cluster"
    create = getattr(co, f"create_{scope}_custom_object")
    get = getattr(co, f"get_{scope}_custom_object")
    listing = getattr(co, f"list_{scope}_custom_object")
    replace = getattr(co, f"replace_{scope}_custom_object")
    delete = getattr(co, f"delete_{scope}_custom_object")

    created = create(group, version, *ns_args, plural, obj)
    assert created["kind"] == kind and created["apiVersion"] == f"{group}/{version}"
    assert created["metadata"].get("namespace") == ("default" if namespaced else None)
    got = get(group, version, *ns_args, plural, "x")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    items = listing(group, version, *ns_args, plural, label_selector="a=1")["items"]
    assert [i["metadata"]["name"] for i in items] == ["x"] and items[0]["kind"] == kind  # CRD lists carry kinds
    got["metadata"]["labels"]["a"] = "2"
    replaced = replace(group, version, *ns_args, plural, "x", got)
    assert replaced["metadata"]["labels"] == {"a": "2"}
    assert int(replaced["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    delete(group, version, *ns_args, plural, "x")
    assert status_of(get, group, version, *ns_args, plural, "x").status == 404


# ---- patches, status subresource, generation ------------------------------------------------------


def test_merge_json_and_strategic_patches(kube):
    core = kube.core
    core.create_namespaced_pod("default", pod("p", {"app": "db", "tier": "x"}))
    # a dict goes out as a strategic merge patch for built-in kinds
    patched = core.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"tier": None, "new": "1"}, "finalizers": ["a/b"]}}
    )
    assert patched.metadata.labels == {"app": "db", "new": "1"}
    patched = core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": ["c/d"]}})
    assert patched.metadata.finalizers == ["a/b", "c/d"]  # finalizers merge as a set
    patched = core.patch_namespaced_pod(
        "p",
        "default",
        [
            {"op": "replace", "path": "/metadata/labels/app", "value": "web"},
            {"op": "remove", "path": "/metadata/finalizers"},
        ],
    )
    assert patched.metadata.labels["app"] == "web" and not patched.metadata.finalizers
    patched = core.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"m": "1"}}}, _content_type="application/merge-patch+json"
    )
    assert patched.metadata.labels["m"] == "1"
    failed = status_of(
        core.patch_namespaced_pod, "p", "default", [{"op": "test", "path": "/metadata/name", "value": "other"}]
    )
    assert failed.status == 422

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
    out = co.patch_namespaced_custom_object(
        SNAP, "v1", "default", "volumesnapshots", "s", {"metadata": {"annotations": {"k": "v"}}}
    )
    assert out["metadata"]["annotations"] == {"k": "v"}
    out = co.patch_namespaced_custom_object(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        "s",
        [{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}],
        _content_type="application/json-patch+json",
    )
    assert out["metadata"]["labels"] == {"x": "y"}
    refused = status_of(
        co.patch_namespaced_custom_object,
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        "s",
        {"metadata": {"labels": {"x": "z"}}},
        _content_type="application/strategic-merge-patch+json",
    )
    assert refused.status == 415  # like the real server: no strategic merge for custom resources


def test_status_subresource_and_generation(kube):
    co = kube.custom
    vs = co.create_namespaced_custom_object(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        {
            "apiVersion": f"{SNAP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "s"},
            "spec": {"source": {"persistentVolumeClaimName": "d"}},
            "status": {"readyToUse": True},
        },
    )
    assert "status" not in vs  # dropped on create: it has a status subresource
    out = co.patch_namespaced_custom_object_status(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        "s",
        {
            "status": {"readyToUse": False, "boundVolumeSnapshotContentName": "c"},
            "metadata": {"labels": {"ignored": "yes"}},
            "spec": {"volumeSnapshotClassName": "ignored"},
        },
    )
    assert out["status"] == {"readyToUse": False, "boundVolumeSnapshotContentName": "c"}
    assert "labels" not in out["metadata"] and "volumeSnapshotClassName" not in out["spec"]
    assert out["metadata"]["generation"] == 1
    out = co.patch_namespaced_custom_object(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        "s",
        {"status": {"readyToUse": True}, "metadata": {"labels": {"kept": "yes"}}},
    )
    assert out["status"]["readyToUse"] is False and out["metadata"]["labels"] == {"kept": "yes"}
    assert out["metadata"]["generation"] == 1  # metadata changes do not bump the generation
    out["status"]["readyToUse"] = True
    out = co.replace_namespaced_custom_object_status(SNAP, "v1", "default", "volumesnapshots", "s", out)
    assert out["status"]["readyToUse"] is True

    core = kube.core
    core.create_namespaced_persistent_volume_claim("default", pvc("d"))
    claim = core.patch_namespaced_persistent_volume_claim_status(
        "d", "default", {"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}
    )
    assert claim.status.phase == "Bound"
    claim = core.patch_namespaced_persistent_volume_claim("d", "default", {"status": {"phase": "Lost"}})
    assert claim.status.phase == "Bound"  # the main resource ignores status
    claim = core.patch_namespaced_persistent_volume_claim(
        "d", "default", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    )
    assert claim.metadata.generation == 2
    unchanged = core.patch_namespaced_persistent_volume_claim(
        "d", "default", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    )
    assert unchanged.metadata.resource_version == claim.metadata.resource_version  # a no-op write
    immutable = status_of(
        core.patch_namespaced_persistent_volume_claim, "d", "default", {"spec": {"accessModes": ["ReadWriteMany"]}}
    )
    assert immutable.status == 422


# ---- selectors, conflicts, generateName ------------------------------------------------------------


def test_label_and_field_selectors(kube):
    core = kube.core
    core.create_namespaced_pod("default", pod("a", {"app": "db", "tier": "1"}, nodeName="n1"))
    core.create_namespaced_pod("default", pod("b", {"app": "web", "tier": "2"}))
    core.create_namespaced_pod("default", pod("c", {"app": "cache"}))
    core.patch_namespaced_pod_status("b", "default", {"status": {"phase": "Running"}})
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_pod("other", pod("a", {"app": "db"}))

    def names(**kw):
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in core.list_pod_for_all_namespaces(**kw).items]

    assert names(label_selector="app=db") == ["default/a", "other/a"]
    assert names(label_selector="app==web") == ["default/b"]
    assert names(label_selector="app!=db") == ["default/b", "default/c"]
    assert names(label_selector="app in (db, cache)") == ["default/a", "default/c", "other/a"]
    assert names(label_selector="app notin (db,cache)") == ["default/b"]
    assert names(label_selector="tier") == ["default/a", "default/b"]
    assert names(label_selector="!tier") == ["default/c", "other/a"]
    assert names(label_selector="app=db,tier=1") == ["default/a"]
    assert names(field_selector="metadata.name=a") == ["default/a", "other/a"]
    assert names(field_selector="metadata.namespace=other") == ["other/a"]
    assert names(field_selector="status.phase=Running") == ["default/b"]
    assert names(field_selector="status.phase!=Running,metadata.namespace=default") == ["default/a", "default/c"]
    assert names(field_selector="spec.nodeName=n1") == ["default/a"]
    assert names(field_selector="spec.nodeName=") == ["default/b", "default/c", "other/a"]
    assert status_of(core.list_pod_for_all_namespaces, field_selector="spec.image=x").status == 400
    assert status_of(core.list_pod_for_all_namespaces, label_selector="app in db").status == 400

    page = core.list_namespaced_pod("default", limit=2)
    assert len(page.items) == 2 and page.metadata._continue
    rest = core.list_namespaced_pod("default", limit=2, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["c"] and not rest.metadata._continue


def test_resource_version_conflicts(kube):
    core = kube.core
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    current = core.patch_namespaced_config_map("cm", "default", {"data": {"v": "2"}})
    assert int(current.metadata.resource_version) > int(first.metadata.resource_version)
    first.data = {"v": "stale"}
    err = status_of(core.replace_namespaced_config_map, "cm", "default", first)
    assert err.status == 409 and "the object has been modified" in err.body
    stale = {"metadata": {"resourceVersion": first.metadata.resource_version}, "data": {"v": "x"}}
    assert status_of(core.patch_namespaced_config_map, "cm", "default", stale).status == 409
    current.data = {"v": "3"}
    assert core.replace_namespaced_config_map("cm", "default", current).data == {"v": "3"}
    dup = status_of(core.create_namespaced_config_map, "default", {"metadata": {"name": "cm"}})
    assert dup.status == 409 and '"reason":"AlreadyExists"' in dup.body.replace(" ", "")

    co = kube.custom
    co.create_cluster_custom_object(
        SNAP,
        "v1",
        "volumesnapshotclasses",
        {
            "apiVersion": f"{SNAP}/v1",
            "kind": "VolumeSnapshotClass",
            "metadata": {"name": "c"},
            "driver": "d",
            "deletionPolicy": "Delete",
        },
    )
    body = {
        "apiVersion": f"{SNAP}/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": "c"},
        "driver": "d",
        "deletionPolicy": "Retain",
    }
    # custom resources refuse an update without a resourceVersion, as upstream
    assert status_of(co.replace_cluster_custom_object, SNAP, "v1", "volumesnapshotclasses", "c", body).status == 422


def test_generate_name(kube):
    made = {
        kube.core.create_namespaced_pod(
            "default", {"metadata": {"generateName": "backup-"}, "spec": pod("x")["spec"]}
        ).metadata.name
        for _ in range(5)
    }
    assert len(made) == 5 and all(n.startswith("backup-") and len(n) == len("backup-") + 5 for n in made)
    vs = kube.custom.create_namespaced_custom_object(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        {
            "apiVersion": f"{SNAP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"generateName": "snap-"},
            "spec": {"source": {"persistentVolumeClaimName": "d"}},
        },
    )
    assert vs["metadata"]["name"].startswith("snap-")


# ---- deletion: finalizers, owners, namespaces -----------------------------------------------------


def test_finalizers_defer_deletion(kube):
    core = kube.core
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "finalizers": ["x/hold", "y/hold"]}})
    answer = core.delete_namespaced_config_map("cm", "default")
    assert answer["metadata"]["deletionTimestamp"]  # not deleted yet: the answer is the object
    held = core.read_namespaced_config_map("cm", "default")
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["x/hold", "y/hold"]
    refused = status_of(
        core.patch_namespaced_config_map, "cm", "default", {"metadata": {"finalizers": ["x/hold", "y/hold", "z/new"]}}
    )
    assert refused.status == 422 and "no new finalizers" in refused.body
    core.patch_namespaced_config_map("cm", "default", [{"op": "remove", "path": "/metadata/finalizers/0"}])
    assert core.read_namespaced_config_map("cm", "default").metadata.finalizers == ["y/hold"]
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["y/hold"]}})
    assert status_of(core.read_namespaced_config_map, "cm", "default").status == 404


def _owner(kind, obj, api_version="v1"):
    md = obj.metadata if hasattr(obj, "metadata") else None
    name, uid = (md.name, md.uid) if md else (obj["metadata"]["name"], obj["metadata"]["uid"])
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "blockOwnerDeletion": True}


def test_owner_references_cascade(kube):
    core, co = kube.core, kube.custom
    vgs = co.create_namespaced_custom_object(
        VGS,
        "v1",
        "default",
        "volumegroupsnapshots",
        {
            "apiVersion": f"{VGS}/v1",
            "kind": "VolumeGroupSnapshot",
            "metadata": {"name": "g"},
            "spec": {"source": {"selector": {"matchLabels": {"app": "db"}}}},
        },
    )
    ref = _owner("VolumeGroupSnapshot", vgs, f"{VGS}/v1beta2")  # match on kind and uid, any version
    for i in range(2):
        co.create_namespaced_custom_object(
            SNAP,
            "v1",
            "default",
            "volumesnapshots",
            {
                "apiVersion": f"{SNAP}/v1",
                "kind": "VolumeSnapshot",
                "metadata": {"name": f"m{i}", "ownerReferences": [ref]},
                "spec": {"source": {"persistentVolumeClaimName": f"d{i}"}},
            },
        )
    cm = core.create_namespaced_config_map(
        "default",
        {
            "metadata": {
                "name": "child-of-m0",
                "ownerReferences": [
                    {
                        "apiVersion": f"{SNAP}/v1",
                        "kind": "VolumeSnapshot",
                        "name": "m0",
                        "uid": co.get_namespaced_custom_object(SNAP, "v1", "default", "volumesnapshots", "m0")[
                            "metadata"
                        ]["uid"],
                    }
                ],
            }
        },
    )
    assert cm.metadata.name == "child-of-m0"
    co.delete_namespaced_custom_object(VGS, "v1", "default", "volumegroupsnapshots", "g")
    assert co.list_namespaced_custom_object(SNAP, "v1", "default", "volumesnapshots")["items"] == []
    assert core.list_namespaced_config_map("default").items == []  # transitively

    # two owners: deleting one only drops its reference
    a = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    b = core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    core.create_namespaced_secret(
        "default", {"metadata": {"name": "s", "ownerReferences": [_owner("ConfigMap", a), _owner("ConfigMap", b)]}}
    )
    core.delete_namespaced_config_map("a", "default")
    assert [r.name for r in core.read_namespaced_secret("s", "default").metadata.owner_references] == ["b"]
    # orphan keeps the dependent and removes the reference
    core.delete_namespaced_config_map("b", "default", propagation_policy="Orphan")
    assert core.read_namespaced_secret("s", "default").metadata.owner_references is None

    # foreground: the owner waits for its dependents, which wait for their finalizers
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "o"}})
    core.create_namespaced_secret(
        "default",
        {"metadata": {"name": "dep", "finalizers": ["x/hold"], "ownerReferences": [_owner("ConfigMap", owner)]}},
    )
    core.delete_namespaced_config_map("o", "default", propagation_policy="Foreground")
    held = core.read_namespaced_config_map("o", "default")
    assert held.metadata.deletion_timestamp and "foregroundDeletion" in held.metadata.finalizers
    assert core.read_namespaced_secret("dep", "default").metadata.deletion_timestamp
    core.patch_namespaced_secret("dep", "default", {"metadata": {"finalizers": None}})
    assert status_of(core.read_namespaced_config_map, "o", "default").status == 404

    # a dependent whose owner does not exist is collected at once
    core.create_namespaced_config_map(
        "default",
        {
            "metadata": {
                "name": "dangling",
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "nope", "uid": "0000"}],
            }
        },
    )
    assert status_of(core.read_namespaced_config_map, "dangling", "default").status == 404


def test_namespace_deletion_empties_it(kube):
    core = kube.core
    core.create_namespace({"metadata": {"name": "gone"}})
    core.create_namespaced_config_map("gone", {"metadata": {"name": "held", "finalizers": ["x/hold"]}})
    core.create_namespaced_pod("gone", pod("p"))
    core.delete_namespace("gone")
    assert core.read_namespace("gone").status.phase == "Terminating"
    assert core.list_namespaced_pod("gone").items == []
    refused = status_of(core.create_namespaced_config_map, "gone", {"metadata": {"name": "late"}})
    assert refused.status == 403
    core.patch_namespaced_config_map("held", "gone", {"metadata": {"finalizers": None}})
    assert status_of(core.read_namespace, "gone").status == 404


# ---- errors -------------------------------------------------------------------------------------------


def test_kubernetes_shaped_errors(kube):
    core = kube.core
    missing = status_of(core.read_namespaced_pod, "nope", "default")
    body = json.loads(missing.body)
    assert missing.status == 404 and body["reason"] == "NotFound" and body["message"] == 'pods "nope" not found'
    assert status_of(core.create_namespaced_pod, "nowhere", pod("p")).status == 404  # no such namespace
    invalid = status_of(
        core.create_namespaced_pod, "default", {"metadata": {"name": "Bad_Name"}, "spec": pod("x")["spec"]}
    )
    assert invalid.status == 422 and '"reason":"Invalid"' in invalid.body
    assert status_of(core.create_namespaced_pod, "default", {"metadata": {}, "spec": pod("x")["spec"]}).status == 422
    no_image = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert status_of(core.create_namespaced_pod, "default", no_image).status == 422
    mismatch = status_of(core.create_namespaced_config_map, "default", {"metadata": {"name": "x", "namespace": "o"}})
    assert mismatch.status == 400
    code, body = kube.raw("GET", "/apis/authentication.k8s.io/v1/tokenreviews")
    assert code == 405 and body["kind"] == "Status" and body["reason"] == "MethodNotAllowed"
    assert kube.raw("POST", "/api/v1/namespaces/default/pods/p", {})[0] == 405
    assert kube.raw("GET", "/api/v1/pods/p")[0] == 404  # a namespaced object needs its namespace
    assert kube.raw("POST", "/api/v1/namespaces/default/configmaps", headers={"Content-Type": "text/plain"})[0] == 400
    assert status_of(kube.custom.list_cluster_custom_object, "nosuch.k8s.io", "v1", "things").status == 404


def test_pod_binding_and_unserved_subresources(kube):
    core = kube.core
    core.create_namespaced_pod("default", pod("p"))
    # the real server answers a Status the client cannot read as a V1Binding (kubernetes-client/python#825)
    core.create_namespaced_pod_binding(
        "p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "local"}}, _preload_content=False
    )
    assert core.read_namespaced_pod("p", "default").spec.node_name == "local"
    assert status_of(core.patch_namespaced_pod, "p", "default", {"spec": {"nodeName": "other"}}).status == 422
    assert status_of(core.read_namespaced_pod_log, "p", "default").status == 400  # no kubelet attached yet


def test_delete_collection_and_dry_run(kube):
    core = kube.core
    for name, app in (("a", "db"), ("b", "db"), ("c", "web")):
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": {"app": app}}})
    core.delete_collection_namespaced_config_map("default", label_selector="app=db")
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == ["c"]

    dry = core.create_namespaced_config_map("default", {"metadata": {"name": "d"}}, dry_run="All")
    assert dry.metadata.name == "d" and dry.metadata.uid
    assert status_of(core.read_namespaced_config_map, "d", "default").status == 404
    core.patch_namespaced_config_map("c", "default", {"data": {"x": "1"}}, dry_run="All")
    assert core.read_namespaced_config_map("c", "default").data is None
    core.delete_namespaced_config_map("c", "default", dry_run="All")
    assert core.read_namespaced_config_map("c", "default").metadata.name == "c"


def test_pluggable_subresource_handlers(kube):
    from aiohttp import web

    async def log(request, call):
        pod = kube.api.store.get(call.rt, call.namespace, call.name)
        return web.Response(text=f"log of {pod['metadata']['name']} ({call.query.get('container')})\n")

    kube.api.add_subresource("pods", "log", log)
    kube.core.create_namespaced_pod("default", pod("p"))
    assert kube.core.read_namespaced_pod_log("p", "default", container="main") == "log of p (main)\n"


# ---- kubectl ------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get(kube, tmp_path):
    def kubectl(*args):
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(kube.kubeconfig), "--cache-dir", str(tmp_path / "c"), *args],
            capture_output=True,
            text=True,
            timeout=30,
        )

    out = kubectl("get", "ns")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:3] == ["NAME", "STATUS", "AGE"] and "kube-system" in out.stdout
    kube.custom.create_namespaced_custom_object(
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        {
            "apiVersion": f"{SNAP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "snap-1"},
            "spec": {"source": {"persistentVolumeClaimName": "d"}},
        },
    )
    out = kubectl("get", "vs", "-o", "name")
    assert out.returncode == 0 and out.stdout.strip() == "volumesnapshot.snapshot.storage.k8s.io/snap-1", out.stderr
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {k: v}\n")
    out = kubectl("apply", "-f", str(manifest))  # needs /openapi/v3 for server-side field validation
    assert out.returncode == 0, out.stderr
    assert kube.core.read_namespaced_config_map("applied", "default").data == {"k": "v"}
    bad = tmp_path / "vs.yaml"
    bad.write_text(f"apiVersion: {SNAP}/v1\nkind: VolumeSnapshot\nmetadata: {{name: bad}}\nspec: {{sourc: {{}}}}\n")
    if kube.api.validating:
        out = kubectl("create", "-f", str(bad))
        assert out.returncode != 0 and "invalid" in out.stderr
