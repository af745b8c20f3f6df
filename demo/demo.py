"""``make demo``: the whole product on embedded defaults, through the Prefect flows.

On the local cluster (Kubernetes API, two CSI-like drivers, the app's with snapshots and CBT, a kubelet, moto S3
on loopback) and Prefect's local API it:

1. deploys the demo app (two Block PVCs of its StorageClass ``csi-hostpath-sc``, a writer that can be frozen) as
   ``configs/policies/demo.yaml`` describes it, plus the repository, ENCRYPTED with a key file generated for the
   run, and its Secret (storage credentials, repository URL, the key file as key ``keyfile``: the mover and
   writer pods mount it, the flows read it through the API);
2. runs ``backup-app`` from that policy twice: a full backup (CBT allocated ranges), then, after more
   writes, a CBT incremental;
3. runs ``restore-app`` into a new namespace and checks every restored volume is byte-identical to
   the snapshot it was backed up from and that the app's records verify;
4. runs ``restore-app`` onto the app's own claims without ``overwrite``, which must be refused (that run shows
   in the UI what a failure looks like: one error line, a failure report, the claims' RestoreFailed Events);
5. runs ``maintain-repo`` (retention, prune, full verify).

It prints a summary table and ends with ``demo: ok`` (exit 0) or ``demo: FAILED <why>`` (exit 1).
With ``PREFECT_API_URL`` set (``make ui`` prints it) the runs go to that server, to be watched in
its UI (logs at INFO; the Prefect state in ``.prefect/`` as ``make ui``'s); otherwise to a throwaway local
Prefect API. It leaves nothing behind in the temporary directory.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
POLICY = REPO_ROOT / "configs" / "policies" / "demo.yaml"
MiB = 1 << 20
SIZES = {"data": 128 * MiB, "logs": 32 * MiB}
TARGET_NS = "demo-restore"
APP_CLASS = "csi-hostpath-sc"  # the app's class: the hostpath driver's (the cluster's default is the other driver's)

# Prefills the data volume like a small database (pages of half random, half repeated bytes, and
# untouched holes), from a pod that has the PVC as a block device.
LOADER = """
import os, random
rng = random.Random(7)
with open("/dev/xvda", "r+b") as f:
    for page in range(0, 96 * 2**20, 64 * 1024):
        if rng.random() < 0.7:
            f.seek(page)
            f.write(b"".join(rng.randbytes(2048) + (b"row %08d " % page * 160)[:2048] for _ in range(16)))
    os.fsync(f.fileno())
"""


def _say(message: str) -> None:
    print(f"demo: {message}", flush=True)


def _sha(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MiB:.1f} MiB"


def _credentials(key: bytes):
    from movers.repo.keys import KEYFILE, Credentials, Secret

    return Credentials((Secret(KEYFILE, "the demo's key file", key),))


def _deploy(cluster, policy, key: bytes) -> None:
    from kubernetes import client

    from demo.demo_app import pod_manifest
    from localcluster.kubelet.testing import phase_in, wait_pod, wait_until
    from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, apply_mover_rbac
    from movers.kube import apply as k
    from movers.kube import manifests as m

    api, core, ns = cluster.client, client.CoreV1Api(cluster.client), policy.namespace
    mover, secret = policy.mover, policy.repository.credentials_secret
    repo_env = {**cluster.s3.env, "CBT_MOVER_REPO": policy.repository.url}
    key_data = {"keyfile": base64.b64encode(key).decode()}
    for namespace in (ns, TARGET_NS):
        core.create_namespace({"metadata": {"name": namespace}})
        core.create_namespaced_secret(
            namespace, {"metadata": {"name": secret}, "stringData": repo_env, "data": key_data}
        )
    # the mover pods' identity: what `cbt-mover install controller` and `install movers` print, applied
    if mover.service_account != MOVER_SERVICE_ACCOUNT:
        raise RuntimeError(
            f"{POLICY.name} names mover ServiceAccount {mover.service_account!r}; the shipped RBAC"
            f" creates {MOVER_SERVICE_ACCOUNT!r}"
        )
    apply_mover_rbac(cluster, [ns, TARGET_NS])
    labels = policy.pvc_selector["matchLabels"]
    for pvc, size in SIZES.items():
        k.create(api, m.block_pvc(pvc, ns, f"{size // MiB}Mi", APP_CLASS, labels))
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "loader"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "load",
                        "image": "python:3-slim",
                        "command": ["python", "-c", LOADER],
                        "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            },
        },
    )
    loaded = wait_pod(core, "loader", phase_in("Succeeded", "Failed"), namespace=ns, timeout=120)
    if loaded.status.phase != "Succeeded":
        raise RuntimeError(f"the loader pod failed: {core.read_namespaced_pod_log('loader', ns)[-500:]}")
    core.delete_namespaced_pod("loader", ns)
    core.create_namespaced_pod(
        ns, pod_manifest("app", {"data": "/dev/xvda", "logs": "/dev/xvdb"}, labels=labels, interval=0.01)
    )
    wait_pod(core, "app", phase_in("Running"), namespace=ns, timeout=60)
    wait_until(lambda: core.read_namespaced_pod_log("app", ns).count("write seq=") >= 20, 60, "the app's writes")


def _writes(cluster, ns: str) -> int:
    from kubernetes import client

    return client.CoreV1Api(cluster.client).read_namespaced_pod_log("app", ns).count("write seq=")


def _init_repo(url: str, env: dict[str, str], key: bytes) -> None:
    from movers.repo.config import RepoConfig
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    bucket = url.removeprefix("s3://").split("/", 1)[0]
    import boto3

    boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=env.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    ).create_bucket(Bucket=bucket)
    Repository.init(open_store(url), RepoConfig.new(encrypted=True), _credentials(key))


def _identical(cluster, policy, restored: dict, key: bytes) -> list[tuple[str, str]]:
    """(pvc, problem) for every restored volume that differs from its snapshot or fails the app's verify."""
    import subprocess

    from movers.kube import apply as k
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    repo = Repository.open(open_store(policy.repository.url), _credentials(key))
    problems = []
    for row in restored["volumes"]:
        claim = k.get(cluster.client, "PersistentVolumeClaim", TARGET_NS, row["pvc"])
        pv = k.get(cluster.client, "PersistentVolume", None, claim["spec"]["volumeName"])
        image = cluster.store.volume_path(pv["spec"]["csi"]["volumeHandle"])
        manifest = repo.read_manifest(row["volume"], row["backup_id"])
        source = cluster.store.snapshot_path(manifest.snapshot.snapshot_handle)
        if _sha(image) != _sha(source):
            problems.append((row["pvc"], "restored bytes differ from the snapshot"))
        out = subprocess.run(
            [sys.executable, "-m", "demo.demo_app", "verify", "--device", str(image)],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            problems.append((row["pvc"], f"app verify failed: {out.stdout.strip()} {out.stderr.strip()}"))
        row["sha256"] = _sha(image)[:12]
    return problems


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _ratio(x: float | None) -> str:
    return "-" if x is None else "all stored" if x == float("inf") else f"{x:.2f}x"


def _summary(full: dict, incr: dict, restored: dict, maint: dict | None, seconds: float) -> str:
    rows = [["step", "volume", "mode / source", "changed", "read", "uploaded", "dedup", "compression", "time"]]
    for step, result in (("backup 1", full), ("backup 2", incr)):
        for r in result["volumes"]:
            rows.append(
                [
                    step,
                    r["volume"],
                    f"{r['mode']} / {r['change_source']}",
                    _mib(r["changed_bytes"]),
                    _mib(r["read_bytes"]),
                    _mib(r["uploaded_bytes"]),
                    _ratio(r["dedup_ratio"]),
                    _ratio(r["compression_ratio"]),
                    f"{r['duration_s']:.1f} s",
                ]
            )
    for r in restored["volumes"]:
        rows.append(
            [
                "restore",
                f"{TARGET_NS}/{r['pvc']}",
                f"{r['volume_mode']} / sha256 {r.get('sha256', '?')}",
                "-",
                "-",
                f"wrote {_mib(r['written_bytes'])}",
                "-",
                "-",
                f"{r['duration_s'] or 0:.1f} s",
            ]
        )
    text = _table(rows)
    if maint is not None:
        text += f"\nmaintenance: {_maint_line(maint)}"
    return text + f"\nfreeze windows: {full['freeze_s']:.2f} s, {incr['freeze_s']:.2f} s; total {seconds:.0f} s"


def _maint_line(maint: dict) -> str:
    verify = maint.get("verify") or {}
    prune = maint.get("prune") or {}
    return (
        f"forgot {len(maint.get('forgotten') or [])} backup(s), kept {maint.get('kept')}; verify"
        f" {verify.get('mode', '-')}: {'ok' if verify.get('ok') else 'DAMAGE'} ({verify.get('backups_checked')}"
        f" backups, {_mib(verify.get('fetched_bytes'))} read); prune deleted {prune.get('packs_deleted', 0)}"
        f" packs, {prune.get('packs_in_grace', 0)} in grace"
    )


def run() -> None:
    from localcluster.cluster import LocalCluster
    from movers.policy.model import load_policy

    t0 = time.monotonic()
    policy = load_policy(POLICY)
    _say("starting the local cluster (in a temporary directory, removed at the end)")
    with LocalCluster() as cluster:
        os.environ.update(cluster.s3.env)  # this process is the Prefect worker: it reads the repository too
        key = os.urandom(32)  # the repository's key file: only in this process and the repository Secret
        _init_repo(policy.repository.url, cluster.s3.env, key)
        secret = f"{policy.namespace}/{policy.repository.credentials_secret}"
        _say(f"repository {policy.repository.url}: encrypted, its key file generated into Secret {secret} (keyfile)")
        _deploy(cluster, policy, key)
        from flows.backup import backup_app
        from flows.maintenance import maintain_repo
        from flows.restore import restore_app
        from localcluster.shipped_rbac import controller_kubeconfig
        from movers.maintenance.request import MaintenanceRequest
        from movers.restore.app_request import RestoreAppRequest

        kubeconfig = str(controller_kubeconfig(cluster))  # the flows run as the shipped controller identity
        _say(f"backup 1 of {policy.namespace} from {POLICY.relative_to(REPO_ROOT)} (full)")
        full = backup_app(policy_path=str(POLICY), kubeconfig=kubeconfig)
        seen = _writes(cluster, policy.namespace)
        from localcluster.kubelet.testing import wait_until

        wait_until(lambda: _writes(cluster, policy.namespace) >= seen + 200, 60, "more writes")
        _say("backup 2 (CBT incremental)")
        incr = backup_app(policy_path=str(POLICY), kubeconfig=kubeconfig)
        _say(f"restore of the latest backup into {TARGET_NS}")
        into_new = RestoreAppRequest(
            repo=policy.repository.url,
            namespace=policy.namespace,
            repo_secret=policy.repository.credentials_secret,
            target_namespace=TARGET_NS,
            image=policy.mover.image,
            service_account=policy.mover.service_account,
        )
        restored = restore_app(into_new, kubeconfig=kubeconfig)
        problems = _identical(cluster, policy, restored, key)
        _say(f"a restore onto {policy.namespace}'s own claims, which exist, without overwrite: must be refused")
        onto_own = into_new.model_copy(update={"target_namespace": policy.namespace})
        refused = restore_app(onto_own, kubeconfig=kubeconfig, return_state=True)
        if refused.is_failed() and "exists" in (refused.message or ""):
            _say(f"refused as it must be (its run shows the failure report): {refused.message.splitlines()[0][:160]}")
        else:
            problems.append(("restore onto existing claims", f"not refused: {refused.type} {refused.message}"))
        _say("maintenance (retention, prune, full verify)")
        asked = MaintenanceRequest(
            repo=policy.repository.url, policy_paths=[str(POLICY)], verify="full", key_secret=secret
        )
        maint = maintain_repo(asked, kubeconfig=kubeconfig)
    print(_summary(full, incr, restored, maint, time.monotonic() - t0), flush=True)
    modes = [(r["mode"], r["change_source"]) for r in incr["volumes"]]
    if any(mode != ("incremental-cbt", "cbt-delta") for mode in modes):
        problems.append(("backup 2", f"expected CBT incremental backups, got {modes}"))
    if problems:
        raise RuntimeError("; ".join(f"{what}: {why}" for what, why in problems))


def prefect_environment(environ: dict[str, str]) -> str | None:
    """Set the demo's Prefect settings in ``environ``; the temporary Prefect home to remove at exit, if any.

    The runs log at INFO to the API (their Logs tabs in the UI say each volume's plan and outcome), the terminal
    shows WARNING and above. With ``PREFECT_API_URL`` (``make ui``'s server) the demo's Prefect state, the
    results of failed runs included, goes where ``make ui`` keeps its own: ``.prefect/`` of this checkout (unless
    ``PREFECT_HOME`` is set); without it, into a throwaway Prefect home (and local API) removed at exit."""
    environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    if environ.get("PREFECT_API_URL"):
        environ.setdefault("PREFECT_HOME", str(REPO_ROOT / ".prefect"))
        return None
    environ["PREFECT_HOME"] = home = tempfile.mkdtemp(prefix="cbt-mover-demo-prefect-")
    # its first start creates the database: well over Prefect's 20 s default on a busy 2-core machine
    environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    return home


def main() -> int:
    home = prefect_environment(os.environ)
    if home:  # a throwaway local API, not the user's ~/.prefect
        # registered before Prefect starts its server, so run after Prefect's own exit handler stopped it
        atexit.register(shutil.rmtree, home, True)
    try:
        run()
    except Exception as err:  # noqa: BLE001  (the demo's contract: one last line saying why)
        print(f"demo: FAILED {type(err).__name__}: {err}", flush=True)
        return 1
    print("demo: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
