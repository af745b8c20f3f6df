"""The PodSecurity admission plugin for pods (upstream ``k8s.io/pod-security-admission``), enforce mode.

A namespace's label ``pod-security.kubernetes.io/enforce`` names its level: ``privileged`` (nothing is checked; also
when the label is absent, the built-in default), ``baseline`` or ``restricted``. A namespace created with a value
that is not a level is refused (422, upstream's ``ValidateNamespace``); one that got such a value later is enforced
as ``restricted`` (upstream fails closed on a label it cannot parse). ``enforce-version`` is read as
``latest`` whatever it says. A pod created in such a namespace is refused with 403::

    pods "NAME" is forbidden: violates PodSecurity "restricted:latest": REASON (DETAIL), REASON (DETAIL)

the failed checks in upstream's order (the baseline checks by id, then the restricted ones by id), each with
upstream's reason and detail words. Checks modelled (every container, init container and ephemeral container):

* baseline: ``capabilities_baseline`` (only the default capabilities may be added), ``hostNamespaces``,
  ``hostPathVolumes``, ``hostPorts``, ``privileged``, ``seccompProfile_baseline`` (no ``Unconfined``);
* restricted (all of baseline, the restricted checks replacing capabilities_baseline, hostPathVolumes and
  seccompProfile_baseline): ``allowPrivilegeEscalation`` (must be false), ``capabilities_restricted`` (drop
  ``ALL``, add only ``NET_BIND_SERVICE``), ``restrictedVolumes`` (configMap, csi, downwardAPI, emptyDir, ephemeral,
  image, persistentVolumeClaim, projected, secret only), ``runAsNonRoot`` (true on the pod or every container, false
  nowhere), ``runAsUser`` (never 0), ``seccompProfile_restricted`` (``RuntimeDefault`` or ``Localhost``, on the pod
  or every container). Windows pods (``spec.os.name: windows``) skip allowPrivilegeEscalation and
  capabilities_restricted, as upstream since 1.25.

Not modelled (no pod of this project sets them): AppArmor, SELinux options, procMount, sysctls, host probes, Windows
host process, user-namespace relaxation (``hostUsers: false``), exemptions, and the audit and warn modes. Only
creates are checked (upstream also checks an update that changes a pod's security-relevant fields; the emulator
refuses those updates as immutable anyway). Mirror pods are not exempt upstream and are not here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from localcluster.kubeapi.errors import invalid
from localcluster.kubeapi.rbac import forbidden_error
from localcluster.kubeapi.resources import Obj, Registry, ResourceType
from localcluster.kubeapi.store import Store

LABEL_PREFIX = "pod-security.kubernetes.io/"
ENFORCE_LABEL = LABEL_PREFIX + "enforce"
LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPABILITIES = frozenset(
    (
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    )
)
RESTRICTED_VOLUMES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
VALID_SECCOMP = ("RuntimeDefault", "Localhost")

Result = tuple[str, str] | None  # (reason, detail) of a failed check, None when it passes


def level_of(namespace: Obj | None) -> str:
    """The enforced level of ``namespace`` (see the module doc)."""
    value = (((namespace or {}).get("metadata") or {}).get("labels") or {}).get(ENFORCE_LABEL)
    if value is None:
        return "privileged"
    return value if value in LEVELS else "restricted"


def admit(store: Store, registry: Registry, rt: ResourceType, obj: Obj, namespace: str) -> None:
    """Raise the plugin's 403 when a new pod violates its namespace's enforced level, its 422 when a new namespace's
    enforce label is not a level (caller holds ``store.lock``)."""
    if rt.key == ("", "namespaces"):
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(ENFORCE_LABEL)
        if value is not None and value not in LEVELS:
            field = f"metadata.labels[{ENFORCE_LABEL}]"
            message = f'Invalid value: "{value}": must be one of {", ".join(LEVELS)}'
            raise invalid("Namespace", "", (obj.get("metadata") or {}).get("name") or "", [(field, message)])
        return
    if rt.key != ("", "pods"):
        return
    level = level_of(store.find(registry.get("", "namespaces"), "", namespace))
    if level == "privileged":
        return
    failed = [r for r in evaluate(obj.get("spec") or {}, level) if r is not None]
    if not failed:
        return
    md = obj.get("metadata") or {}
    detail = ", ".join(f"{reason} ({d})" if d else reason for reason, d in failed)
    raise forbidden_error("", "pods", md.get("name") or "", f'violates PodSecurity "{level}:latest": {detail}')


def evaluate(spec: Obj, level: str) -> list[Result]:
    """Each check of ``level`` over pod ``spec``, in upstream's order: the baseline checks sorted by id, then the
    restricted ones sorted by id, without the baseline checks a restricted one replaces."""
    baseline = [_capabilities_baseline, _host_namespaces, _host_path_volumes, _host_ports, _privileged]
    baseline.append(_seccomp_baseline)
    if level != "restricted":
        return [check(spec) for check in baseline]
    replaced = (_capabilities_baseline, _host_path_volumes, _seccomp_baseline)
    restricted = [
        _allow_privilege_escalation,
        _capabilities_restricted,
        _restricted_volumes,
        _run_as_non_root,
        _run_as_user,
        _seccomp_restricted,
    ]
    return [check(spec) for check in [*(c for c in baseline if c not in replaced), *restricted]]


def _containers(spec: Obj) -> Iterator[Obj]:
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []
    yield from spec.get("ephemeralContainers") or []


def _sc(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def _names(what: str, names: list[str]) -> str:
    """``container "a"`` / ``containers "a", "b"`` (upstream's pluralize and joinQuote)."""
    return f"{what if len(names) == 1 else what + 's'} " + ", ".join(f'"{n}"' for n in names)


def _windows(spec: Obj) -> bool:
    return ((spec.get("os") or {}).get("name")) == "windows"


def _host_namespaces(spec: Obj) -> Result:
    found = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ("host namespaces", ", ".join(found)) if found else None


def _host_ports(spec: Obj) -> Result:
    bad, ports = [], set()
    for c in _containers(spec):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            bad.append(c.get("name", ""))
            ports |= used
    if not bad:
        return None
    uses, word = "uses" if len(bad) == 1 else "use", "hostPort" if len(ports) == 1 else "hostPorts"
    return "hostPort", f"{_names('container', bad)} {uses} {word} {', '.join(sorted(ports))}"


def _privileged(spec: Obj) -> Result:
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("privileged") is True]
    return ("privileged", f"{_names('container', bad)} must not set securityContext.privileged=true") if bad else None


def _host_path_volumes(spec: Obj) -> Result:
    bad = [v.get("name", "") for v in spec.get("volumes") or [] if "hostPath" in v]
    return ("hostPath volumes", _names("volume", bad)) if bad else None


def _capabilities_baseline(spec: Obj) -> Result:
    bad, caps = [], []
    for c in _containers(spec):
        added = [cap for cap in (_sc(c).get("capabilities") or {}).get("add") or [] if cap not in BASELINE_CAPABILITIES]
        if added:
            bad.append(c.get("name", ""))
            caps += [cap for cap in added if cap not in caps]
    if not bad:
        return None
    quoted = ", ".join(f'"{cap}"' for cap in sorted(caps))
    return (
        "non-default capabilities",
        f"{_names('container', bad)} must not include {quoted} in securityContext.capabilities.add",
    )


def _seccomp_baseline(spec: Obj) -> Result:
    return _bad_seccomp(spec, lambda kind: kind != "Unconfined")


def _bad_seccomp(spec: Obj, valid: Callable[[str], bool]) -> Result:
    """Who sets a seccompProfile type that is not ``valid`` (upstream's explicit bad setters), or None."""
    setters, values = [], set()
    pod_type = (_sc(spec).get("seccompProfile") or {}).get("type")
    if pod_type is not None and not valid(pod_type):
        setters.append("pod")
        values.add(pod_type)
    explicit = []
    for c in _containers(spec):
        kind = (_sc(c).get("seccompProfile") or {}).get("type")
        if kind is not None and not valid(kind):
            explicit.append(c.get("name", ""))
            values.add(kind)
    if explicit:
        setters.append(_names("container", explicit))
    if not setters:
        return None
    quoted = ", ".join(f'"{v}"' for v in sorted(values))
    return "seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {quoted}"


def _allow_privilege_escalation(spec: Obj) -> Result:
    if _windows(spec):
        return None
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return "allowPrivilegeEscalation != false", (
        f"{_names('container', bad)} must set securityContext.allowPrivilegeEscalation=false"
    )


def _capabilities_restricted(spec: Obj) -> Result:
    if _windows(spec):
        return None
    missing, adding, caps = [], [], []
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities")
        if capabilities is None:
            missing.append(c.get("name", ""))
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing.append(c.get("name", ""))
        added = [cap for cap in capabilities.get("add") or [] if cap != "NET_BIND_SERVICE"]
        if added:
            adding.append(c.get("name", ""))
            caps += [cap for cap in added if cap not in caps]
    details = []
    if missing:
        details.append(f'{_names("container", missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        quoted = ", ".join(f'"{cap}"' for cap in sorted(caps))
        details.append(f"{_names('container', adding)} must not include {quoted} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def _restricted_volumes(spec: Obj) -> Result:
    bad, kinds = [], set()
    for v in spec.get("volumes") or []:
        if any(key in v for key in RESTRICTED_VOLUMES):
            continue
        bad.append(v.get("name", ""))
        kinds.add(next((key for key in v if key != "name"), "unknown"))
    if not bad:
        return None
    uses = "uses" if len(bad) == 1 else "use"
    kind_words = _names("restricted volume type", sorted(kinds))
    return "restricted volume types", f"{_names('volume', bad)} {uses} {kind_words}"


def _run_as_non_root(spec: Obj) -> Result:
    pod = _sc(spec).get("runAsNonRoot")
    setters = ["pod"] if pod is False else []
    explicit = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsNonRoot") is False]
    implicit = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsNonRoot") is None and pod is not True]
    if explicit:
        setters.append(_names("container", explicit))
    if setters:
        return "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {_names('container', implicit)} must set securityContext.runAsNonRoot=true",
        )
    return None


def _run_as_user(spec: Obj) -> Result:
    setters = ["pod"] if _sc(spec).get("runAsUser") == 0 else []
    explicit = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if explicit:
        setters.append(_names("container", explicit))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def _seccomp_restricted(spec: Obj) -> Result:
    bad = _bad_seccomp(spec, lambda kind: kind in VALID_SECCOMP)
    if bad is not None:
        return bad
    if (_sc(spec).get("seccompProfile") or {}).get("type") in VALID_SECCOMP:
        return None
    implicit = [
        c.get("name", "") for c in _containers(spec) if (_sc(c).get("seccompProfile") or {}).get("type") is None
    ]
    if not implicit:
        return None
    return "seccompProfile", (
        f'pod or {_names("container", implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault"'
        ' or "Localhost"'
    )
