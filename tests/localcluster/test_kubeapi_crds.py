"""CRD kinds on the Kubernetes API emulator: validation against the upstream schemas (strict
unknown fields, formats, enums, CEL rules), the served-versions setting, the group snapshot
content conversion between versions, extra CRDs, and the audit log."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi.crds import default_crd_dir
from localcluster.kubeapi.testing import serve

SNAP = "snapshot.storage.k8s.io"
VGS = "groupsnapshot.storage.k8s.io"
CBT = "cbt.storage.k8s.io"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
needs_crds = pytest.mark.skipif(not default_crd_dir().is_dir(), reason="../shared/reference/crds is absent")


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path) as k:
        yield k


def vs(name="s", **spec):
    return {
        "apiVersion": f"{SNAP}/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name},
        "spec": spec or {"source": {"persistentVolumeClaimName": "data"}},
    }


def sms(ca=CA, version="v1beta1"):
    return {
        "apiVersion": f"{CBT}/{version}",
        "kind": "SnapshotMetadataService",
        "metadata": {"name": "local.csi"},
        "spec": {"address": "sms.local:6443", "audience": "local-sms", "caCert": ca},
    }


def refused(call, *args, **kwargs) -> tuple[int, dict]:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value.status, json.loads(info.value.body)


@needs_crds
def test_schema_violations_are_422(kube):
    co = kube.custom
    assert kube.api.validating
    code, body = refused(
        co.create_namespaced_custom_object,
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        vs(sourcee={"persistentVolumeClaimName": "data"}),
    )
    assert code == 422 and body["reason"] == "Invalid"
    assert "spec.sourcee" in [c["field"] for c in body["details"]["causes"]]
    assert "field not declared in schema" in body["message"]

    code, body = refused(
        co.create_cluster_custom_object, CBT, "v1beta1", "snapshotmetadataservices", sms(ca="not base64!")
    )
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.caCert"
    assert co.create_cluster_custom_object(CBT, "v1beta1", "snapshotmetadataservices", sms())["spec"]["caCert"] == CA

    code, body = refused(
        co.create_cluster_custom_object,
        CBT,
        "v1beta1",
        "snapshotmetadataservices",
        {**sms(), "spec": {"address": "a:1", "caCert": CA}},
    )
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.audience"
    klass = {
        "apiVersion": f"{SNAP}/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": "c"},
        "driver": "local.csi",
        "deletionPolicy": "Sometimes",
    }
    assert refused(co.create_cluster_custom_object, SNAP, "v1", "volumesnapshotclasses", klass)[0] == 422
    klass["deletionPolicy"] = "Delete"
    co.create_cluster_custom_object(SNAP, "v1", "volumesnapshotclasses", klass)
    status = {"status": {"readyToUse": "yes"}}  # a string for a boolean, through the status subresource
    co.create_namespaced_custom_object(SNAP, "v1", "default", "volumesnapshots", vs())
    assert (
        refused(co.patch_namespaced_custom_object_status, SNAP, "v1", "default", "volumesnapshots", "s", status)[0]
        == 422
    )


@needs_crds
def test_cel_rules_one_source_and_immutability(kube):
    co = kube.custom
    code, body = refused(
        co.create_namespaced_custom_object,
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        vs(source={"persistentVolumeClaimName": "a", "volumeSnapshotContentName": "b"}),
    )
    assert code == 422 and "exactly one of" in body["message"]
    co.create_namespaced_custom_object(SNAP, "v1", "default", "volumesnapshots", vs())
    code, body = refused(
        co.patch_namespaced_custom_object,
        SNAP,
        "v1",
        "default",
        "volumesnapshots",
        "s",
        {"spec": {"source": {"persistentVolumeClaimName": "other"}}},
    )
    assert code == 422 and "immutable" in body["message"]
    group = {
        "apiVersion": f"{VGS}/v1",
        "kind": "VolumeGroupSnapshot",
        "metadata": {"name": "g"},
        "spec": {"source": {"selector": {"matchLabels": {"app": "db"}}}},
    }
    co.create_namespaced_custom_object(VGS, "v1", "default", "volumegroupsnapshots", group)
    code, _ = refused(
        co.patch_namespaced_custom_object,
        VGS,
        "v1",
        "default",
        "volumegroupsnapshots",
        "g",
        {"spec": {"source": {"selector": {"matchLabels": {"app": "web"}}}}},
    )
    assert code == 422


def test_without_crd_files_nothing_is_validated(tmp_path):
    with serve(tmp_path, crd_dir=tmp_path / "absent") as kube:
        assert not kube.api.validating
        out = kube.custom.create_namespaced_custom_object(
            SNAP, "v1", "default", "volumesnapshots", vs(sourcee={"x": 1})
        )
        assert out["spec"] == {"sourcee": {"x": 1}}


def test_older_cluster_serving_only_v1beta1_group_snapshots(tmp_path):
    with serve(tmp_path, group_snapshot_versions=("v1beta1",)) as kube:
        co = kube.custom
        group = {
            "apiVersion": f"{VGS}/v1beta1",
            "kind": "VolumeGroupSnapshot",
            "metadata": {"name": "g"},
            "spec": {"source": {"selector": {"matchLabels": {"app": "db"}}}},
        }
        co.create_namespaced_custom_object(VGS, "v1beta1", "default", "volumegroupsnapshots", group)
        with pytest.raises(ApiException) as info:
            co.get_namespaced_custom_object(VGS, "v1", "default", "volumegroupsnapshots", "g")
        assert info.value.status == 404
        with pytest.raises(ApiException) as info:
            co.list_cluster_custom_object(VGS, "v1beta2", "volumegroupsnapshotcontents")
        assert info.value.status == 404
        code, doc = kube.raw("GET", f"/apis/{VGS}")
        assert code == 200 and [v["version"] for v in doc["versions"]] == ["v1beta1"]
        assert doc["preferredVersion"]["version"] == "v1beta1"
        assert kube.raw("GET", f"/apis/{VGS}/v1")[0] == 404


def test_cluster_without_cbt_and_with_the_alpha_sms(tmp_path):
    with serve(tmp_path / "a", served_versions={CBT: ()}) as kube:
        assert CBT not in [g["name"] for g in kube.raw("GET", "/apis")[1]["groups"]]
        with pytest.raises(ApiException) as info:
            kube.custom.get_cluster_custom_object(CBT, "v1beta1", "snapshotmetadataservices", "local.csi")
        assert info.value.status == 404
    with serve(tmp_path / "b", served_versions={CBT: ("v1alpha1",)}) as kube:  # a v0.x sidecar's cluster
        kube.custom.create_cluster_custom_object(CBT, "v1alpha1", "snapshotmetadataservices", sms(version="v1alpha1"))
        got = kube.custom.get_cluster_custom_object(CBT, "v1alpha1", "snapshotmetadataservices", "local.csi")
        assert got["apiVersion"] == f"{CBT}/v1alpha1"
        with pytest.raises(ApiException):
            kube.custom.get_cluster_custom_object(CBT, "v1beta1", "snapshotmetadataservices", "local.csi")


def test_group_snapshot_content_converts_between_versions(kube):
    co = kube.custom
    content = {
        "apiVersion": f"{VGS}/v1",
        "kind": "VolumeGroupSnapshotContent",
        "metadata": {"name": "gc"},
        "spec": {
            "deletionPolicy": "Delete",
            "driver": "local.csi",
            "source": {"volumeHandles": ["v1", "v2"]},
            "volumeGroupSnapshotRef": {"name": "g", "namespace": "default"},
        },
    }
    co.create_cluster_custom_object(VGS, "v1", "volumegroupsnapshotcontents", content)
    infos = [
        {"volumeHandle": "v1", "snapshotHandle": "s1", "readyToUse": True, "restoreSize": 4096},
        {"volumeHandle": "v2", "snapshotHandle": "s2", "readyToUse": True, "restoreSize": 8192},
    ]
    co.patch_cluster_custom_object_status(
        VGS,
        "v1",
        "volumegroupsnapshotcontents",
        "gc",
        {"status": {"readyToUse": True, "volumeSnapshotInfoList": infos}},
    )
    old = co.get_cluster_custom_object(VGS, "v1beta1", "volumegroupsnapshotcontents", "gc")
    assert old["apiVersion"] == f"{VGS}/v1beta1" and "volumeSnapshotInfoList" not in old["status"]
    assert old["status"]["volumeSnapshotHandlePairList"] == [
        {"volumeHandle": "v1", "snapshotHandle": "s1"},
        {"volumeHandle": "v2", "snapshotHandle": "s2"},
    ]
    assert (
        co.get_cluster_custom_object(VGS, "v1beta2", "volumegroupsnapshotcontents", "gc")["status"][
            "volumeSnapshotInfoList"
        ]
        == infos
    )
    # a v1beta1 writer (an old controller) is read back by v1 clients as an info list
    old["status"]["volumeSnapshotHandlePairList"] = [{"volumeHandle": "v1", "snapshotHandle": "s9"}]
    co.replace_cluster_custom_object_status(VGS, "v1beta1", "volumegroupsnapshotcontents", "gc", old)
    new = co.get_cluster_custom_object(VGS, "v1", "volumegroupsnapshotcontents", "gc")
    assert new["status"]["volumeSnapshotInfoList"] == [{"volumeHandle": "v1", "snapshotHandle": "s9"}]


def test_extra_crds_are_served_and_validated(tmp_path):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                                "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                            },
                        }
                    },
                }
            ],
        },
    }
    with serve(tmp_path, extra_crds=[crd]) as kube:
        body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}}
        kube.custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
        body["metadata"]["name"], body["spec"]["size"] = "bad", "three"
        with pytest.raises(ApiException) as info:
            kube.custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
        assert info.value.status == 422
        resources = {r["name"] for r in kube.raw("GET", "/apis/example.com/v1")[1]["resources"]}
        assert resources == {"widgets", "widgets/status"}


def test_audit_log_records_every_request(tmp_path):
    log = tmp_path / "audit.jsonl"
    with serve(tmp_path, audit_log=log) as kube:
        kube.core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
        kube.core.read_namespaced_config_map("cm", "default")
        kube.core.list_namespaced_config_map("default", label_selector="a=b")
        kube.core.patch_namespaced_config_map("cm", "default", {"data": {"k": "w"}})
        with pytest.raises(ApiException):
            kube.core.read_namespaced_config_map("missing", "default")
        kube.core.delete_namespaced_config_map("cm", "default")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["verb"], e["method"], e["code"]) for e in lines] == [
        ("create", "POST", 201),
        ("get", "GET", 200),
        ("list", "GET", 200),
        ("patch", "PATCH", 200),
        ("get", "GET", 404),
        ("delete", "DELETE", 200),
    ]
    assert lines[0]["path"] == "/api/v1/namespaces/default/configmaps"
    assert lines[0]["body"]["data"] == {"k": "v"} and lines[0]["user"] == "kubernetes-admin"
    assert lines[2]["query"] == {"labelSelector": "a=b"} and lines[3]["body"] == {"data": {"k": "w"}}
