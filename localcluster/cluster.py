"""The whole local cluster: S3, a Kubernetes API, two CSI-like drivers with snapshots (and CBT), the Deployment,
ReplicaSet and StatefulSet controllers, a scheduler and one kubelet per node.

    with LocalCluster(workdir) as cluster:
        cluster.kubeconfig      # a kubeconfig file for kubectl and the kubernetes client
        cluster.s3.env          # AWS_* variables of the moto S3 server on loopback
        cluster.client          # a kubernetes ApiClient (admin)
        cluster.apply("objects.yaml")                                       # as admin: create or replace
        cluster.kubeconfig_for("cbt-mover-system", "cbt-mover-controller")  # a kubeconfig of that identity

It is a test double for a cluster: the product (movers/, tasks/, flows/) talks to it only over the
real protocols (the kubernetes client over HTTP, gRPC over TLS, S3 over HTTP) and cannot tell it
apart for everything it does. The drivers and classes are those of ``localcluster.drivers`` (the default
StorageClass ``standard`` belongs to ``disk.csi.local``, not to the demo app's ``hostpath.csi.k8s.io``). Settings
emulate older or poorer clusters, each in one point (see ``localcluster.controllers.cluster``): ``cbt=False`` (no
SnapshotMetadata service), ``group_snapshots="unprocessed"`` (or ``False``: the CRDs are served, nothing processes
VolumeGroupSnapshots), ``group_snapshot_versions`` (which groupsnapshot.storage.k8s.io versions are served, () =
none), ``restore_size=False`` (snapshot contents without restoreSize), ``default_snapshot_class="none"|"two"``
(no default VolumeSnapshotClass, or two per driver), ``hostpath_group_capability=False`` (the hostpath driver
lacks the GroupController capability), ``metadata_sidecar="v0.1.0"`` (the Kubernetes 1.33 alpha CBT sidecar: only
``cbt.storage.k8s.io/v1alpha1`` served, the delta's base named by VolumeSnapshot name), ``stale_deletion_policy=True``
(the snapshot-controller decides deletions by a content's deletionPolicy as first seen); ``drivers`` replaces the
driver table.
``nodes`` (default ``localcluster.nodes.DEFAULT_NODES``: node-a, node-b, the tainted Windows win-a)
are registered by one kubelet each (``cluster.kubelets[name]``; ``cluster.kubelet`` is the first);
``cluster.scheduler`` binds pods to them.
Everything started is stopped in reverse order, in every outcome, and loop devices are detached.

RBAC is enforced for every identity but the admin one (``cluster.kubeconfig``, ``cluster.client``: the
test harness and the demo's set-up); ``kubeconfig_for`` gives a ServiceAccount's identity.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from localcluster.nodes import DEFAULT_NODES, NodeSpec

log = logging.getLogger(__name__)
SA_KUBECONFIG_SECONDS = 24 * 3600


class LocalCluster:
    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        s3: bool = True,
        cbt: bool = True,
        group_snapshots: bool | str = True,
        group_snapshot_versions: tuple[str, ...] | None = None,
        ready_delay: float = 0.2,
        audit_log: str | Path | None = None,
        drivers: tuple | None = None,
        restore_size: bool = True,
        default_snapshot_class: str = "one",
        hostpath_group_capability: bool = True,
        stale_deletion_policy: bool = False,
        nodes: Sequence[NodeSpec] | None = None,
        metadata_sidecar: str = "v1",
    ) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="localcluster-"))
        self.settings = dict(s3=s3, cbt=cbt, group_snapshots=group_snapshots, ready_delay=ready_delay, drivers=drivers)
        self.storage_settings = dict(
            restore_size=restore_size,
            default_snapshot_class=default_snapshot_class,
            hostpath_group_capability=hostpath_group_capability,
            metadata_sidecar=metadata_sidecar,
            stale_deletion_policy=stale_deletion_policy,
        )
        self.group_snapshot_versions = group_snapshot_versions
        self.audit_log = audit_log
        self._stack = contextlib.ExitStack()
        self.nodes = tuple(nodes) if nodes is not None else DEFAULT_NODES
        self.s3 = self.api = self.store = self.controllers = self.kubelet = self.client = self.scheduler = None
        self.kubelets: dict[str, Any] = {}
        self.kubeconfig: Path | None = None

    def start(self) -> LocalCluster:
        from localcluster.controllers import Kube, LocalControllers, api_client_for
        from localcluster.controllers.scheduler import Scheduler
        from localcluster.kubeapi import KubeAPI
        from localcluster.kubelet import LocalKubelet
        from localcluster.kubelet.volumes import Attachments
        from localcluster.s3 import moto_s3
        from localcluster.storage import VolumeStore

        stack = self._stack
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            if self.settings["s3"]:
                self.s3 = stack.enter_context(moto_s3())
            api_settings: dict[str, Any] = {}
            if self.group_snapshot_versions is not None:
                api_settings["group_snapshot_versions"] = self.group_snapshot_versions
            if self.storage_settings["metadata_sidecar"] == "v0.1.0":  # its CRD served v1alpha1 only
                api_settings["served_versions"] = {"cbt.storage.k8s.io": ("v1alpha1",)}
            if self.audit_log:
                api_settings["audit_log"] = str(self.audit_log)
            self.api = stack.enter_context(KubeAPI(**api_settings))
            self.kubeconfig = self.api.write_kubeconfig(self.workdir / "kubeconfig")
            self.store = VolumeStore(self.workdir / "storage")
            stack.callback(self.store.detach_all)
            ctl_settings = {k: self.settings[k] for k in ("cbt", "group_snapshots", "ready_delay")}
            ctl_settings.update(self.storage_settings)
            if self.settings["drivers"]:
                ctl_settings["drivers"] = self.settings["drivers"]
            self.controllers = LocalControllers(self.api, self.store, **ctl_settings)
            self.controllers.start()
            stack.callback(self.controllers.stop)
            self.client = api_client_for(self.api)
            stack.callback(self.client.close)
            scheduler_client = api_client_for(self.api)
            stack.callback(scheduler_client.close)
            self.scheduler = Scheduler(Kube(scheduler_client, "default-scheduler")).start()
            stack.callback(self.scheduler.stop)
            attachments = Attachments(self.store)
            for spec in self.nodes:
                kubelet = LocalKubelet(
                    self.api,
                    self.store,
                    node=spec,
                    workdir=self.workdir / "kubelet" / spec.name,
                    attachments=attachments,
                )
                stack.callback(kubelet.stop)
                kubelet.start()
                self.kubelets[spec.name] = kubelet
            self.kubelet = next(iter(self.kubelets.values()), None)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self._stack.close()
        finally:
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def kubeconfig_for(self, namespace: str, service_account: str, path: str | Path | None = None) -> Path:
        """A kubeconfig (default namespace ``namespace``) with a token of that ServiceAccount, minted as
        TokenRequest would (the API server's audience, not bound to a pod) and valid for 24 hours; it
        dies with the ServiceAccount. Default path: ``WORKDIR/kubeconfig-NAMESPACE-SERVICE_ACCOUNT``."""
        token = self.api.issue_token(namespace, service_account, expiration_seconds=SA_KUBECONFIG_SECONDS)
        path = Path(path) if path is not None else self.workdir / f"kubeconfig-{namespace}-{service_account}"
        return self.api.write_kubeconfig(path, token=token, namespace=namespace)

    def apply(self, source: str | Path | Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create each object of ``source`` (a path to a YAML file of one or more documents, or dicts) as
        the admin, replacing it when it exists already; returns the objects as the API answered."""
        from localcluster.applying import apply_objects

        return apply_objects(self.client, self.api.registry, source)

    def env(self) -> dict[str, str]:
        """Variables for a process that should use this cluster (KUBECONFIG, AWS_*)."""
        env = {"KUBECONFIG": str(self.kubeconfig)}
        if self.s3 is not None:
            env.update(self.s3.env)
        return env
