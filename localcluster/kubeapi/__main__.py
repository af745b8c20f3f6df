"""``python -m localcluster.kubeapi``: the API emulator alone, in the foreground, for kubectl.

Writes a kubeconfig (default ``./localcluster.kubeconfig``), prints how to use it and serves until
interrupted. The whole local cluster (controllers, kubelet, S3) has its own command.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from localcluster.kubeapi.emulator import KubeAPI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.kubeapi", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--kubeconfig", type=Path, default=Path("localcluster.kubeconfig"))
    parser.add_argument("--audit-log", type=Path, default=None, help="append every request to this JSON-lines file")
    parser.add_argument(
        "--group-snapshot-versions",
        default=None,
        help="comma-separated served versions of groupsnapshot.storage.k8s.io (e.g. v1beta1)",
    )
    parser.add_argument("--crd-dir", default="auto", help="upstream CRD directory ('' for none)")
    args = parser.parse_args(argv)
    versions = tuple(v for v in args.group_snapshot_versions.split(",") if v) if args.group_snapshot_versions else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with KubeAPI(
        port=args.port, audit_log=args.audit_log, group_snapshot_versions=versions, crd_dir=args.crd_dir or None
    ) as api:
        path = api.write_kubeconfig(args.kubeconfig)
        validation = "on" if api.validating else "off"
        print(f"Kubernetes API emulator at {api.https_url} and {api.url} (CRD validation: {validation}, RBAC on)")
        print(f"export KUBECONFIG={path.resolve()}")
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
