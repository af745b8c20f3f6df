"""What the product's own identities did in this session's clusters, replayed against the shipped roles.

Every cluster the ``local_cluster`` / ``make_local_cluster`` fixtures start writes an API audit log
(``conftest.audit_dir``); this module runs after all other tests (``conftest`` orders it last, ``make test``
runs it after the others with the same ``--audit-dir``) and reads them. The product's identities are the
flows' (``cbt-mover-system/cbt-mover-controller``, from
``cbt-mover install controller``) and the mover and writer pods' (``<namespace>/cbt-mover``, from
``cbt-mover install movers``). For them:

- every call must be granted by the shipped roles alone (as those commands render them, not the
  cluster's state), and the API must not have refused one: a refused call is a permission the roles lack;
- every grant of the shipped roles should be used by some call: the ones no call used are listed, and
  when the whole flow suite ran they must be exactly the ones ``UNUSED`` names with the reason they stay;
- every built-in object they created or replaced validates as ``kubernetes-validate --strict`` would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.kubeapi.rbac import rule_allows
from localcluster.kubeapi.requestinfo import Attributes
from localcluster.shipped_rbac import (
    CONTROLLER_NAMESPACE,
    CONTROLLER_SERVICE_ACCOUNT,
    controller_objects,
    controller_role,
    mover_objects,
)
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT as MOVER_SA
from tests.audit import ran_modules

CONTROLLER = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}"
# the test modules whose runs exercise every code path of the flows: the unused-grant check needs them all
FLOW_MODULES = {
    "test_flow_backup.py",
    "test_flow_backup_failures.py",
    "test_flow_backup_cancel.py",
    "test_flow_restore.py",
    "test_flow_restore_scale.py",
    "test_flow_restore_files.py",
    "test_flow_windows.py",
}
# (role, apiGroup, resource, verb, resourceName) granted but used by no call of the flow suite, and why it stays
UNUSED: dict[tuple[str, str, str, str, str | None], str] = {}
# granted to every authenticated user by the bootstrap policy (system:basic-user, system:discovery)
BOOTSTRAP = [
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        "verbs": ["create"],
    },
    {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
    {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version", "/version/"], "verbs": ["get"]},
]


def _role_rules() -> dict[str, list[dict]]:
    """The shipped roles by who gets them where, as ``cbt-mover install`` renders them: the controller's
    ClusterRole (cluster-wide), the mover's ClusterRole (cluster-wide, bound per namespace) and Role (in the
    mover's own namespace; the same rules in every namespace's rendering)."""
    bindings = [o for o in mover_objects(["a", "b"]) if o["kind"].endswith("Binding")]
    assert {(b["kind"], b["roleRef"]["kind"]) for b in bindings} == {
        ("RoleBinding", "Role"),
        ("ClusterRoleBinding", "ClusterRole"),
    }
    [cluster_role] = {b["roleRef"]["name"] for b in bindings if b["kind"] == "ClusterRoleBinding"}
    roles = [o for o in mover_objects(["a", "b"]) if o["kind"] == "Role"]
    assert len(roles) == 2 and roles[0]["rules"] == roles[1]["rules"]
    return {
        "controller": controller_role()["rules"],
        "mover-cluster": next(
            o["rules"]
            for o in controller_objects()
            if (o["kind"], o["metadata"]["name"]) == ("ClusterRole", cluster_role)
        ),
        "mover-namespace": roles[0]["rules"],
    }


def _entries(audit_dir: Path) -> Iterator[dict]:
    for path in sorted(audit_dir.glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for line in f:
                entry = json.loads(line)
                if entry.get("authz") and _role_of(entry["user"]):
                    yield entry


def _role_of(user: str) -> str | None:
    if user == CONTROLLER:
        return "controller"
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and parts[3] == MOVER_SA:
        return "mover"
    return None


def _attributes(authz: dict) -> Attributes:
    return Attributes(
        verb=authz["verb"],
        path=authz.get("path") or "",
        resource_request=bool(authz.get("resourceRequest")),
        api_group=authz.get("apiGroup") or "",
        namespace=authz.get("namespace") or "",
        resource=authz.get("resource") or "",
        subresource=authz.get("subresource") or "",
        name=authz.get("name") or "",
    )


def _checks(entry: dict) -> list[Attributes]:
    authz = entry["authz"]
    return [_attributes(authz), *(_attributes(a) for a in authz.get("also") or [])]


def _applicable(role: str, user: str, attrs: Attributes, roles: dict[str, list[dict]]) -> list[tuple[str, dict]]:
    if role == "controller":
        return [("controller", r) for r in roles["controller"]]
    own_namespace = user.split(":")[2]
    named = [("mover-cluster", r) for r in roles["mover-cluster"]]
    if attrs.namespace == own_namespace:
        named += [("mover-namespace", r) for r in roles["mover-namespace"]]
    return named


def _atoms(role: str, rule: dict) -> Iterator[tuple[str, str, str, str, str | None]]:
    for group in rule.get("apiGroups") or [""]:
        for resource in rule.get("resources") or []:
            for verb in rule["verbs"]:
                for name in rule.get("resourceNames") or [None]:
                    yield role, group, resource, verb, name


def _atom_allows(atom: tuple[str, str, str, str, str | None], attrs: Attributes) -> bool:
    _role, group, resource, verb, name = atom
    rule = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
    if name is not None:
        rule["resourceNames"] = [name]
    return rule_allows(attrs, rule)


@pytest.fixture(scope="module")
def audited(audit_dir, request):
    entries = list(_entries(audit_dir))
    ran = {item.path.name for item in request.session.items} | ran_modules(audit_dir)
    if not entries:
        if ran & FLOW_MODULES:
            pytest.fail("the flow tests ran but no call of the product's identities was audited")
        pytest.skip("no flow test ran in this session: nothing to replay (run it with the flow tests)")
    return entries, FLOW_MODULES <= ran


def test_every_call_of_the_product_identities_is_granted_by_the_shipped_roles(audited):
    entries, full = audited
    roles = _role_rules()
    used: set[tuple[str, str, str, str, str | None]] = set()
    refused, ungranted = [], []
    for entry in entries:
        role = _role_of(entry["user"])
        if entry["code"] == 403 or not entry["authz"].get("allowed"):
            refused.append(f"{entry['user']}: {entry['method']} {entry['path']} -> {entry['code']}")
        for attrs in _checks(entry):
            if not attrs.resource_request or any(rule_allows(attrs, r) for r in BOOTSTRAP):
                if not attrs.resource_request and not any(rule_allows(attrs, r) for r in BOOTSTRAP):
                    ungranted.append(f"{entry['user']}: {attrs.verb} {attrs.path} (non-resource)")
                continue
            rules = _applicable(role, entry["user"], attrs, roles)
            granting = [(name, r) for name, r in rules if rule_allows(attrs, r)]
            if not granting:
                what = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
                ungranted.append(
                    f"{entry['user']}: {attrs.verb} {what}.{attrs.api_group or 'core'}"
                    f" {attrs.namespace or '(cluster)'}/{attrs.name or '*'}"
                )
            for name, rule in granting:
                used.update(a for a in _atoms(name, rule) if _atom_allows(a, attrs))
    assert not sorted(set(refused)), "the API refused calls of the product's identities:\n" + "\n".join(
        sorted(set(refused))
    )
    assert not sorted(set(ungranted)), "calls the shipped roles do not grant:\n" + "\n".join(sorted(set(ungranted)))
    granted = {a for name, rules in roles.items() for r in rules for a in _atoms(name, r)}
    unused = sorted(granted - used, key=str)
    print("grants no call used:", *(f"  {a}" for a in unused), sep="\n")
    if full:
        assert set(unused) == set(UNUSED), (
            "grants used by no call of the flow suite, beyond those UNUSED justifies (remove them from"
            f" movers/install/*.yaml, or justify them in UNUSED): {sorted(set(unused) - set(UNUSED), key=str)};"
            f" justified but used or gone: {sorted(set(UNUSED) - set(unused), key=str)}"
        )


def test_every_object_the_product_sends_validates_strictly(audited):
    from tests.k8svalidate import has_schema, validate

    entries, _full = audited
    problems, checked = [], 0
    for entry in entries:
        body = entry.get("body")
        if entry["method"] not in ("POST", "PUT") or not isinstance(body, dict) or "kind" not in body:
            continue
        if body["kind"] in ("TokenRequest", "SelfSubjectAccessReview") or not has_schema(body):
            continue
        checked += 1
        problems += [f"{entry['user']} {entry['method']} {entry['path']}: {e}" for e in validate(body)]
    assert checked, "no built-in object was created by the product's identities"
    assert not problems, "\n".join(problems)
