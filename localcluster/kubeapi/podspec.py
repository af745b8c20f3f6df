"""Pod validation as kube-apiserver does it (``pkg/apis/core/validation``), for the fields a pod of the
local cluster or the product can carry.

- ``pod_create(pod)`` / ``pod_update(pod, old)`` / ``pod_status_update(pod, old)``: ``ValidatePodCreate``,
  ``ValidatePodUpdate`` (the spec is immutable except images, ``activeDeadlineSeconds`` (only
  lowered), added tolerations and removed scheduling gates) and ``ValidatePodStatusUpdate`` (node
  name, QoS class, container state transitions, IPs, condition types);
- ``pod_spec(spec, pod_name, path)``: ``ValidatePodSpec`` — volumes (unique DNS-label names, exactly
  one source, the common sources' own rules), containers and init containers (unique DNS-label
  names, image, ports, env, mounts naming volumes, devices only from PVC or ephemeral volumes,
  resources with requests <= limits, security context), restart/DNS policy, node selector,
  affinity, tolerations, service account and node names, active deadline.
Sources and fields the local cluster never uses (iSCSI, RBD, Windows options, ...) are counted as
volume types but not checked further.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

from localcluster.kubeapi import fields as f
from localcluster.kubeapi import quantity as q
from localcluster.kubeapi import specparts as sp
from localcluster.kubeapi.fields import FieldError

_m, _l, _s = f.as_map, f.as_list, f.as_str  # tolerant accessors: a body may hold anything

_SOURCES = (  # (JSON key, the name upstream's "more than 1 volume type" error uses), in upstream's order
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
)


_HOST_PATH_TYPES = ["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"]


_FILE_MODE = "must be a number between 0 and 0777 (octal), both inclusive"


_PROTOCOLS = ["SCTP", "TCP", "UDP"]


_PULL_POLICIES = ["Always", "IfNotPresent", "Never"]


_UPDATABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds`"
    " (allow it to be set to 1 if it was previously negative)"
)


_MAX_INT32 = 2**31 - 1


# ---- the pod ---------------------------------------------------------------------------------------


def pod_create(pod: dict) -> list[FieldError]:
    spec = _m(pod.get("spec"))
    out = _metadata_and_spec(pod)
    if spec.get("ephemeralContainers"):
        out.append(f.forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        out.append(f.forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    return out


def pod_update(pod: dict, old: dict) -> list[FieldError]:
    spec, old_spec = _m(pod.get("spec")), _m(old.get("spec"))
    out = f.object_meta_update(_m(pod.get("metadata")), _m(old.get("metadata")), True) + _metadata_and_spec(pod)
    for kind in ("containers", "initContainers"):
        new_c, old_c = _l(spec.get(kind)), _l(old_spec.get(kind))
        if len(new_c) != len(old_c):
            return out + [f.forbidden(f"spec.{kind}", "pod updates may not add or remove containers")]
        for i, c in enumerate(new_c):
            image = _s(_m(c).get("image"))
            if not image:
                out.append(f.required(f"spec.{kind}[{i}].image"))
            if image != image.strip():
                out.append(f.invalid(f"spec.{kind}[{i}].image", image, "must not have leading or trailing whitespace"))
    deadline, old_deadline = spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int):
        if deadline < 0 or deadline > _MAX_INT32:
            return out + [
                f.invalid("spec.activeDeadlineSeconds", deadline, f"must be between 0 and {_MAX_INT32}, inclusive")
            ]
        if isinstance(old_deadline, int) and old_deadline < deadline:
            return out + [
                f.invalid("spec.activeDeadlineSeconds", deadline, "must be less than or equal to previous value")
            ]
    elif isinstance(old_deadline, int):
        out.append(
            f.invalid("spec.activeDeadlineSeconds", None, "must not update from a positive integer to nil value")
        )
    out += _only_added_tolerations(_l(spec.get("tolerations")), _l(old_spec.get("tolerations")))
    munged = copy.deepcopy(dict(spec))
    for kind in ("containers", "initContainers"):
        for c, old_c in zip(_l(munged.get(kind)), _l(old_spec.get(kind)), strict=False):
            if isinstance(c, dict):
                c["image"] = _m(old_c).get("image")
    for name in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        munged.pop(name, None)
        if name in old_spec:
            munged[name] = copy.deepcopy(old_spec[name])
    grace = munged.get("terminationGracePeriodSeconds")
    if (
        isinstance(old_spec.get("terminationGracePeriodSeconds"), int)
        and old_spec["terminationGracePeriodSeconds"] < 0
        and grace == 1
    ):
        munged["terminationGracePeriodSeconds"] = old_spec["terminationGracePeriodSeconds"]
    if sp.unset_empty(munged) != sp.unset_empty(old_spec):
        out.append(
            f.forbidden(
                "spec",
                f"pod updates may not change fields other than {_UPDATABLE}\n"
                + sp.spec_diff("core.PodSpec", old_spec, munged),
            )
        )
    return out


def pod_status_update(pod: dict, old: dict) -> list[FieldError]:
    out = f.object_meta_update(_m(pod.get("metadata")), _m(old.get("metadata")), True)
    if _m(pod.get("spec")).get("nodeName") != _m(old.get("spec")).get("nodeName"):
        out.append(f.forbidden("status.nodeName", "may not be changed directly"))
    status, old_status = _m(pod.get("status")), _m(old.get("status"))
    if status.get("qosClass") != old_status.get("qosClass"):
        out.append(f.invalid("status.qosClass", status.get("qosClass"), "field is immutable"))
    nominated = _s(status.get("nominatedNodeName"))
    if nominated and nominated != old_status.get("nominatedNodeName"):
        out += [f.invalid("status.nominatedNodeName", nominated, m) for m in f.name_is_dns_subdomain(nominated)]
    for i, cond in enumerate(_l(status.get("conditions"))):  # upstream names the path under metadata
        kind = _s(_m(cond).get("type"))
        if kind not in ("PodScheduled", "Ready", "Initialized"):
            out += [f.invalid(f"metadata.conditions[{i}].Type", kind, m) for m in f.qualified_name(kind)]
    policy = _m(old.get("spec")).get("restartPolicy")
    for kind in ("containerStatuses", "initContainerStatuses"):
        out += _state_transitions(_l(status.get(kind)), _l(old_status.get(kind)), f"status.{kind}", policy)
    return out + _ips(status)


def _state_transitions(new: list, old: list, path: str, policy: Any) -> list[FieldError]:
    """``ValidateContainerStateTransition``: a terminated container stays terminated unless it may restart."""
    if policy == "Always":
        return []
    out: list[FieldError] = []
    for i, before in enumerate(old):
        terminated = _m(_m(_m(before).get("state")).get("terminated"))
        if not terminated or (terminated.get("exitCode") and policy == "OnFailure"):
            continue
        for after in new:
            if _m(after).get("name") == _m(before).get("name") and not _m(_m(after).get("state")).get("terminated"):
                out.append(f.forbidden(f"{path}[{i}].state", "may not be transitioned to non-terminated state"))
    return out


def _ips(status: dict) -> list[FieldError]:
    """``validatePodIPs`` / ``validateHostIPs``: valid addresses, ``hostIP`` first, no duplicates."""
    out: list[FieldError] = []
    for kind in ("podIPs", "hostIPs"):
        seen: set[str] = set()
        for i, entry in enumerate(_l(status.get(kind))):
            ip = _s(_m(entry).get("ip"))
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                out.append(f.invalid(f"status.{kind}[{i}]", ip, "must be a valid IP address"))
            if ip in seen:
                out.append(f.duplicate(f"status.{kind}[{i}]", entry))
            seen.add(ip)
    host_ips = _l(status.get("hostIPs"))
    if host_ips and _m(host_ips[0]).get("ip") != status.get("hostIP"):
        out.append(f.invalid("status.hostIPs[0].ip", _m(host_ips[0]).get("ip"), "must be equal to `hostIP`"))
    return out


def _metadata_and_spec(pod: dict) -> list[FieldError]:
    md, spec = _m(pod.get("metadata")), _m(pod.get("spec"))
    out = f.object_meta(md, True, f.name_is_dns_subdomain, True)
    out += pod_spec(spec, _s(md.get("name")), "spec")
    if not spec.get("serviceAccountName"):
        for vi, vol in enumerate(_l(spec.get("volumes"))):
            for si, src in enumerate(_l(_m(_m(vol).get("projected")).get("sources"))):
                if _m(src).get("serviceAccountToken") is not None:
                    out.append(
                        f.forbidden(
                            f"spec.volumes[{vi}].projected.sources[{si}].serviceAccountToken",
                            "must not be specified when serviceAccountName is not set",
                        )
                    )
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(_l(spec.get(kind))):
            image = _s(_m(c).get("image"))
            if image != image.strip():
                out.append(f.invalid(f"spec.{kind}[{i}].image", image, "must not have leading or trailing whitespace"))
    return out


def _only_added_tolerations(new: list, old: list) -> list[FieldError]:
    for o in old:
        base = {k: v for k, v in _m(o).items() if k != "tolerationSeconds"}
        if not any({k: v for k, v in _m(n).items() if k != "tolerationSeconds"} == base for n in new):
            return [
                f.forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")
            ]
    return sp.tolerations(new, "spec.tolerations")


# ---- PodSpec ---------------------------------------------------------------------------------------


def pod_spec(spec: dict, pod_name: str, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    if spec.get("terminationGracePeriodSeconds") is None:
        out.append(f.required(f"{path}.terminationGracePeriodSeconds"))
    vols, errs = volumes(_l(spec.get("volumes")), pod_name, f"{path}.volumes")
    out += errs
    out += _containers(_l(spec.get("containers")), vols, f"{path}.containers", spec)
    out += _init_containers(_l(spec.get("initContainers")), _l(spec.get("containers")), vols, f"{path}.initContainers")
    out += sp.enum(spec.get("restartPolicy"), f"{path}.restartPolicy", ["Always", "OnFailure", "Never"])
    out += sp.enum(
        spec.get("dnsPolicy"), f"{path}.dnsPolicy", ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
    )
    out += f.labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
    out += _pod_security_context(_m(spec.get("securityContext")), f"{path}.securityContext")
    for i, secret in enumerate(_l(spec.get("imagePullSecrets"))):
        if set(_m(secret)) - {"name"}:
            out.append(f.invalid(f"{path}.imagePullSecrets[{i}]", secret, "only name may be set"))
    out += sp.affinity(_m(spec.get("affinity")), f"{path}.affinity")
    for name, fn in (
        ("serviceAccountName", f.name_is_dns_subdomain),
        ("nodeName", f.name_is_dns_subdomain),
        ("priorityClassName", f.name_is_dns_subdomain),
    ):
        value = _s(spec.get(name))
        if value:
            out += [f.invalid(f"{path}.{name}", value, m) for m in fn(value, False)]
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not 1 <= deadline <= _MAX_INT32:
        out.append(
            f.invalid(f"{path}.activeDeadlineSeconds", deadline, f"must be between 1 and {_MAX_INT32}, inclusive")
        )
    for name in ("hostname", "subdomain"):
        if spec.get(name):
            out += [f.invalid(f"{path}.{name}", spec[name], m) for m in f.dns1123_label(_s(spec[name]))]
    out += sp.tolerations(_l(spec.get("tolerations")), f"{path}.tolerations")
    os_name = _m(spec.get("os")).get("name")
    if spec.get("os") is not None:
        if not os_name:
            out.append(f.required(f"{path}.os.name", "cannot be empty"))
        elif os_name not in ("linux", "windows"):
            out.append(f.not_supported(f"{path}.os", os_name, ["linux", "windows"]))
    return out


def volumes(vols: list, pod_name: str, path: str) -> tuple[dict[str, dict], list[FieldError]]:
    out: list[FieldError] = []
    known: dict[str, dict] = {}
    created = (
        {f"{pod_name}-{_m(v).get('name')}" for v in vols if _m(v).get("ephemeral") is not None} if pod_name else set()
    )
    for i, vol in enumerate(vols):
        vol, p = _m(vol), f"{path}[{i}]"
        name = _s(vol.get("name"))
        errs = _volume_source(vol, p, name, pod_name)
        errs += [f.required(f"{p}.name")] if not name else sp.dns_label(name, f"{p}.name")
        if name in known:
            errs.append(f.duplicate(f"{p}.name", name))
        if errs:
            out += errs
        else:
            known[name] = vol
        claim = _s(_m(vol.get("persistentVolumeClaim")).get("claimName"))
        if claim and claim in created:
            out.append(
                f.invalid(
                    f"{p}.persistentVolumeClaim.claimName",
                    claim,
                    "must not reference a PVC that gets created for an ephemeral volume",
                )
            )
    return known, out


def _volume_source(vol: dict, path: str, name: str, pod_name: str) -> list[FieldError]:
    out: list[FieldError] = []
    count = 0
    for json_key, err_key in _SOURCES:
        if vol.get(json_key) is None:
            continue
        if count:
            out.append(f.forbidden(f"{path}.{err_key}", "may not specify more than 1 volume type"))
            continue
        count += 1
        src, p = _m(vol[json_key]), f"{path}.{json_key}"
        if json_key == "emptyDir" and src.get("sizeLimit") is not None and q.from_json(src["sizeLimit"]).sign() < 0:
            out.append(f.forbidden(f"{p}.sizeLimit", "SizeLimit field must be a valid resource quantity"))
        elif json_key == "hostPath":
            if not src.get("path"):
                out.append(f.required(f"{p}.path"))
            else:
                out += sp.no_backsteps(_s(src["path"]), f"{p}.path")
                if src.get("type") is not None and src["type"] not in _HOST_PATH_TYPES:
                    out.append(f.not_supported(f"{p}.type", src["type"], _HOST_PATH_TYPES))
        elif json_key == "secret":
            out += [f.required(f"{p}.secretName")] if not src.get("secretName") else []
            out += _mode(src.get("defaultMode"), f"{p}.defaultMode") + _key_paths(src.get("items"), f"{p}.items")
        elif json_key == "configMap":
            out += [f.required(f"{p}.name")] if not src.get("name") else []
            out += _mode(src.get("defaultMode"), f"{p}.defaultMode") + _key_paths(src.get("items"), f"{p}.items")
        elif json_key == "persistentVolumeClaim" and not src.get("claimName"):
            out.append(f.required(f"{p}.claimName"))
        elif json_key == "nfs":
            out += [f.required(f"{p}.{k}") for k in ("server", "path") if not src.get(k)]
            if not _s(src.get("path")).startswith("/"):
                out.append(f.invalid(f"{p}.path", _s(src.get("path")), "must be an absolute path"))
        elif json_key == "downwardAPI":
            out += _mode(src.get("defaultMode"), f"{p}.defaultMode")
            for item in _l(src.get("items")):
                out += _downward_file(_m(item), p)
        elif json_key == "projected":
            out += _mode(src.get("defaultMode"), f"{p}.defaultMode") + _projection(src, p)
        elif json_key == "csi":
            out += sp.csi_driver_name(src.get("driver"), f"{p}.driver")
        elif json_key == "ephemeral":
            out += _ephemeral(src, p, name, pod_name)
    if not count:
        out.append(f.required(path, "must specify a volume type"))
    return out


def _ephemeral(src: dict, path: str, name: str, pod_name: str) -> list[FieldError]:
    template = src.get("volumeClaimTemplate")
    if template is None:
        return [f.required(f"{path}.volumeClaimTemplate")]
    template, p = _m(template), f"{path}.volumeClaimTemplate"
    md = _m(template.get("metadata"))
    out = f.annotations(md.get("annotations"), f"{p}.metadata.annotations")
    out += f.labels(md.get("labels"), f"{p}.metadata.labels")
    out += [f.forbidden(f"{p}.metadata.{k}", "cannot be set") for k in sorted(md) if k not in ("labels", "annotations")]
    out += sp.pvc_spec(_m(template.get("spec")), f"{p}.spec")
    if pod_name and name:
        claim = f"{pod_name}-{name}"
        out += [
            f.invalid(f"{path}.name", name, f"PVC name {f.go_quote(claim)}: {m}")
            for m in f.name_is_dns_subdomain(claim)
        ]
    return out


def _projection(src: dict, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[str] = set()
    for i, source in enumerate(_l(src.get("sources"))):
        source, p = _m(source), f"{path}.sources[{i}]"
        kinds = [
            k
            for k in (
                "secret",
                "configMap",
                "downwardAPI",
                "serviceAccountToken",
                "clusterTrustBundle",
                "podCertificate",
            )
            if source.get(k) is not None
        ]
        for kind in ("secret", "configMap"):
            if source.get(kind) is not None:
                ref = _m(source[kind])
                out += [f.required(f"{p}.{kind}.name")] if not ref.get("name") else []
                out += _key_paths(ref.get("items"), f"{p}.{kind}.items")
                for item in _l(ref.get("items")):
                    item_path = _s(_m(item).get("path"))
                    if item_path and item_path in seen:
                        out.append(f.invalid(path, _s(ref.get("name")), "conflicting duplicate paths"))
                    seen.add(item_path)
        if source.get("downwardAPI") is not None:
            for item in _l(_m(source["downwardAPI"]).get("items")):
                out += _downward_file(_m(item), f"{p}.downwardAPI")
        token = source.get("serviceAccountToken")
        if token is not None:
            token = _m(token)
            seconds = token.get("expirationSeconds", 0)
            if isinstance(seconds, int) and seconds < 600:
                out.append(
                    f.invalid(
                        f"{p}.serviceAccountToken.expirationSeconds",
                        seconds,
                        "may not specify a duration less than 10 minutes",
                    )
                )
            if isinstance(seconds, int) and seconds > 1 << 32:
                out.append(
                    f.invalid(
                        f"{p}.serviceAccountToken.expirationSeconds",
                        seconds,
                        "may not specify a duration larger than 2^32 seconds",
                    )
                )
            if not token.get("path"):
                out.append(f.required(f"{path}.path"))
            else:
                out += _local_path(_s(token["path"]), f"{path}.path")
        if len(kinds) > 1:
            out.append(f.forbidden(p, "may not specify more than 1 volume type per source"))
    return out


def _downward_file(item: dict, path: str) -> list[FieldError]:
    out = [f.required(f"{path}.path")] if not item.get("path") else []
    out += _local_path(_s(item.get("path")), f"{path}.path")
    if item.get("fieldRef") is None and item.get("resourceFieldRef") is None:
        out.append(f.required(path, "one of fieldRef and resourceFieldRef is required"))
    elif item.get("fieldRef") is not None and item.get("resourceFieldRef") is not None:
        out.append(f.invalid(path, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
    return out + _mode(item.get("mode"), f"{path}.mode")


def _key_paths(items: Any, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    for i, item in enumerate(_l(items)):
        item, p = _m(item), f"{path}[{i}]"
        out += [f.required(f"{p}.{k}") for k in ("key", "path") if not item.get(k)]
        out += _local_path(_s(item.get("path")), f"{p}.path") + _mode(item.get("mode"), f"{p}.mode")
    return out


def _mode(mode: Any, path: str) -> list[FieldError]:
    return [f.invalid(path, mode, _FILE_MODE)] if isinstance(mode, int) and not 0 <= mode <= 0o777 else []


def _local_path(target: str, path: str) -> list[FieldError]:
    """``ValidateLocalNonReservedPath``: relative, no ``..`` element, not starting with ``..``."""
    out = [f.invalid(path, target, "must be a relative path")] if target.startswith("/") else []
    out += sp.no_backsteps(target, path)
    if target.startswith("..") and not target.startswith("../"):
        out.append(f.invalid(path, target, "must not start with '..'"))
    return out


# ---- containers ------------------------------------------------------------------------------------


def _containers(containers: list, vols: dict, path: str, spec: dict) -> list[FieldError]:
    if not containers:
        return [f.required(path)]
    out: list[FieldError] = []
    names: set[str] = set()
    for i, c in enumerate(containers):
        c, p = _m(c), f"{path}[{i}]"
        out += _container(c, vols, p)
        name = _s(c.get("name"))
        if name in names:
            out.append(f.duplicate(f"{p}.name", name))
        names.add(name)
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if c.get(probe) is not None:
                out += _probe(_m(c[probe]), f"{p}.{probe}", probe)
        if c.get("lifecycle") is not None:
            for hook in ("postStart", "preStop"):
                if _m(c["lifecycle"]).get(hook) is not None:
                    out += _handler(_m(c["lifecycle"])[hook], f"{p}.lifecycle.{hook}")
        if c.get("restartPolicy") is not None:
            out.append(f.forbidden(f"{p}.restartPolicy", "may not be set for non-init containers"))
    return out


def _init_containers(inits: list, regular: list, vols: dict, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    names = {_s(_m(c).get("name")) for c in regular}
    for i, c in enumerate(inits):
        c, p = _m(c), f"{path}[{i}]"
        out += _container(c, vols, p)
        policy = c.get("restartPolicy")
        if policy is not None and policy != "Always":
            out.append(f.not_supported(f"{p}.restartPolicy", policy, ["Always"]))
        name = _s(c.get("name"))
        if name in names:
            out.append(f.duplicate(f"{p}.name", name))
        elif name:
            names.add(name)
        if policy != "Always":
            for k in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
                if c.get(k) is not None:
                    out.append(
                        f.forbidden(f"{p}.{k}", "may not be set for init containers without restartPolicy=Always")
                    )
    return out


def _container(c: dict, vols: dict, path: str) -> list[FieldError]:
    name = _s(c.get("name"))
    out = [f.required(f"{path}.name")] if not name else sp.dns_label(name, f"{path}.name")
    if not c.get("image"):
        out.append(f.required(f"{path}.image"))
    policy = c.get("terminationMessagePolicy")
    if not policy:
        out.append(f.required(f"{path}.terminationMessagePolicy"))
    elif policy not in ("File", "FallbackToLogsOnError"):
        out.append(f.not_supported(f"{path}.terminationMessagePolicy", policy, ["File", "FallbackToLogsOnError"]))
    out += _ports(_l(c.get("ports")), f"{path}.ports")
    out += _env(_l(c.get("env")), f"{path}.env") + _env_from(_l(c.get("envFrom")), f"{path}.envFrom")
    mounts = {_s(_m(m).get("name")): _s(_m(m).get("mountPath")) for m in _l(c.get("volumeMounts"))}
    devices = {_s(_m(d).get("name")): _s(_m(d).get("devicePath")) for d in _l(c.get("volumeDevices"))}
    out += _mounts(_l(c.get("volumeMounts")), devices, vols, c, f"{path}.volumeMounts")
    out += _devices(_l(c.get("volumeDevices")), mounts, vols, f"{path}.volumeDevices")
    pull = c.get("imagePullPolicy")
    if not pull:
        out.append(f.required(f"{path}.imagePullPolicy"))
    elif pull not in _PULL_POLICIES:
        out.append(f.not_supported(f"{path}.imagePullPolicy", pull, _PULL_POLICIES))
    out += sp.resources(_m(c.get("resources")), f"{path}.resources", container=True)
    return out + _security_context(_m(c.get("securityContext")), f"{path}.securityContext")


def _ports(ports: list, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    names: set[str] = set()
    for i, port in enumerate(ports):
        port, p = _m(port), f"{path}[{i}]"
        name = _s(port.get("name"))
        if name:
            msgs = _port_name(name)
            if msgs:
                out += [f.invalid(f"{p}.name", name, m) for m in msgs]
            elif name in names:
                out.append(f.duplicate(f"{p}.name", name))
            names.add(name)
        number = port.get("containerPort") or 0
        if not number:
            out.append(f.required(f"{p}.containerPort"))
        elif not 1 <= number <= 65535:
            out.append(f.invalid(f"{p}.containerPort", number, "must be between 1 and 65535, inclusive"))
        host = port.get("hostPort") or 0
        if host and not 1 <= host <= 65535:
            out.append(f.invalid(f"{p}.hostPort", host, "must be between 1 and 65535, inclusive"))
        protocol = port.get("protocol")
        if not protocol:
            out.append(f.required(f"{p}.protocol"))
        elif protocol not in _PROTOCOLS:
            out.append(f.not_supported(f"{p}.protocol", protocol, _PROTOCOLS))
    return out


def _port_name(name: str) -> list[str]:
    out = ["must be no more than 15 characters"] if len(name) > 15 else []
    if not all(ch in "-abcdefghijklmnopqrstuvwxyz0123456789" for ch in name):
        out.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not any("a" <= ch <= "z" for ch in name):
        out.append("must contain at least one letter (a-z)")
    if "--" in name:
        out.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        out.append("must not begin or end with a hyphen")
    return out


def _env_name(name: str, path: str) -> list[FieldError]:
    if any(ord(ch) > 126 or ord(ch) < 32 or ch == "=" for ch in name):
        return [
            f.invalid(
                path,
                name,
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            )
        ]
    return []


def _env(env: list, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    for i, var in enumerate(env):
        var, p = _m(var), f"{path}[{i}]"
        name = _s(var.get("name"))
        out += [f.required(f"{p}.name")] if not name else _env_name(name, f"{p}.name")
        source = var.get("valueFrom")
        if source is None:
            continue
        source = _m(source)
        kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if source.get(k)]
        for kind in ("configMapKeyRef", "secretKeyRef"):
            if source.get(kind):
                ref = _m(source[kind])
                out += [
                    f.invalid(f"{p}.valueFrom.{kind}.name", _s(ref.get("name")), m)
                    for m in f.name_is_dns_subdomain(_s(ref.get("name")))
                ]
                key = _s(ref.get("key"))
                out += (
                    [f.required(f"{p}.valueFrom.{kind}.key")]
                    if not key
                    else [f.invalid(f"{p}.valueFrom.{kind}.key", key, m) for m in f.config_map_key(key)]
                )
        if source.get("fieldRef"):
            ref = _m(source["fieldRef"])
            if not ref.get("apiVersion"):
                out.append(f.required(f"{p}.valueFrom.fieldRef.apiVersion"))
            elif not ref.get("fieldPath"):
                out.append(f.required(f"{p}.valueFrom.fieldRef.fieldPath"))
        if not kinds:
            out.append(
                f.invalid(
                    f"{p}.valueFrom",
                    "",
                    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                )
            )
        elif var.get("value"):
            out.append(f.invalid(f"{p}.valueFrom", "", "may not be specified when `value` is not empty"))
        elif len(kinds) > 1:
            out.append(f.invalid(f"{p}.valueFrom", "", "may not have more than one field specified at a time"))
    return out


def _env_from(sources: list, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    for i, src in enumerate(sources):
        src, p = _m(src), f"{path}[{i}]"
        if src.get("prefix"):
            out += _env_name(_s(src["prefix"]), f"{p}.prefix")
        kinds = [k for k in ("configMapRef", "secretRef") if src.get(k) is not None]
        for kind in kinds:
            name = _s(_m(src[kind]).get("name"))
            out += (
                [f.required(f"{p}.{kind}.name")]
                if not name
                else [f.invalid(f"{p}.{kind}.name", name, m) for m in f.name_is_dns_subdomain(name, True)]
            )
        if not kinds:
            out.append(f.invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif len(kinds) > 1:
            out.append(f.invalid(path, "", "may not have more than one field specified at a time"))
    return out


def _mounts(mounts: list, devices: dict, vols: dict, container: dict, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[str] = set()
    for i, mnt in enumerate(mounts):
        mnt, p = _m(mnt), f"{path}[{i}]"
        name, mount_path = _s(mnt.get("name")), _s(mnt.get("mountPath"))
        if not name:
            out.append(f.required(f"{p}.name"))
        if name not in vols:
            out.append(f.not_found(f"{p}.name", name))
        if not mount_path:
            out.append(f.required(f"{p}.mountPath"))
        if mount_path in seen:
            out.append(f.invalid(f"{p}.mountPath", mount_path, "must be unique"))
        seen.add(mount_path)
        if name in devices:
            out.append(f.invalid(f"{p}.name", name, "must not already exist in volumeDevices"))
        if mount_path in devices.values():
            out.append(f.invalid(f"{p}.mountPath", mount_path, "must not already exist as a path in volumeDevices"))
        for sub in ("subPath", "subPathExpr"):
            if mnt.get(sub):
                out += _local_relative(_s(mnt[sub]), f"{path}.{sub}")
        if mnt.get("subPath") and mnt.get("subPathExpr"):
            out.append(
                f.invalid(f"{p}.subPathExpr", mnt["subPathExpr"], "subPathExpr and subPath are mutually exclusive")
            )
        propagation = mnt.get("mountPropagation")
        if propagation is not None:
            p_path = f"{path}.mountPropagation"
            out += sp.enum(propagation, p_path, ["Bidirectional", "HostToContainer", "None"], required=False)
            privileged = _m(container.get("securityContext")).get("privileged") is True
            if propagation == "Bidirectional" and not privileged:
                out.append(
                    f.forbidden(p_path, "Bidirectional mount propagation is available only to privileged containers")
                )
    return out


def _local_relative(target: str, path: str) -> list[FieldError]:
    out = [f.invalid(path, target, "must be a relative path")] if target.startswith("/") else []
    return out + sp.no_backsteps(target, path)


def _devices(devices: list, mounts: dict, vols: dict, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    paths: set[str] = set()
    names: set[str] = set()
    for i, dev in enumerate(devices):
        dev, p = _m(dev), f"{path}[{i}]"
        name, dev_path = _s(dev.get("name")), _s(dev.get("devicePath"))
        vol = vols.get(name)
        if not name:
            out.append(f.required(f"{p}.name"))
        if name in names:
            out.append(f.invalid(f"{p}.name", name, "must be unique"))
        if vol is not None and vol.get("persistentVolumeClaim") is None and vol.get("ephemeral") is None:
            out.append(
                f.invalid(
                    f"{p}.name",
                    name,
                    "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
                )
            )
        if vol is None:
            out.append(f.not_found(f"{p}.name", name))
        if not dev_path:
            out.append(f.required(f"{p}.devicePath"))
        if dev_path in paths:
            out.append(f.invalid(f"{p}.devicePath", dev_path, "must be unique"))
        if dev_path and ".." in dev_path.split("/"):
            out.append(f.invalid(f"{p}.devicePath", dev_path, "can not contain backsteps ('..')"))
        else:
            paths.add(dev_path)
        if name in mounts:
            out.append(f.invalid(f"{p}.name", name, "must not already exist in volumeMounts"))
        if dev_path in mounts.values():
            out.append(f.invalid(f"{p}.devicePath", dev_path, "must not already exist as a path in volumeMounts"))
        if name:
            names.add(name)
    return out


def _probe(probe: dict, path: str, kind: str) -> list[FieldError]:
    out = _handler(probe, path)
    for name in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        value = probe.get(name)
        if isinstance(value, int) and value < 0:
            out.append(f.invalid(f"{path}.{name}", value, "must be greater than or equal to 0"))
    if kind != "readinessProbe" and probe.get("successThreshold", 1) != 1:
        out.append(f.invalid(f"{path}.successThreshold", probe.get("successThreshold"), "must be 1"))
    return out


def _handler(handler: Any, path: str) -> list[FieldError]:
    handler = _m(handler)
    out: list[FieldError] = []
    count = 0
    for kind in ("exec", "httpGet", "tcpSocket", "grpc", "sleep"):
        if handler.get(kind) is None:
            continue
        if count:
            out.append(f.forbidden(f"{path}.{kind}", "may not specify more than 1 handler type"))
            continue
        count += 1
        action = _m(handler[kind])
        if kind == "exec" and not action.get("command"):
            out.append(f.required(f"{path}.exec.command"))
        if kind == "httpGet":
            if not action.get("path"):
                out.append(f.required(f"{path}.httpGet.path"))
            if action.get("scheme") not in ("HTTP", "HTTPS"):
                out.append(f.not_supported(f"{path}.httpGet.scheme", action.get("scheme") or "", ["HTTP", "HTTPS"]))
    if not count:
        out.append(f.required(path, "must specify a handler type"))
    return out


def _security_context(sc: dict, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    for name in ("runAsUser", "runAsGroup"):
        value = sc.get(name)
        if isinstance(value, int) and not 0 <= value <= _MAX_INT32:
            out.append(f.invalid(f"{path}.{name}", value, f"must be between 0 and {_MAX_INT32}, inclusive"))
    if sc.get("allowPrivilegeEscalation") is False and sc.get("privileged") is True:
        out.append(f.invalid(path, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
    if sc.get("procMount") is not None:
        out += sp.enum(sc["procMount"], f"{path}.procMount", ["Default", "Unmasked"], required=False)
    return out + _seccomp(sc.get("seccompProfile"), f"{path}.seccompProfile")


def _pod_security_context(sc: dict, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    for name in ("fsGroup", "runAsUser", "runAsGroup"):
        value = sc.get(name)
        if isinstance(value, int) and not 0 <= value <= _MAX_INT32:
            out.append(f.invalid(f"{path}.{name}", value, f"must be between 0 and {_MAX_INT32}, inclusive"))
    for i, gid in enumerate(_l(sc.get("supplementalGroups"))):
        if isinstance(gid, int) and not 0 <= gid <= _MAX_INT32:
            out.append(
                f.invalid(f"{path}.supplementalGroups[{i}]", gid, f"must be between 0 and {_MAX_INT32}, inclusive")
            )
    if sc.get("fsGroupChangePolicy") is not None:
        out += sp.enum(
            sc["fsGroupChangePolicy"], f"{path}.fsGroupChangePolicy", ["Always", "OnRootMismatch"], required=False
        )
    return out + _seccomp(sc.get("seccompProfile"), f"{path}.seccompProfile")


def _seccomp(profile: Any, path: str) -> list[FieldError]:
    if profile is None:
        return []
    profile = _m(profile)
    kind = profile.get("type")
    if not kind:
        return [f.required(f"{path}.type", "type is required when seccompProfile is set")]
    out = sp.enum(kind, f"{path}.type", ["Localhost", "RuntimeDefault", "Unconfined"], required=False)
    if kind == "Localhost" and profile.get("localhostProfile") is None:
        out.append(f.required(f"{path}.localhostProfile", "must be set when seccomp type is Localhost"))
    elif kind != "Localhost" and profile.get("localhostProfile") is not None:
        out.append(f.invalid(f"{path}.localhostProfile", profile, "can only be set when seccomp type is Localhost"))
    return out
