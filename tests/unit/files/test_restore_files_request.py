"""``movers.files.restore_request.RestoreFilesRequest`` and the files pod it leads to (``movers.kube.filespod``,
``movers.files.cluster.pod_name``): pure, no cluster, no Prefect. The pod passes the Pod Security ``restricted``
profile as the local cluster's admission evaluates it (upstream's checks)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from localcluster.kubeapi.podsecurity_admission import evaluate
from movers import podcontract
from movers.files.cluster import destination, pod_name
from movers.files.request import FilesRequest
from movers.files.restore_request import RestoreFilesRequest
from movers.kube import manifests as m
from movers.kube.filespod import FILES_UID, TARGET_PATH, FilesTask, files_pod
from movers.kube.podspec import MoverProfile, RepoAccess

BASE = {
    "repo": "s3://bucket/repo",
    "namespace": "shop",
    "volumes": [{"pvc": "data", "paths": ["/etc/app.conf", "/db/table/"]}],
    "target": {"claim": "recovered", "new": {"size": "1Gi"}},
}


def test_paths_are_normalised_and_the_directory_defaults_to_the_run():
    request = RestoreFilesRequest.model_validate(BASE)
    assert request.volumes[0].paths == ("/etc/app.conf", "/db/table")
    assert request.directory_of("files-0123") == "restored-files-0123"
    assert destination(request.directory_of("files-0123"), "data") == f"{TARGET_PATH}/restored-files-0123/data"
    given = RestoreFilesRequest.model_validate({**BASE, "directory": "incident/42/"})
    assert given.directory_of("files-0123") == "incident/42"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"volumes": [{"pvc": "data", "paths": ["etc/app.conf"]}]}, "absolute"),
        ({"volumes": [{"pvc": "data", "paths": []}]}, "at least 1"),
        ({"volumes": [{"pvc": "data", "paths": ["/a"]}, {"pvc": "data", "paths": ["/b"]}]}, "named twice"),
        ({"directory": "../elsewhere"}, "relative path"),
        ({"directory": "/abs"}, "relative path"),
        ({"target": {"claim": "recovered", "new": {"size": "lots"}}}, "Kubernetes quantity"),
        ({"target": {"claim": "Not_A_Name"}}, "claim"),
    ],
)
def test_a_request_that_cannot_work_is_refused_naming_why(change, words):
    with pytest.raises(ValidationError) as refused:
        RestoreFilesRequest.model_validate({**BASE, **change})
    assert words in str(refused.value)


def _pod(request: RestoreFilesRequest, keys=("password",)) -> dict:
    volume = request.volumes[0]
    files = request.files_request(volume, "shop/data", "20260101T000000000000Z-abcdef", destination("d", "data"))
    task = FilesTask(podcontract.REQUEST_ENV, files.model_dump_json(), request.target.claim, 600)
    profile = MoverProfile(image="cbt-mover:1", service_account="cbt-mover")
    return files_pod(
        pod_name("files-0123", "data"),
        "shop",
        profile=profile,
        task=task,
        repo=RepoAccess("cbt-mover-repo", keys),
        labels=m.run_labels("files-0123"),
    )


def test_the_files_pod_passes_the_restricted_profile_and_mounts_no_device():
    pod = _pod(RestoreFilesRequest.model_validate(BASE))
    spec = pod["spec"]
    assert [r for r in evaluate(spec, "restricted") if r is not None] == []
    (container,) = spec["containers"]
    assert "volumeDevices" not in container and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["fsGroup"] == FILES_UID
    assert {"name": "target", "mountPath": TARGET_PATH} in container["volumeMounts"]
    assert spec["volumes"][0] == {"name": "target", "persistentVolumeClaim": {"claimName": "recovered"}}
    assert pod["metadata"]["labels"][m.COMPONENT_LABEL] == "files"


def test_the_files_pod_runs_files_cp_of_its_request_with_the_repository_key_as_files():
    pod = _pod(RestoreFilesRequest.model_validate(BASE))
    (container,) = pod["spec"]["containers"]
    assert container["args"] == [
        "files",
        "cp",
        "--request-env",
        podcontract.REQUEST_ENV,
        "--json",
        "--result-file",
        m.TERMINATION_LOG,
    ]
    env = {e["name"]: e for e in container["env"]}
    request = FilesRequest.model_validate_json(env[podcontract.REQUEST_ENV]["value"])
    assert request.paths == ("/etc/app.conf", "/db/table") and request.dest == f"{TARGET_PATH}/d/data"
    assert env["CBT_MOVER_PASSWORD_FILE"]["value"] == f"{m.REPO_KEY_DIR}/password"  # a file, never the value
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "cbt-mover-repo"
    assert container["terminationMessagePath"] == m.TERMINATION_LOG


def test_pod_names_are_dns_labels_distinct_per_claim():
    long = "orders.archive-kept-for-the-auditors-until-the-end-of-fiscal-year-2031"
    names = {pod_name("files-0123456789abcdef", pvc) for pvc in (long, long + "x", "data")}
    assert len(names) == 3 and all(len(n) <= 63 and "." not in n for n in names)
