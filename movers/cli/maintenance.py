"""``cbt-mover forget``, ``prune`` and ``consolidate``: expire backups by the retention rules (or exactly the
``--backup`` ones), delete the data no backup references after a grace period (``movers.repo.retention``,
``movers.repo.prune``), and store the fragmented spans of the newest backups again so that their restores fetch what
they use (``movers.pipeline.consolidate``).
"""

from __future__ import annotations

import argparse

from movers.cli._common import add_repo_options, emit, mib, open_repo, progress_reporter
from movers.errors import UsageError


def add_parsers(sub) -> None:
    """The ``forget`` and ``prune`` subcommands, with their handlers."""
    p = sub.add_parser("forget", help="delete the manifests of backups the retention policy expires")
    add_repo_options(p)
    p.add_argument(
        "--volume",
        help="only this volume's backups (default: every volume); its application runs are still judged whole",
    )
    p.add_argument(
        "--policy",
        metavar="NAME",
        help="only the backups this policy made (tag cbt-mover.io/policy; default: each policy's, separately)",
    )
    for rule in ("last", "daily", "weekly", "monthly"):
        p.add_argument(f"--keep-{rule}", type=int, default=None, metavar="N")
    p.add_argument(
        "--backup",
        action="append",
        metavar="ID",
        help="forget exactly this backup (repeatable; instead of the --keep rules): the only way to forget the newest"
        " backup of a volume or an application's last complete run",
    )
    p.add_argument("--dry-run", action="store_true", help="only say what would be forgotten")
    p.set_defaults(handler=cmd_forget)

    p = sub.add_parser("prune", help="delete data no backup references (after a grace period)")
    add_repo_options(p)
    p.add_argument(
        "--grace", default="24h", help="keep unreferenced data this long (e.g. 0, 90m, 24h, 7d; default 24h)"
    )
    p.add_argument(
        "--wait-backups",
        default="1h",
        help="before deleting, wait this long for backups that may use what it deletes (default 1h); still"
        " running then: delete nothing this time",
    )
    p.add_argument(
        "--repack-max",
        default="4Gi",
        help="copy at most this much live data out of partly used packs (version 2 repositories; e.g. 500Mi,"
        " 10Gi; 0: no repacking; default 4Gi)",
    )
    p.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    p.set_defaults(handler=cmd_prune)

    p = sub.add_parser(
        "consolidate",
        help="store a backup's fragmented spans again (reading only the repository), so its restore fetches only"
        " what it uses",
    )
    add_repo_options(p)
    p.add_argument("--volume", help="only this volume (default: every volume)")
    p.add_argument("--backup", default="latest", metavar="ID", help="the backup (with --volume; default: latest)")
    p.add_argument(
        "--dead-fraction",
        type=float,
        default=None,
        metavar="F",
        help="rewrite a span when more than this share of what its restore fetches is dead (0 < F < 1; default 0.2)",
    )
    p.add_argument("--wait-prune", default="0", help="wait this long for a running prune (default 0: fail at once)")
    p.add_argument("--dry-run", action="store_true", help="only measure")
    p.set_defaults(handler=cmd_consolidate)


def cmd_forget(args: argparse.Namespace) -> int:
    from movers.repo.manifest import shown_volume_id
    from movers.repo.retention import forget
    from movers.repo.retention_rules import Policy

    rules = (args.keep_last, args.keep_daily, args.keep_weekly, args.keep_monthly)
    if args.backup and (args.policy or any(n is not None for n in rules)):
        raise UsageError("--backup names the backups to forget: give no --keep-* or --policy with it")
    repo = open_repo(args)
    if args.backup:
        return _forget_named(args, repo)
    report = forget(
        repo,
        args.volume,
        rules=Policy(
            keep_last=args.keep_last,
            keep_daily=args.keep_daily,
            keep_weekly=args.keep_weekly,
            keep_monthly=args.keep_monthly,
        ),
        dry_run=args.dry_run,
        policy=args.policy,
    )
    verb = "would forget" if report.dry_run else "forget"
    lines = []
    for run in report.runs:  # application runs: kept or forgotten whole
        why = ", ".join(run.reasons) if run.kept else run.why_forgotten
        lines.append(f"{'keep' if run.kept else verb}\t{run.describe()}\t{why}")
    run_of = {bid: run.run for run in report.runs for _vol, bid in run.backups}
    for vol in report.volumes:
        for k in vol.kept:
            run = f"\trun {k.run}" if k.run else ""
            lines.append(f"keep\t{shown_volume_id(vol.volume)}\t{k.backup_id}\t{', '.join(k.reasons)}{run}")
        for bid in vol.expired:
            run = f"\trun {run_of[bid]}" if bid in run_of else ""
            lines.append(f"{verb}\t{shown_volume_id(vol.volume)}\t{bid}{run}")
    for key in report.unreadable:
        lines.append(f"keep\t{key}\tits manifest cannot be read")
    lines.append(f"{'would forget' if report.dry_run else 'forgot'} {len(report.deleted)} backup(s)")
    emit(args, report.to_dict(), "\n".join(lines))
    return 0


def _forget_named(args: argparse.Namespace, repo) -> int:
    from movers.repo.manifest import shown_volume_id
    from movers.repo.retention import forget_named

    report = forget_named(repo, args.backup, args.volume, dry_run=args.dry_run)
    verb = "would forget" if report.dry_run else "forget"
    lines = [f"{verb}\t{shown_volume_id(v.volume)}\t{bid}\tnamed" for v in report.volumes for bid in v.expired]
    lines.append(f"{'would forget' if report.dry_run else 'forgot'} {len(report.deleted)} backup(s)")
    emit(args, report.to_dict(), "\n".join(lines))
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from movers.repo.prune import prune

    grace, wait = _duration(args.grace), _duration(args.wait_backups, "--wait-backups")
    repo, repack_max = open_repo(args), _size(args.repack_max)
    with progress_reporter(args) as reporter:
        marking = reporter.phase("mark", "backups")  # the references of every backup, the long phase
        r = prune(
            repo, grace_s=grace, dry_run=args.dry_run, backup_wait_s=wait, repack_max_bytes=repack_max, progress=marking
        )
    verb = "would delete" if r.dry_run else "deleted"
    text = (
        f"{verb} {r.packs_deleted} pack(s) ({mib(r.bytes_deleted)}) and {r.map_objects_deleted} map object(s);"
        f" kept {r.packs_kept} pack(s), {r.packs_partly_used} partly used ({mib(r.dead_bytes)} dead);"
        f" {'would repack' if r.dry_run else 'repacked'} {r.packs_repacked} ({mib(r.bytes_repacked)} copied);"
        f" {r.packs_in_grace} unreferenced pack(s) in grace ({mib(r.bytes_in_grace)});"
        f" index objects: {r.index_objects_deleted} replaced by {r.index_objects_written}; {r.duration_s:.1f}s"
    )
    if r.backups_waited_for:
        text += f"; waited for {r.backups_waited_for} running backup(s), {r.packs_deferred} pack(s) kept for now"
    emit(args, r.to_dict(), text)
    return 0


def cmd_consolidate(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from movers.pipeline.consolidate import DEAD_FRACTION, ConsolidationOptions, consolidate
    from movers.repo.manifest import shown_volume_id

    fraction = DEAD_FRACTION if args.dead_fraction is None else args.dead_fraction
    if not 0 < fraction < 1:
        raise UsageError(f"--dead-fraction must be between 0 and 1, not {fraction}")
    if args.backup != "latest" and not args.volume:
        raise UsageError("--backup names one volume's backup: give --volume with it")
    wait = _duration(args.wait_prune, "--wait-prune")
    repo = open_repo(args)
    volumes = [args.volume] if args.volume else repo.volumes()
    options = ConsolidationOptions(dead_fraction=fraction, dry_run=args.dry_run, lock_wait_s=wait)
    results = [consolidate(repo, v, args.backup, options) for v in volumes]
    verb = "would rewrite" if args.dry_run else "rewrote"
    lines = [
        f"{shown_volume_id(r.volume)}\t{r.backup_id}\t{verb} {r.spans} span(s) ({mib(r.rewritten_bytes)});"
        f" a restore fetches {mib(r.fetch_after)} (was {mib(r.fetch_before)}, fully used chunks: {mib(r.ideal_bytes)})"
        for r in results
    ]
    doc = {
        "dry_run": args.dry_run,
        "backups": [asdict(r) for r in results],
        "rewritten_bytes": sum(r.rewritten_bytes for r in results),
        "fetched_bytes": sum(r.fetched_bytes for r in results),
        "stored_bytes": sum(r.stored_bytes for r in results),
    }
    emit(args, doc, "\n".join(lines) or "no backups")
    return 0


def _duration(text: str, option: str = "--grace") -> float:
    from movers.values import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise UsageError(f"{option} {err}") from None
    if seconds < 0:
        raise UsageError(f"{option} must not be negative")
    return seconds


def _size(text: str, option: str = "--repack-max") -> int:
    from movers.values import quantity_bytes

    try:
        size = quantity_bytes(text)
    except ValueError:
        raise UsageError(f"{option} must be a size such as 500Mi, 10Gi or 0, not {text!r}") from None
    if size < 0:
        raise UsageError(f"{option} must not be negative")
    return size
