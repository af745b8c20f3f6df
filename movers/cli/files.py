"""``cbt-mover files ls|cp``: list and copy files out of a backup without restoring the volume (``movers.files``).

* ``files ls [PATH]``: a directory's entries (or one entry) like ``ls -l``: type and mode, size, modification time
  (UTC), name (a symlink's ``-> target``); with ``--json`` one object whose ``entries`` hold them. Without PATH on a
  volume of several filesystems and no ``--filesystem``: the filesystems (id, kind, offset, size).
* ``files cp SRC... DEST``: copy files, symlinks and directory trees into the local directory DEST, keeping modes
  and times, never overwriting; the flags make one ``FilesRequest`` (the ``restore-files`` pod's comes whole with
  ``--request-env``), the ``--json`` result is its ``FilesResult``.

Both print ``fetched_bytes`` with ``--json``: what they read from the repository.
"""

from __future__ import annotations

import argparse
import stat
import time

from movers.cli._common import add_repo_options, emit, mib, open_repo_ahead
from movers.errors import UsageError

TYPE_BITS = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK, "other": 0}


def add_parsers(sub) -> None:
    """The ``files`` command and its ``ls`` and ``cp`` subcommands, with its handler."""
    p = sub.add_parser("files", help="list or copy files out of a backup without restoring the volume")
    fsub = p.add_subparsers(dest="files_command", required=True)
    ls = fsub.add_parser("ls", help="list a directory (or show one entry) of a backup's filesystem")
    cp = fsub.add_parser("cp", help="copy files, symlinks and directory trees out of a backup into a local directory")
    for q in (ls, cp):
        add_repo_options(q)
        q.add_argument("--volume")
        q.add_argument("--backup", default="latest", help="backup id or latest (default)")
        q.add_argument(
            "--filesystem",
            metavar="ID",
            help="which filesystem of the volume: whole, pN (partition N) or VG/LV (an LVM logical volume), as"
            " files ls without PATH lists them (default: the volume's only one)",
        )
        q.add_argument("--workers", type=int, default=4, help="parallel fetches from the repository (default 4)")
    ls.add_argument("path", nargs="?", metavar="PATH", help="absolute path inside the filesystem (default /)")
    cp.add_argument(
        "--request-env",
        metavar="VAR",
        help="read the whole request (movers.files.request.FilesRequest, JSON) from this environment variable"
        " instead of the volume, backup, filesystem, workers flags and SRC... DEST (the restore-files pod's)",
    )
    cp.add_argument("args", nargs="*", metavar="SRC... DEST", help="absolute paths in the backup, then a directory")
    p.set_defaults(handler=cmd_files)


def cmd_files(args: argparse.Namespace) -> int:
    if args.files_command == "ls":
        return _ls(args)
    return _cp(args)


def _require_volume(args: argparse.Namespace) -> str:
    if args.volume is None:
        raise UsageError(
            f"the following arguments are required: --volume (see cbt-mover files {args.files_command} --help)"
        )
    return args.volume


def _ls(args: argparse.Namespace) -> int:
    volume = _require_volume(args)
    if args.path is not None and not args.path.startswith("/"):
        raise UsageError(f"a path inside the backup is absolute (starts with /): {args.path!r}")
    opened = open_repo_ahead(args)
    from movers.files.backup import list_files

    listing = list_files(opened, volume, args.backup, args.path, args.filesystem, workers=max(1, args.workers))
    if listing.filesystem is None:
        lines = [
            f"{fs.id}\t{fs.kind or 'unknown'}\t{'-' if fs.offset is None else fs.offset}\t{mib(fs.size)}"
            for fs in listing.filesystems
        ]
    else:
        lines = [_ls_line(e) for e in listing.entries]
    emit(args, listing.as_output(), "\n".join(lines))
    return 0


def _ls_line(entry) -> str:
    mode = stat.filemode(TYPE_BITS[entry.kind] | entry.mode)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry.mtime_ns // 1_000_000_000))
    name = f"{entry.name} -> {entry.target}" if entry.kind == "symlink" else entry.name
    return f"{mode} {entry.size:>12} {when} {name}"


def files_request(args: argparse.Namespace):
    """The ``FilesRequest`` of the parsed flags (``--request-env VAR``: the pod's, whole)."""
    from movers.files.request import FilesRequest

    if args.request_env:
        return FilesRequest.from_env(args.request_env)
    volume = _require_volume(args)
    if len(args.args) < 2:
        raise UsageError("files cp needs at least one SRC path in the backup and a DEST directory (see --help)")
    *paths, dest = args.args
    return FilesRequest(
        volume=volume,
        backup=args.backup,
        filesystem=args.filesystem,
        paths=tuple(paths),
        dest=dest,
        workers=max(1, args.workers),
    )


def _cp(args: argparse.Namespace) -> int:
    request = files_request(args)  # bad input before any work
    opened = open_repo_ahead(args)
    from movers.files.backup import copy_files
    from movers.podcontract import TERMINATION_MESSAGE_MAX

    result = copy_files(opened, request)
    text = (
        f"copied {result.entries} entries ({mib(result.copied_bytes)}) of {result.filesystem} of backup"
        f" {result.backup_id} into {request.dest}: fetched {mib(result.fetched_bytes)} in {result.duration_s} s"
    )
    fitted = result.fitted(TERMINATION_MESSAGE_MAX)  # the --result-file is a pod's termination log
    emit(args, result.model_dump(mode="json"), text, fitted.model_dump_json())
    return 0
