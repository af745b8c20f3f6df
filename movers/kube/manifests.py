"""Pure builders of the Kubernetes objects a backup or restore run creates.

Every function returns a fresh ``dict`` (JSON-serialisable, no client models) and has no side
effects: the same arguments give the same manifest, which ``tests/golden/`` pins down. Applying
them is the job of ``movers.kube.apply`` and the modules built on it. ``labels`` are copied into
``metadata.labels`` as given; callers put the run label (``run_labels``) there so that
``cleanup.delete_by_label`` finds everything a run created and a retried run recognises its own objects.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
GROUP_SNAPSHOT_GROUP = "groupsnapshot.storage.k8s.io"
GROUP_SNAPSHOT_VERSIONS = ("v1", "v1beta2", "v1beta1")  # preferred first (cbt-api-facts §5)
RUN_LABEL = "cbt-mover.io/run"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
ALLOW_VOLUME_MODE_CHANGE = "snapshot.storage.kubernetes.io/allow-volume-mode-change"
TERMINATION_LOG = "/dev/termination-log"
CBT_TOKEN_DIR = "/var/run/secrets/cbt.storage.k8s.io"
CBT_TOKEN_FILE = f"{CBT_TOKEN_DIR}/token"
CBT_TOKEN_SECONDS = 600
DEFAULT_NODE_SELECTOR = {"kubernetes.io/os": "linux"}
DEFAULT_RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}}
# env var -> (secret key, optional): the repository credentials the mover reads from its Secret
REPO_SECRET_KEYS = (
    ("AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID", False),
    ("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", False),
    ("AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN", True),
    ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL", True),
    ("AWS_REGION", "AWS_REGION", True),
    ("CBT_MOVER_REPO", "CBT_MOVER_REPO", False),
)


def run_labels(run_id: str, **extra: str) -> dict[str, str]:
    """The labels of everything a run creates: ``cbt-mover.io/run=<run_id>``, managed-by, extras."""
    return {RUN_LABEL: run_id, MANAGED_BY_LABEL: "cbt-mover", **extra}


def _meta(name: str, namespace: str | None, labels: Mapping[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return meta


def volume_group_snapshot(
    name: str,
    namespace: str,
    selector: Mapping[str, Any],
    group_class: str | None,
    version: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A dynamic VolumeGroupSnapshot of the PVCs ``selector`` (a LabelSelector) matches.

    ``version`` is the served ``groupsnapshot.storage.k8s.io`` version (v1, v1beta2, v1beta1: the
    spec is the same in all three). ``group_class`` None leaves the class out (the driver's default
    class applies); an empty string is rejected, as the CRD's validation would.
    """
    if version not in GROUP_SNAPSHOT_VERSIONS:
        raise ValueError(f"unsupported {GROUP_SNAPSHOT_GROUP} version {version!r}")
    if group_class == "":
        raise ValueError("group_class must be a class name or None (the default class)")
    spec: dict[str, Any] = {"source": {"selector": copy.deepcopy(dict(selector))}}
    if group_class is not None:
        spec["volumeGroupSnapshotClassName"] = group_class
    return {
        "apiVersion": f"{GROUP_SNAPSHOT_GROUP}/{version}",
        "kind": "VolumeGroupSnapshot",
        "metadata": _meta(name, namespace, labels),
        "spec": spec,
    }


def volume_snapshot(
    name: str, namespace: str, pvc: str, snapshot_class: str | None = None, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A dynamic ``snapshot.storage.k8s.io/v1`` VolumeSnapshot of ``pvc`` (the fallback without groups).

    ``snapshot_class`` None: the driver's default VolumeSnapshotClass.
    """
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": pvc}}
    if snapshot_class is not None:
        spec["volumeSnapshotClassName"] = snapshot_class
    return {
        "apiVersion": f"{SNAPSHOT_GROUP}/v1",
        "kind": "VolumeSnapshot",
        "metadata": _meta(name, namespace, labels),
        "spec": spec,
    }


def _block_pvc_spec(size: str, storage_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Block",
        "resources": {"requests": {"storage": size}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return spec


def pvc_from_snapshot(
    name: str,
    namespace: str,
    snapshot: str,
    size: str,
    storage_class: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ReadWriteOnce Block-mode PVC provisioned from VolumeSnapshot ``snapshot`` (the mover reads it).

    ``size`` is a quantity at least the snapshot's restoreSize. If the snapshot's source was a
    Filesystem PVC, its content needs ``allow_volume_mode_change_patch()`` first (KEP-3141).
    ``storage_class`` None: the cluster's default class.
    """
    spec = _block_pvc_spec(size, storage_class)
    spec["dataSource"] = {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": snapshot}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(name, namespace, labels),
            "spec": spec}  # fmt: skip


def block_pvc(
    name: str, namespace: str, size: str, storage_class: str | None = None, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """An empty ReadWriteOnce Block-mode PVC: the target of a restore (recorded capacity and class)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(name, namespace, labels),
            "spec": _block_pvc_spec(size, storage_class)}  # fmt: skip


def allow_volume_mode_change_patch() -> dict[str, Any]:
    """The merge patch for a VolumeSnapshotContent that lets a Block PVC come from a Filesystem source."""
    return {"metadata": {"annotations": {ALLOW_VOLUME_MODE_CHANGE: "true"}}}


def backup_args(
    *,
    volume: str,
    namespace: str,
    snapshot: str,
    device: str = "/dev/xvda",
    repo: str | None = None,
    base_handle: str | None = None,
    cluster: str | None = None,
    pvc: str | None = None,
    group_snapshot: str | None = None,
    full: bool = False,
    cbt_fallback: str = "scan",
    workers: int | None = None,
    storage_class: str | None = None,
    volume_mode: str | None = None,
    tags: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The argv (after the ``cbt-mover`` entrypoint) of a mover pod backing up ``snapshot`` via CBT.

    ``--kube`` looks the snapshot, its driver's SnapshotMetadataService and CA up in-cluster; the
    JSON result goes to stdout and to the termination log. ``repo`` None: the pod's
    ``CBT_MOVER_REPO`` (from the repository Secret). ``base_handle``: a delta since that snapshot.
    ``storage_class`` / ``volume_mode`` (the source PVC's) and ``tags`` (e.g. ``cbt-mover.io/run``,
    ``cbt-mover.io/app``; sorted by key) are recorded in the manifest for restores.
    """
    args = ["backup", "--volume", volume, "--device", device, "--kube", "--namespace", namespace,
            "--snapshot", snapshot, "--cbt-fallback", cbt_fallback]  # fmt: skip
    for flag, value in (("--repo", repo), ("--base-handle", base_handle), ("--cluster", cluster), ("--pvc", pvc),
                        ("--group-snapshot", group_snapshot), ("--storage-class", storage_class),
                        ("--volume-mode", volume_mode)):  # fmt: skip
        if value:
            args += [flag, value]
    for key, value in sorted((tags or {}).items()):
        args += ["--tag", f"{key}={value}"]
    if workers is not None:
        args += ["--workers", str(workers)]
    if full:
        args.append("--full")
    return [*args, *extra, "--json", "--result-file", TERMINATION_LOG]


def restore_args(
    *,
    volume: str,
    backup: str = "latest",
    device: str = "/dev/xvda",
    repo: str | None = None,
    assume_zeroed: bool = False,
    workers: int | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The argv of a writer pod restoring ``backup`` of ``volume`` onto its Block device.

    ``assume_zeroed`` only for a freshly provisioned volume known to read as zeros.
    """
    args = ["restore", "--volume", volume, "--backup", backup, "--device", device]
    if repo:
        args += ["--repo", repo]
    if workers is not None:
        args += ["--workers", str(workers)]
    if assume_zeroed:
        args.append("--assume-zeroed")
    return [*args, *extra, "--json", "--result-file", TERMINATION_LOG]


def _repo_env(secret: str) -> list[dict[str, Any]]:
    env = []
    for var, key, optional in REPO_SECRET_KEYS:
        ref: dict[str, Any] = {"name": secret, "key": key}
        if optional:
            ref["optional"] = True
        env.append({"name": var, "valueFrom": {"secretKeyRef": ref}})
    return env


def mover_pod(
    name: str,
    namespace: str,
    *,
    image: str,
    args: Sequence[str],
    pvc: str,
    service_account: str,
    repo_secret: str,
    device_path: str = "/dev/xvda",
    cbt_audience: str | None = None,
    resources: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    active_deadline_seconds: int | None = None,
    env: Mapping[str, str] | None = None,
    image_pull_policy: str = "IfNotPresent",
) -> dict[str, Any]:
    """A run-once pod running ``cbt-mover ARGS`` against Block PVC ``pvc`` at ``device_path``.

    Contract:
    - ``restartPolicy: Never``: a failed mover is retried by the flow, not the kubelet; the result
      JSON comes back in the termination message (``/dev/termination-log``), the log tail under
      ``FallbackToLogsOnError`` when the mover died before writing it.
    - ``cbt_audience``: a projected ServiceAccount token for that audience (600 s, re-minted by the
      kubelet) mounted read-only at ``CBT_TOKEN_FILE``; ``--cbt-token-file`` is appended to the
      args when they do not name one. None: no token volume (restore pods, or TokenRequest).
    - Repository credentials come from Secret ``repo_secret`` (``REPO_SECRET_KEYS``; session
      token, endpoint and region are optional keys).
    - Security: not privileged, no privilege escalation, all capabilities dropped, read-only root
      filesystem, RuntimeDefault seccomp. It runs as uid 0 because the runtime creates the device
      node of a ``volumeDevices`` entry owned by root (fsGroup does not apply to block devices);
      the device cgroup, not privileges, grants access to exactly that device.
    - ``node_selector`` defaults to Linux nodes: block volumes cannot attach to Windows nodes.
    - ``resources`` default: requests cpu 500m / memory 256Mi, limits cpu 2 / memory 512Mi
      (the pipeline's memory is bounded by its in-flight bytes, not by the volume size).
    """
    argv = list(args)
    volumes: list[dict[str, Any]] = [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}]
    mounts: list[dict[str, Any]] = []
    if cbt_audience is not None:
        volumes.append({"name": "cbt-token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": cbt_audience, "expirationSeconds": CBT_TOKEN_SECONDS, "path": "token"}}]}})  # fmt: skip
        mounts.append({"name": "cbt-token", "mountPath": CBT_TOKEN_DIR, "readOnly": True})
        if "--cbt-token-file" not in argv:
            argv += ["--cbt-token-file", CBT_TOKEN_FILE]
    container: dict[str, Any] = {
        "name": "mover",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "args": argv,
        "env": [*_repo_env(repo_secret), *({"name": k, "value": v} for k, v in (env or {}).items())],
        "resources": copy.deepcopy(dict(resources) if resources is not None else DEFAULT_RESOURCES),
        "volumeDevices": [{"name": "data", "devicePath": device_path}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,
            "runAsNonRoot": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": service_account,
        "automountServiceAccountToken": True,  # --kube reads the snapshot with the pod's own identity
        "nodeSelector": dict(node_selector if node_selector is not None else DEFAULT_NODE_SELECTOR),
        "containers": [container],
        "volumes": volumes,
    }
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = int(active_deadline_seconds)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(name, namespace, labels), "spec": spec}


# -- restore: handing a restored volume to a claim of another name or volume mode ------------------------------

RESTORED_FROM = "cbt-mover.io/restored-from"  # annotation of a restored claim: <volume id>@<backup id>
RESTORED_BY = "cbt-mover.io/restored-by"  # annotation of a restored claim: the restore run id
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
_CSI_KEPT = (
    "driver", "volumeHandle", "volumeAttributes", "readOnly", "controllerPublishSecretRef", "nodeStageSecretRef",
    "nodePublishSecretRef", "controllerExpandSecretRef", "nodeExpandSecretRef",
)  # fmt: skip


def reclaim_policy_patch(policy: str) -> dict[str, Any]:
    """The merge patch setting a PV's ``persistentVolumeReclaimPolicy`` (Retain keeps the storage when the PV goes)."""
    if policy not in ("Retain", "Delete", "Recycle"):
        raise ValueError(f"unknown reclaim policy {policy!r}")
    return {"spec": {"persistentVolumeReclaimPolicy": policy}}


def rebound_pv(
    name: str,
    source_pv: Mapping[str, Any],
    claim_namespace: str,
    claim_name: str,
    volume_mode: str,
    *,
    fs_type: str = "ext4",
    reclaim_policy: str = "Retain",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A new PV for the storage behind ``source_pv`` (a PV as a dict), pre-bound to claim ``claim_name``.

    A PV's ``volumeMode`` is immutable, so a volume changes mode (or claim) by a new PV object with the
    same ``csi`` source (driver, volumeHandle, attributes, secret refs), capacity, access modes, class and
    node affinity. ``claimRef`` names the claim without a uid: the PV controller binds the claim whose
    ``volumeName`` is this PV and fills the uid in. ``fs_type`` is set for Filesystem mode (dropped for
    Block); ``mountOptions`` are kept for Filesystem only. ``reclaim_policy`` Retain (default) so that
    nothing deletes the storage while the hand-over is in progress; the caller restores the original
    policy after binding. The provisioned-by annotation is kept (the provisioner deletes what it made).
    """
    if volume_mode not in ("Block", "Filesystem"):
        raise ValueError(f"volume_mode must be Block or Filesystem, not {volume_mode!r}")
    spec = source_pv.get("spec") or {}
    csi = {k: copy.deepcopy(v) for k, v in (spec.get("csi") or {}).items() if k in _CSI_KEPT}
    if not csi.get("driver") or not csi.get("volumeHandle"):
        raise ValueError(f"PV {source_pv.get('metadata', {}).get('name')} has no CSI volume handle")
    if volume_mode == "Filesystem":
        csi["fsType"] = (spec.get("csi") or {}).get("fsType") or fs_type
    meta = _meta(name, None, labels)
    provisioner = ((source_pv.get("metadata") or {}).get("annotations") or {}).get(PROVISIONED_BY)
    if provisioner:
        meta["annotations"] = {PROVISIONED_BY: provisioner}
    new_spec: dict[str, Any] = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "capacity": copy.deepcopy(dict(spec.get("capacity") or {})),
        "csi": csi,
        "persistentVolumeReclaimPolicy": reclaim_policy,
        "storageClassName": spec.get("storageClassName") or "",
        "volumeMode": volume_mode,
        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": claim_namespace,
                     "name": claim_name},  # fmt: skip
    }
    if spec.get("nodeAffinity"):
        new_spec["nodeAffinity"] = copy.deepcopy(spec["nodeAffinity"])
    if volume_mode == "Filesystem" and spec.get("mountOptions"):
        new_spec["mountOptions"] = list(spec["mountOptions"])
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": new_spec}


def prebound_pvc(
    name: str,
    namespace: str,
    volume: str,
    size: str,
    storage_class: str,
    volume_mode: str = "Filesystem",
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A claim of PV ``volume`` (``spec.volumeName``): the PV controller binds exactly that PV, nothing is
    provisioned. ``storage_class`` must be the PV's class ("" for none), ``size`` at most its capacity."""
    meta = _meta(name, namespace, labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    spec = {"accessModes": list(access_modes), "volumeMode": volume_mode, "resources": {"requests": {"storage": size}},
            "storageClassName": storage_class, "volumeName": volume}  # fmt: skip
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def restored_patch(volume: str, backup_id: str, run_id: str) -> dict[str, Any]:
    """The merge patch that marks a claim as a complete restore of ``backup_id`` of ``volume`` (set last)."""
    return {"metadata": {"annotations": {RESTORED_FROM: f"{volume}@{backup_id}", RESTORED_BY: run_id}}}


def quantity(n_bytes: int) -> str:
    """A Kubernetes quantity of at least ``n_bytes``: ``16Mi`` when it divides evenly, else plain bytes."""
    if n_bytes <= 0:
        raise ValueError("a volume size must be positive")
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n_bytes % unit == 0:
            return f"{n_bytes // unit}{suffix}"
    return str(n_bytes)
