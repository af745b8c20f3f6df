"""The apps/v1 workload kinds (Deployment, ReplicaSet, StatefulSet) as kube-apiserver admits them, and their
``scale`` subresource (autoscaling/v1 ``Scale``).

- ``defaults(rt, obj)``: ``SetDefaults_Deployment`` / ``_ReplicaSet`` / ``_StatefulSet`` of ``pkg/apis/apps/v1``:
  replicas 1, revisionHistoryLimit 10, a Deployment's RollingUpdate strategy (25% / 25%) and progress deadline
  (600 s), a StatefulSet's OrderedReady policy, RollingUpdate (partition 0) strategy and Retain/Retain claim
  retention, the template's pod defaults and the claim templates' (volumeMode Filesystem, phase Pending).
- ``validate_create`` / ``validate_update`` / ``validate_status``: ``pkg/apis/apps/validation``: a selector is
  required, not empty, must match the template's labels and (apps/v1) is immutable; a StatefulSet's name is a DNS
  label; replicas and the other
  counts are non-negative; the template is a pod template whose restartPolicy is Always and which sets no
  activeDeadlineSeconds; a StatefulSet's spec may change only in replicas, ordinals, template, updateStrategy,
  revisionHistoryLimit, persistentVolumeClaimRetentionPolicy and minReadySeconds.
- ``scale_of(rt, obj)`` is the object's ``Scale`` (``spec.replicas``; ``status.replicas`` and the selector as a
  string, ``metav1.FormatLabelSelector``); ``scaled(obj, scale)`` the object with the Scale's replicas, after
  ``validate_scale`` (``ValidateScale``) and its preconditions (the Scale's resourceVersion and uid), which
  ``Rest`` then updates as any spec change (generation bumped). Authorization sees ``deployments/scale`` and
  ``statefulsets/scale`` as their own resources, as upstream.
"""

from __future__ import annotations

import copy
from typing import Any

from localcluster.kubeapi import fields as f
from localcluster.kubeapi import podspec as ps
from localcluster.kubeapi.fields import FieldError
from localcluster.kubeapi.resources import Obj, ResourceType

_m, _l, _s = f.as_map, f.as_list, f.as_str

GROUP = "apps"
DEPLOYMENTS, REPLICASETS, STATEFULSETS = (GROUP, "deployments"), (GROUP, "replicasets"), (GROUP, "statefulsets")
KEYS = (DEPLOYMENTS, REPLICASETS, STATEFULSETS)
SCALABLE = (DEPLOYMENTS, REPLICASETS, STATEFULSETS)
_STATEFULSET_MUTABLE = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)
_STATUS_COUNTS = (
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "updatedReplicas",
    "currentReplicas",
    "fullyLabeledReplicas",
    "unavailableReplicas",
    "observedGeneration",
)


# ---- defaulting ------------------------------------------------------------------------------------


def defaults(rt: ResourceType, obj: Obj, pod_spec_defaults) -> None:
    """The scheme defaults of an apps/v1 object (``pod_spec_defaults``: the pod spec's, ``meta._pod_spec``)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    spec.setdefault("replicas", 1)
    template = spec.get("template")
    if isinstance(template, dict):
        if not isinstance(template.get("spec"), dict):
            template["spec"] = {}
        pod_spec_defaults(template["spec"])
    if rt.key == DEPLOYMENTS:
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")
    elif rt.key == STATEFULSETS:
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("partition", 0)
        retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
        if isinstance(retention, dict):
            retention.setdefault("whenDeleted", "Retain")
            retention.setdefault("whenScaled", "Retain")
        for claim in _l(spec.get("volumeClaimTemplates")):
            if isinstance(claim, dict):
                claim_spec = claim.setdefault("spec", {})
                if isinstance(claim_spec, dict):
                    claim_spec.setdefault("volumeMode", "Filesystem")
                claim.setdefault("status", {"phase": "Pending"})


# ---- validation ------------------------------------------------------------------------------------


def _kind_word(key: tuple[str, str]) -> str:
    # upstream's ReplicaSet validation says "deployment" too (ValidateReplicaSetSpec)
    return "statefulset" if key == STATEFULSETS else "deployment"


def _nonnegative(value: Any, path: str) -> list[FieldError]:
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return [f.invalid(path, value, "must be greater than or equal to 0")]
    return []


def _selector_and_template(key: tuple[str, str], spec: Obj) -> list[FieldError]:
    out: list[FieldError] = []
    selector = spec.get("selector")
    template = _m(spec.get("template"))
    labels = _m(_m(template.get("metadata")).get("labels"))
    if selector is None:
        out.append(f.required("spec.selector"))
    else:
        out += f.label_selector(selector, "spec.selector")
        if not _m(selector).get("matchLabels") and not _m(selector).get("matchExpressions"):
            out.append(f.invalid("spec.selector", selector, f"empty selector is invalid for {_kind_word(key)}"))
    if spec.get("template") is None:
        out.append(f.required("spec.template"))
        return out
    from localcluster.kubeapi.selectors import match_label_selector

    if selector and _m(selector) and not match_label_selector(_m(selector), dict(labels)):
        out.append(f.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`"))
    out += f.labels(labels, "spec.template.metadata.labels")
    out += f.annotations(_m(template.get("metadata")).get("annotations"), "spec.template.metadata.annotations")
    pod_spec = _m(template.get("spec"))
    claims = [_s(_m(_m(c).get("metadata")).get("name")) for c in _l(spec.get("volumeClaimTemplates"))]
    if claims:  # a StatefulSet's pods get a volume per claim template: the template may mount them
        volumes = [v for v in _l(pod_spec.get("volumes")) if _m(v).get("name") not in claims]
        volumes += [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims if c]
        pod_spec = {**pod_spec, "volumes": volumes}
    out += ps.pod_spec(pod_spec, "", "spec.template.spec")
    if pod_spec.get("restartPolicy") != "Always":
        out.append(f.not_supported("spec.template.spec.restartPolicy", pod_spec.get("restartPolicy"), ["Always"]))
    if pod_spec.get("activeDeadlineSeconds") is not None:
        out.append(
            f.forbidden(
                "spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds in ReplicaSet is not Supported"
            )
        )
    return out


def validate_create(key: tuple[str, str], obj: Obj) -> list[FieldError]:
    """The strategy's ``Validate`` (the ObjectMeta checks follow in ``validation.validate``)."""
    spec = _m(obj.get("spec"))
    # a StatefulSet's name is a DNS label (its pods' hostnames come from it); the others', a DNS subdomain
    out = f.core_meta(obj, True, f.name_is_dns_label if key == STATEFULSETS else f.name_is_dns_subdomain)
    out += _nonnegative(spec.get("replicas"), "spec.replicas")
    out += _nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    out += _nonnegative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit")
    out += _selector_and_template(key, spec)
    if key == DEPLOYMENTS:
        out += _deployment_strategy(spec)
    elif key == STATEFULSETS:
        out += _statefulset_spec(spec)
    return out


def _deployment_strategy(spec: Obj) -> list[FieldError]:
    out: list[FieldError] = []
    strategy = _m(spec.get("strategy"))
    kind = strategy.get("type")
    if kind not in ("Recreate", "RollingUpdate"):
        out.append(f.not_supported("spec.strategy.type", kind, ["Recreate", "RollingUpdate"]))
    elif kind == "Recreate" and strategy.get("rollingUpdate") is not None:
        out.append(
            f.forbidden("spec.strategy.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'")
        )
    rolling = _m(strategy.get("rollingUpdate"))
    if kind == "RollingUpdate" and rolling.get("maxUnavailable") in (0, "0%") and rolling.get("maxSurge") in (0, "0%"):
        out.append(
            f.invalid(
                "spec.strategy.rollingUpdate.maxUnavailable",
                rolling["maxUnavailable"],
                "may not be 0 when `maxSurge` is 0",
            )
        )
    deadline, ready = spec.get("progressDeadlineSeconds"), spec.get("minReadySeconds") or 0
    if isinstance(deadline, int) and deadline <= ready:
        out.append(f.invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds"))
    return out


def _statefulset_spec(spec: Obj) -> list[FieldError]:
    out: list[FieldError] = []
    policy = spec.get("podManagementPolicy")
    if not policy:
        out.append(f.required("spec.podManagementPolicy"))
    elif policy not in ("OrderedReady", "Parallel"):
        out.append(f.invalid("spec.podManagementPolicy", policy, "must be 'OrderedReady' or 'Parallel'"))
    kind = _m(spec.get("updateStrategy")).get("type")
    if kind not in ("RollingUpdate", "OnDelete"):
        out.append(f.invalid("spec.updateStrategy", kind, "must be 'RollingUpdate' or 'OnDelete'"))
    name = _s(spec.get("serviceName"))
    if name:
        out += [f.invalid("spec.serviceName", name, m) for m in f.dns1123_label(name)]
    for i, claim in enumerate(_l(spec.get("volumeClaimTemplates"))):
        claim_name = _s(_m(_m(claim).get("metadata")).get("name"))
        if not claim_name:
            out.append(f.required(f"spec.volumeClaimTemplates[{i}].metadata.name", "name or generateName is required"))
    return out


def validate_update(key: tuple[str, str], obj: Obj, old: Obj) -> list[FieldError]:
    """The strategy's ``ValidateUpdate``: the new object's spec, and what apps/v1 keeps immutable."""
    out = f.core_meta_update(obj, old) + validate_create(key, obj)
    spec, old_spec = _m(obj.get("spec")), _m(old.get("spec"))
    if spec.get("selector") != old_spec.get("selector"):
        out.append(f.invalid("spec.selector", spec.get("selector"), "field is immutable"))
    if key == STATEFULSETS:
        rest = {k: v for k, v in spec.items() if k not in _STATEFULSET_MUTABLE}
        old_rest = {k: v for k, v in old_spec.items() if k not in _STATEFULSET_MUTABLE}
        if rest != old_rest:
            out.append(
                f.forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template',"
                    " 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and"
                    " 'minReadySeconds' are forbidden",
                )
            )
    return out


def validate_status(key: tuple[str, str], obj: Obj, old: Obj) -> list[FieldError]:
    """The status strategy's ``ValidateUpdate``: the counts are non-negative."""
    out = f.core_meta_update(obj, old)
    status = _m(obj.get("status"))
    for name in _STATUS_COUNTS:
        out += _nonnegative(status.get(name), f"status.{name}")
    return out


# ---- the scale subresource ---------------------------------------------------------------------------


def format_selector(selector: Obj | None) -> str:
    """``metav1.FormatLabelSelector``: ``k=v`` for matchLabels, ``k in (a,b)`` ... for expressions, sorted."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in _m(selector.get("matchLabels")).items()]
    for expr in _l(selector.get("matchExpressions")):
        key, op, values = _s(expr.get("key")), expr.get("operator"), sorted(_l(expr.get("values")))
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(sorted(parts))


def scale_of(obj: Obj) -> Obj:
    """The autoscaling/v1 ``Scale`` of a workload (the registry's ``scaleFromDeployment`` and kin)."""
    md = obj["metadata"]
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": md["name"],
            "namespace": md.get("namespace", ""),
            "uid": md["uid"],
            "resourceVersion": md["resourceVersion"],
            "creationTimestamp": md.get("creationTimestamp"),
        },
        "spec": {"replicas": _m(obj.get("spec")).get("replicas", 0)},
        "status": {
            "replicas": _m(obj.get("status")).get("replicas", 0),
            "selector": format_selector(_m(obj.get("spec")).get("selector")),
        },
    }


def validate_scale(scale: Any) -> list[FieldError]:
    """``ValidateScale``: the ObjectMeta of a namespaced object and non-negative replicas."""
    scale = _m(scale)
    out = f.object_meta(_m(scale.get("metadata")), True, f.name_is_dns_subdomain)
    replicas = _m(scale.get("spec")).get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool)):
        return out + [f.invalid("spec.replicas", replicas, "must be an integer")]
    return out + _nonnegative(replicas, "spec.replicas")


def scaled(obj: Obj, scale: Obj) -> Obj:
    """``obj`` with ``spec.replicas`` from ``scale`` (a copy; the caller has checked preconditions)."""
    out = copy.deepcopy(obj)
    out.setdefault("spec", {})["replicas"] = _m(scale.get("spec")).get("replicas") or 0
    return out
