"""The files pod of a ``restore-files`` run: ``cbt-mover files cp`` of one volume's backup into a Filesystem claim,
unprivileged (a pure builder, as ``manifests.mover_pod`` is for the mover and writer pods).

Unlike a mover or writer, it needs no device: it reads the backup from the repository and writes files into a
mounted filesystem, so it passes the Pod Security ``restricted`` profile: it runs as ``FILES_UID`` (non-root, group
``FILES_UID``), ``fsGroup`` ``FILES_UID`` (the kubelet gives the claim's filesystem, and the repository key files,
to that group, so the pod may write the one and read the other), no privilege escalation, every capability dropped,
seccomp ``RuntimeDefault``, a read-only root filesystem, no ServiceAccount token (it never calls the API) and only
persistentVolumeClaim and secret volumes.

The fsGroup's change policy is ``OnRootMismatch``: the kubelet gives the claim's files to the group (adding group
read-write to their modes) only when the claim's root directory does not have that group yet, i.e. once for a new
claim and for an existing claim written by another user (its existing files then change group and gain group
read-write: the price of writing into it as a non-root user); a claim that already matches is not walked again.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from movers.kube import manifests as m
from movers.kube.podspec import MoverProfile, RepoAccess

FILES = "files"  # the pod's app.kubernetes.io/component
FILES_UID = 10001  # the pod's user, group and fsGroup: the image's own user (Dockerfile USER)
TARGET_PATH = "/restore"  # where the pod mounts the target claim
TARGET_VOLUME = "target"


def files_args(request_env: str) -> list[str]:
    """The argv (after the ``cbt-mover`` entrypoint): ``files cp`` of the request in env variable ``request_env``
    (``movers.files.request.FilesRequest``), its JSON result on stdout and in the termination log."""
    return ["files", "cp", "--request-env", request_env, "--json", "--result-file", m.TERMINATION_LOG]


@dataclass(frozen=True)
class FilesTask:
    """What one files pod does: ``files cp`` of the request ``request_json`` (rendered into env ``request_env``)
    into claim ``claim``, mounted at ``TARGET_PATH``, within ``active_deadline_seconds`` (None: no deadline)."""

    request_env: str
    request_json: str
    claim: str
    active_deadline_seconds: int | None = None


def security_context() -> dict[str, Any]:
    """The pod's securityContext: the ``restricted`` profile's user and seccomp, and the fsGroup."""
    return {
        "runAsNonRoot": True,
        "runAsUser": FILES_UID,
        "runAsGroup": FILES_UID,
        "fsGroup": FILES_UID,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def files_pod(
    name: str,
    namespace: str,
    *,
    profile: MoverProfile,
    task: FilesTask,
    repo: RepoAccess,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The files pod ``name`` (see the module doc): ``task`` run as ``profile`` says (image, ServiceAccount,
    resources, placement; ``manifests.DEFAULT_NODE_SELECTOR`` when it gives none), the repository access ``repo`` as
    a mover gets it (``manifests.repo_access``: the Secret's storage credentials as env, its key files mounted
    0400), ``restartPolicy: Never`` (the flow decides about retries), the result in the termination message (the log
    tail under ``FallbackToLogsOnError``)."""
    placement = profile.placement
    key_volumes, mounts, env = m.repo_access(repo)
    container: dict[str, Any] = {
        "name": FILES,
        "image": profile.image,
        "imagePullPolicy": profile.image_pull_policy,
        "args": files_args(task.request_env),
        "env": [*env, {"name": task.request_env, "value": task.request_json}],
        "resources": copy.deepcopy(dict(profile.resources) if profile.resources is not None else m.DEFAULT_RESOURCES),
        "volumeMounts": [{"name": TARGET_VOLUME, "mountPath": TARGET_PATH}, *mounts],
        "terminationMessagePath": m.TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": profile.service_account,
        "automountServiceAccountToken": False,
        "securityContext": security_context(),
        "nodeSelector": dict(
            placement.node_selector if placement.node_selector is not None else m.DEFAULT_NODE_SELECTOR
        ),
        "containers": [container],
        "volumes": [{"name": TARGET_VOLUME, "persistentVolumeClaim": {"claimName": task.claim}}, *key_volumes],
    }
    if placement.tolerations:
        spec["tolerations"] = copy.deepcopy([dict(t) for t in placement.tolerations])
    if placement.affinity:
        spec["affinity"] = copy.deepcopy(dict(placement.affinity))
    if task.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = int(task.active_deadline_seconds)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    full = m.object_labels(FILES, labels)
    if full:
        meta["labels"] = full
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def filesystem_pvc(
    name: str, namespace: str, size: str, storage_class: str | None, labels: Mapping[str, str] | None
) -> dict[str, Any]:
    """A ReadWriteOnce Filesystem claim of ``size`` in ``storage_class`` (None: the cluster's default): the new
    target of a ``restore-files`` run."""
    claim = m.block_pvc(name, namespace, size, storage_class, labels)
    claim["spec"]["volumeMode"] = "Filesystem"
    return claim
