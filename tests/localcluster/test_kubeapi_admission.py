"""Admission in the Kubernetes API emulator, through the real ``kubernetes`` client: quantities parsed
and written back as the API server does, the 422 Status bodies of ``NewInvalid``, ObjectMeta rules
for every kind (CRDs included), NamespaceLifecycle, and the built-in kinds' create and update
validation (PVC, PV, Pod, Secret, ConfigMap, StorageClass, Event, Node)."""

from __future__ import annotations

import json
import re

import pytest
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi import quantity
from localcluster.kubeapi.testing import serve

SNAP = "snapshot.storage.k8s.io"
QUANTITY_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path) as k:
        yield k


def refused(call, *args, **kwargs) -> tuple[int, dict]:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value.status, json.loads(info.value.body)


def causes(body: dict) -> list[tuple[str, str]]:
    return [(c["reason"], c.get("field", "")) for c in body["details"]["causes"]]


def pvc(name="data", size="1Gi", **spec):
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec},
    }


def pv(name="pv1", **spec):
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "disk.csi.local", "volumeHandle": "h1"},
            **spec,
        },
    }


def pod(name="p", containers=None, **spec):
    containers = containers or [{"name": "main", "image": "mover"}]
    return {"metadata": {"name": name}, "spec": {"containers": containers, **spec}}


# ---- quantities -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, written",
    [
        ("1073741824", "1073741824"),
        ("1024Mi", "1Gi"),
        ("0.5Gi", "512Mi"),
        ("1000M", "1G"),
        ("1Gi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("1.5", "1500m"),
        ("0.1", "100m"),
        ("1000", "1k"),
        ("2048Ki", "2Mi"),
        ("1e3", "1e3"),
        ("1.5Ki", "1536"),
        ("0.5n", "1n"),
        ("8Ei", "9223372036854775807"),
        ("+1Gi", "+1Gi"),
        ("1.000G", "1G"),
    ],
)
def test_quantity_canonical_form(given, written):
    assert str(quantity.parse(given)) == written


@pytest.mark.parametrize(
    "text, message",
    [
        ("None", QUANTITY_ERROR),
        ("", QUANTITY_ERROR),
        ("1GB", QUANTITY_ERROR),
        ("1 Gi", QUANTITY_ERROR),
        ("1K", "unable to parse quantity's suffix"),
        ("1e", "unable to parse quantity's suffix"),
    ],
)
def test_quantity_errors(text, message):
    with pytest.raises(quantity.QuantityError, match="^" + re.escape(message) + "$"):
        quantity.parse(text)


def test_quantities_are_stored_and_returned_canonical(kube):
    core = kube.core
    code, _ = kube.raw("POST", "/api/v1/namespaces/default/persistentvolumeclaims", pvc("bytes", 1073741824))
    assert code == 201  # a JSON number is a quantity too
    core.create_namespaced_persistent_volume_claim("default", pvc("mebi", "1024Mi"))
    core.create_namespaced_persistent_volume_claim("default", pvc("half", "0.5Gi"))
    sizes = {
        c.metadata.name: c.spec.resources.requests["storage"]
        for c in core.list_namespaced_persistent_volume_claim("default").items
    }
    assert sizes == {"bytes": "1073741824", "mebi": "1Gi", "half": "512Mi"}
    assert kube.raw("GET", "/api/v1/namespaces/default/persistentvolumeclaims/mebi")[1]["spec"]["resources"] == {
        "requests": {"storage": "1Gi"}
    }
    core.create_persistent_volume(pv(capacity={"storage": "1000M"}))
    assert core.read_persistent_volume("pv1").spec.capacity == {"storage": "1G"}
    limits = {"cpu": "0.5", "memory": "1024Mi"}
    created = core.create_namespaced_pod(
        "default", pod(containers=[{"name": "m", "image": "i", "resources": {"limits": limits}}])
    )
    resources = created.spec.containers[0].resources
    assert resources.limits == {"cpu": "500m", "memory": "1Gi"} and resources.requests == resources.limits
    assert created.status.qos_class == "Guaranteed"
    status = {"status": {"capacity": {"storage": "2048Mi"}, "phase": "Bound"}}
    patched = core.patch_namespaced_persistent_volume_claim_status("mebi", "default", status)
    assert patched.status.capacity == {"storage": "2Gi"}


def test_an_unparsable_size_is_refused_as_the_api_server_does(kube):
    core = kube.core
    for size in ("None", ""):
        code, body = refused(core.create_namespaced_persistent_volume_claim, "default", pvc(size=size))
        assert code == 400 and body["reason"] == "BadRequest"
        assert body["message"] == (
            f'PersistentVolumeClaim in version "v1" cannot be handled as a PersistentVolumeClaim: {QUANTITY_ERROR}'
        )
    core.create_namespaced_persistent_volume_claim("default", pvc())
    code, body = refused(
        core.patch_namespaced_persistent_volume_claim,
        "data",
        "default",
        {"spec": {"resources": {"requests": {"storage": "None"}}}},
    )
    assert code == 422 and body["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "patch", "message": body["details"]["causes"][0]["message"]}
    ]
    assert body["message"].startswith(' "" is invalid: patch: Invalid value: "') and QUANTITY_ERROR in body["message"]
    code, body = refused(
        core.create_namespaced_pod,
        "default",
        pod(containers=[{"name": "m", "image": "i", "resources": {"requests": {"memory": "lots"}}}]),
    )
    assert code == 400 and body["message"].endswith(QUANTITY_ERROR)
    assert core.read_namespaced_persistent_volume_claim("data", "default").spec.resources.requests == {"storage": "1Gi"}


# ---- the 422 body ---------------------------------------------------------------------------------


def test_invalid_status_body_is_new_invalid(kube):
    code, body = refused(
        kube.core.create_namespaced_persistent_volume_claim,
        "default",
        {"metadata": {"name": "Data_1"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
    )
    assert code == 422 and body["reason"] == "Invalid" and body["status"] == "Failure" and body["code"] == 422
    assert body["details"]["name"] == "Data_1" and body["details"]["kind"] == "PersistentVolumeClaim"
    assert body["details"]["group"] == ""
    name_error = (
        'metadata.name: Invalid value: "Data_1": a lowercase RFC 1123 subdomain must consist of lower case'
        " alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g."
        " 'example.com', regex used for validation is"
        " '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )
    assert body["message"] == (
        f'PersistentVolumeClaim "Data_1" is invalid: [{name_error}, spec.accessModes: Required'
        " value: at least 1 access mode is required]"
    )
    assert causes(body) == [("FieldValueInvalid", "metadata.name"), ("FieldValueRequired", "spec.accessModes")]
    assert body["details"]["causes"][1]["message"] == "Required value: at least 1 access mode is required"

    code, body = refused(kube.core.create_namespaced_persistent_volume_claim, "default", pvc(volumeMode="Raw"))
    assert body["message"] == (
        'PersistentVolumeClaim "data" is invalid: spec.volumeMode: Unsupported value: "Raw":'
        ' supported values: "Block", "Filesystem"'
    )
    assert causes(body) == [("FieldValueNotSupported", "spec.volumeMode")]


# ---- ObjectMeta, for every kind -----------------------------------------------------------------


def test_names_labels_and_annotations(kube):
    core = kube.core
    code, body = refused(core.create_namespaced_config_map, "default", {"metadata": {}})
    assert body["message"] == 'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required'
    assert (
        core.create_namespaced_config_map("default", {"metadata": {"generateName": "cfg-"}}).metadata.name[:4] == "cfg-"
    )
    code, body = refused(core.create_namespace, {"metadata": {"name": "a.b"}})
    assert body["message"] == 'Namespace "a.b" is invalid: metadata.name: Invalid value: "a.b": must not contain dots'
    code, body = refused(core.create_namespaced_service, "default", {"metadata": {"name": "1svc"}, "spec": {}})
    assert "a DNS-1035 label must consist of lower case alphanumeric characters" in body["message"]

    labels = {"app.kubernetes.io/name": "x" * 64, "bad key!": "v", "ok": "-dash"}
    code, body = refused(core.create_namespaced_config_map, "default", {"metadata": {"name": "c", "labels": labels}})
    assert code == 422 and [c["field"] for c in body["details"]["causes"]] == ["metadata.labels"] * 3
    messages = [c["message"] for c in body["details"]["causes"]]
    assert messages[0].startswith(f'Invalid value: "{"x" * 64}": must be no more than 63 bytes')
    assert messages[1].startswith('Invalid value: "bad key!": name part must consist of alphanumeric characters')
    assert messages[2].startswith('Invalid value: "-dash": a valid label must be an empty string or consist of')

    big = {"a": "x" * (256 * 1024)}
    code, body = refused(core.create_namespaced_secret, "default", {"metadata": {"name": "s", "annotations": big}})
    assert body["message"] == 'Secret "s" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'
    assert causes(body) == [("FieldValueTooLong", "metadata.annotations")]
    code, body = refused(
        core.create_namespaced_secret, "default", {"metadata": {"name": "s", "annotations": {"a/b/c": "v"}}}
    )
    assert causes(body) == [("FieldValueInvalid", "metadata.annotations")]


def test_object_meta_rules_apply_to_custom_resources(kube):
    vs = {
        "apiVersion": f"{SNAP}/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "Snap", "labels": {"k": "v v"}},
        "spec": {"source": {"persistentVolumeClaimName": "data"}},
    }
    code, body = refused(kube.custom.create_namespaced_custom_object, SNAP, "v1", "default", "volumesnapshots", vs)
    assert code == 422 and body["details"]["kind"] == "VolumeSnapshot" and body["details"]["group"] == SNAP
    assert body["message"].startswith(f'VolumeSnapshot.{SNAP} "Snap" is invalid: [metadata.name: Invalid value:')
    assert causes(body) == [("FieldValueInvalid", "metadata.name"), ("FieldValueInvalid", "metadata.labels")]


def test_namespace_lifecycle(kube):
    core = kube.core
    code, body = refused(core.create_namespaced_config_map, "nowhere", {"metadata": {"name": "c"}})
    assert code == 404 and body["message"] == 'namespaces "nowhere" not found'
    assert body["details"] == {"name": "nowhere", "group": "", "kind": "namespaces"}
    core.create_namespace({"metadata": {"name": "gone"}})
    core.create_namespaced_config_map("gone", {"metadata": {"name": "keep", "finalizers": ["example.com/hold"]}})
    core.delete_namespace("gone")
    code, body = refused(core.create_namespaced_config_map, "gone", {"metadata": {"name": "c"}})
    assert code == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'configmaps "c" is forbidden: unable to create new content in namespace gone because it is being terminated'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": "namespace gone is being terminated",
            "field": "metadata.namespace",
        }
    ]


def test_metadata_updates(kube):
    core = kube.core
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    code, body = refused(core.patch_namespaced_config_map, "c", "default", {"metadata": {"uid": "other"}})
    assert (
        code == 422
        and body["message"] == 'ConfigMap "c" is invalid: metadata.uid: Invalid value: "other": field is immutable'
    )
    cm.metadata.uid = "other"
    code, body = refused(core.replace_namespaced_config_map, "c", "default", cm)
    assert code == 409 and "Precondition failed: UID in precondition: other" in body["message"]
    code, body = refused(core.patch_namespaced_config_map, "c", "default", {"metadata": {"finalizers": ["hold"]}})
    assert set(causes(body)) == {("FieldValueInvalid", "metadata.finalizers[0]")}
    assert "name is neither a standard finalizer name nor is it fully qualified" in body["message"]


# ---- PersistentVolumeClaim ------------------------------------------------------------------------


def test_claim_spec(kube):
    core = kube.core
    code, body = refused(
        core.create_namespaced_persistent_volume_claim,
        "default",
        pvc(accessModes=["ReadWriteOnce", "ReadWriteOncePod", "Sometimes"], size="0"),
    )
    assert causes(body) == [
        ("FieldValueNotSupported", "spec.accessModes"),
        ("FieldValueForbidden", "spec.accessModes"),
        ("FieldValueInvalid", "spec.resources[storage]"),
    ]
    assert 'spec.resources[storage]: Invalid value: "0": must be greater than zero' in body["message"]
    code, body = refused(
        core.create_namespaced_persistent_volume_claim,
        "default",
        {"metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"]}},
    )
    assert body["message"] == 'PersistentVolumeClaim "d" is invalid: spec.resources[storage]: Required value'
    snap = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "s1"}
    code, body = refused(
        core.create_namespaced_persistent_volume_claim,
        "default",
        pvc(dataSource=snap, dataSourceRef={**snap, "name": "s2"}),
    )
    assert causes(body) == [("FieldValueInvalid", "spec")] and "must match dataSourceRef" in body["message"]
    code, body = refused(
        core.create_namespaced_persistent_volume_claim,
        "default",
        pvc(dataSource={"kind": "VolumeSnapshot", "name": "s"}),
    )
    assert "must be 'PersistentVolumeClaim' when referencing the default apiGroup" in body["message"]
    created = core.create_namespaced_persistent_volume_claim("default", pvc(dataSource=snap, storageClassName="fast"))
    ref = created.spec.data_source_ref
    assert (ref.api_group, ref.kind, ref.name) == (SNAP, "VolumeSnapshot", "s1")
    assert created.spec.volume_mode == "Filesystem"


def test_claim_updates(kube):
    core = kube.core
    core.create_namespaced_persistent_volume_claim("default", pvc(storageClassName="fast"))
    code, body = refused(
        core.patch_namespaced_persistent_volume_claim,
        "data",
        "default",
        {"spec": {"resources": {"requests": {"storage": "2Gi"}}}},
    )
    assert code == 422 and causes(body) == [("FieldValueForbidden", "spec")]
    assert body["message"].startswith(
        'PersistentVolumeClaim "data" is invalid: spec: Forbidden: spec is immutable'
        " after creation except resources.requests and volumeAttributesClassName for"
        " bound claims\n"
    )
    core.patch_namespaced_persistent_volume_claim("data", "default", {"spec": {"volumeName": "pv1"}})  # binding, once
    core.patch_namespaced_persistent_volume_claim_status(
        "data", "default", {"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}
    )
    grown = core.patch_namespaced_persistent_volume_claim(
        "data", "default", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    )
    assert grown.spec.resources.requests == {"storage": "2Gi"}
    code, body = refused(
        core.patch_namespaced_persistent_volume_claim,
        "data",
        "default",
        {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
    )
    assert causes(body) == [("FieldValueForbidden", "spec.resources.requests.storage")]
    for change in ({"storageClassName": "slow"}, {"volumeName": "pv2"}, {"accessModes": ["ReadWriteMany"]}):
        assert causes(
            refused(core.patch_namespaced_persistent_volume_claim, "data", "default", {"spec": change})[1]
        ) == [("FieldValueForbidden", "spec")]
    code, body = refused(
        core.patch_namespaced_persistent_volume_claim, "data", "default", {"spec": {"volumeMode": "Block"}}
    )
    assert ("FieldValueInvalid", "volumeMode") in causes(body)


# ---- PersistentVolume -----------------------------------------------------------------------------


def test_volume_spec(kube):
    core = kube.core
    code, body = refused(core.create_persistent_volume, {"metadata": {"name": "pv1"}, "spec": {"accessModes": ["X"]}})
    assert causes(body) == [
        ("FieldValueNotSupported", "spec.accessModes"),
        ("FieldValueRequired", "spec.capacity"),
        ("FieldValueNotSupported", "spec.capacity"),
        ("FieldValueRequired", "spec"),
    ]
    assert "spec: Required value: must specify a volume type" in body["message"]
    code, body = refused(
        core.create_persistent_volume,
        pv(csi={"driver": "", "volumeHandle": ""}, hostPath={"path": "/x"}, persistentVolumeReclaimPolicy="Keep"),
    )
    assert causes(body) == [
        ("FieldValueNotSupported", "spec.persistentVolumeReclaimPolicy"),
        ("FieldValueForbidden", "spec.csi"),
    ]
    code, body = refused(core.create_persistent_volume, pv(csi={"driver": "Bad_Driver!", "volumeHandle": ""}))
    assert causes(body) == [("FieldValueInvalid", "spec.csi.driver"), ("FieldValueRequired", "spec.csi.volumeHandle")]
    affinity = {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "Near", "values": ["a"]},
                        {"key": "kubernetes.io/hostname", "operator": "Exists", "values": ["n"]},
                    ]
                }
            ]
        }
    }
    code, body = refused(core.create_persistent_volume, pv(nodeAffinity=affinity))
    assert causes(body) == [
        ("FieldValueInvalid", "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator"),
        ("FieldValueForbidden", "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[1].values"),
    ]
    code, body = refused(core.create_persistent_volume, pv(nodeAffinity={"required": {"nodeSelectorTerms": []}}))
    assert "must have at least one node selector term" in body["message"]


def test_volume_updates(kube):
    core = kube.core
    zone = {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "failure-domain.beta.kubernetes.io/zone", "operator": "In", "values": ["a"]}
                    ]
                }
            ]
        }
    }
    core.create_persistent_volume(pv(nodeAffinity=zone))
    code, body = refused(core.patch_persistent_volume, "pv1", {"spec": {"csi": {"volumeHandle": "h2"}}})
    assert causes(body) == [("FieldValueForbidden", "spec.persistentvolumesource")]
    assert "spec.persistentvolumesource is immutable after creation" in body["message"]
    code, body = refused(core.patch_persistent_volume, "pv1", {"spec": {"volumeMode": "Block"}})
    assert causes(body) == [("FieldValueInvalid", "volumeMode")]
    ga = json.loads(json.dumps(zone).replace("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"))
    assert core.patch_persistent_volume("pv1", {"spec": {"nodeAffinity": ga}}).spec.node_affinity is not None
    ga["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["b"]
    code, body = refused(core.patch_persistent_volume, "pv1", {"spec": {"nodeAffinity": ga}})
    assert causes(body) == [("FieldValueInvalid", "nodeAffinity")]
    updated = core.patch_persistent_volume(
        "pv1",
        {"spec": {"persistentVolumeReclaimPolicy": "Delete", "claimRef": {"name": "data", "namespace": "default"}}},
    )
    assert updated.spec.persistent_volume_reclaim_policy == "Delete"


# ---- Pod ------------------------------------------------------------------------------------------


def test_pod_spec(kube):
    core = kube.core
    code, body = kube.raw("POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "p"}, "spec": {}})
    assert code == 422 and body["message"] == 'Pod "p" is invalid: spec.containers: Required value'
    containers = [{"name": "Main", "image": ""}, {"name": "side", "image": "i"}]
    init = [{"name": "side", "image": "i"}]
    code, body = refused(
        core.create_namespaced_pod,
        "default",
        pod(containers=containers, initContainers=init, restartPolicy="Sometimes"),
    )
    assert causes(body) == [
        ("FieldValueInvalid", "spec.containers[0].name"),
        ("FieldValueRequired", "spec.containers[0].image"),
        ("FieldValueDuplicate", "spec.initContainers[0].name"),
        ("FieldValueNotSupported", "spec.restartPolicy"),
    ]
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "data", "emptyDir": {}},
        {"name": "scratch", "emptyDir": {}, "hostPath": {"path": "/tmp"}},
        {"name": "conf", "configMap": {"name": "c"}},
    ]
    main = {
        "name": "m",
        "image": "i",
        "volumeMounts": [{"name": "nope", "mountPath": "/a"}, {"name": "data", "mountPath": "/dev/xvda"}],
        "volumeDevices": [{"name": "conf", "devicePath": "/dev/xvda"}],
    }
    code, body = refused(core.create_namespaced_pod, "default", pod(containers=[main], volumes=volumes))
    assert causes(body) == [
        ("FieldValueDuplicate", "spec.volumes[1].name"),
        ("FieldValueForbidden", "spec.volumes[2].hostPath"),
        ("FieldValueNotFound", "spec.containers[0].volumeMounts[0].name"),
        ("FieldValueInvalid", "spec.containers[0].volumeMounts[1].mountPath"),
        ("FieldValueInvalid", "spec.containers[0].volumeDevices[0].name"),
        ("FieldValueInvalid", "spec.containers[0].volumeDevices[0].devicePath"),
    ]
    assert "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode" in body["message"]


def test_pod_scheduling_fields(kube):
    tolerations = [
        {"key": "node.kubernetes.io/os", "operator": "Exists", "value": "windows"},
        {"operator": "Equal", "value": "x"},
        {"key": "k", "effect": "Sometimes"},
        {"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]}]
            }
        }
    }
    code, body = refused(
        kube.core.create_namespaced_pod,
        "default",
        pod(
            tolerations=tolerations,
            affinity=affinity,
            nodeSelector={"kubernetes.io/os": "lin ux"},
            activeDeadlineSeconds=0,
        ),
    )
    assert causes(body) == [
        ("FieldValueInvalid", "spec.nodeSelector"),
        (
            "FieldValueRequired",
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].values",
        ),
        ("FieldValueInvalid", "spec.activeDeadlineSeconds"),
        ("FieldValueInvalid", "spec.tolerations[0].operator"),
        ("FieldValueInvalid", "spec.tolerations[1].operator"),
        ("FieldValueNotSupported", "spec.tolerations[2].effect"),
        ("FieldValueInvalid", "spec.tolerations[3].effect"),
    ]
    assert (
        "spec.tolerations[0].operator: Invalid value: \"windows\": value must be empty when `operator` is 'Exists'"
    ) in body["message"]


def test_a_pod_naming_a_missing_service_account_is_refused_before_validation(kube):
    """The ServiceAccount admission plugin (a mutating one) runs before the object is validated."""
    code, body = refused(kube.core.create_namespaced_pod, "default", pod(serviceAccountName="Mover"))
    assert code == 403 and "error looking up service account default/Mover" in body["message"], body


def test_pod_resources(kube):
    container = {
        "name": "m",
        "image": "i",
        "resources": {"requests": {"cpu": "2", "memory": "-1"}, "limits": {"cpu": "1", "gpus": "1"}},
    }
    code, body = refused(kube.core.create_namespaced_pod, "default", pod(containers=[container]))
    limits, requests = "spec.containers[0].resources.limits", "spec.containers[0].resources.requests"
    assert causes(body) == [
        ("FieldValueInvalid", f"{limits}[gpus]"),
        ("FieldValueInvalid", f"{limits}[gpus]"),
        ("FieldValueInvalid", requests),
        ("FieldValueInvalid", f"{requests}[memory]"),
        ("FieldValueInvalid", f"{requests}[gpus]"),
        ("FieldValueInvalid", f"{requests}[gpus]"),
    ]
    assert f'{limits}[gpus]: Invalid value: "gpus": must be a standard resource for containers' in body["message"]
    assert (
        'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1'
        in body["message"]
    )
    assert 'resources.requests[memory]: Invalid value: "-1": must be greater than or equal to 0' in body["message"]


def test_pod_updates(kube):
    core = kube.core
    core.create_namespaced_pod(
        "default", pod(tolerations=[{"key": "a", "operator": "Exists"}], activeDeadlineSeconds=600)
    )
    code, body = refused(core.patch_namespaced_pod, "p", "default", {"spec": {"nodeSelector": {"zone": "a"}}})
    assert code == 422 and causes(body) == [("FieldValueForbidden", "spec")]
    assert body["message"].startswith(
        'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,'
        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing"
        " tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously"
        " negative)\n"
    )
    allowed = {
        "spec": {
            "containers": [{"name": "main", "image": "mover:2"}],
            "activeDeadlineSeconds": 60,
            "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
        }
    }
    updated = core.patch_namespaced_pod("p", "default", allowed)
    assert updated.spec.containers[0].image == "mover:2" and len(updated.spec.tolerations) == 2
    code, body = refused(core.patch_namespaced_pod, "p", "default", {"spec": {"activeDeadlineSeconds": 120}})
    assert causes(body) == [("FieldValueInvalid", "spec.activeDeadlineSeconds")]
    code, body = refused(
        core.replace_namespaced_pod,
        "p",
        "default",
        pod(tolerations=[{"key": "b", "operator": "Exists"}], activeDeadlineSeconds=60),
    )
    assert ("FieldValueForbidden", "spec.tolerations") in causes(body)


def test_pod_status_updates(kube):
    core = kube.core
    core.create_namespaced_pod("default", pod(restartPolicy="Never"))
    code, body = refused(
        core.create_namespaced_pod_binding,
        "p",
        "default",
        {"metadata": {"name": "p"}, "target": {"kind": "Pod", "name": "n1"}},
    )
    assert code == 422 and causes(body) == [("FieldValueNotSupported", "target.kind")]
    done = {
        "name": "main",
        "state": {"terminated": {"exitCode": 0}},
        "ready": False,
        "restartCount": 0,
        "image": "mover",
        "imageID": "",
    }
    status = {
        "status": {
            "phase": "Succeeded",
            "qosClass": "BestEffort",
            "containerStatuses": [done],
            "hostIP": "10.0.0.1",
            "hostIPs": [{"ip": "10.0.0.1"}],
        }
    }
    assert core.patch_namespaced_pod_status("p", "default", status).status.phase == "Succeeded"
    current = kube.raw("GET", "/api/v1/namespaces/default/pods/p")[1]  # a PUT: the statuses are replaced
    current["status"].update(qosClass="Guaranteed", hostIP="10.0.0.2")
    current["status"]["containerStatuses"][0]["state"] = {"running": {}}
    code, body = kube.raw("PUT", "/api/v1/namespaces/default/pods/p/status", current)
    assert code == 422 and causes(body) == [
        ("FieldValueInvalid", "status.qosClass"),
        ("FieldValueForbidden", "status.containerStatuses[0].state"),
        ("FieldValueInvalid", "status.hostIPs[0].ip"),
    ]


# ---- Secret, ConfigMap, StorageClass, Event, Node -------------------------------------------------


def test_secrets_and_config_maps(kube):
    core = kube.core
    code, body = refused(
        core.create_namespaced_secret, "default", {"metadata": {"name": "s"}, "data": {"a b": "dg==", "..x": "dg=="}}
    )
    assert causes(body) == [("FieldValueInvalid", "data[..x]"), ("FieldValueInvalid", "data[a b]")]
    assert "data[..x]: Invalid value: \"..x\": must not start with '..'" in body["message"]
    code, body = kube.raw(
        "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "c", "labels": {"n": 1}}}
    )
    assert code == 400 and body["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot'
        " unmarshal number into Go struct field ObjectMeta.metadata.labels of"
        " type string"
    )
    code, body = refused(core.create_namespaced_secret, "default", {"metadata": {"name": "s"}, "data": {"k": "%%%"}})
    assert code == 400 and body["message"].startswith(
        'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte'
    )
    code, body = refused(
        core.create_namespaced_config_map,
        "default",
        {"metadata": {"name": "c"}, "data": {"k": "x" * (1024 * 1024 + 1)}},
    )
    assert body["message"] == 'ConfigMap "c" is invalid: : Too long: may not be more than 1048576 bytes'
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}, "immutable": True})
    code, body = refused(core.patch_namespaced_secret, "s", "default", {"type": "kubernetes.io/tls"})
    assert ("FieldValueInvalid", "type") in causes(body)
    code, body = refused(core.patch_namespaced_secret, "s", "default", {"stringData": {"k": "w"}})
    assert causes(body) == [("FieldValueForbidden", "data")]


def test_storage_classes(kube):
    storage = kube.storage
    code, body = refused(
        storage.create_storage_class,
        {"metadata": {"name": "sc"}, "provisioner": "", "volumeBindingMode": "Later", "reclaimPolicy": "Recycle"},
    )
    assert causes(body) == [
        ("FieldValueRequired", "provisioner"),
        ("FieldValueNotSupported", "reclaimPolicy"),
        ("FieldValueNotSupported", "volumeBindingMode"),
    ]
    created = storage.create_storage_class(
        {
            "metadata": {"name": "sc"},
            "provisioner": "disk.csi.local",
            "parameters": {"csi.storage.k8s.io/fstype": "xfs"},
        }
    )
    assert created.reclaim_policy == "Delete" and created.volume_binding_mode == "Immediate"
    change = {
        "parameters": {"csi.storage.k8s.io/fstype": "ext4"},
        "provisioner": "other.csi",
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    code, body = refused(storage.patch_storage_class, "sc", change)
    assert causes(body) == [
        ("FieldValueForbidden", "parameters"),
        ("FieldValueForbidden", "provisioner"),
        ("FieldValueForbidden", "reclaimPolicy"),
        ("FieldValueInvalid", "volumeBindingMode"),
    ]
    assert storage.patch_storage_class("sc", {"metadata": {"labels": {"tier": "fast"}}}).metadata.labels


def test_events_and_nodes(kube):
    core = kube.core
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"},
        "reason": "Started",
    }
    code, body = refused(core.create_namespaced_event, "default", event)
    assert body["message"] == (
        'Event "e" is invalid: involvedObject.namespace: Invalid value: "other": does not match event.namespace'
    )
    node = {
        "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "os", "value": "windows", "effect": "Never"}]},
        "status": {"capacity": {"pods": "110.5", "cpu": "2"}},
    }
    code, body = refused(core.create_node, node)
    assert causes(body) == [
        ("FieldValueNotSupported", "metadata.taints[0].effect"),
        ("FieldValueInvalid", "status.capacity.pods"),
    ]
    node["spec"]["taints"][0]["effect"] = "NoSchedule"
    node["status"]["capacity"]["pods"] = "110"
    assert core.create_node(node).status.capacity == {"pods": "110", "cpu": "2"}


def test_event_timestamps_and_counts_decode_as_upstream(kube):
    """``metav1.Time`` is RFC 3339 (a naive timestamp is refused), ``metav1.MicroTime`` RFC 3339 with exactly six
    fractional digits, ``count`` an int32: anything else is the decoder's 400, as kube-apiserver answers."""
    involved = {"kind": "PersistentVolumeClaim", "name": "db", "namespace": "default"}

    def event(**fields):
        return {"metadata": {"name": "db.1"}, "involvedObject": involved, "reason": "BackedUp", **fields}

    prefix = 'Event in version "v1" cannot be handled as a Event: '
    for fields, message in (
        (
            {"firstTimestamp": "yesterday"},
            'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"',
        ),
        (
            {"lastTimestamp": "2026-01-01T00:00:00"},  # datetime.isoformat() of a naive datetime
            'parsing time "2026-01-01T00:00:00" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"',
        ),
        (
            {"firstTimestamp": "2026-01-01 00:00:00Z"},
            'parsing time "2026-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 00:00:00Z" as "T"',
        ),
        ({"firstTimestamp": "2026-13-01T00:00:00Z"}, 'parsing time "2026-13-01T00:00:00Z": month out of range'),
        ({"firstTimestamp": "2026-02-30T00:00:00Z"}, 'parsing time "2026-02-30T00:00:00Z": day out of range'),
        ({"firstTimestamp": "2026-01-01T00:00:00Zs"}, 'parsing time "2026-01-01T00:00:00Zs": extra text: "s"'),
        (
            {"eventTime": "2026-01-01T00:00:00Z"},  # datetime.isoformat() drops a zero microsecond
            'parsing time "2026-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"',
        ),
        ({"firstTimestamp": 1767225600}, "json: cannot unmarshal number into Go value of type string"),
        ({"count": "1"}, "json: cannot unmarshal string into Go struct field Event.count of type int32"),
        ({"count": 2**31}, "json: cannot unmarshal number 2147483648 into Go struct field Event.count of type int32"),
        (
            {"series": {"count": 1.5, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}},
            "json: cannot unmarshal number 1.5 into Go struct field EventSeries.series.count of type int32",
        ),
    ):
        code, body = kube.raw("POST", "/api/v1/namespaces/default/events", event(**fields))
        assert (code, body["message"]) == (400, prefix + message), fields

    for stamp in ("2026-01-01T00:00:00Z", "2026-01-01T01:30:00.123+01:30", "2026-01-01T00:00:00.123456789-00:00"):
        code, body = kube.raw("POST", "/api/v1/namespaces/default/events", event(firstTimestamp=stamp))
        assert code == 201, (stamp, body)
        kube.core.delete_namespaced_event("db.1", "default")


def test_a_new_style_event_needs_what_upstream_s_legacy_validation_asks(kube):
    """With ``eventTime`` set, core/v1 validation asks for the reporting controller and instance, an action, a
    reason of at most 128 characters and a note of at most 1024."""
    body = {
        "metadata": {"name": "db.1"},
        "involvedObject": {"kind": "PersistentVolumeClaim", "name": "db", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reason": "R" * 129,
        "message": "m" * 1025,
    }
    code, refusal = kube.raw("POST", "/api/v1/namespaces/default/events", body)
    assert code == 422 and causes(refusal) == [
        ("FieldValueRequired", "reportingController"),
        ("FieldValueInvalid", "reportingController"),  # IsQualifiedName(""): empty, and not matching
        ("FieldValueInvalid", "reportingController"),
        ("FieldValueRequired", "reportingInstance"),
        ("FieldValueRequired", "action"),
        ("FieldValueInvalid", "reason"),
        ("FieldValueInvalid", "message"),
    ]
    body |= {"reportingComponent": "cbt-mover", "reportingInstance": "pod-1", "action": "Backup", "reason": "BackedUp"}
    body["message"] = "m" * 1024
    # the Python client sends a whole second as datetime.isoformat() does, without the six digits: refused
    code, refusal = refused(kube.core.create_namespaced_event, "default", body)
    assert code == 400 and 'cannot parse "+00:00" as ".000000"' in refusal["message"], refusal
    body["eventTime"] = "2026-01-01T00:00:00.000001Z"
    assert kube.core.create_namespaced_event("default", body).reporting_component == "cbt-mover"
