"""The shipped RBAC of configs/rbac, applied to the local cluster for the namespaces a test or the demo uses.

``configs/rbac/mover.yaml`` says: copy the namespaced part per application namespace. ``mover_objects``
does that and nothing else: the ClusterRole as shipped; the ClusterRoleBinding with one subject per
namespace (the file's subject with the namespace changed); and the file's namespaced objects of its
first namespace (ServiceAccount ``cbt-mover``, Role, RoleBinding) once per namespace, with only
``metadata.namespace`` and subject namespaces changed. Rules are never touched.

``apply_mover_rbac(cluster, namespaces)`` applies them as the admin (the namespaces must exist): the
namespaced objects of ``namespaces``, and the ClusterRoleBinding with the namespaces it already had
(several tests share one cluster) plus these; returns the namespaces the binding now names.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "rbac"
MOVER_YAML = CONFIGS / "mover.yaml"
CONTROLLER_YAML = CONFIGS / "controller.yaml"
MOVER_SERVICE_ACCOUNT = "cbt-mover"

Obj = dict[str, Any]


def _docs(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def mover_objects(namespaces: Iterable[str], path: Path = MOVER_YAML) -> list[Obj]:
    namespaces = list(dict.fromkeys(namespaces))
    docs = _docs(path)
    template_ns = next(d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace"))
    out: list[Obj] = []
    for doc in docs:
        if doc["metadata"].get("namespace"):
            continue
        doc = copy.deepcopy(doc)
        if doc["kind"] == "ClusterRoleBinding":
            subject = doc["subjects"][0]
            doc["subjects"] = [{**subject, "namespace": ns} for ns in namespaces]
        out.append(doc)
    for ns in namespaces:
        for doc in docs:
            if doc["metadata"].get("namespace") != template_ns:
                continue
            doc = copy.deepcopy(doc)
            doc["metadata"]["namespace"] = ns
            for subject in doc.get("subjects") or []:
                if subject.get("namespace") == template_ns:
                    subject["namespace"] = ns
            out.append(doc)
    return out


def apply_mover_rbac(cluster, namespaces: Iterable[str]) -> list[str]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    binding = next(d for d in _docs(MOVER_YAML) if d["kind"] == "ClusterRoleBinding")["metadata"]["name"]
    try:
        current = client.RbacAuthorizationV1Api(cluster.client).read_cluster_role_binding(binding)
        known = [s.namespace for s in current.subjects or [] if s.namespace]
    except ApiException as err:
        if err.status != 404:
            raise
        known = []
    namespaces = list(namespaces)
    covered = list(dict.fromkeys([*known, *namespaces]))
    objs = mover_objects(covered)
    cluster.apply([o for o in objs if o["metadata"].get("namespace") in (None, *namespaces)])
    return covered


CONTROLLER_NAMESPACE = "cbt-mover-system"
CONTROLLER_SERVICE_ACCOUNT = "cbt-mover-controller"
REPO_SECRET = "cbt-mover-repo"  # the only Secret name configs/rbac/controller.yaml lets the flows read


def controller_kubeconfig(cluster) -> Path:
    """The kubeconfig the flows run with: configs/rbac/controller.yaml applied unchanged (as the admin, once
    per cluster) and a token of its ServiceAccount ``cbt-mover-system/cbt-mover-controller``."""
    path = cluster.workdir / f"kubeconfig-{CONTROLLER_NAMESPACE}-{CONTROLLER_SERVICE_ACCOUNT}"
    if not path.exists():
        cluster.apply(CONTROLLER_YAML)
        cluster.kubeconfig_for(CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT, path)
    return path
