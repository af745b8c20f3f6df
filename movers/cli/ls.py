"""``cbt-mover ls``: list the backups (and with ``--json`` the application runs); manifests that cannot be read
are named after the listing, which then fails with their exit code."""

from __future__ import annotations

import argparse
import json
import sys

from movers import errors
from movers.cli._common import add_repo_options, mib, open_repo


def add_parsers(sub) -> None:
    """The ``ls`` subcommand, with its handler."""
    p = sub.add_parser("ls", help="list backups")
    add_repo_options(p)
    p.add_argument("--volume")
    p.set_defaults(handler=cmd_ls)


def cmd_ls(args: argparse.Namespace) -> int:
    from movers.repo.manifest import shown_volume_id
    from movers.repo.selection import runs_of

    repo = open_repo(args)
    rows, manifests, unreadable = [], [], []
    for ref in repo.list_backups(args.volume):
        try:
            m = repo.read_manifest(ref.volume, ref.backup_id)
        except errors.NotFoundError:
            continue  # forgotten since it was listed
        except (errors.IntegrityError, errors.IncompatibleError) as err:
            unreadable.append((ref, err))
            continue
        manifests.append(m)
        rows.append(
            {
                "volume": ref.volume,
                "backup_id": ref.backup_id,
                "mode": m.mode,
                "parent": m.parent,
                "created": m.created,
                "capacity_bytes": m.capacity_bytes,
                "snapshot_handle": m.snapshot.snapshot_handle,
                "new_chunk_bytes": m.stats.get("new_chunk_bytes"),
                "stored_bytes": m.stats.get("stored_bytes"),
                "namespace": m.volume.namespace,
                "pvc": m.volume.pvc,
                "storage_class": m.volume.storage_class,
                "volume_mode": m.volume.volume_mode,
                "pv_name": m.volume.pv_name,
                "pv_uid": m.volume.pv_uid,
                "pv_volume_handle": m.volume.pv_volume_handle,
                "csi_driver": m.volume.csi_driver,
                "fs_type": m.volume.fs_type,
                "run_pvcs": m.run_pvcs,
                "tags": m.tags,
            }
        )
    if args.json:  # runs: complete, or partial with the PVCs that have no backup in them (of what is listed)
        runs = [r.to_dict() for r in runs_of(manifests)]
        problems = [
            {"key": ref.key, "volume": ref.volume, "backup_id": ref.backup_id, "error": str(err)}
            for ref, err in unreadable
        ]
        print(json.dumps({"backups": rows, "runs": runs, "unreadable": problems}, sort_keys=True))
    else:
        for r in rows:
            cells = (shown_volume_id(r["volume"]), r["backup_id"], r["mode"], mib(r["capacity_bytes"]), r["created"])
            line = "\t".join(cells)
            tags = ",".join(f"{k}={v}" for k, v in sorted(r["tags"].items()))
            print(f"{line}\t{tags}" if tags else line)
        sys.stdout.flush()
        for ref, err in unreadable:
            print(f"unreadable: {err if ref.key in str(err) else f'{ref.key}: {err}'}", file=sys.stderr)
    if unreadable:  # after the listing: a script sees the rest and a failure
        damaged = any(isinstance(err, errors.IntegrityError) for _ref, err in unreadable)
        kinds = {
            "damaged" if isinstance(err, errors.IntegrityError) else "from a newer cbt-mover" for _r, err in unreadable
        }
        summary = (
            f"{len(unreadable)} of {len(unreadable) + len(rows)} backup manifests cannot be read"
            f" ({' or '.join(sorted(kinds))}; {'see unreadable' if args.json else 'named above'}):"
            f" the other {len(rows)} are listed"
        )
        raise errors.IntegrityError(summary) if damaged else errors.IncompatibleError(summary)
    return 0
