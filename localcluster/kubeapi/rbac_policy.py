"""The bootstrap RBAC policy the API server creates at start (upstream ``bootstrappolicy/policy.go``).

ClusterRoles (labelled ``kubernetes.io/bootstrapping: rbac-defaults``, annotated
``rbac.authorization.kubernetes.io/autoupdate: "true"``), with upstream's names and rules:

- ``cluster-admin``: every verb on every resource and non-resource URL; bound to the group
  ``system:masters`` (whose members the authorizer allows before RBAC anyway);
- ``system:discovery``: get on /livez, /readyz, /healthz, /version(/), /openapi(/*), /api(/*),
  /apis(/*); bound to ``system:authenticated``;
- ``system:basic-user``: create selfsubjectaccessreviews and selfsubjectrulesreviews
  (authorization.k8s.io) and selfsubjectreviews (authentication.k8s.io); bound to
  ``system:authenticated``;
- ``system:public-info-viewer``: get on /livez, /readyz, /healthz, /version(/); bound to
  ``system:authenticated`` and ``system:unauthenticated`` (the only grant anonymous requests get);
- ``system:auth-delegator``: create tokenreviews and subjectaccessreviews (unbound, as upstream:
  bind it to a component that delegates authentication, like a CSI sidecar).

Not created: the roles and bindings of upstream's controllers, nodes, kube-proxy, the scheduler,
and the aggregated admin/edit/view roles (nothing here aggregates, see ``rbac_objects``).
"""

from __future__ import annotations

from localcluster.kubeapi.resources import Obj
from localcluster.kubeapi.rest import Rest

GROUP = "rbac.authorization.k8s.io"
_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
AUTHENTICATED, UNAUTHENTICATED, MASTERS = "system:authenticated", "system:unauthenticated", "system:masters"
_PUBLIC_URLS = ["/livez", "/readyz", "/healthz", "/version", "/version/"]


def _rule(
    verbs: list[str], groups: list[str] | None = None, resources: list[str] | None = None, urls: list[str] | None = None
) -> Obj:
    rule: Obj = {"verbs": verbs}
    if groups is not None:
        rule["apiGroups"] = groups
    if resources is not None:
        rule["resources"] = resources
    if urls is not None:
        rule["nonResourceURLs"] = urls
    return rule


def cluster_roles() -> list[Obj]:
    roles = {
        "cluster-admin": [_rule(["*"], ["*"], ["*"]), _rule(["*"], urls=["*"])],
        "system:discovery": [
            _rule(
                ["get"],
                urls=[
                    *_PUBLIC_URLS[:3],
                    "/version",
                    "/version/",
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
            )
        ],
        "system:basic-user": [
            _rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
        ],
        "system:public-info-viewer": [_rule(["get"], urls=list(_PUBLIC_URLS))],
        "system:auth-delegator": [
            _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
        ],
    }
    return [{"metadata": {"name": name, **_META}, "rules": rules} for name, rules in roles.items()]


def cluster_role_bindings() -> list[Obj]:
    bindings = {
        "cluster-admin": [MASTERS],
        "system:discovery": [AUTHENTICATED],
        "system:basic-user": [AUTHENTICATED],
        "system:public-info-viewer": [AUTHENTICATED, UNAUTHENTICATED],
    }
    return [
        {
            "metadata": {"name": name, **_META},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "Group", "apiGroup": GROUP, "name": g} for g in groups],
        }
        for name, groups in bindings.items()
    ]


def bootstrap(rest: Rest) -> None:
    """Create the bootstrap roles and bindings that do not exist yet."""
    for plural, objs in (("clusterroles", cluster_roles()), ("clusterrolebindings", cluster_role_bindings())):
        rt = rest.registry.get(GROUP, plural)
        for obj in objs:
            if rest.store.find(rt, "", obj["metadata"]["name"]) is None:
                rest.create(rt, "v1", "", obj)
