"""The shipped RBAC applied to the local cluster exactly as a user installs it: the objects ``cbt-mover install
controller`` and ``cbt-mover install movers --namespace NS`` print (``movers.install`` renders both), parsed
and applied unchanged as the admin.

``controller_objects()`` and ``mover_objects(namespaces)`` are those renderings' objects (the controller's in
its default namespace ``CONTROLLER_NAMESPACE``); ``controller_role()`` is the controller's ClusterRole.
``apply_mover_rbac(cluster, namespaces)`` applies the controller's objects (when the cluster lacks them: the
movers' ClusterRole is among them) and the movers' objects of ``namespaces``, which must exist.
``controller_kubeconfig(cluster)`` is the kubeconfig the flows run with.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from movers import install
from movers.install import CONTROLLER_SERVICE_ACCOUNT, MOVER_SERVICE_ACCOUNT

CONTROLLER_NAMESPACE = install.DEFAULT_CONTROLLER_NAMESPACE
REPO_SECRET = "cbt-mover-repo"  # the only Secret name the controller's ClusterRole lets the flows read

__all__ = [
    "CONTROLLER_NAMESPACE",
    "CONTROLLER_SERVICE_ACCOUNT",
    "MOVER_SERVICE_ACCOUNT",
    "REPO_SECRET",
    "apply_mover_rbac",
    "controller_kubeconfig",
    "controller_objects",
    "controller_role",
    "mover_objects",
]


def controller_objects() -> list[dict[str, Any]]:
    return install.objects(install.render_controller(CONTROLLER_NAMESPACE))


def mover_objects(namespaces: Iterable[str]) -> list[dict[str, Any]]:
    return install.objects(install.render_movers(namespaces))


def controller_role() -> dict[str, Any]:
    """The controller's ClusterRole (the one its ClusterRoleBinding names), as rendered."""
    objs = controller_objects()
    [binding] = [o for o in objs if o["kind"] == "ClusterRoleBinding"]
    name = binding["roleRef"]["name"]
    return next(o for o in objs if (o["kind"], o["metadata"]["name"]) == ("ClusterRole", name))


def _install_controller(cluster) -> None:
    """``cbt-mover install controller | kubectl apply -f -`` on ``cluster``, unless its last object (the movers'
    ClusterRole) is there already."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    objs = controller_objects()
    try:
        client.RbacAuthorizationV1Api(cluster.client).read_cluster_role(objs[-1]["metadata"]["name"])
        return
    except ApiException as err:
        if err.status != 404:
            raise
    cluster.apply(objs)


def apply_mover_rbac(cluster, namespaces: Iterable[str]) -> None:
    _install_controller(cluster)
    cluster.apply(mover_objects(namespaces))


def controller_kubeconfig(cluster) -> Path:
    """The kubeconfig the flows run with: the controller's objects applied (when missing) and a token of its
    ServiceAccount ``cbt-mover-system/cbt-mover-controller``."""
    path = cluster.workdir / f"kubeconfig-{CONTROLLER_NAMESPACE}-{CONTROLLER_SERVICE_ACCOUNT}"
    if not path.exists():
        _install_controller(cluster)
        cluster.kubeconfig_for(CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT, path)
    return path
