"""``cbt-mover verify``: read and check all data the backups reference, or ``--sample`` a fraction of the
packs; exit code ``EXIT_INTEGRITY`` when something is damaged."""

from __future__ import annotations

import argparse
import json
import sys

from movers import errors
from movers.cli._common import add_repo_options, mib, open_repo, progress_reporter
from movers.errors import UsageError


def add_parsers(sub) -> None:
    """The ``verify`` subcommand, with its handler."""
    p = sub.add_parser("verify", help="read and check all data that backups reference (or a sample of it)")
    add_repo_options(p)
    p.add_argument("--volume")
    p.add_argument("--backup", help="backup id or latest (needs --volume)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument(
        "--sample",
        type=float,
        metavar="FRACTION",
        help="check every map, read about FRACTION (0..1) of the packs' bytes whole",
    )
    p.add_argument("--seed", type=int, metavar="N", help="seed of the --sample choice (default: random, reported)")
    p.set_defaults(handler=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from movers.pipeline.verify import run_verify, run_verify_sampled

    if args.seed is not None and args.sample is None:
        raise UsageError("--seed needs --sample")
    if args.sample is not None and not 0 <= args.sample <= 1:
        raise UsageError(f"--sample must be a fraction between 0 and 1, not {args.sample}")
    repo = open_repo(args)
    if args.backup and not args.volume:
        raise UsageError("--backup needs --volume")
    refs = repo.list_backups(args.volume)
    if args.backup:
        manifest = repo.resolve(args.volume, args.backup)
        refs = [r for r in refs if r.backup_id == manifest.backup_id]
    elif args.volume and not refs:
        raise errors.NotFoundError(f"volume {args.volume} has no backups in {repo.describe()}")
    workers = max(1, args.workers)
    with progress_reporter(args) as reporter:
        if args.sample is None:
            report = run_verify(repo, refs, workers=workers, progress=reporter.phase("verify", "backups"))
        else:
            progress = reporter.stages(("maps", "backups"), ("packs", "bytes"))  # maps checked, then packs read
            report = run_verify_sampled(repo, refs, args.sample, args.seed, workers=workers, progress=progress)
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
    else:
        for line in report.errors:
            print(f"damaged: {line}", file=sys.stderr)
        for line in report.warnings:
            print(f"warning: {line}", file=sys.stderr)
        sampled = f", {report.packs_read}/{report.packs_total} packs read whole (seed {report.seed})" * (
            report.mode == "sampled"
        )
        print(
            f"verified {report.backups_checked} backup(s), {report.chunks_verified} chunks,"
            f" {mib(report.fetched_bytes)} read{sampled}: {'ok' if report.ok else f'{len(report.errors)} damaged'}"
        )
    return 0 if report.ok else errors.EXIT_INTEGRITY
