"""The backup's decisions that need no cluster: derived object names, the snapshot path and classes a
preflight picks from the classes the cluster has (``movers.backup.preflight``)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from movers.backup import preflight as p
from movers.backup.preflight import GROUP, PER_PVC, Source
from movers.kube.names import derived_name, is_dns_label
from movers.kube.volumes import PvIdentity
from movers.policy.model import parse_policy

RUN = "backup-0123456789abcdef"
DEFAULT_VS = {p.DEFAULT_SNAPSHOT_CLASS: "true"}
DEFAULT_VGS = {p.DEFAULT_GROUP_CLASS: "true"}


def _class(name: str, driver: str, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": name, "annotations": annotations or {}}, "driver": driver}


def _source(pvc: str, driver: str = "hostpath.csi.k8s.io") -> Source:
    return Source(pvc, "Block", "16Mi", "sc", driver, PvIdentity(csi_driver=driver, pv_volume_handle=f"h-{pvc}"))


def test_derived_names_are_dns_labels_and_distinct_whatever_the_claim_name():
    assert derived_name(RUN, "data") == f"{RUN}-data"  # an ordinary name stays readable and unchanged
    prefix = "shop.primary-database.volume-for-table"  # "<run>-<prefix>."[:63] ended in "."
    one, two = (derived_name(RUN, f"{prefix}.wal-segments-archive-of-{i}") for i in (1, 2))
    assert one != two and all(is_dns_label(n) and len(n) == 63 for n in (one, two)), (one, two)
    assert one.startswith(f"{RUN}-shop-primary") and re.fullmatch(r".*-[0-9a-f]{8}", one)
    assert derived_name(RUN, f"{prefix}.wal-segments-archive-of-1") == one  # stable across retries
    assert derived_name(RUN, "data.v1") != derived_name(RUN, "data-v1")  # a dot is not a dash
    assert is_dns_label(derived_name(RUN, "x" * 253)) and is_dns_label(derived_name("..", "--"))
    with pytest.raises(ValueError):
        derived_name(RUN, "data", max_length=64)


def test_the_group_path_needs_the_api_and_a_class_of_the_claims_one_driver():
    host, disk = "hostpath.csi.k8s.io", "disk.csi.local"
    groups = [_class("hp-group", host, DEFAULT_VGS), _class("hp-other", host)]
    claims = [_source("a"), _source("b")]
    assert p.choose_path(claims, "v1", groups, None) == (
        GROUP,
        f"the default VolumeGroupSnapshotClass hp-group of CSI driver {host}",
        "hp-group",
    )
    assert p.choose_path(claims, "v1", groups, "hp-other")[::2] == (GROUP, "hp-other")
    path, why, cls = p.choose_path(claims, None, groups, None)
    assert (path, cls) == (PER_PVC, None) and "serves no groupsnapshot.storage.k8s.io API" in why
    path, why, _ = p.choose_path([_source("a"), _source("b", disk)], "v1", groups, None)
    assert path == PER_PVC and "several CSI drivers (disk.csi.local, hostpath.csi.k8s.io)" in why
    assert p.choose_path([_source("a", disk)], "v1", groups, None)[:2] == (
        PER_PVC,
        f"CSI driver {disk} has no VolumeGroupSnapshotClass",
    )
    assert "does not exist" in p.choose_path(claims, "v1", groups, "typo")[1]
    assert "is of CSI driver" in p.choose_path(claims, "v1", [_class("d", disk)], "d")[1]
    path, why, _ = p.choose_path(claims, "v1", [_class("hp-other", host)], None)
    assert path == PER_PVC and "no default VolumeGroupSnapshotClass (its classes: hp-other" in why
    path, why, _ = p.choose_path(claims, "v1", [*groups, _class("hp-3", host, DEFAULT_VGS)], None)
    assert path == PER_PVC and "2 default VolumeGroupSnapshotClasses (hp-3, hp-group;" in why


def test_snapshot_classes_per_driver_and_what_group_members_need():
    host = "hostpath.csi.k8s.io"
    classes = [_class("hp-snap", host, DEFAULT_VS), _class("hp-retain", host), _class("disk", "disk.csi.local")]
    assert p.snapshot_class_for(classes, host, None) == ("hp-snap", None)
    assert p.snapshot_class_for(classes, host, "hp-retain") == ("hp-retain", None)
    assert p.snapshot_class_for(classes, host, "disk") == ("hp-snap", None)  # the policy's is another driver's
    assert p.member_cbt_problem(classes, host) is None
    name, why = p.snapshot_class_for(classes, "disk.csi.local", None)
    assert name is None and "no default VolumeSnapshotClass (its classes: disk)" in why and "snapshot_class" in why
    name, why = p.snapshot_class_for(classes, "other.csi", None)
    assert name is None and "has no VolumeSnapshotClass" in why
    two = [*classes, _class("hp-b", host, DEFAULT_VS)]
    name, why = p.snapshot_class_for(two, host, None)
    assert name is None and "2 default VolumeSnapshotClasses (hp-b, hp-snap)" in why
    assert "2 (hp-b, hp-snap)" in p.member_cbt_problem(two, host)
    assert "no default VolumeSnapshotClass" in p.member_cbt_problem(classes, "disk.csi.local")


def test_the_permissions_a_run_asks_for():
    settings = {
        "name": "shop",
        "namespace": "shop",
        "pvc_selector": {"matchLabels": {"app": "db"}},
        "repository": {"url": "s3://b", "credentials_secret": "creds"},
        "mover": {"service_account": "sa"},
        "hooks": {"pre": [{"name": "x", "pod_selector": {"app": "db"}, "command": ["true"]}]},
        "cbt": {"enabled": "auto"},
    }
    checks = [c for c, _why in p.base_checks(parse_policy(settings), group_served=True)]
    assert p.Check("get", "", "secrets", namespace="shop", name="creds") in checks
    assert p.Check("create", "", "pods", "exec", namespace="shop") in checks
    assert p.Check("list", "groupsnapshot.storage.k8s.io", "volumegroupsnapshotclasses") in checks
    contents = [
        p.Check(verb, group, resource)
        for verb in ("patch", "delete")
        for group, resource in (
            ("snapshot.storage.k8s.io", "volumesnapshotcontents"),
            ("groupsnapshot.storage.k8s.io", "volumegroupsnapshotcontents"),
        )
    ]
    assert all(c in checks for c in contents), "retained_snapshots: remove patches and deletes Retain contents"
    kept = [c for c, _why in p.base_checks(parse_policy({**settings, "retained_snapshots": "keep"}), True)]
    assert not [c for c in contents if c in kept], kept
    quiet = {**settings, "hooks": {}, "cbt": {"enabled": "off"}}
    fewer = [c for c, _why in p.base_checks(parse_policy(quiet), group_served=False)]
    assert not [
        c for c in fewer if c.subresource == "exec" or c.group in ("groupsnapshot.storage.k8s.io", "cbt.storage.k8s.io")
    ]


def _request(pod: dict):
    """The ``BackupRequest`` a mover pod carries (``movers.backup.request.REQUEST_ENV``), read back by its class."""
    from movers.backup.request import REQUEST_ENV, BackupRequest

    [value] = [e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == REQUEST_ENV]
    return BackupRequest.model_validate_json(value)


def _shop_policy():
    return parse_policy(
        {
            "name": "shop",
            "namespace": "ns",
            "pvc_selector": {"matchLabels": {"app": "db"}},
            "repository": {"url": "s3://b", "credentials_secret": "cbt-mover-repo"},
            "mover": {"image": "cbt-mover", "tolerations": [{"operator": "Exists"}]},
            "timeouts": {"mover": "10m"},
        }
    )


def test_a_planned_scan_reaches_the_mover():
    """A mover planned to scan (no CBT for its volume, or CBT off) reads the whole device and asks no CBT service:
    with ``--kube`` it would ask the driver's service anyway; the snapshot's handle is recorded all the same."""
    from movers.backup.movers import mover_objects
    from movers.backup.plan import VolumePlan

    member = {"pvc": "a", "snapshot": "s", "restore_size": None, "size": "1Gi", "handle": "snap-1"}
    _, pod = mover_objects("run-1", member, VolumePlan.of({}, None, "CBT off"), _shop_policy())
    scan = _request(pod)
    assert scan.changes.source == "scan" and scan.snapshot.snapshot_handle == "snap-1"
    assert "--kube" not in pod["spec"]["containers"][0]["args"]
    _, pod = mover_objects("run-1", member, VolumePlan.of({"handle": None, "reason": "first"}, "aud"), _shop_policy())
    assert _request(pod).changes.source == "cbt" and "--kube" in pod["spec"]["containers"][0]["args"]


def test_cbt_max_results_reaches_the_cbt_movers_only():
    from movers.backup.movers import volume_request
    from movers.backup.plan import VolumePlan

    member = {"pvc": "a", "snapshot": "s"}
    cbt = volume_request(member, VolumePlan.of({"handle": None, "reason": "first"}, "aud", max_results=512), "ns")
    assert cbt.changes.cbt_max_results == 512
    assert volume_request(member, VolumePlan.of({}, None, "CBT off"), "ns").changes.source == "scan"


def test_a_flow_and_the_cli_build_the_same_request():
    """The mover pod's request (the flow: a planned volume's pod, its env value decoded) is the request the
    operator's CLI builds from the equivalent flags: one contract across the pod."""
    from movers.backup.movers import mover_objects
    from movers.backup.plan import VolumePlan
    from movers.cli import build_parser
    from movers.cli.backup import backup_request
    from movers.kube.volumes import source_identity
    from tests.unit.kube.test_kube_manifests import SOURCE_PV

    member = {
        "pvc": "data",
        "snapshot": "snap",
        "restore_size": None,
        "size": "1Gi",
        "storage_class": "fast",
        "volume_mode": "Filesystem",
        "handle": "h1",
        "group_snapshot": "vgs-1",
        "labels": {"app": "db"},
        "identity": dataclasses.replace(source_identity(SOURCE_PV), fs_type="xfs"),
        "tags": {"cbt-mover.io/run": "run-1"},
        "run_pvcs": ["wal", "data"],
    }
    plan = VolumePlan.of({"handle": "h0", "reason": "delta since b0", "parent": "b0"}, "aud", max_results=512)
    _, pod = mover_objects("run-1", member, plan, _shop_policy())
    from_the_flow = _request(pod)

    flags = [
        "backup", "--volume", "ns/data", "--device", "/dev/xvda", "--kube", "--namespace", "ns", "--snapshot", "snap",
        "--pvc", "data", "--base-handle", "h0", "--parent", "b0", "--cbt-max-results", "512",
        "--snapshot-handle", "h1", "--group-snapshot", "vgs-1", "--storage-class", "fast",
        "--volume-mode", "Filesystem", "--pv-name", "pvc-1234", "--pv-handle", "vol-1",
        "--csi-driver", "hostpath.csi.k8s.io", "--fs-type", "xfs", "--pvc-labels", '{"app": "db"}',
        "--node-affinity", '{"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone",'
        ' "operator": "In", "values": ["z1"]}]}]}',
        "--run-pvcs", "data,wal", "--tag", "cbt-mover.io/run=run-1", "--repo", "file:///nowhere", "--json",
    ]  # fmt: skip
    from_the_cli = backup_request(build_parser().parse_args(flags), cbt_wanted=True)
    assert from_the_cli.model_copy(update={"workers": None}) == from_the_flow


def test_mover_objects_are_built_without_a_cluster():
    """The backup's claim and mover pod of a member (movers.backup.movers): the source claim's class and size,
    the plan's change source and page size, a CBT token only for CBT, the policy's placement."""
    from movers.backup.movers import mover_objects
    from movers.backup.plan import VolumePlan
    from movers.kube import manifests as m

    member = {
        "pvc": "data",
        "snapshot": "snap",
        "restore_size": None,
        "size": "1Gi",
        "storage_class": "fast",
        "handle": "h1",
        "app": "shop",
        "labels": {"app": "db"},
    }
    policy = _shop_policy()
    cbt = VolumePlan.of({"handle": "h0", "reason": "delta since b0"}, "aud", max_results=512)
    claim, pod = mover_objects("run-1", member, cbt, policy)
    assert (claim["spec"]["storageClassName"], claim["spec"]["resources"]["requests"]["storage"]) == ("fast", "1Gi")
    request = _request(pod)
    assert (request.changes.cbt_max_results, request.changes.base_handle) == (512, "h0")
    assert (request.volume.storage_class, request.volume.labels, request.snapshot.snapshot_handle) == (
        "fast",
        {"app": "db"},
        "h1",
    )
    assert any("projected" in v for v in pod["spec"]["volumes"]) and pod["spec"]["tolerations"] == [
        {"operator": "Exists"}
    ]
    assert pod["metadata"]["labels"][m.PVC_LABEL] == "data" and pod["spec"]["activeDeadlineSeconds"] == 600
    _, scan_pod = mover_objects("run-1", member, VolumePlan.of({}, None, "CBT off"), policy)
    assert _request(scan_pod).changes.source == "scan" and "--kube" not in scan_pod["spec"]["containers"][0]["args"]
    assert not any("projected" in v for v in scan_pod["spec"]["volumes"])
    assert request.changes.base_snapshot is None, "a v1beta1 service gets the handle only"

    # a v1alpha1 service (sidecar v0.1.0) names the base by its VolumeSnapshot; a base without one is no base
    base = {"handle": "h0", "reason": "delta since b0", "snapshot": "snap-b0"}
    by_name = VolumePlan.of(base, "aud", by_name=True)
    assert (by_name.change_source, by_name.base_handle, by_name.base_snapshot) == ("cbt-delta", "h0", "snap-b0")
    assert (
        by_name.why == "delta since b0; asked by its VolumeSnapshot name snap-b0 (a v1alpha1 SnapshotMetadataService)"
    )
    changes = _request(mover_objects("run-1", member, by_name, policy)[1]).changes
    assert (changes.base_snapshot, changes.base_handle) == ("snap-b0", "h0")
    nameless = VolumePlan.of({**base, "snapshot": None}, "aud", by_name=True)
    assert (nameless.change_source, nameless.base_handle, nameless.base_snapshot) == ("cbt-allocated", None, None)
    assert nameless.why.endswith("names the base by VolumeSnapshot name and that backup recorded none"), nameless.why


def test_the_movers_result_is_typed_and_keeps_what_it_does_not_name():
    """movers.backup.request.BackupResult: what the flow reads of a mover's result line (the class the mover
    wrote it with); a line without the backup it committed is refused (the flow then fails the volume without a
    retry, which would commit another)."""
    from pydantic import ValidationError

    from movers.backup.request import BackupResult

    line = {"backup_id": "b1", "volume": "ns/a", "mode": "incremental", "change_source": "scan"}
    line |= {"cbt_fallback": "CBT down"}
    res = BackupResult.model_validate(line | {"read_bytes": 4096, "cbt": {"messages": 3}, "newer": 1})
    assert (res.change_source, res.cbt_fallback, res.read_bytes, res.stored_bytes) == ("scan", "CBT down", 4096, 0)
    assert res.cbt is not None and res.cbt.messages == 3 and res.model_extra == {"newer": 1}
    assert "cbt" not in BackupResult.model_validate(line).as_output()
    with pytest.raises(ValidationError, match="backup_id"):
        BackupResult.model_validate({k: v for k, v in line.items() if k != "backup_id"})
