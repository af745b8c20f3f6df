"""Copying files out of a backup in a cluster: the ``restore-files`` use case's steps against the Kubernetes API.

1. ``check_permissions``: every call the run makes with its identity, through SelfSubjectAccessReviews, before
   anything is created (``PermissionsMissing`` names each refused one);
2. ``check_target``: the target claim as the request names it. An existing one must exist (``NotFoundError``), be
   Filesystem mode and not be used by an unfinished pod unless it is ReadWriteMany; a new one must not exist yet
   (``FilesTargetRefused``: one line, exit code 2). Nothing is created before both checks pass;
3. ``create_claim``: a new target is created (Filesystem, ReadWriteOnce, the run's labels); a WaitForFirstConsumer
   class binds it when the first files pod is scheduled;
4. ``copy_files``: one files pod per volume (``movers.kube.filespod``): ``cbt-mover files cp`` of the volume's
   backup into ``<directory>/<pvc>`` of the claim. The pod is deleted in every outcome; its result is parsed by the
   class it was written with (``FilesResult``);
5. ``discard_run``: the run's pods always; after a failure also the claim the run created (the backup still holds
   every file, and the same request runs again into a fresh claim of the same name). An existing target claim is
   never deleted: what a failed run copied into it stays under the run's directory.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from movers import podcontract
from movers.errors import EXIT_INCOMPATIBLE, NotFoundError, UsageError
from movers.files.request import FilesRequest, FilesResult
from movers.files.restore_request import TargetClaim
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import repokey
from movers.kube.access import Check, denied
from movers.kube.filespod import TARGET_PATH, FilesTask, files_pod, filesystem_pvc
from movers.kube.pods import PodFailed, PodNotScheduled, PodTimeouts, PodWaitErrors, run_scheduled, uses_claims
from movers.kube.podspec import MoverProfile, RepoAccess

PVC_LABEL = m.PVC_LABEL


class FilesTargetRefused(UsageError):
    """The target claim cannot take the files (exit code 2); nothing was created."""


class FilesPermissionsMissing(k.ForbiddenError):
    """The run's identity lacks permissions the run needs (exit code 6); nothing was created."""


class FilesPodFailed(PodFailed):
    """A files pod failed (``pods.PodFailed``: its exit status and the retry rule)."""


class FilesPodNotScheduled(PodNotScheduled):
    """A files pod was not scheduled in time (``pods.wait_scheduled``)."""


def required_permissions(namespace: str, service_account: str, repo_secret: str, new: bool) -> list[Check]:
    """Every call of a run into ``namespace`` with its identity: read its ServiceAccount and repository Secret,
    the target claim (and create it, and delete it after a failure, when ``new``), the pods (who uses the claim;
    run, follow and delete the files pods) and the Events that say why one waits."""
    ns = namespace
    checks = [
        Check("get", "", "serviceaccounts", namespace=ns, name=service_account),
        Check("get", "", "secrets", namespace=ns, name=repo_secret),
        Check("get", "", "persistentvolumeclaims", namespace=ns),
    ]
    if new:
        checks += [Check(verb, "", "persistentvolumeclaims", namespace=ns) for verb in ("create", "delete")]
    checks += [Check(verb, "", "pods", namespace=ns) for verb in ("get", "list", "watch", "create", "delete")]
    checks += [Check("get", "", "pods", "log", namespace=ns), Check("list", "", "events", namespace=ns)]
    return checks


def check_permissions(api, namespace: str, service_account: str, repo_secret: str, new: bool) -> None:
    """``FilesPermissionsMissing`` (one line naming every refused call) unless the identity of ``api`` may make
    every call of ``required_permissions``."""
    refused = denied(api, required_permissions(namespace, service_account, repo_secret, new))
    if refused:
        raise FilesPermissionsMissing(
            f"cannot restore files into {namespace}: this identity lacks {len(refused)} permission(s) the run needs"
            f" (nothing was created): {'; '.join(refused)}",
            403,
        )


def check_target(api, namespace: str, target: TargetClaim, service_account: str) -> None:
    """The files pods' ServiceAccount exists and the target claim can take the files (see the module doc); else
    ``NotFoundError`` (a missing ServiceAccount or existing claim, exit code 3) or ``FilesTargetRefused`` (exit code
    2), one line naming the object and why."""
    if k.find(api, "ServiceAccount", namespace, service_account) is None:
        raise NotFoundError(
            f"ServiceAccount {namespace}/{service_account} of the files pods does not exist"
            " (cbt-mover install movers creates it)"
        )
    where = f"{namespace}/{target.claim}"
    claim = k.find(api, "PersistentVolumeClaim", namespace, target.claim)
    if target.new is not None:
        if claim is not None:
            raise FilesTargetRefused(
                f"target claim {where} already exists: name a new claim, or give this one without new"
            )
        return
    if claim is None:
        raise NotFoundError(f"target claim {where} does not exist (give new: {{size, storage_class}} to create it)")
    spec = claim.get("spec") or {}
    if (spec.get("volumeMode") or "Filesystem") != "Filesystem":
        raise FilesTargetRefused(f"target claim {where} is a {spec['volumeMode']} claim: files need a Filesystem claim")
    if "ReadWriteMany" in (spec.get("accessModes") or []):
        return
    users = sorted(
        p["metadata"]["name"] for p in k.list_objects(api, "Pod", namespace) if uses_claims(p, [target.claim])
    )
    if users:
        raise FilesTargetRefused(
            f"target claim {where} is in use by pod(s) {', '.join(users)} and is not ReadWriteMany:"
            " stop them, or copy into another claim"
        )


def create_claim(api, namespace: str, target: TargetClaim, labels: dict[str, str]) -> dict[str, Any]:
    """The new target claim (``target.new``) created with ``labels`` (the run's: ``discard_run`` finds it)."""
    assert target.new is not None
    claim = filesystem_pvc(target.claim, namespace, target.new.size, target.new.storage_class, labels)
    return k.create(api, claim)


def pod_name(run_id: str, pvc: str) -> str:
    """The files pod of ``pvc``: ``files-<run id>-<pvc>`` when that is a DNS label, else cut to fit with ``-`` + 8
    hex digits of its SHA-256: distinct per PVC."""
    name = f"files-{run_id}-{pvc}"
    if len(name) <= 63 and "." not in name:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name.replace('.', '-')[:54].rstrip('-')}-{digest}"


def destination(directory: str, pvc: str) -> str:
    """Where the files of ``pvc`` go in the pod: ``<TARGET_PATH>/<directory>/<pvc>``."""
    return posixpath.join(TARGET_PATH, directory, pvc)


@dataclass(frozen=True)
class FilesRun:
    """What the files pods of one run share: the ``namespace``, the ``run_id``, the pods' ``profile`` (image,
    ServiceAccount, resources, placement), the repository Secret ``repo_secret``, the target ``claim`` and each
    pod's ``timeouts``."""

    namespace: str
    run_id: str
    profile: MoverProfile
    repo_secret: str
    claim: str
    timeouts: PodTimeouts = PodTimeouts(start=600.0, total=3600.0)


def copy_files(
    api,
    run: FilesRun,
    pvc: str,
    request: FilesRequest,
    *,
    labels: dict[str, str],
    on_log_line: Callable[[str], None] | None = None,
) -> FilesResult:
    """The files pod of ``pvc`` (``pod_name``) running ``request`` into the run's claim, with the key files Secret
    ``run.repo_secret`` holds now (``repokey.key_names``); its result. The pod is created, waited for
    (``pods.run_scheduled``: a WaitForFirstConsumer claim binds when it is scheduled) and deleted in every outcome
    (a retry starts a fresh one). ``FilesPodFailed`` names the exit code and the log tail, or a result this flow
    cannot read (exit ``EXIT_INCOMPATIBLE``: another image version)."""
    namespace = run.namespace
    repo_keys = repokey.key_names(k.find(api, "Secret", namespace, run.repo_secret) or {})
    name = pod_name(run.run_id, pvc)
    task = FilesTask(
        request_env=podcontract.REQUEST_ENV,
        request_json=request.model_dump_json(),
        claim=run.claim,
        active_deadline_seconds=int(run.timeouts.total),
    )
    pod = files_pod(
        name, namespace, profile=run.profile, task=task, repo=RepoAccess(run.repo_secret, repo_keys), labels=labels
    )
    k.delete_and_wait(api, "Pod", namespace, name)  # a failed attempt's pod
    try:
        res = run_scheduled(
            api,
            pod,
            run.claim,
            run.timeouts,
            errors=PodWaitErrors(what="files pod", not_scheduled=FilesPodNotScheduled),
            on_log_line=on_log_line,
        )
    finally:
        k.delete_and_wait(api, "Pod", namespace, name)
    if not res.succeeded or not isinstance(res.result, dict):
        message, tail = res.message.strip(), "\n".join(res.log_tail).strip()
        said = message if not tail or tail in message else f"{message}\n{tail}"  # the log tail may be the message
        raise FilesPodFailed(f"files pod {namespace}/{name} failed (exit {res.exit_code}): {said}", res.exit_code)
    try:
        return FilesResult.model_validate(res.result)
    except ValidationError as err:
        raise FilesPodFailed(
            f"files pod {namespace}/{name} wrote a result this flow cannot read ({podcontract.summary(err)}): is its"
            " image another version?",
            EXIT_INCOMPATIBLE,
        ) from None


def discard_run(api, namespace: str, run_id: str, target: TargetClaim, failed: bool) -> dict[str, list[str]]:
    """The run's files pods (found by its run label), and after a failure the claim it created (``target.new``,
    when it carries this run's label; never a claim that existed before): what was deleted, by kind."""
    selector = f"{m.RUN_LABEL}={run_id}"
    deleted: dict[str, list[str]] = {}
    for pod in k.list_objects(api, "Pod", namespace, selector):
        k.delete_and_wait(api, "Pod", namespace, pod["metadata"]["name"])
        deleted.setdefault("Pod", []).append(pod["metadata"]["name"])
    if failed and target.new is not None:
        claim = k.find(api, "PersistentVolumeClaim", namespace, target.claim)
        if claim is not None and (claim["metadata"].get("labels") or {}).get(m.RUN_LABEL) == run_id:
            k.delete_and_wait(api, "PersistentVolumeClaim", namespace, target.claim)
            deleted.setdefault("PersistentVolumeClaim", []).append(target.claim)
    return deleted
