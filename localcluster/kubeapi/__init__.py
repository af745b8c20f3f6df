"""A Kubernetes API emulator over HTTP on loopback, for the local cluster (never the product).

The official ``kubernetes`` client and kubectl work against it unchanged. ``KubeAPI`` (see
``emulator.py``) is the entry point; ``ResourceType`` describes a served resource. Modules:
``resources``/``builtin``/``crds`` (what is served), ``store`` (objects, resourceVersions, change
log), ``rest``/``deletion`` (verb semantics, garbage collection), ``meta`` (defaults),
``validation`` (decoding and admission of built-in kinds, with ``podspec``, ``storagevalidation``,
``specparts``, ``fields`` and ``quantity``; the apps/v1 workloads and their ``scale`` in ``apps``),
``schema``/``cel`` (CRD schemas), ``patching``,
``selectors``, ``authn``/``tokens`` (service-account tokens and token reviews), ``requestinfo``
(request attributes), ``rbac`` (the RBAC authorizer, 403 bodies), ``rbac_objects`` (the RBAC kinds
and their validation), ``rbac_policy`` (bootstrap roles), ``rbac_escalation`` (escalation checks on
RBAC writes), ``reviews`` (access reviews), ``serviceaccount_admission``, ``podsecurity_admission``
(Pod Security, enforce mode), ``server``/``calls``/``watch`` (HTTP), ``discovery``, ``openapi``, ``tables``,
``audit``, ``testing`` (a served API with a
real client, for tests).

RBAC is enforced for every identity but the admin one (``system:masters``), as kube-apiserver does.
"""

from localcluster.kubeapi.calls import Call
from localcluster.kubeapi.emulator import KubeAPI
from localcluster.kubeapi.errors import ApiError
from localcluster.kubeapi.resources import ResourceType

__all__ = ["ApiError", "Call", "KubeAPI", "ResourceType"]
