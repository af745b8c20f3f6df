"""``python -m localcluster``: the whole local cluster in the foreground, for a person with kubectl.

Prints the kubeconfig and S3 variables to export, then serves until Ctrl-C (or SIGTERM), and
cleans up everything it started (processes, loop devices, its work directory unless --workdir).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from localcluster.cluster import LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="keep state here (default: a temporary directory, removed at exit)")
    parser.add_argument("--no-cbt", action="store_true", help="no SnapshotMetadata service (CBT fallbacks)")
    parser.add_argument("--no-group-snapshots", action="store_true", help="no group snapshot controller")
    parser.add_argument("--group-snapshot-versions", help="comma-separated served versions, e.g. v1beta1")
    parser.add_argument("--no-s3", action="store_true", help="do not start the moto S3 server")
    parser.add_argument("--audit-log", help="append every API request as a JSON line to this file")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    versions = None
    if args.group_snapshot_versions is not None:
        versions = tuple(v for v in args.group_snapshot_versions.split(",") if v)
    cluster = LocalCluster(
        args.workdir,
        s3=not args.no_s3,
        cbt=not args.no_cbt,
        group_snapshots=not args.no_group_snapshots,
        group_snapshot_versions=versions,
        audit_log=args.audit_log,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with cluster:
        print("local cluster running; in another shell:")
        for key, value in cluster.env().items():
            print(f"  export {key}={value}")
        print("  kubectl get storageclass,volumesnapshotclass,snapshotmetadataservice")
        print("Ctrl-C stops it.", flush=True)
        done.wait()
    print("local cluster stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
