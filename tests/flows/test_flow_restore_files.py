"""The ``restore-files`` flow end to end on the local cluster with Prefect's test harness, as the shipped
identities. A two-claim app (Filesystem claims data and logs, ext4, labelled app=demo) holds known files written
through the double's mount; ``backup-app`` backs it up; then the namespace enforces the Pod Security ``restricted``
level (as a real cluster's admission would check it from then on). Then:

* two paths of data (a file and a directory tree) are copied into a NEW claim: the files pod passes ``restricted``
  (the API admitted it), the files arrive bit-exact with their modes (read back by a restricted pod), the artifact
  lists them with the bytes copied and fetched, the pod is gone and the claim stays;
* a file of logs is copied into an EXISTING claim under a directory given; the cleanup leaves that claim alone;
* a Block claim as the target is refused in one line (exit code 2), and a missing one (exit code 3), before
  anything is created; so is a claim a running pod uses (naming the pod);
* a path the backup does not have fails the run: its failure report says why, the files pod is gone and the claim
  the run created is deleted."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from kubernetes import client

from localcluster.kubelet.testing import phase_in, pod_manifest, wait_pod, wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, apply_mover_rbac
from movers.errors import EXIT_NOT_FOUND, EXIT_USAGE, NotFoundError
from movers.files.cluster import FilesPodFailed, FilesTargetRefused
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube.filespod import FILES_UID
from tests.flowapp import (
    APP_CLASS,
    REPO_SECRET,
    artifact,
    audited_creations,
    backup_params,
    flow_kubeconfig,
    init_repo,
    repo_secret,
)

NS = "files-shop"
BUCKET = "flow-restore-files"
REPO = f"s3://{BUCKET}/repo"
LABELS = {"app": "demo"}  # what the backup's selector picks
CLAIMS = ("data", "logs")
POD = {"image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT, "repo_secret": REPO_SECRET}
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
# the app's files: path in its claim -> (what makes its content, mode): a text, or the seed and size of random bytes
# (the writer pod makes the same bytes: an argv holds no MiB); the 1 MiB file spans several chunks of the backup, the
# 8 MiB one not asked for makes most of what the backup stored
SPECS = {
    "data": {
        "etc/app.conf": ("threads = 8\nlisten = 0.0.0.0:5432\n", 0o640),
        "db/table/00001.dat": ((1, 1 << 20), 0o600),
        "db/table/00002.dat": ((2, 100_000), 0o644),
        "db/other.dat": ((3, 8 << 20), 0o644),  # not asked for: the copy must not fetch it all
    },
    "logs": {"app.log": ("started\n" * 1000, 0o644)},
}


def content_of(made) -> bytes:
    """The bytes ``made`` (a text, or the seed and size of random bytes) stands for."""
    return made.encode() if isinstance(made, str) else random.Random(made[0]).randbytes(made[1])


FILES = {pvc: {path: (content_of(made), mode) for path, (made, mode) in files.items()} for pvc, files in SPECS.items()}
ASKED = ["/etc/app.conf", "/db/table"]  # of data: a file and a tree
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": FILES_UID, "fsGroup": FILES_UID}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture(scope="module")
def backed_up(local_cluster, harness, module_env):
    """The app in NS (two ext4 claims holding FILES), backed up once; then NS enforces ``restricted``."""
    from flows.backup import backup_app

    cluster, api = local_cluster, local_cluster.client
    core = client.CoreV1Api(api)
    cluster.s3.client().create_bucket(Bucket=BUCKET)
    init_repo(cluster, REPO)
    for key, value in cluster.s3.env.items():
        module_env.setenv(key, value)
    core.create_namespace({"metadata": {"name": NS}})
    apply_mover_rbac(cluster, [NS])
    core.create_namespaced_secret(NS, repo_secret(cluster, REPO))
    for pvc in CLAIMS:
        claim = m.block_pvc(pvc, NS, "64Mi", APP_CLASS, LABELS)
        claim["spec"]["volumeMode"] = "Filesystem"
        k.create(api, claim)
    _write_files(core)
    out = backup_app(**backup_params(cluster, REPO, NS, parallelism=2, hooks={"pre": [], "post": []}))
    assert sorted(r["volume"] for r in out["volumes"]) == [f"{NS}/{pvc}" for pvc in CLAIMS], out
    core.patch_namespace(NS, {"metadata": {"labels": RESTRICTED}})
    return {"cluster": cluster, "backup": out}


def _write_files(core) -> None:
    """FILES written into the claims by a pod that mounts both (the claims bind where it runs)."""
    script = (
        "import json, os, random, sys\n"
        "for pvc, files in json.loads(sys.argv[1]).items():\n"
        "    for path, (made, mode) in files.items():\n"
        "        full = os.path.join('/mnt', pvc, path)\n"
        "        os.makedirs(os.path.dirname(full), exist_ok=True)\n"
        "        data = made.encode() if isinstance(made, str) else random.Random(made[0]).randbytes(made[1])\n"
        "        with open(full, 'wb') as f:\n"
        "            f.write(data)\n"
        "        os.chmod(full, mode)\n"
        "os.sync()\n"
    )
    mounts = [{"name": pvc, "mountPath": f"/mnt/{pvc}"} for pvc in CLAIMS]
    pod = pod_manifest("writer", ["python", "-c", script, json.dumps(SPECS)], volumeMounts=mounts)
    pod["spec"]["volumes"] = [{"name": pvc, "persistentVolumeClaim": {"claimName": pvc}} for pvc in CLAIMS]
    _run_to_end(core, pod)


def _run_to_end(core, pod) -> str:
    """Run ``pod`` in NS to its end, delete it; its log (it must have succeeded)."""
    name = pod["metadata"]["name"]
    core.create_namespaced_pod(NS, pod)
    done = wait_pod(core, name, phase_in("Succeeded", "Failed"), namespace=NS, timeout=60)
    log = core.read_namespaced_pod_log(name, NS)
    core.delete_namespaced_pod(name, NS)
    wait_until(lambda: not k.find(core.api_client, "Pod", NS, name), 30, f"pod {NS}/{name} gone")
    assert done.status.phase == "Succeeded", log
    return log


def _read_back(core, claim: str, directory: str) -> dict[str, list]:
    """Every file under ``directory`` of ``claim``: relative path -> [sha256, mode], read by a pod that passes the
    namespace's ``restricted`` level."""
    script = (
        "import hashlib, json, os, sys\n"
        "top = os.path.join('/mnt/claim', sys.argv[1])\n"
        "out = {}\n"
        "for root, dirs, files in os.walk(top):\n"
        "    for name in files:\n"
        "        full = os.path.join(root, name)\n"
        "        with open(full, 'rb') as f:\n"
        "            digest = hashlib.sha256(f.read()).hexdigest()\n"
        "        out[os.path.relpath(full, top)] = [digest, os.stat(full).st_mode & 0o7777]\n"
        "print(json.dumps(out, sort_keys=True))\n"
    )
    pod = pod_manifest(
        "reader",
        ["python", "-c", script, directory],
        volumeMounts=[{"name": "claim", "mountPath": "/mnt/claim", "readOnly": True}],
        securityContext={**RESTRICTED_CONTAINER},
    )
    pod["spec"]["securityContext"] = {**RESTRICTED_POD, "seccompProfile": {"type": "RuntimeDefault"}}
    # a read-only claim: the kubelet applies no fsGroup to it (which would add group rw to every mode)
    pod["spec"]["volumes"] = [{"name": "claim", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}]
    return json.loads(_run_to_end(core, pod).strip().splitlines()[-1])


def _restore_files(cluster, return_state=False, **asked):
    from flows.files import restore_files

    request = {"repo": REPO, "namespace": NS, **POD, **asked}
    return restore_files(request=request, kubeconfig=flow_kubeconfig(cluster), return_state=return_state)


def _run_objects(api, run_id: str) -> dict[str, list[str]]:
    found = {}
    for kind in ("Pod", "PersistentVolumeClaim"):
        found[kind] = [o["metadata"]["name"] for o in k.list_objects(api, kind, NS, f"{m.RUN_LABEL}={run_id}")]
    return found


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def test_a_block_claim_is_refused_as_the_target_before_anything_is_created(backed_up):
    cluster = backed_up["cluster"]
    api = cluster.client
    k.create(api, m.block_pvc("raw", NS, "16Mi", APP_CLASS))
    before = {
        kind: [o["metadata"]["name"] for o in k.list_objects(api, kind, NS)]
        for kind in ("Pod", "PersistentVolumeClaim")
    }
    volumes = [{"pvc": "data", "paths": ASKED}]
    with pytest.raises(FilesTargetRefused) as refused:
        _restore_files(cluster, volumes=volumes, target={"claim": "raw"})
    assert str(refused.value) == f"target claim {NS}/raw is a Block claim: files need a Filesystem claim"
    assert refused.value.exit_code == EXIT_USAGE
    with pytest.raises(NotFoundError) as missing:
        _restore_files(cluster, volumes=volumes, target={"claim": "nowhere"})
    assert str(missing.value).startswith(f"target claim {NS}/nowhere does not exist")
    assert missing.value.exit_code == EXIT_NOT_FOUND
    after = {
        kind: [o["metadata"]["name"] for o in k.list_objects(api, kind, NS)]
        for kind in ("Pod", "PersistentVolumeClaim")
    }
    assert after == before


def test_a_claim_a_running_pod_uses_is_refused_unless_it_is_read_write_many(backed_up):
    cluster = backed_up["cluster"]
    api, core = cluster.client, client.CoreV1Api(cluster.client)
    claim = m.block_pvc("busy", NS, "64Mi", APP_CLASS)
    claim["spec"]["volumeMode"] = "Filesystem"
    k.create(api, claim)
    holder = pod_manifest(
        "holder",
        ["sleep", "600"],
        volumeMounts=[{"name": "v", "mountPath": "/mnt/busy"}],
        securityContext={**RESTRICTED_CONTAINER},
    )
    holder["spec"]["securityContext"] = {**RESTRICTED_POD, "seccompProfile": {"type": "RuntimeDefault"}}
    holder["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "busy"}}]
    core.create_namespaced_pod(NS, holder)
    try:
        wait_pod(core, "holder", phase_in("Running"), namespace=NS, timeout=60)
        with pytest.raises(FilesTargetRefused) as refused:
            _restore_files(cluster, volumes=[{"pvc": "data", "paths": ASKED}], target={"claim": "busy"})
        assert str(refused.value) == (
            f"target claim {NS}/busy is in use by pod(s) holder and is not ReadWriteMany: stop them, or copy into"
            " another claim"
        )
    finally:
        core.delete_namespaced_pod("holder", NS, grace_period_seconds=0)
        wait_until(lambda: not k.find(api, "Pod", NS, "holder"), 30, "holder gone")


def test_a_file_into_an_existing_claim_under_a_directory_given(backed_up):
    cluster = backed_up["cluster"]
    api, core = cluster.client, client.CoreV1Api(cluster.client)
    claim = m.block_pvc("existing", NS, "64Mi", APP_CLASS)
    claim["spec"]["volumeMode"] = "Filesystem"
    k.create(api, claim)
    out = _restore_files(
        cluster,
        volumes=[{"pvc": "logs", "paths": ["/app.log"]}],
        target={"claim": "existing"},
        directory="incident/42",
    )
    content, mode = FILES["logs"]["app.log"]
    assert _read_back(core, "existing", "incident/42/logs") == {"app.log": [_sha(content), mode]}
    assert out["volumes"][0]["result"]["copied_bytes"] == len(content)
    # nothing of the run is left, and the claim it did not create is untouched by the cleanup
    assert _run_objects(api, out["run_id"]) == {"Pod": [], "PersistentVolumeClaim": []}
    assert k.find(api, "PersistentVolumeClaim", NS, "existing") is not None


def test_two_paths_of_one_volume_into_a_new_claim(backed_up):
    cluster = backed_up["cluster"]
    api, core = cluster.client, client.CoreV1Api(cluster.client)
    new = {"size": "64Mi", "storage_class": APP_CLASS}
    out = _restore_files(cluster, volumes=[{"pvc": "data", "paths": ASKED}], target={"claim": "recovered", "new": new})
    run_id, directory = out["run_id"], out["directory"]
    assert directory == f"restored-{run_id}"
    (volume,) = out["volumes"]
    assert volume["pvc"] == "data" and volume["into"] == f"{directory}/data"
    result = volume["result"]
    data = FILES["data"]
    expected = {"app.conf": data["etc/app.conf"]}
    expected |= {f"table/{p.rsplit('/', 1)[1]}": data[p] for p in data if p.startswith("db/table/")}
    # bit-exact, modes kept, nothing else (db/other.dat was not asked for)
    assert _read_back(core, "recovered", f"{directory}/data") == {
        path: [_sha(content), mode] for path, (content, mode) in expected.items()
    }
    copied = {(e["path"], e["kind"], e["size"]) for e in result["copied"]}
    assert ("/etc/app.conf", "file", len(data["etc/app.conf"][0])) in copied
    assert ("/db/table", "dir", 0) in copied
    assert result["copied_bytes"] == sum(len(content) for content, _ in expected.values())
    # what the two paths and the filesystem's metadata occupy is fetched (the chunks holding them, up to 4 MiB each,
    # may hold some of the 8 MiB file beside them; measured: 3.3 MB of 9.5 MB), never the whole volume
    stored = next(r["data_bytes"] for r in backed_up["backup"]["volumes"] if r["volume"] == f"{NS}/data")
    assert result["copied_bytes"] < result["fetched_bytes"] < stored / 2, (result["fetched_bytes"], stored)
    # the artifact: one row per entry, and the volume's bytes copied and fetched in the report
    rows = artifact(f"files-{NS}").data
    rows = json.loads(rows) if isinstance(rows, str) else rows
    assert {(r["volume"], r["path"], r["kind"]) for r in rows} >= {
        (f"{NS}/data", "/etc/app.conf", "file"),
        (f"{NS}/data", "/db/table/00001.dat", "file"),
    }
    report = artifact(f"files-{NS}-report").data
    assert f"`{NS}/recovered` (created by this run)" in report and f"{directory}/data" in report
    # the files pod passed the restricted level (the API admitted it) and is gone; the claim stays
    (pod,) = [o for o in audited_creations(cluster, NS) if o.get("kind") == "Pod" and run_id in o["metadata"]["name"]]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert _run_objects(api, run_id) == {"Pod": [], "PersistentVolumeClaim": ["recovered"]}


def test_a_path_the_backup_lacks_fails_the_run_and_removes_its_new_claim(backed_up):
    cluster = backed_up["cluster"]
    api = cluster.client
    state = _restore_files(
        cluster,
        return_state=True,
        volumes=[{"pvc": "data", "paths": ["/etc/app.conf", "/no/such/file"]}],
        target={"claim": "scratch", "new": {"size": "64Mi", "storage_class": APP_CLASS}},
    )
    assert state.is_failed()
    with pytest.raises(FilesPodFailed) as failed:
        state.result()
    assert failed.value.pod_exit_code == EXIT_NOT_FOUND, str(failed.value)
    assert "/no/such/file" in str(failed.value)
    # the pod was admitted under restricted and ran; it and the claim the run created are gone
    pods = [
        o
        for o in audited_creations(cluster, NS)
        if o.get("kind") == "Pod" and o["metadata"]["name"].startswith("files-")
    ]
    assert pods, "the files pod was never created"
    run_id = pods[-1]["metadata"]["labels"][m.RUN_LABEL]
    assert _run_objects(api, run_id) == {"Pod": [], "PersistentVolumeClaim": []}
    assert k.find(api, "PersistentVolumeClaim", NS, "scratch") is None
    report = artifact(f"files-{NS}-failure")
    assert report is not None and "files pod" in report.data
