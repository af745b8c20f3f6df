"""Validation of the storage kinds as kube-apiserver does it: PersistentVolumeClaim and
PersistentVolume (``pkg/apis/core/validation``), StorageClass and CSIDriver
(``pkg/apis/storage/validation``).

- claims: access modes, a positive ``resources.requests.storage``, volume mode, class names, data
  source rules; on update the spec is immutable except ``volumeName`` (set once, by binding) and,
  for bound claims, ``resources.requests`` and ``volumeAttributesClassName``; a request may shrink
  back down to no less than ``status.capacity`` (RecoverVolumeExpansionFailure, GA); the status
  update checks ``status.capacity``;
- volumes: access modes, ``capacity`` with ``storage`` only and positive, exactly one volume source
  (CSI: driver name, ``volumeHandle``, secret references), reclaim policy, ``nodeAffinity.required``
  terms, class names, volume mode; on update the source (but for a first ``controllerExpandSecretRef``),
  volume mode and node affinity (but for beta-to-GA label keys) are immutable;
- classes: provisioner, parameters, reclaim policy, binding mode, allowed topologies; provisioner,
  parameters, reclaim policy and binding mode immutable;
- CSIDriver: its name, the required flags, the enums.
"""

from __future__ import annotations

import copy
from typing import Any

from localcluster.kubeapi import fields as f
from localcluster.kubeapi import quantity as q
from localcluster.kubeapi import specparts as sp
from localcluster.kubeapi.fields import FieldError
from localcluster.kubeapi.resources import Obj

_m, _l, _s = f.as_map, f.as_list, f.as_str  # tolerant accessors: a body may hold anything

_RECLAIM = ["Delete", "Recycle", "Retain"]


_CLASS_RECLAIM = ["Delete", "Retain"]


_BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]


_PV_SOURCES = (
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
)


_BETA_TO_GA = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/os": "kubernetes.io/os",
    "beta.kubernetes.io/arch": "kubernetes.io/arch",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
}


# ---- PersistentVolumeClaim -------------------------------------------------------------------------


def pvc_create(obj: Obj) -> list[FieldError]:
    return f.core_meta(obj, True) + sp.pvc_spec(_m(obj.get("spec")), "spec")


def pvc_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = f.core_meta_update(obj, old) + pvc_create(obj)
    spec, old_spec = copy.deepcopy(_m(obj.get("spec"))), copy.deepcopy(_m(old.get("spec")))
    if not old_spec.get("volumeName"):  # the PV controller binds a claim once
        old_spec.pop("volumeName", None)
        if "volumeName" in spec:
            old_spec["volumeName"] = spec["volumeName"]
    old_ann = _m(_m(old.get("metadata")).get("annotations"))
    new_ann = _m(_m(obj.get("metadata")).get("annotations"))
    beta = "volume.beta.kubernetes.io/storage-class"
    if (
        beta in old_ann
        and old_spec.get("storageClassName") is None
        and spec.get("storageClassName") == old_ann[beta]
        and new_ann.get(beta, old_ann[beta]) == old_ann[beta]
    ):
        spec.pop("storageClassName", None)
    else:
        if new_ann.get(beta) != old_ann.get(beta):
            out.append(f.invalid(f"metadata.annotations.{beta}", new_ann.get(beta, ""), "field is immutable"))
        if (
            spec.get("storageClassName") is not None
            and old_spec.get("storageClassName") is None
            and (beta not in old_ann or spec["storageClassName"] == old_ann[beta])
        ):
            spec.pop("storageClassName")
    bound = _m(obj.get("status")).get("phase") == "Bound"
    if bound:
        requests = _m(_m(spec.get("resources")).get("requests"))
        if "storage" in _m(_m(old_spec.get("resources")).get("requests")) and requests:
            requests["storage"] = old_spec["resources"]["requests"]["storage"]
        if spec.get("volumeAttributesClassName") is not None:
            spec["volumeAttributesClassName"] = old_spec.get("volumeAttributesClassName")
    if sp.unset_empty(spec) != sp.unset_empty(old_spec):
        out.append(
            f.forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and"
                " volumeAttributesClassName for bound claims\n"
                + sp.spec_diff("core.PersistentVolumeClaimSpec", old_spec, spec),
            )
        )
    new_size, old_size = _storage(obj.get("spec")), _storage(old.get("spec"))
    status_size = q.from_json(_m(_m(old.get("status")).get("capacity")).get("storage"))
    if new_size < old_size and new_size <= status_size:
        out.append(f.forbidden("spec.resources.requests.storage", "field can not be less than status.capacity"))
    old_mode, new_mode = _m(old.get("spec")).get("volumeMode"), _m(obj.get("spec")).get("volumeMode")
    if new_mode != old_mode:
        out.append(f.invalid("volumeMode", new_mode, "field is immutable"))
    old_vac = _m(old.get("spec")).get("volumeAttributesClassName")
    new_vac = _m(obj.get("spec")).get("volumeAttributesClassName")
    if old_vac is not None and new_vac != old_vac:
        if new_vac is None:
            out.append(f.forbidden("spec.volumeAttributesClassName", "update from non-nil value to nil is forbidden"))
        elif new_vac == "":
            out.append(
                f.forbidden(
                    "spec.volumeAttributesClassName", "update from non-nil value to an empty string is forbidden"
                )
            )
    return out


def _storage(spec: Any) -> q.Quantity:
    return q.from_json(_m(_m(_m(spec).get("resources")).get("requests")).get("storage"))


def pvc_status_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = f.core_meta_update(obj, old)
    if not _m(obj.get("spec")).get("accessModes"):
        out.append(f.required("Spec.accessModes"))
    for name, value in sorted(_m(_m(obj.get("status")).get("capacity")).items()):
        out += _basic_resource(value, f.key("status.capacity", name))
    for name, value in sorted(_m(_m(obj.get("status")).get("allocatedResources")).items()):
        out += _basic_resource(value, f.key("status.allocatedResources", name))
    return out


def _basic_resource(value: Any, path: str) -> list[FieldError]:
    number = q.from_json(value).value()
    return [f.invalid(path, number, "must be a valid resource quantity")] if number < 0 else []


# ---- PersistentVolume ------------------------------------------------------------------------------


def pv_create(obj: Obj) -> list[FieldError]:
    spec, md = _m(obj.get("spec")), _m(obj.get("metadata"))
    out = f.core_meta(obj, False)
    out += sp.access_modes(_l(spec.get("accessModes")), "spec.accessModes", "")
    capacity = _m(spec.get("capacity"))
    if not capacity:
        out.append(f.required("spec.capacity"))
    if "storage" not in capacity or len(capacity) > 1:
        out.append(f.not_supported("spec.capacity", dict(capacity), ["storage"]))
    for name, value in sorted(capacity.items()):
        p = f.key("spec.capacity", name)
        out += _basic_resource(value, p)
        if q.from_json(value).sign() <= 0:
            out.append(f.invalid(p, str(q.from_json(value)), "must be greater than zero"))
    if spec.get("persistentVolumeReclaimPolicy"):
        out += sp.enum(spec["persistentVolumeReclaimPolicy"], "spec.persistentVolumeReclaimPolicy", _RECLAIM)
    affinity = spec.get("nodeAffinity")
    if affinity is not None:
        if _m(affinity).get("required") is not None:
            out += sp.node_selector(_m(affinity["required"]), "spec.nodeAffinity.required")
        else:
            out.append(f.required("spec.nodeAffinity.required", "must specify required node constraints"))
    count = 0
    for source in _PV_SOURCES:
        if spec.get(source) is None:
            continue
        if count and source != "flexVolume":
            out.append(
                f.forbidden(
                    f"spec.{'cephFS' if source == 'cephfs' else source}", "may not specify more than 1 volume type"
                )
            )
            continue
        count += 1
        out += _pv_source(source, _m(spec[source]), _s(md.get("name")), affinity is not None)
    if not count:
        out.append(f.required("spec", "must specify a volume type"))
    if spec.get("storageClassName"):
        out += [
            f.invalid("spec.storageClassName", spec["storageClassName"], m)
            for m in f.name_is_dns_subdomain(_s(spec["storageClassName"]))
        ]
    if spec.get("volumeMode") is not None:
        out += sp.enum(spec["volumeMode"], "spec.volumeMode", sp.VOLUME_MODES, required=False)
    vac = spec.get("volumeAttributesClassName")
    if vac is not None:
        if not vac:
            out.append(f.required("spec.volumeAttributesClassName", "an empty string is disallowed"))
        else:
            out += [f.invalid("spec.volumeAttributesClassName", vac, m) for m in f.name_is_dns_subdomain(_s(vac))]
        if spec.get("csi") is None:
            out.append(f.required("spec.csi", "has to be specified when using volumeAttributesClassName"))
    return out


def _pv_source(source: str, src: dict, pv_name: str, has_affinity: bool) -> list[FieldError]:
    p = f"spec.{source}"
    if source == "csi":
        out = sp.csi_driver_name(src.get("driver"), f"{p}.driver")
        if not src.get("volumeHandle"):
            out.append(f.required(f"{p}.volumeHandle"))
        for ref in (
            "controllerPublishSecretRef",
            "controllerExpandSecretRef",
            "nodePublishSecretRef",
            "nodeExpandSecretRef",
        ):
            if src.get(ref) is not None:
                out += _secret_reference(_m(src[ref]), f"{p}.{ref}")
        return out
    if source in ("hostPath", "local"):
        if not src.get("path"):
            return [f.required(f"{p}.path")]
        out = sp.no_backsteps(_s(src["path"]), f"{p}.path")
        if source == "local" and not has_affinity:
            out.append(f.required("spec.nodeAffinity", "Local volume requires node affinity"))
        return out
    if source == "nfs":
        out = [f.required(f"{p}.{k}") for k in ("server", "path") if not src.get(k)]
        if not _s(src.get("path")).startswith("/"):
            out.append(f.invalid(f"{p}.path", _s(src.get("path")), "must be an absolute path"))
        return out
    return []


def _secret_reference(ref: dict, path: str) -> list[FieldError]:
    name, namespace = _s(ref.get("name")), _s(ref.get("namespace"))
    out = (
        [f.required(f"{path}.name")]
        if not name
        else [f.invalid(f"{path}.name", name, m) for m in f.dns1123_subdomain(name)]
    )
    out += (
        [f.required(f"{path}.namespace")]
        if not namespace
        else [f.invalid(f"{path}.namespace", namespace, m) for m in f.dns1123_label(namespace)]
    )
    return out


def pv_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = pv_create(obj)
    spec, old_spec = _m(obj.get("spec")), _m(old.get("spec"))
    new_src = {k: copy.deepcopy(spec[k]) for k in _PV_SOURCES if spec.get(k) is not None}
    old_src = {k: old_spec[k] for k in _PV_SOURCES if old_spec.get(k) is not None}
    csi, old_csi = _m(new_src.get("csi")), _m(old_src.get("csi"))
    if old_csi and old_csi.get("controllerExpandSecretRef") is None:
        csi.pop("controllerExpandSecretRef", None)  # may be set once
    if sp.unset_empty(new_src) != sp.unset_empty(old_src):
        out.append(
            f.forbidden(
                "spec.persistentvolumesource",
                "spec.persistentvolumesource is immutable after"
                " creation\n" + sp.spec_diff("core.PersistentVolumeSource", old_src, new_src),
            )
        )
    if spec.get("volumeMode") != old_spec.get("volumeMode"):
        out.append(f.invalid("volumeMode", spec.get("volumeMode"), "field is immutable"))
    if (
        old_spec.get("nodeAffinity") is not None
        and _ga_labels(spec.get("nodeAffinity")) != old_spec["nodeAffinity"]
        and spec.get("nodeAffinity") != old_spec["nodeAffinity"]
    ):
        out.append(
            f.invalid(
                "nodeAffinity",
                spec.get("nodeAffinity"),
                "field is immutable, except for updating from beta label to GA",
            )
        )
    if old_spec.get("volumeAttributesClassName") is not None and spec.get("volumeAttributesClassName") is None:
        out.append(f.forbidden("spec.volumeAttributesClassName", "update from non-nil value to nil is forbidden"))
    return out


def _ga_labels(affinity: Any) -> Any:
    """The affinity with GA keys turned back into the beta keys they replaced (an allowed update)."""
    affinity = copy.deepcopy(affinity)
    ga_to_beta = {v: k for k, v in _BETA_TO_GA.items()}
    for term in _l(_m(_m(affinity).get("required")).get("nodeSelectorTerms")):
        for req in _l(_m(term).get("matchExpressions")):
            if isinstance(req, dict) and _s(req.get("key")) in ga_to_beta:
                req["key"] = ga_to_beta[_s(req["key"])]
    return affinity


# ---- storage.k8s.io --------------------------------------------------------------------------------


def storage_class_create(obj: Obj) -> list[FieldError]:
    out = f.core_meta(obj, False)
    provisioner = _s(obj.get("provisioner"))
    if not provisioner:
        out.append(f.required("provisioner"))
    else:
        out += [f.invalid("provisioner", provisioner.lower(), m) for m in f.qualified_name(provisioner.lower())]
    params = _m(obj.get("parameters"))
    if len(params) > 512:
        return out + [f.too_long("parameters", 512)]
    out += [f.invalid("parameters", k, "field can not be empty.") for k in params if not k]
    if sum(len(_s(k).encode()) + len(_s(v).encode()) for k, v in params.items()) > 256 * 1024:
        out.append(f.too_long("parameters", 256 * 1024))
    reclaim = obj.get("reclaimPolicy")
    if reclaim and reclaim not in _CLASS_RECLAIM:
        out.append(f.not_supported("reclaimPolicy", reclaim, _CLASS_RECLAIM))
    out += sp.enum(obj.get("volumeBindingMode"), "volumeBindingMode", _BINDING_MODES)
    terms: list[Any] = []
    for i, term in enumerate(_l(obj.get("allowedTopologies"))):
        p, expressions = f"allowedTopologies[{i}]", {}
        for j, req in enumerate(_l(_m(term).get("matchLabelExpressions"))):
            req, rp = _m(req), f"{p}.matchLabelExpressions[{j}]"
            values = _l(req.get("values"))
            if not values:
                out.append(f.required(f"{rp}.values"))
            for k, v in enumerate(values):
                if v in values[:k]:
                    out.append(f.duplicate(f"{rp}.values[{k}]", v))
            out += f.label_name(_s(req.get("key")), f"{rp}.key")
            if _s(req.get("key")) in expressions:
                out.append(f.duplicate(f"{rp}.key", req.get("key")))
            expressions[_s(req.get("key"))] = set(map(str, values))
        if expressions in terms:
            out.append(f.duplicate(f"{p}.matchLabelExpressions", ""))
        terms.append(expressions)
    return out


def storage_class_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = f.core_meta_update(obj, old)
    if (obj.get("parameters") or {}) != (old.get("parameters") or {}):
        out.append(f.forbidden("parameters", "updates to parameters are forbidden."))
    if obj.get("provisioner") != old.get("provisioner"):
        out.append(f.forbidden("provisioner", "updates to provisioner are forbidden."))
    if obj.get("reclaimPolicy") != old.get("reclaimPolicy"):
        out.append(f.forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."))
    if obj.get("volumeBindingMode") != old.get("volumeBindingMode"):
        out.append(f.invalid("volumeBindingMode", obj.get("volumeBindingMode"), "field is immutable"))
    return out


def csi_driver_create(obj: Obj) -> list[FieldError]:
    spec = _m(obj.get("spec"))
    out = sp.csi_driver_name(_m(obj.get("metadata")).get("name"), "name")
    for name in ("attachRequired", "podInfoOnMount", "storageCapacity", "requiresRepublish"):
        if spec.get(name) is None:
            out.append(f.required(f"spec.{name}"))
    if spec.get("fsGroupPolicy") is not None:
        out += sp.enum(spec["fsGroupPolicy"], "spec.fsGroupPolicy", ["File", "None", "ReadWriteOnceWithFSType"])
    for i, mode in enumerate(_l(spec.get("volumeLifecycleModes"))):
        out += sp.enum(mode, f"spec.volumeLifecycleModes[{i}]", ["Ephemeral", "Persistent"])
    return out
