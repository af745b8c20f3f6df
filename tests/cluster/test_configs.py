"""configs/: every YAML parses, the policies and the work pool job template use the names the shipped RBAC
(``cbt-mover install``, tests/cluster/test_install.py) creates, the CRD examples are accepted by the API emulator's
schema validation, the Dockerfile."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_every_yaml_parses():
    files = sorted(CONFIGS.rglob("*.yaml")) + sorted(CONFIGS.rglob("*.yml"))
    assert len(files) >= 5
    for path in files:
        assert docs(path), path


def rbac_docs() -> list[dict]:
    """What ``cbt-mover install controller`` and ``install movers`` print for the policies' namespaces."""
    from movers.install import objects, render_controller, render_movers
    from movers.policy.model import load_policies

    namespaces = sorted({p.namespace for p in load_policies(CONFIGS / "policies")})
    return objects(render_controller()) + objects(render_movers(namespaces))


def test_policies_use_the_rbac_names():
    from movers.policy.model import load_policies

    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in rbac_docs() if d["kind"] == "ServiceAccount"
    }
    controller = next(
        d for d in rbac_docs() if (d["kind"], d["metadata"]["name"]) == ("ClusterRole", "cbt-mover-controller")
    )
    secret_rule = next(r for r in controller["rules"] if r["resources"] == ["secrets"])
    for policy in load_policies(CONFIGS / "policies"):
        assert (policy.namespace, policy.mover.service_account) in accounts, policy.name
        assert policy.repository.credentials_secret in secret_rule["resourceNames"], policy.name


def test_crd_examples_accepted_by_the_api_emulator(tmp_path):
    from kubernetes.client.rest import ApiException

    from localcluster.kubeapi.testing import serve

    examples = {d["kind"]: d for p in sorted((CONFIGS / "examples").glob("*.yaml")) for d in docs(p)}
    assert set(examples) == {"SnapshotMetadataService", "VolumeGroupSnapshotClass", "VolumeSnapshotClass"}
    plurals = {
        "SnapshotMetadataService": "snapshotmetadataservices",
        "VolumeGroupSnapshotClass": "volumegroupsnapshotclasses",
        "VolumeSnapshotClass": "volumesnapshotclasses",
    }
    assert examples["SnapshotMetadataService"]["apiVersion"] == "cbt.storage.k8s.io/v1beta1"
    assert examples["VolumeGroupSnapshotClass"]["apiVersion"] == "groupsnapshot.storage.k8s.io/v1"
    with serve(tmp_path) as kube:
        for kind, obj in examples.items():
            group, version = obj["apiVersion"].split("/")
            created = kube.custom.create_cluster_custom_object(group, version, plurals[kind], obj)
            assert created["metadata"]["name"] == obj["metadata"]["name"]
            assert created["metadata"].get("uid")
        # the validation is real: the same SMS without its CA certificate is rejected
        broken = json.loads(json.dumps(examples["SnapshotMetadataService"]))
        broken["metadata"]["name"] = "other.csi.k8s.io"
        del broken["spec"]["caCert"]
        with pytest.raises(ApiException) as info:
            kube.custom.create_cluster_custom_object(
                "cbt.storage.k8s.io", "v1beta1", "snapshotmetadataservices", broken
            )
        assert info.value.status == 422


def test_sms_example_ca_cert_is_base64_pem():
    import base64

    sms = docs(CONFIGS / "examples" / "snapshotmetadataservice.yaml")[0]
    assert base64.b64decode(sms["spec"]["caCert"], validate=True).startswith(b"-----BEGIN CERTIFICATE-----")
    assert "://" not in sms["spec"]["address"] and ":" in sms["spec"]["address"]


EXPECTED_VARIABLES = {
    # prefect-kubernetes' own variables (0.8.0)
    "name",
    "namespace",
    "image",
    "image_pull_policy",
    "service_account_name",
    "env",
    "labels",
    "command",
    "cpu_request",
    "cpu_limit",
    "memory_request",
    "memory_limit",
    "backoff_limit",
    "finished_job_ttl",
    "job_watch_timeout_seconds",
    "pod_watch_timeout_seconds",
    "stream_output",
    "cluster_config",
    # ours
    "repository_secret",
}


def test_job_template():
    template = json.loads((CONFIGS / "k8s-job-template.json").read_text())
    assert set(template) == {"job_configuration", "variables"}
    props = template["variables"]["properties"]
    assert set(props) == EXPECTED_VARIABLES
    assert props["service_account_name"]["default"] == "cbt-mover-controller"
    assert props["namespace"]["default"] == "cbt-mover-system"
    assert props["repository_secret"]["default"] == "cbt-mover-repo"
    config = template["job_configuration"]
    manifest = config["job_manifest"]
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "Job")
    pod = manifest["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "{{ service_account_name }}"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    (container,) = pod["containers"]
    assert container["image"] == "{{ image }}" and container["args"] == "{{ command }}"
    assert container["env"] == "{{ env }}" and config["env"] == "{{ env }}"
    assert container["command"] == ["/usr/bin/env"]  # the image's ENTRYPOINT is cbt-mover
    assert container["envFrom"] == [{"secretRef": {"name": "{{ repository_secret }}", "optional": True}}]
    # every placeholder names a declared variable, and every variable is used
    text = json.dumps(config)
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", text))
    assert used == EXPECTED_VARIABLES
    # the service account and namespace are those `cbt-mover install controller` creates by default
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in rbac_docs() if d["kind"] == "ServiceAccount"
    }
    assert (props["namespace"]["default"], props["service_account_name"]["default"]) in accounts


def test_dockerfile():
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    entrypoints = [ln for ln in lines if ln.startswith("ENTRYPOINT")]
    assert len(entrypoints) == 1 and json.loads(entrypoints[0].removeprefix("ENTRYPOINT").strip()) == ["cbt-mover"]
    assert "requirements.lock" in text and "uv pip install" in text and "pip install --no-deps --compile ." in text
    # compiled at build time: the image sets PYTHONDONTWRITEBYTECODE, so nothing compiled at run time is kept
    assert "--compile-bytecode" in text
    users = [ln for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] != "USER root" and users[-1] != "USER 0"
    # the console script exists in the project
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'cbt-mover = "movers.cli:main"' in pyproject
    # everything the Dockerfile copies exists and is not excluded by .dockerignore
    ignored = {
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    }
    for line in lines:
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), src
                assert src.rstrip("/") not in ignored, src


def render_job_manifest(template: dict, values: dict) -> dict:
    """The Job the Kubernetes worker would create: the template's placeholders filled from ``values`` over the
    variables' defaults (Prefect's ``apply_values``), then what prefect-kubernetes' job configuration does to it
    before it creates the Job (env as a list of name/value pairs, a ``command`` string split into args)."""
    import shlex

    from prefect.utilities.templating import apply_values

    defaults = {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}
    config = apply_values(template["job_configuration"], {**defaults, **values})
    manifest = config["job_manifest"]
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": k, "value": v} for k, v in (container.get("env") or {}).items()]
    if isinstance(container.get("args"), str):
        container["args"] = shlex.split(container["args"])
    return manifest


def test_job_template_renders_a_job_that_strict_validation_accepts():
    from tests import k8svalidate

    template = json.loads((CONFIGS / "k8s-job-template.json").read_text())
    job = render_job_manifest(
        template,
        {
            "name": "backup-app-1",
            "labels": {"prefect.io/flow-run-id": "0b4d2a3c-1111-4a5b-9c8d-0123456789ab"},
            "command": "prefect flow-run execute 0b4d2a3c-1111-4a5b-9c8d-0123456789ab",
            "env": {"PYTHONUNBUFFERED": "1", "PREFECT_API_URL": "http://prefect.cbt-mover-system:4200/api"},
            "job_watch_timeout_seconds": 600,
        },
    )
    assert "{{" not in json.dumps(job), job
    assert k8svalidate.validate(job) == [], f"against Kubernetes {k8svalidate.VERSION}"
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (1, 1)
    # the check is real: the Job fields in the pod template (where the template had them) are refused
    misplaced = json.loads(json.dumps(job))
    misplaced["spec"]["template"]["spec"].update(parallelism=1, completions=1)
    errors = k8svalidate.validate(misplaced)
    assert len(errors) == 1 and "spec.template.spec" in errors[0] and "completions" in errors[0], errors
    assert k8svalidate.has_schema(job)
    assert not k8svalidate.has_schema({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot"})
