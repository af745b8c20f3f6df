"""Retention: which backups to keep, and ``forget`` to delete the manifests of the rest.

The keep rules (``Policy``, restic-style) and ``select_kept``, which applies them to one series of backups
(pure), are ``movers.repo.retention_rules``'s.

What a series is (``forget``; one owner of this rule for the CLI, the backup flow and the maintenance flow):

* backups of an **application run** (tagged ``RUN_TAG``) are judged a whole run at a time: the runs of one
  namespace made by one policy are one series, and ``movers.repo.runretention.select_runs`` keeps or
  forgets each run with all its backups (the rules count complete runs; the newest complete run always
  stays; a partial run stays only while newer than the newest complete one). A forget by rules thus never
  splits a restore point, nor leaves an application that had a complete run without one;
* backups made **outside a run** (the CLI without ``--tag cbt-mover.io/run=...``) are judged per volume
  and policy, by ``select_kept``, as before runs existed;
* the **policy** of a backup is its ``POLICY_TAG``; a backup written before that tag by the backup flow
  records its policy's name as ``APP_TAG``, which then counts; a backup with neither has no policy. The
  rules given apply to every policy's series separately (each counts its own backups), or, with
  ``policy=NAME``, to that policy's backups only (``cbt-mover forget --policy NAME``: how the backups of a
  policy that no longer exists are retired). A policy never expires another policy's backups.

``forget_named`` deletes exactly the backups named by id, no rule asked: the only way to forget a volume's
newest backup or an application's last complete run.

Every backup is a complete map (no chains), so expiring any backup never breaks another one.
``forget`` only deletes manifests (the commit points); the data they referenced is freed by
``movers.repo.prune``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from movers.errors import NotFoundError, UsageError
from movers.repo.manifest import Manifest
from movers.repo.repository import BackupRef, Repository
from movers.repo.retention_rules import Kept, Policy, select_kept
from movers.repo.retention_scope import Backup, backup_time, in_scope, policy_of  # noqa: F401 (re-exported)
from movers.repo.runretention import RunPoint, select_runs

log = logging.getLogger(__name__)


@dataclass
class VolumeRetention:
    volume: str
    kept: list[Kept] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)


@dataclass
class RunRetention:
    """The verdict on one application run: kept (``reasons``) or forgotten (``why_forgotten``), whole."""

    namespace: str | None
    policy: str | None
    run: str
    created: datetime  # its newest backup's time
    complete: bool
    missing: list[str]  # member PVCs without a backup in it (a partial run)
    backups: list[tuple[str, str]]  # (volume, backup id)
    reasons: list[str]
    why_forgotten: str = ""

    @property
    def kept(self) -> bool:
        return bool(self.reasons)

    def describe(self) -> str:
        """``run R of NS (policy P), complete|partial (no backup of X)``."""
        policy = f" (policy {self.policy})" if self.policy else ""
        state = "complete" if self.complete else f"partial (no backup of {', '.join(self.missing)})"
        return f"run {self.run} of {self.namespace}{policy}, {state}"

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "namespace": self.namespace,
            "policy": self.policy,
            "created": self.created.isoformat(),
            "complete": self.complete,
            "missing": self.missing,
            "backups": [{"volume": v, "backup_id": b} for v, b in self.backups],
            "action": "keep" if self.kept else "forget",
            "reasons": self.reasons,
            "why_forgotten": self.why_forgotten,
        }


@dataclass
class ForgetReport:
    dry_run: bool
    volumes: list[VolumeRetention] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # manifest keys deleted (or that would be)
    runs: list[RunRetention] = field(default_factory=list)  # every run judged, newest first per series
    unreadable: list[str] = field(default_factory=list)  # manifest keys that could not be read: kept

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "deleted": self.deleted,
            "volumes": [
                {
                    "volume": v.volume,
                    "kept": [
                        {
                            "backup_id": k.backup_id,
                            "created": k.created.isoformat(),
                            "reasons": k.reasons,
                            "run": k.run,
                            "policy": k.policy,
                        }
                        for k in v.kept
                    ],
                    "expired": v.expired,
                }
                for v in self.volumes
            ],
            "runs": [r.to_dict() for r in self.runs],
            "unreadable": self.unreadable,
        }


def _rules(**rules: int | None) -> Policy:
    return _check_rules(Policy(**rules))


def _check_rules(policy: Policy) -> Policy:
    """``policy``, or ``UsageError`` when it has no rule at all."""
    if policy.empty:
        raise UsageError("forget needs at least one of --keep-last, --keep-daily, --keep-weekly, --keep-monthly")
    return policy


def forget(
    repo: Repository,
    volume: str | None = None,
    *,
    rules: Policy,
    dry_run: bool = False,
    now: datetime | None = None,
    policy: str | None = None,
) -> ForgetReport:
    """Delete the manifests of the backups the ``rules`` (keep-last/daily/weekly/monthly) expire (see the module
    doc for what they count).

    ``volume``: only that volume's backups are deleted; the runs they belong to are still judged whole, with
    the backups of the other volumes of their namespace (``NotFoundError`` when it has none). ``policy``: only
    that policy's backups are judged and deleted (None: each policy's, separately). With no rule at all this
    refuses (``UsageError``) rather than keep everything silently. Every manifest in scope is read (its run,
    members and policy); one that cannot be read is kept and listed in ``unreadable``. Only manifests are
    deleted; run ``prune`` to free the data. A backup's time is the one encoded in its id (else the
    manifest's ``created``).
    """
    _check_rules(rules)
    if volume is not None and not repo.list_backups(volume):
        raise NotFoundError(f"volume {volume} has no backups in {repo.describe()}")
    return _forget(repo, None if volume is None else [volume], rules, dry_run, now, policy)


def forget_each(
    repo: Repository,
    volumes: Sequence[str] | None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    policy: str | None = None,
    **rules: int | None,
) -> tuple[ForgetReport, list[str]]:
    """``forget`` of ``volumes`` (None: every volume of the repository) in one pass (the runs they share are
    judged once), and the named volumes that have no backups (not an error: nothing to expire)."""
    checked = _rules(**rules)
    if volumes is None:
        return _forget(repo, None, checked, dry_run, now, policy), []
    missing = [v for v in dict.fromkeys(volumes) if not repo.list_backups(v)]
    named = [v for v in dict.fromkeys(volumes) if v not in missing]
    return (_forget(repo, named, checked, dry_run, now, policy) if named else ForgetReport(dry_run)), missing


def forget_named(
    repo: Repository, backup_ids: Sequence[str], volume: str | None = None, *, dry_run: bool = False
) -> ForgetReport:
    """Delete exactly the named backups' manifests (``cbt-mover forget --backup ID``): no rule is asked, so this
    is the one way to forget the newest backup of a volume or an application's last complete run.

    ``volume``: look for the ids among that volume's backups only. An id that names no backup
    (``NotFoundError``), or backups of several volumes (``UsageError``: give ``volume``), deletes nothing.
    """
    if not backup_ids:
        raise UsageError("name at least one backup id to forget")
    found: dict[str, list[BackupRef]] = {}
    for ref in repo.list_backups(volume):
        found.setdefault(ref.backup_id, []).append(ref)
    where = f" of volume {volume}" if volume else ""
    missing = [b for b in dict.fromkeys(backup_ids) if b not in found]
    if missing:
        raise NotFoundError(f"no backup {', '.join(missing)}{where} in {repo.describe()}: nothing forgotten")
    twice = [b for b in dict.fromkeys(backup_ids) if len(found[b]) > 1]
    if twice:
        raise UsageError(f"backup id {twice[0]} names backups of {len(found[twice[0]])} volumes: add --volume")
    report = ForgetReport(dry_run=dry_run)
    by_volume: dict[str, VolumeRetention] = {}
    for bid in dict.fromkeys(backup_ids):
        ref = found[bid][0]
        by_volume.setdefault(ref.volume, VolumeRetention(ref.volume)).expired.append(bid)
        report.deleted.append(ref.key)
    report.volumes = [by_volume[v] for v in sorted(by_volume)]
    if not dry_run:
        for key in report.deleted:
            repo.store.delete(key)
            log.info("forgot %s (named)", key)
    return report


def _forget(
    repo: Repository,
    named: list[str] | None,
    rules: Policy,
    dry_run: bool,
    now: datetime | None,
    policy: str | None,
) -> ForgetReport:
    from movers.repo.selection import run_status

    now = now or datetime.now(UTC)
    report = ForgetReport(dry_run=dry_run)
    backups = in_scope(repo, named, report.unreadable)
    if policy is not None:
        backups = [b for b in backups if b.policy == policy]
    wanted = None if named is None else set(named)

    def deletable(b: Backup) -> bool:
        return wanted is None or b.ref.volume in wanted

    reasons: dict[str, list[str]] = {}  # manifest key -> why it is kept (empty: forgotten)
    series: dict[tuple[str, str], dict[str, list[Backup]]] = {}
    for b in backups:
        if b.run is not None:
            series.setdefault((b.namespace or "", b.policy or ""), {}).setdefault(b.run, []).append(b)
    for (ns, pol), runs in sorted(series.items()):
        if not any(deletable(b) for members in runs.values() for b in members):
            continue
        points = {}
        for run, members in runs.items():
            newest: dict[str, Manifest] = {}
            for b in sorted(members, key=lambda b: b.ref.backup_id):
                newest[b.pvc] = b.manifest
            status = run_status(run, newest)
            created = max(b.created for b in members)
            newest_ids: dict[str, str] = {}
            for b in members:
                newest_ids[b.ref.volume] = max(newest_ids.get(b.ref.volume, b.ref.backup_id), b.ref.backup_id)
            points[run] = RunPoint(run, created, status.complete, newest_ids, status.missing)
        for verdict in select_runs(list(points.values()), rules, now):
            p, members = verdict.point, runs[verdict.point.run]
            backed = sorted((b.ref.volume, b.ref.backup_id) for b in members)
            report.runs.append(
                RunRetention(
                    ns or None,
                    pol or None,
                    p.run,
                    p.created,
                    p.complete,
                    list(p.missing),
                    backed,
                    list(verdict.reasons),
                    verdict.why_forgotten,
                )
            )
            for b in members:
                reasons[b.ref.key] = list(verdict.reasons)
    singles: dict[tuple[str, str], list[Backup]] = {}
    for b in backups:
        if b.run is None and deletable(b):
            singles.setdefault((b.ref.volume, b.policy or ""), []).append(b)
    for members in singles.values():
        kept, _ = select_kept([(b.ref.backup_id, b.created) for b in members], now=now, **asdict(rules))
        why = {k.backup_id: k.reasons for k in kept}
        for b in members:
            reasons[b.ref.key] = why.get(b.ref.backup_id, [])
    by_volume: dict[str, list[Backup]] = {}
    for b in sorted(backups, key=lambda b: (b.created, b.ref.backup_id), reverse=True):
        if deletable(b) and b.ref.key in reasons:
            by_volume.setdefault(b.ref.volume, []).append(b)
    for vol in sorted(by_volume):
        judged = VolumeRetention(vol)
        for b in by_volume[vol]:
            if reasons[b.ref.key]:
                judged.kept.append(Kept(b.ref.backup_id, b.created, reasons[b.ref.key], b.run, b.policy))
            else:
                judged.expired.append(b.ref.backup_id)
                report.deleted.append(b.ref.key)
        report.volumes.append(judged)
    if not dry_run:
        for key in report.deleted:
            repo.store.delete(key)
            log.info("forgot %s", key)
    return report
