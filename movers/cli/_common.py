"""What every ``cbt-mover`` command shares: the repository and CBT options, opening the repository, the
``--retry-for`` budget, the progress reporter and the one result a command prints (``emit``).

Commands import this module, never each other; it imports no command. The heavy modules (the repository, its
stores, the CBT client) are imported inside the functions that need them, so that every command's start stays
cheap.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from movers.cli.progress import MODES, Reporter, open_reporter
from movers.errors import UsageError
from movers.values import human_bytes

if TYPE_CHECKING:
    from movers.repo.repository import Repository

log = logging.getLogger("movers")

# the upstream snapshot-metadata-lister's other spellings of the CBT flags ``extents`` shares with ``backup``
LISTER_ALIASES = {
    "--base-handle": ("-P", "-previous-snapshot-id", "--previous-snapshot-id"),
    "--cbt-max-results": ("-max-results", "--max-results"),
    "--kubeconfig": ("-kubeconfig",),
    "--service-account": ("-service-account",),
}


def add_repo_options(p: argparse.ArgumentParser) -> None:
    """The options of every command that opens a repository: where it is, its key, the retry budget and how the
    result and progress are shown (``--json``, ``--result-file``, ``--log-level``, ``--progress``)."""
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


def add_cbt_options(p: argparse.ArgumentParser, lister: bool = False) -> None:
    """The CBT options; ``lister``: with the upstream snapshot-metadata-lister's spellings too (``extents``)."""

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


def cbt_options(args: argparse.Namespace):
    """The ``movers.cbt.source.CbtOptions`` of the parsed CBT options (``backup``'s or ``extents``')."""
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


def progress_reporter(args: argparse.Namespace) -> Reporter:
    """The command's progress on stderr as ``--progress`` asks (``movers.cli.progress``)."""
    return open_reporter(args.progress, args.progress_interval)


def open_repo(args: argparse.Namespace, create: bool = False):
    """The repository ``--repo`` names, opened with the key options (``create``: made by ``init``)."""
    from movers.repo.config import RepoConfig
    from movers.repo.keys import HOW_TO_GIVE, Credentials, kdf_cost
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    if not args.repo:
        raise UsageError("--repo is required (or set CBT_MOVER_REPO)")
    retry_for = retry_budget(args)
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


def open_repo_ahead(args: argparse.Namespace) -> Callable[[], Repository]:
    """``open_repo(args)`` started now, on a thread, for a command with other start-up work to do meanwhile (the
    key derivation of a passphrase, scrypt, holds no lock Python needs): the returned function waits for it and
    returns the repository or raises what opening raised. Opening only reads the repository, so a command that
    fails before it calls the function has changed nothing; the thread does not keep the process alive."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((open_repo(args), None))
        except BaseException as err:  # handed to the caller, in its thread
            outcome.append((None, err))

    thread = threading.Thread(target=run, name="open-repo", daemon=True)
    thread.start()

    def opened() -> Repository:
        thread.join()
        repo, err = outcome[0]
        if err is not None:
            raise err
        return repo

    return opened


def retry_budget(args: argparse.Namespace) -> float:
    """Seconds of ``--retry-for``: the budget of every store and AWS KMS call."""
    from movers.repo.store.retry import parse_retry_for

    try:
        return parse_retry_for(args.retry_for)
    except ValueError as err:
        raise UsageError(f"--retry-for (or CBT_MOVER_RETRY_FOR) {err}") from None


def emit(args: argparse.Namespace, result: dict[str, Any], text: str, file_text: str | None = None) -> None:
    """Print the command's result: ``text``, or with ``--json`` the one JSON object; ``--result-file`` gets the
    JSON too, or ``file_text`` when given (e.g. a result cut to what a termination message holds); a failure to
    write it is a warning, never the command's failure."""
    doc = json.dumps(result, sort_keys=True)
    print(doc if args.json else text)
    if getattr(args, "result_file", None):
        try:
            with open(args.result_file, "w", encoding="utf-8") as f:
                f.write(doc if file_text is None else file_text)
        except OSError as err:
            log.warning("cannot write the result to %s: %s", args.result_file, err.strerror)


def mib(n: int | None) -> str:
    """A byte count for a person (``movers.values.human_bytes``), ``?`` when unknown."""
    return human_bytes(n, missing="?")
