"""``cbt-mover``: the mover pod's entrypoint and the operator's tool.

Every failure a user can cause prints one line ``cbt-mover: error: ...`` on stderr and exits
with the code documented in ``movers.errors`` (never a traceback; ``--log-level DEBUG``
logs one). ``--json`` prints exactly one JSON object on stdout. Progress goes to stderr as ``--progress`` says
(``movers.cli_progress``: a bar on a terminal, else ``progress done=N total=N`` lines, a backup's followed by
``position=N capacity=N mode=M``). ``extents`` also takes the
upstream snapshot-metadata-lister's command line (``movers.cli_extents``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, NoReturn

from movers import device, errors, logsetup, redaction
from movers.cli_progress import MODES, Reporter, open_reporter
from movers.errors import MoverError, UsageError
from movers.values import human_bytes

log = logging.getLogger("movers")


def _add_repo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", default=os.environ.get("CBT_MOVER_REPO"), help="s3://bucket/prefix or file:///path")
    p.add_argument("--s3-endpoint", default=None, help="S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
    p.add_argument("--s3-region", default=None, help="S3 region (default: AWS_REGION / profile)")
    p.add_argument("--s3-profile", default=None, help="AWS profile name (default: AWS_PROFILE)")
    p.add_argument(
        "--retry-for",
        default=os.environ.get("CBT_MOVER_RETRY_FOR", "5m"),
        metavar="DURATION",
        help="keep retrying a failing store request this long, e.g. 90s, 5m, 0 for no retry"
        " (default: CBT_MOVER_RETRY_FOR or 5m; at most 1h)",
    )
    k = p.add_argument_group("repository key (an encrypted repository's; the passphrase also from CBT_MOVER_PASSWORD)")
    k.add_argument(
        "--password-file", metavar="FILE", help="file holding the passphrase (default: CBT_MOVER_PASSWORD_FILE)"
    )
    k.add_argument("--key-file", metavar="FILE", help="file of at least 32 random bytes (default: CBT_MOVER_KEY_FILE)")
    k.add_argument(
        "--kms-key",
        metavar="KEY",
        help="AWS KMS key id, key ARN, alias/NAME or alias ARN: opens the kms key slots; init wraps the first slot"
        " with it (default: CBT_MOVER_KMS_KEY; AWS credentials and endpoint as for S3)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object with the result")
    p.add_argument("--result-file", help="also write the JSON result here (a pod's /dev/termination-log)")
    p.add_argument("--log-level", default=os.environ.get("CBT_MOVER_LOG_LEVEL", "WARNING"))
    p.add_argument(
        "--progress",
        choices=MODES,
        default="auto",
        help="how backup, restore, verify and prune show progress on stderr: a bar, progress done=N total=N lines,"
        " JSON lines or nothing (default auto: a bar on a terminal, else the lines)",
    )
    p.add_argument(
        "--progress-interval", type=float, default=2.0, help="seconds between progress lines (plain and json)"
    )


def _add_cbt(p: argparse.ArgumentParser, lister: bool = False) -> None:
    """The CBT options; ``lister``: with the upstream snapshot-metadata-lister's spellings too (``extents``)."""
    from movers.cli_extents import LISTER_ALIASES

    def flags(name: str) -> tuple[str, ...]:
        return (*LISTER_ALIASES.get(name, ()), name) if lister else (name,)

    g = p.add_argument_group("changed block tracking (SnapshotMetadata service)")
    g.add_argument("--cbt-address", help="HOST:PORT of the SnapshotMetadata service")
    g.add_argument("--cbt-ca-file", help="PEM CA bundle the service's certificate must chain to")
    g.add_argument("--cbt-token-file", help="file with an audience-scoped token (projected SA token)")
    g.add_argument("--cbt-audience", help="get tokens for this audience from the TokenRequest API")
    g.add_argument(
        *flags("--service-account"),
        help="NAMESPACE/NAME for TokenRequest (default: the pod's own)"
        + (", or NAME with --service-account-namespace" if lister else ""),
    )
    g.add_argument(
        *flags("--cbt-max-results"),
        dest="cbt_max_results",
        type=int,
        default=None if lister else 4096,
        help="tuples per response (0: server decides; default 4096" + (", with -o json or table 0)" if lister else ")"),
    )
    g.add_argument(
        *flags("--base-handle"),
        dest="base_handle",
        help="CSI snapshot handle of the base: a delta instead of allocated ranges (backup --extents: the snapshot"
        " the extents are changes since)",
    )
    g.add_argument(
        "--base-snapshot",
        help="the base's VolumeSnapshot name (with --kube and --base-handle): what a v1alpha1"
        " SnapshotMetadataService (sidecar v0.1.0) is asked for instead of the handle",
    )
    g.add_argument("--kube", action="store_true", help="look up the VolumeSnapshot, its driver's service and CA")
    g.add_argument(
        *flags("--kubeconfig"), help="kubeconfig file (default: in-cluster, then KUBECONFIG / ~/.kube/config)"
    )
    g.add_argument("--snapshot-wait", type=float, default=300.0, help="seconds to wait for the snapshot to be ready")


def _cbt_options(args: argparse.Namespace):
    from movers.cbt.source import CbtOptions

    return CbtOptions(
        namespace=args.namespace,
        snapshot=args.snapshot,
        base_handle=args.base_handle,
        base_snapshot=args.base_snapshot,
        address=args.cbt_address,
        ca_file=args.cbt_ca_file,
        token_file=args.cbt_token_file,
        audience=args.cbt_audience,
        service_account=args.service_account,
        service_account_namespace=getattr(args, "service_account_namespace", None),
        token_expiry=getattr(args, "token_expiry", 600),
        max_results=args.cbt_max_results,
        starting_offset=getattr(args, "starting_offset", 0),
        kube=args.kube,
        kubeconfig=args.kubeconfig,
        wait_timeout=args.snapshot_wait,
    )


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error contract: a bad argument is one line naming the fix and the command's
    ``--help``, exit code 2, instead of argparse's usage block (subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(errors.EXIT_USAGE, f"cbt-mover: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cbt-mover")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cbt-mover", description="Back up and restore block volumes.")
    parser.add_argument("--version", action="version", version=f"cbt-mover {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("init", help="create a repository (encrypted: give its first key)")
    _add_repo(p)
    p.add_argument(
        "--insecure-no-encryption",
        action="store_true",
        help="create an unencrypted repository: anyone who can read the bucket reads the backups",
    )

    p = sub.add_parser("backup", help="back up a device or image file")
    _add_repo(p)
    # required unless --request-env: cmd_backup says so in argparse's words
    p.add_argument(
        "--volume",
        help="volume id, e.g. namespace/pvc: printable ASCII, at most 255 bytes URL-quoted (docs/format.md)",
    )
    p.add_argument("--device", help="block device or image file to read")
    p.add_argument(
        "--request-env",
        metavar="VAR",
        help="read the whole backup request (movers.backup.request.BackupRequest, JSON) from this environment"
        " variable instead of the flags of the volume, device, change source and identity (the mover pod's)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--extents", help="JSON lines of changed extents {offset, length}; - for stdin")
    src.add_argument("--scan", action="store_true", help="read the whole device, store what the repo lacks")
    p.add_argument("--full", action="store_true", help="do not build on the latest backup")
    p.add_argument(
        "--parent",
        metavar="BACKUP_ID",
        help="the backup the --extents (or the CBT delta since --base-handle) are changes since; with --extents,"
        " needed unless --base-handle or the extents' summary line names the snapshot they are changes since",
    )
    p.add_argument(
        "--cbt-fallback",
        choices=("scan", "fail"),
        default="scan",
        help="when CBT is unavailable: scan the device (default) or fail with exit code 9",
    )
    _add_cbt(p)
    p.add_argument("--zstd-level", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ident = p.add_argument_group("identity recorded in the manifest")
    for flag in ("--cluster", "--namespace", "--pvc"):
        ident.add_argument(flag)
    ident.add_argument("--pv-name", help="the source PV's name")
    ident.add_argument("--pv-uid", help="the source PV's metadata.uid (a delta needs the base's PV to be this one)")
    ident.add_argument(
        "--pv-handle",
        help="the source PV's CSI volume handle (default with --kube: the"
        " snapshot content's spec.source.volumeHandle); a delta needs the base's to be the same",
    )
    ident.add_argument("--csi-driver", help="the source PV's CSI driver (default with --kube: the snapshot's)")
    ident.add_argument("--fs-type", help="the source PV's spec.csi.fsType (Filesystem volumes; e.g. ext4, xfs, ntfs)")
    ident.add_argument(
        "--node-affinity",
        metavar="JSON",
        help="the source PV's spec.nodeAffinity.required (a NodeSelector), where a restore may place it",
    )
    ident.add_argument(
        "--pvc-labels",
        metavar="JSON",
        help="the source PVC's metadata.labels, which a restored claim gets back (an application's selector finds it)",
    )
    ident.add_argument(
        "--run-pvcs",
        metavar="PVC,PVC",
        help="every PVC of the application run this backup is part"
        " of: a restore of the run checks that each has a backup",
    )
    ident.add_argument("--snapshot", help="VolumeSnapshot name (the CBT target)")
    ident.add_argument("--snapshot-handle", help="CSI snapshot handle (base of the next delta)")
    ident.add_argument("--group-snapshot", help="VolumeGroupSnapshot name")
    ident.add_argument("--group-snapshot-handle")
    ident.add_argument("--storage-class", help="the PVC's storage class (what a restore provisions)")
    ident.add_argument("--volume-mode", choices=("Block", "Filesystem"), help="the PVC's volume mode")
    ident.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a tag recorded in the manifest (repeatable), e.g. cbt-mover.io/run=RUN_ID",
    )

    from movers.cli_extents import add_parser as add_extents_parser

    add_extents_parser(sub, _add_cbt)

    p = sub.add_parser("restore", help="restore a backup onto a device or image file")
    _add_repo(p)
    p.add_argument("--volume", required=True)
    p.add_argument("--backup", default="latest", help="backup id or latest (default)")
    p.add_argument("--device", required=True, help="target block device or image file")
    p.add_argument("--assume-zeroed", action="store_true", help="the target reads as zeros: skip zeroing holes")
    p.add_argument(
        "--verify-device",
        action="store_true",
        help="after writing, read the target back and compare it with the backup (one more full read)",
    )
    p.add_argument("--workers", type=int, default=4)

    p = sub.add_parser("ls", help="list backups")
    _add_repo(p)
    p.add_argument("--volume")

    p = sub.add_parser("verify", help="read and check all data that backups reference (or a sample of it)")
    _add_repo(p)
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

    p = sub.add_parser("forget", help="delete the manifests of backups the retention policy expires")
    _add_repo(p)
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

    p = sub.add_parser("prune", help="delete data no backup references (after a grace period)")
    _add_repo(p)
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

    from movers.cli_install import add_install_parsers
    from movers.cli_keys import add_key_parsers

    add_key_parsers(sub, _add_repo)
    add_install_parsers(sub)
    return parser


def _reporter(args: argparse.Namespace) -> Reporter:
    """The command's progress on stderr as ``--progress`` asks (``movers.cli_progress``)."""
    return open_reporter(args.progress, args.progress_interval)


def _open_repo(args: argparse.Namespace, create: bool = False):
    """The repository ``--repo`` names, opened with the key options (``create``: made by ``init``)."""
    from movers.repo.config import RepoConfig
    from movers.repo.keys import HOW_TO_GIVE, Credentials, kdf_cost
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    if not args.repo:
        raise UsageError("--repo is required (or set CBT_MOVER_REPO)")
    retry_for = _retry_for(args)
    options = {
        k: v
        for k, v in (("endpoint_url", args.s3_endpoint), ("region", args.s3_region), ("profile", args.s3_profile))
        if v
    }
    store = open_store(args.repo, retry_for=retry_for, **options)
    credentials = Credentials.gather(
        args.password_file, args.key_file, kms_key=args.kms_key, aws_profile=args.s3_profile, retry_for=retry_for
    )
    if not create:
        return Repository.open(store, credentials)
    if args.insecure_no_encryption:
        return Repository.init(store, credentials=credentials)
    if credentials is None:
        raise UsageError(f"a new repository is encrypted: {HOW_TO_GIVE} (or --insecure-no-encryption)")
    return Repository.init(store, RepoConfig.new(encrypted=True), credentials, kdf_cost())


def _retry_for(args: argparse.Namespace) -> float:
    """Seconds of ``--retry-for``: the budget of every store and AWS KMS call."""
    from movers.repo.store.retry import parse_retry_for

    try:
        return parse_retry_for(args.retry_for)
    except ValueError as err:
        raise UsageError(f"--retry-for (or CBT_MOVER_RETRY_FOR) {err}") from None


def _emit(args: argparse.Namespace, result: dict[str, Any], text: str) -> None:
    doc = json.dumps(result, sort_keys=True)
    print(doc if args.json else text)
    if getattr(args, "result_file", None):
        try:
            with open(args.result_file, "w", encoding="utf-8") as f:
                f.write(doc)
        except OSError as err:
            log.warning("cannot write the result to %s: %s", args.result_file, err.strerror)


def cmd_init(args: argparse.Namespace) -> int:
    repo = _open_repo(args, create=True)
    doc = {
        "repo": repo.describe(),
        "repo_id": repo.config.repo_id,
        "chunk_hash": repo.content_hash.name,
        "encrypted": repo.config.encrypted,
        "key_slot": repo.opened_by,
    }
    how = f"encrypted, key slot {repo.opened_by}" if repo.config.encrypted else "NOT encrypted"
    _emit(args, doc, f"initialized {repo.describe()} ({how}, chunk hash {repo.content_hash.name})")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """``--request-env VAR``: the flow's ``BackupRequest`` (the mover pod); else the same request from the flags."""
    from movers.backup.request import BackupRequest
    from movers.backup.volume import back_up_volume
    from movers.cbt.source import CbtConnection
    from movers.repo.manifest import parse_node_affinity, parse_pvc_labels, parse_run_pvcs, parse_tags

    cbt = CbtConnection.of(_cbt_options(args))
    if args.request_env:
        request = BackupRequest.from_env(args.request_env)
    else:
        missing = [flag for flag in ("--volume", "--device") if getattr(args, flag[2:]) is None]
        if missing:
            raise UsageError(
                f"the following arguments are required: {', '.join(missing)} (see cbt-mover backup --help)"
            )
        if sum(map(bool, (args.extents, args.scan, cbt.wanted))) != 1:
            raise UsageError("choose one change source: --extents FILE, --scan, or CBT (--cbt-address ... or --kube)")
        ns = args.namespace
        request = BackupRequest(
            volume=dict(
                id=args.volume, cluster=args.cluster, namespace=ns, pvc=args.pvc, pv_volume_handle=args.pv_handle,
                csi_driver=args.csi_driver, storage_class=args.storage_class, volume_mode=args.volume_mode,
                pv_name=args.pv_name, pv_uid=args.pv_uid, fs_type=args.fs_type,
                node_affinity=parse_node_affinity(args.node_affinity), labels=parse_pvc_labels(args.pvc_labels),
            ),
            snapshot=dict(
                volume_snapshot=args.snapshot, namespace=ns, snapshot_handle=args.snapshot_handle,
                group_snapshot=args.group_snapshot, group_snapshot_handle=args.group_snapshot_handle,
            ),
            changes=dict(
                source="extents" if args.extents else "scan" if args.scan else "cbt", extents=args.extents,
                base_handle=args.base_handle, base_snapshot=args.base_snapshot, parent=args.parent, full=args.full,
                cbt_fallback=args.cbt_fallback, cbt_max_results=args.cbt_max_results,
            ),
            device=args.device, tags=parse_tags(args.tag), run_pvcs=parse_run_pvcs(args.run_pvcs),
            workers=max(1, args.workers), zstd_level=args.zstd_level,
        )  # fmt: skip
    r = back_up_volume(lambda: _open_repo(args), request, cbt=cbt, progress=lambda: _reporter(args))
    _emit(
        args,
        r.as_output(),
        f"backup {r.backup_id} of {r.volume}: {r.mode}, read {_mib(r.read_bytes)},"
        f" new {_mib(r.new_chunk_bytes)}, uploaded {_mib(r.stored_bytes)} in {r.duration_s} s",
    )
    return 0


def cmd_extents(args: argparse.Namespace) -> int:
    from movers.cli_extents import cmd_extents as run

    return run(args, _cbt_options)


def cmd_restore(args: argparse.Namespace) -> int:
    from movers.pipeline.restore import run_restore

    device.check_target(args.device)
    repo = _open_repo(args)
    manifest = repo.resolve(args.volume, args.backup)
    phases = 2 if args.verify_device else 1  # writing, then reading back
    with _reporter(args) as reporter:
        try:
            stats = run_restore(
                repo,
                manifest,
                args.device,
                assume_zeroed=args.assume_zeroed,
                workers=max(1, args.workers),
                progress=reporter.phase("restore", part=0, parts=phases),
            )
        except device.NoRoom as err:
            raise device.NoRoom(
                f"restore target {args.device} has no room for backup {manifest.backup_id}"
                f" ({_mib(manifest.capacity_bytes)}): {err}; the target is incomplete"
            ) from None
        except device.ReadOnly as err:
            raise device.ReadOnly(f"restore target {args.device}: {err}; the target is incomplete") from None
        check = None
        if args.verify_device:
            from movers.pipeline.readback import verify_device

            readback = reporter.phase("readback", part=1, parts=phases)
            check = verify_device(repo, manifest, args.device, workers=max(1, args.workers), progress=readback)
    result = {"backup_id": manifest.backup_id, "volume": args.volume, "mode": manifest.mode, **stats.as_dict()}
    text = (
        f"restored {manifest.backup_id} of {args.volume} to {args.device}: {_mib(stats.written_bytes)} written,"
        f" verified {stats.chunks_verified} chunks in {stats.duration_s} s"
    )
    if check is not None:
        result["readback"] = check.as_dict()
        text += f"; read back {_mib(check.checked_bytes + check.zero_bytes)} in {check.duration_s} s: identical"
    result["requests"] = repo.store.requests.as_dict()
    _emit(args, result, text)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from movers.repo.manifest import shown_volume_id
    from movers.repo.selection import runs_of

    repo = _open_repo(args)
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
            cells = (shown_volume_id(r["volume"]), r["backup_id"], r["mode"], _mib(r["capacity_bytes"]), r["created"])
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


def cmd_verify(args: argparse.Namespace) -> int:
    from movers.pipeline.verify import run_verify, run_verify_sampled

    if args.seed is not None and args.sample is None:
        raise UsageError("--seed needs --sample")
    if args.sample is not None and not 0 <= args.sample <= 1:
        raise UsageError(f"--sample must be a fraction between 0 and 1, not {args.sample}")
    repo = _open_repo(args)
    if args.backup and not args.volume:
        raise UsageError("--backup needs --volume")
    refs = repo.list_backups(args.volume)
    if args.backup:
        manifest = repo.resolve(args.volume, args.backup)
        refs = [r for r in refs if r.backup_id == manifest.backup_id]
    elif args.volume and not refs:
        raise errors.NotFoundError(f"volume {args.volume} has no backups in {repo.describe()}")
    workers = max(1, args.workers)
    with _reporter(args) as reporter:
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
            f" {_mib(report.fetched_bytes)} read{sampled}: {'ok' if report.ok else f'{len(report.errors)} damaged'}"
        )
    return 0 if report.ok else errors.EXIT_INTEGRITY


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


def cmd_forget(args: argparse.Namespace) -> int:
    from movers.repo.manifest import shown_volume_id
    from movers.repo.retention import forget

    rules = (args.keep_last, args.keep_daily, args.keep_weekly, args.keep_monthly)
    if args.backup and (args.policy or any(n is not None for n in rules)):
        raise UsageError("--backup names the backups to forget: give no --keep-* or --policy with it")
    repo = _open_repo(args)
    if args.backup:
        return _forget_named(args, repo)
    report = forget(
        repo,
        args.volume,
        keep_last=args.keep_last,
        keep_daily=args.keep_daily,
        keep_weekly=args.keep_weekly,
        keep_monthly=args.keep_monthly,
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
    _emit(args, report.to_dict(), "\n".join(lines))
    return 0


def _forget_named(args: argparse.Namespace, repo) -> int:
    from movers.repo.manifest import shown_volume_id
    from movers.repo.retention import forget_named

    report = forget_named(repo, args.backup, args.volume, dry_run=args.dry_run)
    verb = "would forget" if report.dry_run else "forget"
    lines = [f"{verb}\t{shown_volume_id(v.volume)}\t{bid}\tnamed" for v in report.volumes for bid in v.expired]
    lines.append(f"{'would forget' if report.dry_run else 'forgot'} {len(report.deleted)} backup(s)")
    _emit(args, report.to_dict(), "\n".join(lines))
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from movers.repo.prune import prune

    grace, wait = _duration(args.grace), _duration(args.wait_backups, "--wait-backups")
    repo, repack_max = _open_repo(args), _size(args.repack_max)
    with _reporter(args) as reporter:
        marking = reporter.phase("mark", "backups")  # the references of every backup, the long phase
        r = prune(
            repo, grace_s=grace, dry_run=args.dry_run, backup_wait_s=wait, repack_max_bytes=repack_max, progress=marking
        )
    verb = "would delete" if r.dry_run else "deleted"
    text = (
        f"{verb} {r.packs_deleted} pack(s) ({_mib(r.bytes_deleted)}) and {r.map_objects_deleted} map object(s);"
        f" kept {r.packs_kept} pack(s), {r.packs_partly_used} partly used ({_mib(r.dead_bytes)} dead);"
        f" {'would repack' if r.dry_run else 'repacked'} {r.packs_repacked} ({_mib(r.bytes_repacked)} copied);"
        f" {r.packs_in_grace} unreferenced pack(s) in grace ({_mib(r.bytes_in_grace)});"
        f" index objects: {r.index_objects_deleted} replaced by {r.index_objects_written}; {r.duration_s:.1f}s"
    )
    if r.backups_waited_for:
        text += f"; waited for {r.backups_waited_for} running backup(s), {r.packs_deferred} pack(s) kept for now"
    _emit(args, r.to_dict(), text)
    return 0


def cmd_key(args: argparse.Namespace) -> int:
    from movers.cli_keys import cmd_key as run

    return run(args)


def cmd_install(args: argparse.Namespace) -> int:
    from movers.cli_install import cmd_install as run

    return run(args)


def _mib(n: int | None) -> str:
    return human_bytes(n, missing="?")


COMMANDS = {
    "init": cmd_init,
    "backup": cmd_backup,
    "extents": cmd_extents,
    "restore": cmd_restore,
    "ls": cmd_ls,
    "verify": cmd_verify,
    "forget": cmd_forget,
    "prune": cmd_prune,
    "key": cmd_key,
    "install": cmd_install,
}


def _api_refusal(err: Exception) -> str | None:
    """The one line for a Kubernetes ``ApiException`` 401/403 (the API's message), else None."""
    if type(err).__name__ != "ApiException" or getattr(err, "status", None) not in (401, 403):
        return None
    from movers.kube.apply import api_message

    return f"the Kubernetes API refused a call ({err.status}): {api_message(err)}"


def _fail(line: str) -> None:
    """The one error line on stderr, with every known credential redacted (``movers.redaction``)."""
    print(f"cbt-mover: {redaction.KNOWN(line)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    log_level = getattr(args, "log_level", "WARNING")  # commands that only print (install) have none
    level = getattr(logging, str(log_level).upper(), None)
    if not isinstance(level, int):
        parser.error(f"unknown --log-level {log_level}")
    logsetup.configure(level)
    try:
        if getattr(args, "volume", None) is not None:  # every command that takes a volume id, before any work
            from movers.repo.manifest import check_volume_id

            check_volume_id(args.volume)
        return COMMANDS[args.command](args)
    except MoverError as err:
        log.debug("command failed", exc_info=True)
        _fail(f"error: {err}")
        return err.exit_code
    except KeyboardInterrupt:
        print("cbt-mover: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug: keep the one-line contract, log the traceback at DEBUG
        refused = _api_refusal(err)
        if refused:  # a Kubernetes call no wrapper mapped: still the access exit code
            _fail(f"error: {refused}")
            return errors.EXIT_ACCESS
        log.debug("internal error", exc_info=True)
        _fail(f"internal error: {type(err).__name__}: {err}")
        return errors.EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
