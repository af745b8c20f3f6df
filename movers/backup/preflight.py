"""What a backup run checks before it freezes anything, and the snapshot plan the cluster allows.

Nothing here creates or changes an object. A failure is a ``movers.errors.PreflightError``: one line
saying what is wrong and how to fix it, with the exit code of its cause (6: a permission, 3: something
missing, 2: a setting). A run calls, in this order (the repository is opened in between, by the flow):

1. ``check_permissions(api, policy)``: one SelfSubjectAccessReview (``access.denied``) per
   call every run makes (``base_checks``): what ``inspect`` reads, the mover claims and pods, the hooks'
   exec, the credentials Secret by name, the contents' patch and delete of ``retained_snapshots: remove``. Every
   authenticated user may ask these, so a missing grant is
   reported as such, never as a 403 halfway through a run.
2. ``inspect(api, policy)`` -> ``Preflight``:

   - the claims the selector picks (``Source``): each Bound to a CSI PersistentVolume, whose identity
     (``volumes.source_identity``) the backup records;
   - the credentials Secret exists and has the keys the mover pods read (``manifests.REPO_SECRET_KEYS``),
     the movers' ServiceAccount exists; the Secret's key names (``Preflight.secret_keys``, never a value) are
     what the run's mover pods mount and its restore report names: the run reads the Secret's keys once, here;
   - the snapshot path: a VolumeGroupSnapshot only when the group API is served and a
     VolumeGroupSnapshotClass exists for the one CSI driver of all the claims (the policy's
     ``group_snapshot.class``, else exactly one default class of that driver); otherwise one
     VolumeSnapshot per claim under one freeze. Either way ``path_reason`` says why;
   - the VolumeSnapshotClass of each driver for per-claim snapshots (``snapshot_classes``): the policy's
     ``snapshot_class`` for the claims of its driver, else exactly one default class of the driver. On the
     per-claim path a driver without one (no default, or several) fails the preflight, naming the classes
     and the fix; on the group path they serve the fallback after a group not cut in time, and
     ``fallback_problem`` says why there can be none;
   - per driver (``cbt``): its SnapshotMetadataService's audience (none: the movers scan, with the
     reason), whether it is a v1alpha1 one (``base_by_name``: the v0.1.0 sidecar's delta names its base by
     VolumeSnapshot name) and whether a group member's changed blocks can be asked for: the metadata sidecar reads the
     snapshot's VolumeSnapshotClass and a group member names none, so it needs exactly one default
     VolumeSnapshotClass of the driver (else group members are scanned, with that reason);
   - the permissions the chosen path adds (``path_checks``): the group snapshot calls, the per-claim
     snapshot calls (also for the fallback), the content patch of a Filesystem source.

``policy`` is the run's ``movers.policy.BackupPolicy`` (its namespace is the application's).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from movers.errors import EXIT_ACCESS, EXIT_NOT_FOUND, EXIT_USAGE, CbtUnavailableError, NotFoundError, PreflightError
from movers.kube import access
from movers.kube.access import Check
from movers.kube.apply import find, get, list_objects, served_group_snapshot_version
from movers.kube.manifests import GROUP_SNAPSHOT_GROUP, REPO_SECRET_KEYS, SNAPSHOT_GROUP
from movers.kube.repokey import secret_key_names
from movers.kube.volumes import PvIdentity, source_identity
from movers.values import selector_string

if TYPE_CHECKING:
    from movers.policy.model import BackupPolicy

DEFAULT_SNAPSHOT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
DEFAULT_GROUP_CLASS = "groupsnapshot.storage.kubernetes.io/is-default-class"
GROUP, PER_PVC = "group", "per-pvc"
CBT_GROUP = "cbt.storage.k8s.io"


@dataclass(frozen=True)
class Source:
    """A claim the backup takes: its name, volume mode, capacity, class, CSI driver, PV identity and labels."""

    pvc: str
    volume_mode: str
    size: str | None
    storage_class: str | None
    driver: str
    identity: PvIdentity  # its PV's (volumes.source_identity): what the request's SourceVolume records of it
    labels: dict[str, str] = field(default_factory=dict)  # the claim's metadata.labels (a restore reapplies them)


@dataclass(frozen=True)
class DriverCbt:
    audience: str | None  # the SnapshotMetadataService's audience; None: no CBT for this driver
    unavailable: str | None  # why there is no CBT (None: there is)
    group_members: str | None  # why a group member gets no CBT (None: it does)
    base_by_name: bool = False  # a v1alpha1 service (sidecar v0.x): a delta names its base by VolumeSnapshot name


@dataclass(frozen=True)
class Preflight:
    sources: list[Source]
    path: str  # GROUP or PER_PVC
    path_reason: str
    group_version: str | None  # the served groupsnapshot.storage.k8s.io version (None: not served)
    group_class: str | None  # the VolumeGroupSnapshotClass of the group path
    snapshot_classes: dict[str, str]  # driver -> VolumeSnapshotClass of per-claim snapshots
    fallback_problem: str | None  # group path: why no per-claim fallback is possible (None: it is)
    cbt: dict[str, DriverCbt]  # driver -> what CBT it offers
    # the credentials Secret's key names (never a value), as read here: which key files the mover pods mount
    # (repokey.key_files) and the restore report's commands come from them; the Secret is not read again
    secret_keys: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)


# -- permissions ------------------------------------------------------------------------------------------------


def _needs_exec(policy: BackupPolicy) -> bool:
    return bool(policy.hooks.pre or policy.hooks.post or policy.use_pod_annotations)


def base_checks(policy: BackupPolicy, group_served: bool) -> list[tuple[Check, str]]:
    """Every call of a run whatever its snapshot path, each with what it is for."""
    ns = policy.namespace
    secret, account = policy.repository.credentials_secret, policy.mover.service_account
    checks = [
        (Check("list", "", "persistentvolumeclaims", namespace=ns), "to select the application's claims"),
        (Check("get", "", "persistentvolumes"), "to read the identity of their volumes"),
        (Check("get", "", "serviceaccounts", namespace=ns, name=account), "to check the movers' ServiceAccount"),
        (Check("list", SNAPSHOT_GROUP, "volumesnapshotclasses"), "to resolve the snapshot classes"),
        (Check("get", SNAPSHOT_GROUP, "volumesnapshotcontents"), "to read the snapshots' handles"),
        (Check("get", SNAPSHOT_GROUP, "volumesnapshots", namespace=ns), "to wait for the snapshots"),
        (Check("list", SNAPSHOT_GROUP, "volumesnapshots", namespace=ns), "to find the run's snapshots"),
        *(
            (Check(v, "", "persistentvolumeclaims", namespace=ns), "for the claims the movers read")
            for v in ("create", "get", "delete")
        ),
        *(
            (Check(v, "", "pods", namespace=ns), "for the mover pods")
            for v in ("create", "get", "list", "watch", "delete")
        ),
        (Check("get", "", "pods", "log", namespace=ns), "to follow the movers' progress"),
    ]
    if secret:  # the shipped controller role grants get on Secrets by name
        why = (
            "to check the credentials Secret (repository.credentials_secret); the controller's role names the"
            " Secrets it may read: add this one to its resourceNames, or name one it may read in the policy"
        )
        checks.append((Check("get", "", "secrets", namespace=ns, name=secret), why))
    if group_served:
        checks.append((Check("list", GROUP_SNAPSHOT_GROUP, "volumegroupsnapshotclasses"), "to resolve group classes"))
        checks.append(
            (Check("list", GROUP_SNAPSHOT_GROUP, "volumegroupsnapshots", namespace=ns), "to find the run's groups")
        )
    if policy.retained_snapshots == "remove":  # movers.kube.retained: a Retain content goes with its snapshot
        why = "to delete a Retain class's contents with their snapshots (retained_snapshots: remove)"
        for verb in ("patch", "delete"):
            checks.append((Check(verb, SNAPSHOT_GROUP, "volumesnapshotcontents"), why))
            if group_served:
                checks.append((Check(verb, GROUP_SNAPSHOT_GROUP, "volumegroupsnapshotcontents"), why))
    if policy.cbt.enabled != "off":
        checks.append((Check("get", CBT_GROUP, "snapshotmetadataservices"), "to find the drivers' CBT services"))
    if _needs_exec(policy):
        checks += [
            (Check("list", "", "pods", namespace=ns), "to find the hooks' pods"),
            (Check("create", "", "pods", "exec", namespace=ns), "to run the freeze/thaw hooks"),
            (Check("get", "", "pods", "exec", namespace=ns), "to run the freeze/thaw hooks (older API servers)"),
        ]
    return checks


def path_checks(namespace: str, plan: Preflight) -> list[tuple[Check, str]]:
    """The calls the chosen path adds: the group's, the per-claim snapshots' (also the group's fallback),
    and the content annotation a Filesystem source needs."""
    ns, checks = namespace, []
    if plan.path == GROUP:
        checks += [
            (Check(v, GROUP_SNAPSHOT_GROUP, "volumegroupsnapshots", namespace=ns), "for the group snapshot")
            for v in ("create", "get", "patch", "delete")
        ]
    if plan.path == PER_PVC or plan.fallback_problem is None:
        checks += [
            (Check(v, SNAPSHOT_GROUP, "volumesnapshots", namespace=ns), "for per-claim snapshots")
            for v in ("create", "patch", "delete")
        ]
    if any(s.volume_mode == "Filesystem" for s in plan.sources):
        checks.append(
            (Check("patch", SNAPSHOT_GROUP, "volumesnapshotcontents"), "to read a Filesystem claim as a block device")
        )
    return checks


def _require(api, checks: Iterable[tuple[Check, str]]) -> None:
    refused = []
    for check, purpose in checks:
        refused += [f"{line}, {purpose}" for line in access.denied(api, [check])]
    if refused:
        raise PreflightError(
            f"the run's identity lacks {len(refused)} permission(s): {'; '.join(refused)} (grant them to the flow's"
            " ServiceAccount: cbt-mover install controller)",
            EXIT_ACCESS,
        )


def check_permissions(api, policy: BackupPolicy) -> None:
    """``PreflightError`` (exit 6) naming every refused call of ``base_checks``."""
    _require(api, base_checks(policy, served_group_snapshot_version(api) is not None))


# -- the cluster ------------------------------------------------------------------------------------------------


def select_sources(api, namespace: str, selector: Mapping[str, Any]) -> list[Source]:
    """The claims ``selector`` picks, sorted by name, each Bound to a CSI volume."""
    claims = list_objects(api, "PersistentVolumeClaim", namespace, selector_string(selector))
    if not claims:
        raise PreflightError(f"no PVC in namespace {namespace} matches the selector {dict(selector)}", EXIT_NOT_FOUND)
    sources = []
    for claim in sorted(claims, key=lambda c: c["metadata"]["name"]):
        name, spec, status = claim["metadata"]["name"], claim.get("spec") or {}, claim.get("status") or {}
        if status.get("phase") != "Bound" or not spec.get("volumeName"):
            raise PreflightError(
                f"PVC {namespace}/{name} is not bound to a volume (phase {status.get('phase')}): there is nothing to"
                " snapshot yet (a WaitForFirstConsumer claim binds when a pod uses it)",
                EXIT_USAGE,
            )
        pv = get(api, "PersistentVolume", None, spec["volumeName"])
        identity = source_identity(pv)
        if not identity.csi_driver or not identity.pv_volume_handle:
            raise PreflightError(
                f"PVC {namespace}/{name} is bound to PV {spec['volumeName']}, which is not a CSI volume: CSI"
                " snapshots cannot take it",
                EXIT_USAGE,
            )
        sources.append(
            Source(
                pvc=name,
                volume_mode=spec.get("volumeMode") or "Filesystem",
                size=(status.get("capacity") or {}).get("storage")
                or ((spec.get("resources") or {}).get("requests") or {}).get("storage"),
                storage_class=spec.get("storageClassName"),
                driver=identity.csi_driver,
                identity=identity,
                labels=dict(claim["metadata"].get("labels") or {}),
            )
        )
    return sources


def _secret_value(secret: Mapping[str, Any], key: str) -> str | None:
    if key in (secret.get("stringData") or {}):
        return secret["stringData"][key]
    raw = (secret.get("data") or {}).get(key)
    try:
        return base64.b64decode(raw).decode() if raw is not None else None
    except (binascii.Error, UnicodeDecodeError):
        return None


class MoverIdentity(NamedTuple):
    """What ``check_mover_identity`` found: the credentials Secret's key names and the warnings."""

    secret_keys: tuple[str, ...]  # repokey.secret_key_names of the credentials Secret: names, never values
    warnings: list[str]


def check_mover_identity(api, policy: BackupPolicy) -> MoverIdentity:
    """The credentials Secret (with every key the mover pods need) and the movers' ServiceAccount exist;
    returns the Secret's key names and warnings (the Secret names another repository than the policy: the movers
    get the policy's)."""
    namespace, name, url = policy.namespace, policy.repository.credentials_secret, policy.repository.url
    if not name:
        raise PreflightError("the mover pods need repository credentials: set repository.credentials_secret")
    secret = find(api, "Secret", namespace, name)
    if secret is None:
        raise PreflightError(
            f"the credentials Secret {namespace}/{name} (repository.credentials_secret) does not exist: create it"
            f" with the keys {', '.join(k for _, k, optional in REPO_SECRET_KEYS if not optional)}",
            EXIT_NOT_FOUND,
        )
    keys = secret_key_names(secret)
    missing = [key for _, key, optional in REPO_SECRET_KEYS if not optional and key not in keys]
    if missing:
        raise PreflightError(
            f"the credentials Secret {namespace}/{name} lacks the key(s) {', '.join(missing)}: the mover pods"
            " could not start",
            EXIT_USAGE,
        )
    account = policy.mover.service_account
    if find(api, "ServiceAccount", namespace, account) is None:
        raise PreflightError(
            f"the movers' ServiceAccount {namespace}/{account} (mover.service_account) does not exist: apply the"
            f" output of `cbt-mover install movers --namespace {namespace}`",
            EXIT_NOT_FOUND,
        )
    named = _secret_value(secret, "CBT_MOVER_REPO")
    if named and url and named.rstrip("/") != url.rstrip("/"):
        why = f"the Secret {namespace}/{name} names repository {named}; the mover pods back up to the policy's {url}"
        return MoverIdentity(keys, [why])
    return MoverIdentity(keys, [])


def _of_driver(classes: list[dict], driver: str) -> list[dict]:
    return [c for c in classes if c.get("driver") == driver]


def _defaults(classes: list[dict], annotation: str) -> list[str]:
    return sorted(
        c["metadata"]["name"]
        for c in classes
        if ((c.get("metadata") or {}).get("annotations") or {}).get(annotation) == "true"
    )


def _names(classes: list[dict]) -> str:
    return ", ".join(sorted(c["metadata"]["name"] for c in classes)) or "none"


def snapshot_class_for(classes: list[dict], driver: str, policy_class: str | None) -> tuple[str | None, str | None]:
    """The VolumeSnapshotClass of ``driver``'s per-claim snapshots, or None and why (with the fix)."""
    mine = _of_driver(classes, driver)
    if policy_class and any(c["metadata"]["name"] == policy_class for c in mine):
        return policy_class, None
    defaults = _defaults(mine, DEFAULT_SNAPSHOT_CLASS)
    if len(defaults) == 1:
        return defaults[0], None
    fix = (
        f"set snapshot_class in the policy, or annotate exactly one VolumeSnapshotClass of {driver} with"
        f' {DEFAULT_SNAPSHOT_CLASS}: "true"'
    )
    if not mine:
        return None, f"CSI driver {driver} has no VolumeSnapshotClass: create one (and {fix})"
    if not defaults:
        return None, f"CSI driver {driver} has no default VolumeSnapshotClass (its classes: {_names(mine)}): {fix}"
    return None, f"CSI driver {driver} has {len(defaults)} default VolumeSnapshotClasses ({', '.join(defaults)}): {fix}"


def member_cbt_problem(classes: list[dict], driver: str) -> str | None:
    """Why the changed blocks of ``driver``'s group members cannot be asked for, or None (see the module doc)."""
    defaults = _defaults(_of_driver(classes, driver), DEFAULT_SNAPSHOT_CLASS)
    if len(defaults) == 1:
        return None
    which = "no default VolumeSnapshotClass" if not defaults else f"{len(defaults)} ({', '.join(defaults)})"
    return (
        f"the group members name no VolumeSnapshotClass and CSI driver {driver} has {which}: its"
        " SnapshotMetadataService cannot serve them (mark exactly one class default)"
    )


def choose_path(
    sources: list[Source], version: str | None, group_classes: list[dict], policy_class: str | None
) -> tuple[str, str, str | None]:
    """``(path, why, group class)``: GROUP when the group API is served and a class exists for the one
    driver of all ``sources``, else PER_PVC."""
    if version is None:
        return PER_PVC, f"the cluster serves no {GROUP_SNAPSHOT_GROUP} API", None
    drivers = sorted({s.driver for s in sources})
    if len(drivers) > 1:
        return PER_PVC, f"the claims belong to several CSI drivers ({', '.join(drivers)}); a group takes one's", None
    driver = drivers[0]
    mine = _of_driver(group_classes, driver)
    if policy_class:
        named = next((c for c in group_classes if c["metadata"]["name"] == policy_class), None)
        if named is None:
            return PER_PVC, f"the policy's VolumeGroupSnapshotClass {policy_class} does not exist", None
        if named.get("driver") != driver:
            return (
                PER_PVC,
                (
                    f"the policy's VolumeGroupSnapshotClass {policy_class} is of CSI driver"
                    f" {named.get('driver')}, the claims' is {driver}"
                ),
                None,
            )
        return GROUP, f"VolumeGroupSnapshotClass {policy_class} (the policy's) of CSI driver {driver}", policy_class
    defaults = _defaults(mine, DEFAULT_GROUP_CLASS)
    if len(defaults) == 1:
        return GROUP, f"the default VolumeGroupSnapshotClass {defaults[0]} of CSI driver {driver}", defaults[0]
    if not mine:
        return PER_PVC, f"CSI driver {driver} has no VolumeGroupSnapshotClass", None
    if not defaults:
        return (
            PER_PVC,
            (
                f"CSI driver {driver} has no default VolumeGroupSnapshotClass (its classes:"
                f" {_names(mine)}; name one in group_snapshot.class)"
            ),
            None,
        )
    return (
        PER_PVC,
        (
            f"CSI driver {driver} has {len(defaults)} default VolumeGroupSnapshotClasses"
            f" ({', '.join(defaults)}; name one in group_snapshot.class)"
        ),
        None,
    )


def driver_cbt(api, driver: str, enabled: str, classes: list[dict]) -> DriverCbt:
    """What CBT ``driver`` offers (see the module doc)."""
    from movers.cbt.discovery import snapshot_metadata_service

    if enabled == "off":
        return DriverCbt(None, "CBT disabled by the policy (cbt.enabled: off)", None)
    try:
        service = snapshot_metadata_service(api, driver)
    except (CbtUnavailableError, NotFoundError):
        return DriverCbt(None, f"CSI driver {driver} has no SnapshotMetadataService", None)
    return DriverCbt(service.audience, None, member_cbt_problem(classes, driver), service.legacy)


def _check_policy_class(classes: list[dict], policy_class: str | None, drivers: list[str]) -> None:
    if not policy_class:
        return
    named = next((c for c in classes if c["metadata"]["name"] == policy_class), None)
    if named is None or named.get("driver") not in drivers:
        what = "does not exist" if named is None else f"is of CSI driver {named.get('driver')}"
        raise PreflightError(
            f"the policy's snapshot_class {policy_class} {what}; the claims' CSI drivers: {', '.join(drivers)}"
            f" (their classes: {_names([c for c in classes if c.get('driver') in drivers])})",
            EXIT_USAGE,
        )


def inspect(api, policy: BackupPolicy) -> Preflight:
    """The claims, the mover identity, the snapshot path, classes and CBT (see the module doc)."""
    namespace = policy.namespace
    sources = select_sources(api, namespace, policy.pvc_selector)
    identity = check_mover_identity(api, policy)
    drivers = sorted({s.driver for s in sources})
    version = served_group_snapshot_version(api)
    classes = list_objects(api, "VolumeSnapshotClass", None)
    _check_policy_class(classes, policy.snapshot_class, drivers)
    group_classes = list_objects(api, "VolumeGroupSnapshotClass", None, version=version) if version else []
    path, why, group_class = choose_path(sources, version, group_classes, policy.group_snapshot.class_name)
    snapshot_classes, problems = {}, []
    for driver in drivers:
        name, problem = snapshot_class_for(classes, driver, policy.snapshot_class)
        if name:
            snapshot_classes[driver] = name
        else:
            problems.append(problem)
    if path == PER_PVC and problems:
        raise PreflightError(f"one VolumeSnapshot per claim ({why}) needs a class: {'; '.join(problems)}", EXIT_USAGE)
    plan = Preflight(
        sources=sources,
        path=path,
        path_reason=why,
        group_version=version,
        group_class=group_class,
        snapshot_classes=snapshot_classes,
        fallback_problem="; ".join(problems) or None,
        cbt={driver: driver_cbt(api, driver, policy.cbt.enabled, classes) for driver in drivers},
        secret_keys=identity.secret_keys,
        warnings=identity.warnings,
    )
    _require(api, path_checks(namespace, plan))
    return plan
