"""The ServiceAccount admission plugin for pods (upstream ``plugin/pkg/admission/serviceaccount``).

On create, a pod's ``spec.serviceAccountName`` (defaulted to ``default`` by ``meta.defaults``, as
the plugin does) must name an existing ServiceAccount of its namespace, else 403:
``pods "NAME" is forbidden: error looking up service account NS/SA: serviceaccount "SA" not found``
(the pod's ``generateName`` stands for its name when it has none yet). Mirror pods (annotation
``kubernetes.io/config.mirror``) are not checked. Updates are not checked, as upstream.

The plugin's other half, mounting the ``kube-api-access-*`` projected volume, is done by the local
kubelet when it starts the pod (``localcluster/kubelet/volumes.py``), so pod specs in the API do not
show that volume.
"""

from __future__ import annotations

from localcluster.kubeapi.rbac import forbidden_error
from localcluster.kubeapi.resources import Obj, Registry, ResourceType
from localcluster.kubeapi.store import Store

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def admit(store: Store, registry: Registry, rt: ResourceType, obj: Obj, namespace: str) -> None:
    """Raise the plugin's 403 when a new pod's ServiceAccount does not exist (caller holds ``store.lock``)."""
    if rt.key != ("", "pods"):
        return
    md = obj.get("metadata") or {}
    if MIRROR_ANNOTATION in (md.get("annotations") or {}):
        return
    account = (obj.get("spec") or {}).get("serviceAccountName") or "default"
    if store.find(registry.get("", "serviceaccounts"), namespace, account) is not None:
        return
    name = md.get("name") or md.get("generateName") or "Unknown"
    raise forbidden_error(
        "",
        "pods",
        name,
        f'error looking up service account {namespace}/{account}: serviceaccount "{account}" not found',
    )
