"""Turning command-line CBT options into an extent stream (shared by ``backup`` and ``extents``).

Either everything is explicit (``address``, ``ca_file``, ``token_file`` or ``audience``,
``namespace``, ``snapshot``) or ``kube`` is set and the VolumeSnapshot is looked up: its
content gives the driver and snapshot handle, the driver's SnapshotMetadataService gives the
address, audience and CA, and the token comes from the TokenRequest API (or ``token_file``).

A delta since ``base_handle`` from a v1alpha1 service (found with ``kube``: the v0.1.0 sidecar, whose
``GetMetadataDelta`` field 3 is ``base_snapshot_name``) names the base by its VolumeSnapshot, ``base_snapshot``,
after checking that this VolumeSnapshot (in ``namespace``) still holds the handle ``base_handle``. When it
cannot (no name given, the snapshot gone or another one now) the session's stream is the allocated blocks and
``base_rejected`` says why: the caller backs up in full (or refuses) with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from movers.cbt import discovery
from movers.cbt.client import ExtentStream, SnapshotMetadataClient
from movers.cbt.tokens import FileToken, TokenRequestToken, service_account_of
from movers.errors import CbtUnavailableError, UsageError
from movers.kube.client import api_client
from movers.kube.snapshots import SnapshotRef, resolve_snapshot

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@dataclass(frozen=True)
class CbtConnection:
    """How a pod reaches the SnapshotMetadata service: the pod's wiring, not what a backup asks for
    (``movers.backup.request.BackupRequest`` holds the snapshot, base and page size). ``service_account``:
    NS/NAME (or NAME with ``service_account_namespace``) for TokenRequest; ``token_expiry``: seconds a
    TokenRequest's token lives."""

    address: str | None = None
    ca_file: str | None = None
    token_file: str | None = None
    audience: str | None = None
    service_account: str | None = None
    service_account_namespace: str | None = None
    token_expiry: int = 600
    kube: bool = False
    kubeconfig: str | None = None
    wait_timeout: float = 300.0

    @property
    def wanted(self) -> bool:
        return bool(self.kube or self.address)

    @property
    def connection(self) -> CbtConnection:
        """This connection alone (of a ``CbtOptions``: without its target)."""
        return CbtConnection(**{f.name: getattr(self, f.name) for f in fields(CbtConnection)})

    def options(self, **target) -> CbtOptions:
        """A session's options: this connection and ``target`` (namespace, snapshot, base_handle, ...)."""
        return CbtOptions(**{f.name: getattr(self, f.name) for f in fields(CbtConnection)}, **target)


@dataclass(frozen=True)
class CbtOptions(CbtConnection):
    """A CBT session's options: the connection and what it reads: the VolumeSnapshot ``snapshot`` in
    ``namespace``, a delta since ``base_handle`` (its VolumeSnapshot ``base_snapshot`` for a v1alpha1 service, see
    the module doc), ``max_results`` per call, from ``starting_offset``."""

    namespace: str | None = None
    snapshot: str | None = None
    base_handle: str | None = None
    base_snapshot: str | None = None
    max_results: int = 4096
    starting_offset: int = 0


@dataclass
class CbtSession:
    """An open client, its stream and what was learned about the snapshot."""

    client: SnapshotMetadataClient
    stream: ExtentStream
    snapshot: SnapshotRef | None
    base_rejected: str | None = None  # why no delta since base_handle could be asked (the stream is allocated)

    def close(self) -> None:
        self.client.close()


def open_session(opts: CbtOptions, clamp_to: int | None = None) -> CbtSession:
    if not opts.namespace or not opts.snapshot:
        raise UsageError("CBT needs --namespace and --snapshot (the VolumeSnapshot to read)")
    api = api_client(opts.kubeconfig) if (opts.kube or opts.audience) else None
    ref = service = None
    address, audience, ca_pem = opts.address, opts.audience, None
    if opts.kube:
        ref = discovery.wait_snapshot_ready(api, opts.namespace, opts.snapshot, opts.wait_timeout)
        try:
            service = discovery.snapshot_metadata_service(api, ref.driver)
        except CbtUnavailableError as err:  # no CBT for this driver: the caller's scan records the snapshot
            err.snapshot = ref
            raise
        address = address or service.address
        audience = audience or service.audience
        ca_pem = service.ca_pem
    if opts.ca_file:
        try:
            with open(opts.ca_file, "rb") as f:
                ca_pem = f.read()
        except OSError as err:
            raise UsageError(f"cannot read --cbt-ca-file {opts.ca_file}: {err.strerror}") from None
    if not address or ca_pem is None:
        raise UsageError("CBT needs --cbt-address and --cbt-ca-file, or --kube to look them up")
    if opts.token_file:
        tokens = FileToken(opts.token_file)
    elif audience:
        ns, name = _service_account(opts.service_account, opts.service_account_namespace)
        tokens = TokenRequestToken(_core(api), ns, name, audience, expiry=opts.token_expiry)
    else:
        raise UsageError("CBT needs --cbt-token-file or --cbt-audience (a TokenRequest for that audience)")
    client = SnapshotMetadataClient(address, ca_pem, tokens, max_results=opts.max_results)
    start = opts.starting_offset
    base, rejected = opts.base_handle, None
    if base and service is not None and service.legacy:
        base, rejected = _base_by_name(api, opts, service.driver)
    if base:
        stream = client.delta(opts.namespace, base, opts.snapshot, clamp_to, starting_offset=start)
    else:
        stream = client.allocated(opts.namespace, opts.snapshot, clamp_to, starting_offset=start)
    return CbtSession(client, stream, ref, rejected)


def _base_by_name(api, opts: CbtOptions, driver: str) -> tuple[str | None, str | None]:
    """``(the VolumeSnapshot name to send, None)`` for a v1alpha1 service's delta since ``opts.base_handle``, or
    ``(None, why not)`` (see the module doc)."""
    from movers.errors import NotFoundError

    old = f"the v1alpha1 SnapshotMetadataService of {driver} (sidecar v0.x) names a delta's base by VolumeSnapshot"
    name = opts.base_snapshot
    if not name:
        return None, f"{old} and none was given for base {opts.base_handle} (--base-snapshot)"
    what = f"the base VolumeSnapshot {opts.namespace}/{name}"
    try:
        base = resolve_snapshot(api, opts.namespace, name)
    except NotFoundError:
        return None, f"{old}, and {what} no longer exists"
    if base.handle != opts.base_handle:
        return None, f"{old}, and {what} is another snapshot now (handle {base.handle}, not {opts.base_handle})"
    return name, None


def _core(api):
    from kubernetes import client

    return client.CoreV1Api(api)


def _service_account(spec: str | None, namespace: str | None = None) -> tuple[str, str]:
    """``(namespace, name)`` of ``NAMESPACE/NAME``, or of ``NAME`` and ``namespace`` (the upstream lister's
    --service-account and --service-account-namespace); neither: the pod's own."""
    if namespace is not None:
        if not spec or "/" in spec or not namespace:
            raise UsageError("--service-account-namespace needs --service-account NAME (without a namespace)")
        return namespace, spec
    if spec:
        ns, sep, name = spec.partition("/")
        if not sep or not ns or not name:
            raise UsageError(
                "--service-account must be NAMESPACE/NAME (or NAME with --service-account-namespace NAMESPACE)"
            )
        return ns, name
    try:
        with open(IN_CLUSTER_TOKEN, encoding="utf-8") as f:
            found = service_account_of(f.read().strip())
    except OSError:
        found = None
    if found is None:
        raise UsageError("a TokenRequest needs --service-account NAMESPACE/NAME (or run in a pod)")
    return found
