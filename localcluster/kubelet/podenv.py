"""A container's environment as the kubelet computes it, and the downward API's field values.

Order (later wins): the runtime's base (PATH with this interpreter's bin directory first,
HOSTNAME, HOME, the KUBERNETES_SERVICE_* variables of the in-cluster endpoint, ``apiproxy.py``),
the image's ENV, ``envFrom`` (secretRef/configMapRef with ``prefix``), then ``env`` (``value``
with ``$(VAR)`` expansion, ``valueFrom`` secretKeyRef, configMapKeyRef, fieldRef,
resourceFieldRef). A missing secret, config map or key that is not ``optional`` raises
``ConfigError`` (the container waits with reason CreateContainerConfigError, as upstream).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from localcluster.kubelet.images import BIN_DIR, Image

Obj = dict[str, Any]
Getter = Callable[[str, str], Obj | None]  # (namespace, name) -> object or None

POD_IP = "127.0.0.1"
HOST_IP = "127.0.0.1"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ConfigError(Exception):
    """A referenced secret, config map or key is missing (CreateContainerConfigError)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known variables are replaced, ``$$`` is a literal ``$``,
    unknown references stay as they are."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def field_value(pod: Obj, path: str) -> str:
    """The value of a downward API ``fieldRef.fieldPath``."""
    md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return str((md.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = md.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": POD_IP,
        "status.podIPs": POD_IP,
        "status.hostIP": HOST_IP,
        "status.hostIPs": HOST_IP,
    }
    if path not in simple:
        raise ConfigError(f'unsupported fieldPath "{path}"')
    return str(simple[path] or "")


def resource_value(container: Obj, ref: Obj) -> str:
    """``resourceFieldRef``: the container's own request/limit, else what a node of this machine has."""
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if value is not None:
        return str(value)
    if kind == "limits" and name == "cpu":
        return str(os.cpu_count() or 1)
    if kind == "limits" and name == "memory":
        return str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return "0"


def _data(obj: Obj, secret: bool) -> dict[str, str]:
    if secret:
        return {k: base64.b64decode(v or "").decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    out = dict(obj.get("data") or {})
    for k, v in (obj.get("binaryData") or {}).items():
        out[k] = base64.b64decode(v or "").decode(errors="replace")
    return out


def base_env(pod: Obj, endpoint: tuple[str, int] | None) -> dict[str, str]:
    """What every container starts with; ``endpoint``: the in-cluster API endpoint (https), if any."""
    env = {
        "PATH": f"{BIN_DIR}:{DEFAULT_PATH}",
        "HOSTNAME": (pod.get("metadata") or {}).get("name", ""),
        "HOME": "/root",
    }
    if endpoint is not None:
        host, port = endpoint[0], str(endpoint[1])
        env.update(
            KUBERNETES_SERVICE_HOST=host,
            KUBERNETES_SERVICE_PORT=port,
            KUBERNETES_SERVICE_PORT_HTTPS=port,
            KUBERNETES_PORT=f"tcp://{host}:{port}",
            KUBERNETES_PORT_443_TCP=f"tcp://{host}:{port}",
            KUBERNETES_PORT_443_TCP_PROTO="tcp",
            KUBERNETES_PORT_443_TCP_ADDR=host,
            KUBERNETES_PORT_443_TCP_PORT=port,
        )
    return env


def container_env(
    pod: Obj, container: Obj, image: Image | None, base: Mapping[str, str], secrets: Getter, configmaps: Getter
) -> dict[str, str]:
    ns = pod["metadata"]["namespace"]
    env = dict(base)
    if image is not None:
        env.update(image.env)
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        for kind, getter, secret in (("secretRef", secrets, True), ("configMapRef", configmaps, False)):
            ref = src.get(kind)
            if not ref:
                continue
            obj = getter(ns, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                what = "secret" if secret else "configmap"
                raise ConfigError(f'{what} "{ref.get("name")}" not found')
            for k, v in _data(obj, secret).items():
                env[prefix + k] = v
    for item in container.get("env") or []:
        name = item.get("name", "")
        if "value" in item or not item.get("valueFrom"):
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        src = item["valueFrom"]
        if src.get("fieldRef"):
            env[name] = field_value(pod, src["fieldRef"].get("fieldPath", ""))
        elif src.get("resourceFieldRef"):
            env[name] = resource_value(container, src["resourceFieldRef"])
        else:
            for kind, getter, secret in (("secretKeyRef", secrets, True), ("configMapKeyRef", configmaps, False)):
                ref = src.get(kind)
                if not ref:
                    continue
                what = "secret" if secret else "configmap"
                obj = getter(ns, ref.get("name", ""))
                data = _data(obj, secret) if obj is not None else None
                if data is None or ref.get("key") not in data:
                    if ref.get("optional"):
                        break
                    if data is None:
                        raise ConfigError(f'{what} "{ref.get("name")}" not found')
                    raise ConfigError(
                        f"couldn't find key {ref.get('key')} in {what.capitalize()} {ns}/{ref.get('name')}"
                    )
                env[name] = data[ref["key"]]
                break
    return env
