"""Pure builders of the Kubernetes objects a backup or restore run creates.

Every function returns a fresh ``dict`` (JSON-serialisable, no client models) and has no side
effects: the same arguments give the same manifest, which ``tests/golden/`` pins down. Applying
them is the job of ``movers.kube.apply`` and the modules built on it.

Labels: ``labels`` are copied into ``metadata.labels``; callers put the run label there (``run_labels``)
so that ``cleanup.delete_by_label`` finds everything a run created and a retried run recognises its own
objects. The labels of a run's object (they carry ``RUN_LABEL``) are completed with the recommended
``app.kubernetes.io/*`` labels: name and managed-by ``cbt-mover``, instance = the run id, component =
what the builder makes (``COMPONENTS``) unless the caller names one; part-of = the protected
application when the caller gives it (``run_labels(run_id, app=...)``). Labels without the run label
(e.g. an application's own claims built for a test) are left as given. Every value is a valid label
value (``label_value`` makes one from any name).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from movers.kube.podspec import MoverProfile, MoverTask, RepoAccess
from movers.repo.keys import KEY_FILE_ENV, PASSWORD_FILE_ENV

SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
GROUP_SNAPSHOT_GROUP = "groupsnapshot.storage.k8s.io"
GROUP_SNAPSHOT_VERSIONS = ("v1", "v1beta2", "v1beta1")  # preferred first (cbt-api-facts §5)
LABEL_PREFIX = "cbt-mover.io/"  # the product's own labels (run, pvc, kept, ...)
RUN_LABEL = LABEL_PREFIX + "run"
PVC_LABEL = LABEL_PREFIX + "pvc"  # the claim (``label_value`` of its name) a run's object is for
NAME_LABEL = "app.kubernetes.io/name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
COMPONENT_LABEL = "app.kubernetes.io/component"
INSTANCE_LABEL = "app.kubernetes.io/instance"
PART_OF_LABEL = "app.kubernetes.io/part-of"
PRODUCT = "cbt-mover"  # the value of the name and managed-by labels
# app.kubernetes.io/component of what the builders make
MOVER, WRITER, SNAPSHOT, READER_CLAIM, RESTORE_CLAIM, RESTORE_VOLUME = (
    "mover",
    "writer",
    "snapshot",
    "reader-claim",
    "restore-claim",
    "restore-volume",
)
COMPONENTS = (MOVER, WRITER, SNAPSHOT, READER_CLAIM, RESTORE_CLAIM, RESTORE_VOLUME)
ALLOW_VOLUME_MODE_CHANGE = "snapshot.storage.kubernetes.io/allow-volume-mode-change"
TERMINATION_LOG = "/dev/termination-log"
CBT_TOKEN_DIR = "/var/run/secrets/cbt.storage.k8s.io"
CBT_TOKEN_FILE = f"{CBT_TOKEN_DIR}/token"
CBT_TOKEN_SECONDS = 600
DEFAULT_NODE_SELECTOR = {"kubernetes.io/os": "linux"}
# mover and writer pods unless a policy or the restore's parameters say otherwise (peak RSS measured by
# bench/engine_bench.py: about 250 MiB); no CPU limit (a throttled mover only runs longer)
DEFAULT_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
# env var -> (secret key, optional): the repository credentials the mover reads from its Secret
REPO_SECRET_KEYS = (
    ("AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID", False),
    ("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", False),
    ("AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN", True),
    ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL", True),
    ("AWS_REGION", "AWS_REGION", True),
    ("CBT_MOVER_REPO", "CBT_MOVER_REPO", False),
)
# the repository key in the same Secret: Secret key -> the mover's variable naming the file it is mounted as
# (``movers.repo.keys``; never the value itself in env or argv). A pod mounts the keys the Secret has
# (``movers.kube.repokey.key_names``) under REPO_KEY_DIR, mode 0400.
REPO_KEY_FILES = (("password", PASSWORD_FILE_ENV), ("keyfile", KEY_FILE_ENV))
REPO_KEY_VOLUME = "repo-key"
REPO_KEY_DIR = "/var/run/secrets/cbt-mover/repository"
REPO_KEY_MODE = 0o400


_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def label_value(text: str) -> str:
    """A valid label value for ``text`` (at most 63 characters of ``[A-Za-z0-9._-]``, alphanumeric at both
    ends, or empty): ``text`` itself when it is one, else its readable part (other characters turned into
    ``-``, cut to fit) and ``-`` + 8 hex digits of its SHA-256, so that different names stay different."""
    text = str(text)
    if len(text) <= 63 and _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:54].strip("-_.")
    return f"{readable}-{digest}" if readable else digest


def run_labels(run_id: str, *, app: str | None = None, component: str | None = None, **extra: str) -> dict[str, str]:
    """The labels of everything a run creates: ``cbt-mover.io/run=<run_id>``, the ``app.kubernetes.io/*``
    set (name, managed-by, instance = the run, part-of = ``app`` when given, ``component`` when given; the
    builders fill in their own component otherwise) and ``extra``."""
    labels = {RUN_LABEL: run_id, NAME_LABEL: PRODUCT, MANAGED_BY_LABEL: PRODUCT, INSTANCE_LABEL: label_value(run_id)}
    if app:
        labels[PART_OF_LABEL] = label_value(app)
    if component:
        labels[COMPONENT_LABEL] = component
    return {**labels, **extra}


def object_labels(component: str, labels: Mapping[str, str] | None) -> dict[str, str]:
    """``labels`` completed as the module doc says (a run's object), or as given."""
    if not labels or RUN_LABEL not in labels:
        return dict(labels or {})
    return {
        NAME_LABEL: PRODUCT,
        MANAGED_BY_LABEL: PRODUCT,
        INSTANCE_LABEL: label_value(labels[RUN_LABEL]),
        COMPONENT_LABEL: component,
        **labels,
    }


def _meta(name: str, namespace: str | None, labels: Mapping[str, str] | None, component: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    full = object_labels(component, labels)
    if full:
        meta["labels"] = full
    return meta


def _is_quantity(text: str) -> bool:
    from movers.values import parse_quantity

    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _check_quantity(size: Any, what: str) -> str:
    if not isinstance(size, str) or not _is_quantity(size):
        raise ValueError(f"{what} {size!r} is not a Kubernetes quantity (e.g. 16Mi, 1Gi, 1073741824)")
    return size


def reader_claim_size(restore_size: int | str | None, source_capacity: int | str | None) -> str:
    """The size of the claim a mover reads a snapshot from: the snapshot's ``restoreSize`` (bytes or a
    quantity), or, when the driver left it out, the source claim's capacity (a volume only grows, so its
    capacity is at least the snapshot's size). ``ValueError`` when neither is known: never ``"None"``."""
    for value, what in ((restore_size, "restoreSize"), (source_capacity, "source claim capacity")):
        if value is None or value == "" or isinstance(value, bool):
            continue
        if isinstance(value, int):
            return quantity(value)
        return _check_quantity(str(value).strip(), what)
    raise ValueError(
        "the snapshot has no restoreSize and the source claim's capacity is unknown: cannot size"
        " the claim to read it from"
    )


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
        "metadata": _meta(name, namespace, labels, SNAPSHOT),
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
        "metadata": _meta(name, namespace, labels, SNAPSHOT),
        "spec": spec,
    }


def _block_pvc_spec(size: str, storage_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Block",
        "resources": {"requests": {"storage": _check_quantity(size, "size")}},
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

    ``size`` is a quantity at least the snapshot's restoreSize (``reader_claim_size``; anything that is
    not a quantity, such as ``"None"``, is a ``ValueError``). If the snapshot's source was a Filesystem
    PVC, its content needs ``allow_volume_mode_change_patch()`` first (KEP-3141). ``storage_class``: the
    source claim's class (or one of the snapshot's driver); None: the cluster's default class, which
    may belong to another driver.
    """
    spec = _block_pvc_spec(size, storage_class)
    spec["dataSource"] = {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": snapshot}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(name, namespace, labels, READER_CLAIM),
        "spec": spec,
    }


def block_pvc(
    name: str,
    namespace: str,
    size: str,
    storage_class: str | None = None,
    labels: Mapping[str, str] | None = None,
    snapshot: str | None = None,
) -> dict[str, Any]:
    """A ReadWriteOnce Block-mode PVC: the target of a restore (recorded capacity and class), empty, or provisioned
    from the kept VolumeSnapshot ``snapshot`` (its content annotated first when its source was a Filesystem PVC:
    ``allow_volume_mode_change_patch``)."""
    spec = _block_pvc_spec(size, storage_class)
    if snapshot:
        spec["dataSource"] = {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": snapshot}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(name, namespace, labels, RESTORE_CLAIM),
        "spec": spec,
    }


def allow_volume_mode_change_patch() -> dict[str, Any]:
    """The merge patch for a VolumeSnapshotContent that lets a Block PVC come from a Filesystem source."""
    return {"metadata": {"annotations": {ALLOW_VOLUME_MODE_CHANGE: "true"}}}


def backup_args(*, request_env: str, cbt: bool, repo: str | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The argv (after the ``cbt-mover`` entrypoint) of a mover pod whose whole backup request
    (``movers.backup.request.BackupRequest``: volume, identity, snapshot, change source, tags) is the JSON of env
    variable ``request_env`` (``mover_pod``'s ``env``). ``cbt``: the request's change source is CBT, and
    ``--kube`` looks the snapshot, its driver's SnapshotMetadataService and CA up in-cluster (how the pod reaches
    the service, not part of the request). ``repo`` None: the pod's ``CBT_MOVER_REPO`` (from the repository
    Secret). The JSON result goes to stdout and to the termination log.
    """
    args = ["backup", "--request-env", request_env, *(["--kube"] if cbt else [])]
    if repo:
        args += ["--repo", repo]
    return [*args, *extra, "--json", "--result-file", TERMINATION_LOG]


def restore_args(
    *, request_env: str, repo: str | None = None, extra: Sequence[str] = (), cbt: bool = False
) -> list[str]:
    """The argv (after the ``cbt-mover`` entrypoint) of a writer pod whose whole restore request
    (``movers.restore.request.RestoreRequest``: volume, backup, device, ``assume_zeroed``, ``verify_device``,
    workers, a CBT delta) is the JSON of env variable ``request_env`` (``mover_pod``'s ``env``). ``cbt``: the
    request names a CBT delta, and ``--kube`` looks its snapshot, the driver's SnapshotMetadataService and CA up
    in-cluster, as a backup mover's does (``backup_args``). ``repo`` None: the pod's ``CBT_MOVER_REPO`` (from the
    repository Secret). The JSON result goes to stdout and to the termination log.
    """
    args = ["restore", "--request-env", request_env, *(["--kube"] if cbt else [])]
    if repo:
        args += ["--repo", repo]
    return [*args, *extra, "--json", "--result-file", TERMINATION_LOG]


def _repo_env(secret: str) -> list[dict[str, Any]]:
    env = []
    for var, key, optional in REPO_SECRET_KEYS:
        ref: dict[str, Any] = {"name": secret, "key": key}
        if optional:
            ref["optional"] = True
        env.append({"name": var, "valueFrom": {"secretKeyRef": ref}})
    return env


def _repo_key(secret: str, keys: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The Secret volume of ``keys`` (some of ``REPO_KEY_FILES``), its mount and the variables naming its files."""
    known = dict(REPO_KEY_FILES)
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ValueError(f"repository key(s) {unknown} are none of {sorted(known)}")
    items = [{"key": key, "path": key, "mode": REPO_KEY_MODE} for key, _var in REPO_KEY_FILES if key in keys]
    # optional: a key removed from the Secret since it was read makes the mover fail at once, naming the missing
    # file, instead of a pod that waits in ContainerCreating until the run's timeout
    source = {"secretName": secret, "items": items, "defaultMode": REPO_KEY_MODE, "optional": True}
    volume = {"name": REPO_KEY_VOLUME, "secret": source}
    mount = {"name": REPO_KEY_VOLUME, "mountPath": REPO_KEY_DIR, "readOnly": True}
    env = [{"name": var, "value": f"{REPO_KEY_DIR}/{key}"} for key, var in REPO_KEY_FILES if key in keys]
    return volume, mount, env


def repo_access(repo: RepoAccess) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """What a pod needs of the repository access ``repo`` (see ``mover_pod``): its volumes (the key files' Secret
    volume, when ``repo.keys``), their mounts and the container's env (the Secret's storage credentials, then the
    variables naming the key files)."""
    if not repo.keys:
        return [], [], _repo_env(repo.secret)
    volume, mount, key_env = _repo_key(repo.secret, repo.keys)
    return [volume], [mount], [*_repo_env(repo.secret), *key_env]


def mover_pod(
    name: str,
    namespace: str,
    *,
    profile: MoverProfile,
    task: MoverTask,
    repo: RepoAccess,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A run-once pod running ``task`` (``cbt-mover ARGS`` against Block PVC ``pvc`` at ``device_path``) as
    ``profile`` says (image, ServiceAccount, resources, placement), with the repository access ``repo``.

    Contract:
    - ``task.role``: ``mover`` (reads a snapshot's claim for a backup) or ``writer`` (writes a restore);
      None: ``writer`` when ``args`` start with ``restore``, else ``mover``. It is the pod's
      ``app.kubernetes.io/component``. A mover gets its claim read-only (``readOnly: true``: the engine
      opens the device O_RDONLY for a backup) and keeps its ServiceAccount token (``--kube`` reads the
      snapshot with it); a writer gets its claim writable and ``automountServiceAccountToken: false``
      (it never calls the API), unless it restores in place by CBT (``cbt_audience`` given): then it reads the
      live claim's snapshot and asks the service as a mover does, with the same two tokens.
    - ``restartPolicy: Never``: a failed mover is retried by the flow, not the kubelet; the result
      JSON comes back in the termination message (``/dev/termination-log``), the log tail under
      ``FallbackToLogsOnError`` when the mover died before writing it.
    - ``task.cbt_audience``: a projected ServiceAccount token for that audience (600 s, re-minted by the
      kubelet) mounted read-only at ``CBT_TOKEN_FILE``; ``--cbt-token-file`` is appended to the
      args when they do not name one. None: no token volume (writers but by CBT, or TokenRequest).
    - Repository credentials come from Secret ``repo.secret`` (``REPO_SECRET_KEYS``; session
      token, endpoint and region are optional keys). ``repo.keys``: the keys of ``REPO_KEY_FILES`` the
      Secret holds (an encrypted repository's key), mounted as files (items of a Secret volume, read-only,
      mode 0400) under ``REPO_KEY_DIR``; the container's environment names the files, never their content.
    - Security: not privileged, no privilege escalation, all capabilities dropped, read-only root
      filesystem, RuntimeDefault seccomp. It runs as uid 0 because the runtime creates the device
      node of a ``volumeDevices`` entry owned by root (fsGroup does not apply to block devices);
      the device cgroup, not privileges, grants access to exactly that device.
    - ``profile.placement``: its ``node_selector`` defaults to Linux nodes (block volumes cannot attach to
      Windows nodes); ``tolerations`` (Kubernetes Tolerations) and ``affinity`` (a Kubernetes Affinity) go into the pod
      spec as given (``movers.policy.model`` validates them), e.g. for a tainted backup node pool.
    - ``profile.resources`` default: ``DEFAULT_RESOURCES`` (the policy's default too)
      (the pipeline's memory is bounded by its in-flight bytes, not by the volume size).
    """
    args, role, cbt_audience, placement = task.args, task.role, task.cbt_audience, profile.placement
    role = role or (WRITER if list(args[:1]) == ["restore"] else MOVER)
    if role not in (MOVER, WRITER):
        raise ValueError(f"role must be {MOVER} or {WRITER}, not {role!r}")
    argv = list(args)
    claim: dict[str, Any] = {"claimName": task.pvc, **({"readOnly": True} if role == MOVER else {})}
    key_volumes, mounts, repo_env = repo_access(repo)
    volumes: list[dict[str, Any]] = [{"name": "data", "persistentVolumeClaim": claim}, *key_volumes]
    if cbt_audience is not None:
        volumes.append(
            {
                "name": "cbt-token",
                "projected": {
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "audience": cbt_audience,
                                "expirationSeconds": CBT_TOKEN_SECONDS,
                                "path": "token",
                            }
                        }
                    ]
                },
            }
        )
        mounts.append({"name": "cbt-token", "mountPath": CBT_TOKEN_DIR, "readOnly": True})
        if "--cbt-token-file" not in argv:
            argv += ["--cbt-token-file", CBT_TOKEN_FILE]
    container: dict[str, Any] = {
        "name": "mover",
        "image": profile.image,
        "imagePullPolicy": profile.image_pull_policy,
        "args": argv,
        "env": [*repo_env, *({"name": k, "value": v} for k, v in (task.env or {}).items())],
        "resources": copy.deepcopy(dict(profile.resources) if profile.resources is not None else DEFAULT_RESOURCES),
        "volumeDevices": [{"name": "data", "devicePath": task.device_path}],
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
        "serviceAccountName": profile.service_account,
        # a mover's --kube reads the snapshot with the pod's own identity; a writer calls the API only for CBT
        "automountServiceAccountToken": role == MOVER or cbt_audience is not None,
        "nodeSelector": dict(placement.node_selector if placement.node_selector is not None else DEFAULT_NODE_SELECTOR),
        "containers": [container],
        "volumes": volumes,
    }
    if placement.tolerations:
        spec["tolerations"] = copy.deepcopy([dict(t) for t in placement.tolerations])
    if placement.affinity:
        spec["affinity"] = copy.deepcopy(dict(placement.affinity))
    if task.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = int(task.active_deadline_seconds)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(name, namespace, labels, role), "spec": spec}


# -- restore: handing a restored volume to a claim of another name or volume mode ------------------------------

RESTORED_FROM = "cbt-mover.io/restored-from"  # annotation of a restored claim: <volume id>@<backup id>
RESTORED_BY = "cbt-mover.io/restored-by"  # annotation of a restored claim: the restore run id
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
_CSI_KEPT = (
    "driver",
    "volumeHandle",
    "volumeAttributes",
    "readOnly",
    "controllerPublishSecretRef",
    "nodeStageSecretRef",
    "nodePublishSecretRef",
    "controllerExpandSecretRef",
    "nodeExpandSecretRef",
)


@dataclass(frozen=True)
class Handover:
    """The claim a volume is handed to (``rebound_pv``, ``volumes.rebind_volume``): ``claim`` (its name) of
    ``volume_mode`` (Block or Filesystem), the ``fs_type`` a Filesystem volume gets when its PV records none;
    ``replace_existing``: an existing claim of that name is deleted first (``volumes.rebind_volume``)."""

    claim: str
    volume_mode: str
    fs_type: str = "ext4"
    replace_existing: bool = False


@dataclass(frozen=True)
class ClaimedVolume:
    """The PV a pre-bound claim names (``prebound_pvc``) and what the claim must match: its ``storage_class``
    ("" for none), a ``size`` at most its capacity, its ``volume_mode`` and ``access_modes``."""

    volume: str
    size: str
    storage_class: str
    volume_mode: str = "Filesystem"
    access_modes: Sequence[str] = ("ReadWriteOnce",)

    @classmethod
    def of(cls, pv: Mapping[str, Any]) -> ClaimedVolume:
        """All of PV ``pv`` (a dict): its name, capacity, class, mode and access modes."""
        spec = pv["spec"]
        return cls(
            pv["metadata"]["name"],
            spec["capacity"]["storage"],
            spec["storageClassName"],
            spec["volumeMode"],
            tuple(spec["accessModes"]),
        )


def reclaim_policy_patch(policy: str) -> dict[str, Any]:
    """The merge patch setting a PV's ``persistentVolumeReclaimPolicy`` (Retain keeps the storage when the PV goes)."""
    if policy not in ("Retain", "Delete", "Recycle"):
        raise ValueError(f"unknown reclaim policy {policy!r}")
    return {"spec": {"persistentVolumeReclaimPolicy": policy}}


def rebound_pv(
    name: str,
    source_pv: Mapping[str, Any],
    claim_namespace: str,
    handover: Handover,
    *,
    reclaim_policy: str = "Retain",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A new PV for the storage behind ``source_pv`` (a PV as a dict), pre-bound to claim ``handover.claim`` of
    ``handover.volume_mode`` in ``claim_namespace``.

    A PV's ``volumeMode`` is immutable, so a volume changes mode (or claim) by a new PV object with the
    same ``csi`` source (driver, volumeHandle, attributes, secret refs), capacity, access modes, class and
    node affinity. ``claimRef`` names the claim without a uid: the PV controller binds the claim whose
    ``volumeName`` is this PV and fills the uid in. ``handover.fs_type`` is set for Filesystem mode (dropped for
    Block); ``mountOptions`` are kept for Filesystem only. ``reclaim_policy`` Retain (default) so that
    nothing deletes the storage while the hand-over is in progress; the caller restores the original
    policy after binding. The provisioned-by annotation is kept (the provisioner deletes what it made).
    """
    claim_name, volume_mode, fs_type = handover.claim, handover.volume_mode, handover.fs_type
    if volume_mode not in ("Block", "Filesystem"):
        raise ValueError(f"volume_mode must be Block or Filesystem, not {volume_mode!r}")
    spec = source_pv.get("spec") or {}
    csi = {k: copy.deepcopy(v) for k, v in (spec.get("csi") or {}).items() if k in _CSI_KEPT}
    if not csi.get("driver") or not csi.get("volumeHandle"):
        raise ValueError(f"PV {source_pv.get('metadata', {}).get('name')} has no CSI volume handle")
    if volume_mode == "Filesystem":
        csi["fsType"] = (spec.get("csi") or {}).get("fsType") or fs_type
    meta = _meta(name, None, labels, RESTORE_VOLUME)
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
        "claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": claim_namespace,
            "name": claim_name,
        },
    }
    if spec.get("nodeAffinity"):
        new_spec["nodeAffinity"] = copy.deepcopy(spec["nodeAffinity"])
    if volume_mode == "Filesystem" and spec.get("mountOptions"):
        new_spec["mountOptions"] = list(spec["mountOptions"])
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": new_spec}


def prebound_pvc(
    name: str,
    namespace: str,
    claimed: ClaimedVolume,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A claim of PV ``claimed.volume`` (``spec.volumeName``): the PV controller binds exactly that PV, nothing
    is provisioned. ``claimed.storage_class`` must be the PV's class ("" for none), ``claimed.size`` at most its
    capacity."""
    meta = _meta(name, namespace, labels, RESTORE_CLAIM)
    if annotations:
        meta["annotations"] = dict(annotations)
    spec = {
        "accessModes": list(claimed.access_modes),
        "volumeMode": claimed.volume_mode,
        "resources": {"requests": {"storage": claimed.size}},
        "storageClassName": claimed.storage_class,
        "volumeName": claimed.volume,
    }
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def restored_patch(volume: str, backup_id: str, run_id: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The merge patch that marks a claim as a complete restore of ``backup_id`` of ``volume`` (set last) and
    gives it ``labels``, the source claim's, so that the application's selectors (and its next backup) find
    it: they win over the restore's ``app.kubernetes.io/*`` labels; ``cbt-mover.io/*`` ones stay the run's."""
    meta: dict[str, Any] = {"annotations": {RESTORED_FROM: f"{volume}@{backup_id}", RESTORED_BY: run_id}}
    own = {key: value for key, value in (labels or {}).items() if not key.startswith(LABEL_PREFIX)}
    if own:
        meta["labels"] = own
    return {"metadata": meta}


def quantity(n_bytes: int) -> str:
    """A Kubernetes quantity of at least ``n_bytes``: ``16Mi`` when it divides evenly, else plain bytes."""
    if n_bytes <= 0:
        raise ValueError("a volume size must be positive")
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n_bytes % unit == 0:
            return f"{n_bytes // unit}{suffix}"
    return str(n_bytes)
