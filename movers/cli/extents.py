"""``cbt-mover extents``: what the SnapshotMetadata service reports for a snapshot, in our JSON lines or in the
forms of the upstream ``snapshot-metadata-lister`` (kubernetes-csi/external-snapshot-metadata,
``tools/snapshot-metadata-lister/main.go``), whose command lines it accepts.

The lister's flags, in each of Go's spellings (``-name`` and ``--name`` alike): ``-n/--namespace``,
``-s/--snapshot``, ``-p/--previous-snapshot`` (a VolumeSnapshot name, resolved to its content's
``status.snapshotHandle``), ``-P/--previous-snapshot-id`` (a CSI handle; wins over ``-p``), ``-o/--output-format``
(``table`` or ``json``), ``--kubeconfig``, ``--service-account`` with ``--service-account-namespace``,
``--token-expiry``, ``--starting-offset``, ``--max-results``. Without ``--cbt-address`` the service is looked up
from the cluster (``--kube``), as the lister always does.

Output forms (``-o``):

* ``jsonl`` (the default; what ``backup --extents`` reads): ``{"offset": N, "length": N}`` per coalesced extent,
  then one ``{"summary": {...}}`` line.
* ``json``, the lister's ``JSONEmitter`` (``pkg/iterator/emitters.go``): one JSON array, no newline after it, of
  one object per message received, ``{"block_metadata_type": 1|2, "volume_capacity_bytes": N, "block_metadata":
  [{"byte_offset": N, "size_bytes": N}, ...]}`` (Go's encoding: zero fields of a tuple left out, no tuples
  ``null``, no spaces); ``[]`` when there is none.
* ``table``, the lister's ``TableEmitter``: two header lines before the first message, then one row per tuple:
  record number, volume capacity, block metadata type, byte offset, size (``%7d %14d %17s %14d %14d``); nothing
  when there is no message.

With ``json`` and ``table`` the messages are the service's as sent (``--max-results`` defaults to 0 there, the
service chooses, as the lister); ``jsonl`` asks for 4096 tuples per message and merges adjacent ones.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import IO

from movers.cli._common import add_cbt_options, cbt_options
from movers.errors import NotFoundError, UsageError

log = logging.getLogger("movers")

OUTPUT_FORMATS = ("jsonl", "json", "table")
DEFAULT_MAX_RESULTS = {"jsonl": 4096, "json": 0, "table": 0}
TABLE_HEADER = (
    "Record#   VolCapBytes  BlockMetadataType   ByteOffset     SizeBytes\n"
    "------- -------------- ----------------- -------------- --------------\n"
)


def add_parsers(sub) -> None:
    """The ``extents`` subcommand, with the CBT options it shares with backup in the lister's spellings too."""
    p = sub.add_parser(
        "extents",
        help="list the allocated or changed extents of a snapshot (JSON lines, or as snapshot-metadata-lister"
        " prints them)",
    )
    p.add_argument("--log-level", default=os.environ.get("CBT_MOVER_LOG_LEVEL", "WARNING"))
    p.add_argument("-n", "-namespace", "--namespace", help="namespace of the VolumeSnapshot(s)")
    p.add_argument("-s", "-snapshot", "--snapshot", help="VolumeSnapshot name")
    p.add_argument(
        "-p",
        "-previous-snapshot",
        "--previous-snapshot",
        metavar="NAME",
        help="an earlier VolumeSnapshot: list the changes since it (its handle is looked up; -P wins)",
    )
    p.add_argument(
        "-o",
        "-output-format",
        "--output-format",
        choices=OUTPUT_FORMATS,
        default="jsonl",
        help="jsonl (default: what backup --extents reads, and a summary line), or the lister's json or table",
    )
    p.add_argument(
        "-service-account-namespace",
        "--service-account-namespace",
        metavar="NAMESPACE",
        help="namespace of --service-account NAME (the lister's form)",
    )
    p.add_argument(
        "-token-expiry",
        "--token-expiry",
        type=int,
        default=600,
        metavar="SECONDS",
        help="lifetime of the TokenRequest's token (default 600, the API server's minimum)",
    )
    p.add_argument(
        "-starting-offset",
        "--starting-offset",
        type=int,
        default=0,
        metavar="BYTES",
        help="list from the block holding this byte offset",
    )
    add_cbt_options(p, lister=True)
    p.set_defaults(handler=cmd_extents)


def cmd_extents(args: argparse.Namespace) -> int:
    """List the extents as ``--output-format`` says."""
    from movers.cbt.source import open_session

    if args.starting_offset < 0:
        raise UsageError(f"--starting-offset must be >= 0, not {args.starting_offset}")
    if args.cbt_max_results is None:
        args.cbt_max_results = DEFAULT_MAX_RESULTS[args.output_format]
    if not args.cbt_address:  # the lister finds the service from the cluster
        args.kube = True
    if args.previous_snapshot and not args.base_handle:
        args.base_handle = _previous_handle(args)
        args.base_snapshot = args.base_snapshot or args.previous_snapshot
    session = open_session(cbt_options(args))
    try:
        if session.base_rejected:
            from movers.errors import CbtBaseRejectedError

            raise CbtBaseRejectedError(session.base_rejected)
        stream = session.stream
        if args.output_format == "jsonl":
            _write_jsonl(args, stream, sys.stdout)
        elif args.output_format == "json":
            _write_json(stream, sys.stdout)
        else:
            _write_table(stream, sys.stdout)
        sys.stdout.flush()
    finally:
        session.close()
    return 0


def _previous_handle(args: argparse.Namespace) -> str:
    """The CSI handle of ``--previous-snapshot``: its VolumeSnapshotContent's ``status.snapshotHandle``."""
    from movers.kube.client import api_client
    from movers.kube.snapshots import resolve_snapshot

    if not args.namespace:
        raise UsageError("--previous-snapshot needs --namespace")
    try:
        ref = resolve_snapshot(api_client(args.kubeconfig), args.namespace, args.previous_snapshot)
    except NotFoundError as err:
        raise NotFoundError(f"--previous-snapshot: {err}") from None
    if not ref.content:
        raise NotFoundError(f"VolumeSnapshot {args.namespace}/{args.previous_snapshot} has no bound content")
    if not ref.ready or not ref.handle:
        why = f": {ref.error}" if ref.error else ""
        raise UsageError(f"VolumeSnapshot {args.namespace}/{args.previous_snapshot} is not ready{why}")
    log.info("--previous-snapshot %s has the handle %s", args.previous_snapshot, ref.handle)
    return ref.handle


def _write_jsonl(args: argparse.Namespace, stream, out: IO[str]) -> None:
    from movers.extents import write_jsonl

    count, total = write_jsonl(stream, out)
    summary = {
        "mode": "delta" if args.base_handle else "allocated",
        "namespace": args.namespace,
        "snapshot": args.snapshot,
        "base_handle": args.base_handle,
        "block_type": stream.block_type,
        "capacity_bytes": stream.capacity,
        "extents": count,
        "bytes": total,
        "messages": stream.messages,
        "tuples": stream.tuples,
        "resumes": stream.resumes,
        "starting_offset": args.starting_offset,
    }
    out.write(json.dumps({"summary": summary}, sort_keys=True) + "\n")


def _write_json(stream, out: IO[str]) -> None:
    opening = "["
    for _number, tuples in stream.records():
        record = {
            "block_metadata_type": stream.assembler.block_type,
            "volume_capacity_bytes": stream.capacity,
            # Go's encoding of the lister's records: a tuple's zero fields are left out, no tuples is null
            "block_metadata": [_tuple(off, size) for off, size in tuples] or None,
        }
        out.write(opening + json.dumps(record, separators=(",", ":")))
        opening = ","
    out.write("[]" if opening == "[" else "]")


def _tuple(offset: int, size: int) -> dict[str, int]:
    return {k: v for k, v in (("byte_offset", offset), ("size_bytes", size)) if v}


def _write_table(stream, out: IO[str]) -> None:
    for number, tuples in stream.records():
        if number == 1:
            out.write(TABLE_HEADER)
        kind, capacity = stream.block_type, stream.capacity
        out.writelines(f"{number:7d} {capacity:14d} {kind:>17} {off:14d} {size:14d}\n" for off, size in tuples)
