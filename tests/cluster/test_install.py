"""``cbt-mover install controller|movers``: the objects a user applies without editing.

The renderings for several namespaces validate strictly (``tests/k8svalidate``), differ only in the namespace,
grant nothing that widens itself (no wildcards, Secrets only by name) and bind what they define; applied to the
API emulator, each namespace's movers get their namespaced reads there only and the cluster-scoped reads
through their own binding. A bad namespace is one line and exit 2. The templates ship in the wheel.
(What the roles grant exactly is replayed against every call of the flows in tests/cluster/test_shipped_rbac.py, which
reads these same renderings.)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from movers import install
from movers.errors import UsageError
from tests import k8svalidate

ROOT = Path(__file__).resolve().parents[2]
# "null", "0123" and "on" read as null, an int and a bool in unquoted YAML: they must stay strings
NAMESPACES = ["shop", "team-a-prod", "null", "0123", "on", "a" * 63]
BAD = ["Shop", "-shop", "shop-", "a" * 64, "shop.prod", "shop_db", "", "sh op", "${NAMESPACE}"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "movers", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def namespaces_in(obj) -> set[str]:
    """Every value of a ``namespace`` key anywhere in ``obj`` (metadata and subjects)."""
    found: set[str] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "namespace":
                found.add(value)
            found |= namespaces_in(value)
    elif isinstance(obj, list):
        for item in obj:
            found |= namespaces_in(item)
    return found


def test_the_cli_prints_the_renderings():
    out = cli("install", "controller")
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == install.render_controller("cbt-mover-system")
    out = cli("install", "controller", "--namespace", "backup-system")
    assert out.stdout == install.render_controller("backup-system")
    out = cli("install", "movers", "--namespace", "shop", "--namespace", "demo", "--namespace", "shop")
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == install.render_movers(["shop", "demo"])
    objs = install.objects(out.stdout)
    assert [(o["kind"], namespaces_in(o)) for o in objs] == [
        (kind, {ns})
        for ns in ("shop", "demo")
        for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRoleBinding")
    ]


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_rendered_object_validates_strictly(namespace):
    objs = install.objects(install.render_controller(namespace)) + install.objects(install.render_movers([namespace]))
    assert len(objs) == 9
    for obj in objs:
        assert k8svalidate.has_schema(obj), obj["kind"]
        assert k8svalidate.validate(obj) == [], f"against Kubernetes {k8svalidate.VERSION}"
    assert set().union(*map(namespaces_in, objs)) == {namespace}  # a string, whatever YAML would make of it
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"} == {namespace}
    # the check is real: a field out of place is refused
    broken = json.loads(json.dumps(objs[-1]))
    broken["subjects"][0]["serviceAccount"] = "cbt-mover"
    assert k8svalidate.validate(broken) != []


@pytest.mark.parametrize(
    "name, render",
    [
        (install.CONTROLLER_TEMPLATE, install.render_controller),
        (install.MOVERS_TEMPLATE, lambda ns: install.render_movers([ns])),
    ],
)
def test_the_namespace_is_the_only_input(name, render):
    """A rendering is its template with the placeholder replaced: nothing else differs, no namespace is written in,
    and every placeholder sits in a double-quoted scalar."""
    text = install.template(name)
    code = [line.split("#", 1)[0].rstrip() for line in text.splitlines()]
    with_placeholder = [line for line in code if install.PLACEHOLDER in line]
    assert len(with_placeholder) >= 2 and all(
        re.fullmatch(r' *(- )?[a-z]+: "[-a-z]*\$\{NAMESPACE\}"', line) for line in with_placeholder
    ), with_placeholder
    assert not any(ns in line for line in code for ns in ("cbt-mover-system", "demo", "shop"))
    template_objs = install.objects(text)
    for ns in ("x", "backup-system"):
        rendered = install.objects(render(ns))
        assert json.loads(json.dumps(template_objs).replace(install.PLACEHOLDER, ns)) == rendered
        assert "$" not in json.dumps(rendered)


def test_roles_grant_nothing_that_widens_itself_and_secrets_only_by_name():
    objs = install.objects(install.render_controller()) + install.objects(install.render_movers(["shop"]))
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")]
    assert {(o["kind"], o["metadata"]["name"]) for o in roles} == {
        ("ClusterRole", "cbt-mover-controller"),
        ("ClusterRole", "cbt-mover-pod"),
        ("Role", "cbt-mover-pod"),
    }
    for role in roles:
        for rule in role["rules"]:
            assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
            values = [*rule["apiGroups"], *rule["resources"], *rule["verbs"], *rule.get("resourceNames", [])]
            assert not any("*" in v for v in values), rule
            assert not set(rule["verbs"]) & {"escalate", "bind", "impersonate", "deletecollection", "update"}, rule
            if "secrets" in rule["resources"]:
                assert rule["resources"] == ["secrets"] and rule["verbs"] == ["get"] and rule["resourceNames"]


def test_bindings_name_what_the_renderings_define():
    controller = install.objects(install.render_controller("backup-system"))
    movers = install.objects(install.render_movers(["shop", "demo"]))
    objs = controller + movers
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "ServiceAccount"}
    roles = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objs if "Role" in o["kind"]}
    bindings = [o for o in objs if o["kind"].endswith("Binding")]
    assert len(bindings) == 5
    for binding in bindings:
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"], binding["metadata"].get("namespace")) in roles
        assert {(s["namespace"], s["name"]) for s in binding["subjects"]} <= accounts
        if binding["metadata"]["name"] != "cbt-mover-controller":
            [ns] = namespaces_in(binding)
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": install.MOVER_SERVICE_ACCOUNT, "namespace": ns}
            ]
    [ctrl] = [b for b in bindings if b["metadata"]["name"] == "cbt-mover-controller"]
    assert ctrl["subjects"] == [
        {"kind": "ServiceAccount", "name": install.CONTROLLER_SERVICE_ACCOUNT, "namespace": "backup-system"}
    ]
    # one ClusterRoleBinding per application namespace: applying or removing one touches no other
    assert sorted(b["metadata"]["name"] for b in movers if b["kind"] == "ClusterRoleBinding") == [
        "cbt-mover-pod-demo",
        "cbt-mover-pod-shop",
    ]


def test_an_invalid_namespace_is_one_line_and_exit_2():
    for namespace in BAD:
        with pytest.raises(UsageError, match=f"^invalid namespace {re.escape(repr(namespace))}: "):
            install.render_movers(["shop", namespace])
        with pytest.raises(UsageError):
            install.render_controller(namespace)
    for args in (["controller", "--namespace=Shop"], ["movers", "--namespace=shop", "--namespace=-shop"]):
        out = cli("install", *args)
        assert out.returncode == 2 and out.stdout == "", args  # nothing printed, not even the valid namespace's
        assert out.stderr.startswith(f"cbt-mover: error: invalid namespace {args[-1].split('=')[1]!r}: ")
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_install_without_a_subcommand_or_namespace_is_one_line_and_exit_2():
    for args in (["install"], ["install", "movers"], ["install", "nodes"]):
        out = cli(*args)
        assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, args
        assert out.stderr.startswith("cbt-mover: error: ") and "--help" in out.stderr


def test_applied_each_namespace_gets_its_own_grants(tmp_path):
    """On the API emulator (kube-apiserver's RBAC authorizer): the movers of a namespace read VolumeSnapshots
    there only and the cluster-scoped objects through their own binding, which another namespace's install and
    removal leave alone."""
    from kubernetes import client

    from localcluster.applying import apply_objects
    from localcluster.kubeapi.testing import serve

    def allowed(kube, ns, sa, namespace, resource, group="snapshot.storage.k8s.io"):
        with kube.as_service_account(ns, sa) as api_client:
            attrs = {"verb": "get", "group": group, "resource": resource, "namespace": namespace}
            review = client.AuthorizationV1Api(api_client).create_self_subject_access_review(
                {"spec": {"resourceAttributes": attrs}}
            )
            return review.status.allowed

    with serve(tmp_path) as kube:
        apply_objects(kube.client, kube.api.registry, install.objects(install.render_controller("backup-system")))
        for ns in ("shop", "null"):
            kube.core.create_namespace({"metadata": {"name": ns}})
            apply_objects(kube.client, kube.api.registry, install.objects(install.render_movers([ns])))
        mover = install.MOVER_SERVICE_ACCOUNT
        for ns, other in (("shop", "null"), ("null", "shop")):
            assert allowed(kube, ns, mover, ns, "volumesnapshots")
            assert not allowed(kube, ns, mover, other, "volumesnapshots")
            assert allowed(kube, ns, mover, "", "volumesnapshotcontents")
            assert allowed(kube, ns, mover, "", "snapshotmetadataservices", "cbt.storage.k8s.io")
            assert not allowed(kube, ns, mover, ns, "secrets", "")
        controller = ("backup-system", install.CONTROLLER_SERVICE_ACCOUNT)
        assert allowed(kube, *controller, "shop", "volumesnapshots")
        # removing shop's movers leaves null's grants
        [binding] = [o for o in install.objects(install.render_movers(["shop"])) if o["kind"] == "ClusterRoleBinding"]
        kube.rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        assert not allowed(kube, "shop", mover, "", "volumesnapshotcontents")
        assert allowed(kube, "null", mover, "", "volumesnapshotcontents")


def test_the_templates_are_in_the_wheel_and_found_where_it_is_installed(tmp_path):
    """The image installs the project with ``pip install --no-deps .``: its wheel carries the templates, and an
    installation outside the source tree renders from them (the source tree's import, as in an editable install,
    is what every other test here uses)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "movers", src / "movers", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    subprocess.run([*build, str(src)], check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("cbt_mover-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"movers/install/controller.yaml", "movers/install/movers.yaml"} <= set(names)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "zipfile", "-e", str(wheel), str(site)], check=True, timeout=60)
    code = "import movers.install as i, sys; print(i.__file__); sys.stdout.write(i.render_movers(['shop']))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = [{str(site)!r}]; {code}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    where, text = out.stdout.split("\n", 1)
    assert Path(where).is_relative_to(site)
    assert text == install.render_movers(["shop"])
    assert yaml.safe_load_all(text)
