"""Serve image files over the SnapshotMetadata API for manual testing.

    python -m localcluster.snapshot_metadata --image NS/NAME=path [--image NS/NAME2=path2 ...]
        [--block-type FIXED_LENGTH|VARIABLE_LENGTH] [--port 0] [--ca-out snapshot-metadata-ca.pem]
        [--audience snapshot-metadata] [--volume-id vol-1] [--dns-name NAME ...]

All images belong to one volume (``--volume-id``), so any two of them can be diffed. Prints the address, the CA
file it wrote, one token valid for every namespace for an hour, and each snapshot's handle (the
``base_snapshot_id`` of a delta), then serves until SIGINT/SIGTERM. The server key stays in memory.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from localcluster.snapshot_metadata.auth import StaticTokens
from localcluster.snapshot_metadata.server import BLOCK_TYPES, SnapshotMetadataServer
from localcluster.snapshot_metadata.snapshots import ImageSnapshot, InMemoryCatalog
from localcluster.snapshot_metadata.tls import make_ca_and_cert


def _image(spec: str) -> tuple[str, str, Path]:
    ref, sep, path = spec.partition("=")
    namespace, slash, name = ref.partition("/")
    if not (sep and slash and namespace and name and path):
        raise argparse.ArgumentTypeError(f"expected NS/NAME=path, got {spec!r}")
    return namespace, name, Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localcluster.snapshot_metadata", description="Serve image files over SnapshotMetadata."
    )
    parser.add_argument("--image", action="append", type=_image, required=True, metavar="NS/NAME=PATH")
    parser.add_argument("--block-type", choices=sorted(BLOCK_TYPES), default="FIXED_LENGTH")
    parser.add_argument("--block-size", type=int, default=4096)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ca-out", type=Path, default=Path("snapshot-metadata-ca.pem"))
    parser.add_argument("--audience", default="snapshot-metadata")
    parser.add_argument("--volume-id", default="vol-1")
    parser.add_argument("--dns-name", action="append", default=[])
    args = parser.parse_args(argv)

    catalog = InMemoryCatalog()
    try:
        snaps = [
            catalog.add(ImageSnapshot(path, namespace=ns, name=name, volume_id=args.volume_id))
            for ns, name, path in args.image
        ]
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tokens = StaticTokens(args.audience)
    tls = make_ca_and_cert(args.dns_name)
    args.ca_out.write_bytes(tls.ca_pem)
    # Blocked before the server's threads start (they inherit the mask) and taken with sigwait:
    # a handler that sets an Event can deadlock when the signal lands inside Event.wait's lock.
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    server = SnapshotMetadataServer(
        catalog, tokens, block_type=args.block_type, block_size=args.block_size, host=args.host, port=args.port, tls=tls
    )
    with server:
        print(f"address: {server.address}")
        print(f"ca: {args.ca_out}")
        print(f"audience: {args.audience}")
        print(f"token: {tokens.issue(expires_in=3600)}")
        for snap in snaps:
            print(f"snapshot: {snap.namespace}/{snap.name} handle={snap.handle} capacity={snap.capacity}")
        print("serving; Ctrl-C to stop", flush=True)
        signal.sigwait(stop_signals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
