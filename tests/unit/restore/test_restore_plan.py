"""The pure parts of ``movers.restore``: names and labels whatever the PVC name, the hand-over's fsType,
the writer's placement from the source volume's recorded node affinity, and the permissions the preflight
asks for (compared with the shipped controller role)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from movers import restore as r
from movers.kube import manifests as m
from movers.kube import podspec
from movers.policy.model import MoverSettings
from movers.restore.live import CbtPath
from movers.restore.request import REQUEST_ENV, CbtDelta, RestoreRequest

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
RUN = "restore-0123456789abcdef"
NODE_B = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.hostpath.csi/node", "operator": "In", "values": ["node-b"]}]}
    ]
}


def test_names_and_labels_are_valid_and_distinct_whatever_the_pvc_name():
    prefix = "orders.archive-" + "x" * 50
    longest = "a" * 240 + ".b" * 6  # 252 characters: the write claim cannot just add a suffix
    pvcs = ["data", f"{prefix}-one", f"{prefix}-two", longest, longest[:-2]]
    pods = [r.pod_name(RUN, p) for p in pvcs]
    claims = [r.write_claim_name(p, RUN) for p in pvcs]
    assert pods[0] == f"{RUN}-data" and claims[0] == f"data-{RUN}", "short names stay readable"
    assert len(set(pods)) == len(set(claims)) == len(pvcs), "names cut to fit stay distinct"
    for pod in pods:
        assert len(pod) <= 63 and DNS_LABEL.fullmatch(pod), pod
    for pvc, claim in zip(pvcs, claims, strict=True):
        assert claim != pvc and len(claim) <= 253 and DNS_SUBDOMAIN.fullmatch(claim), claim
    for pvc in pvcs:
        labels = r.labels_of(RUN, pvc, app="shop")
        assert all(len(v) <= 63 and LABEL_VALUE.fullmatch(v) for v in labels.values()), labels
        assert labels[r.PVC_LABEL] == m.label_value(pvc) and labels[m.PART_OF_LABEL] == "shop"
    assert r.labels_of(RUN, "data")[r.PVC_LABEL] == "data" and m.PART_OF_LABEL not in r.labels_of(RUN, "data")


def test_the_hand_over_keeps_the_recorded_fs_type_and_falls_back_to_the_class():
    xfs_class = {"metadata": {"name": "fast"}, "parameters": {"csi.storage.k8s.io/fstype": "xfs"}}
    old_class = {"metadata": {"name": "old"}, "parameters": {"FSType": "ext3"}}
    plain = {"metadata": {"name": "plain"}, "parameters": {"type": "ssd"}}
    assert r.handover_fs_type("ntfs", xfs_class) == ("ntfs", None), "the recorded fsType wins over the class"
    fs, note = r.handover_fs_type(None, xfs_class)
    assert fs == "xfs" and "no fsType recorded" in note and "fast" in note
    assert r.handover_fs_type(None, old_class)[0] == "ext3", "the deprecated key, any case, as the provisioner"
    fs, note = r.handover_fs_type(None, plain)
    assert fs == "ext4" and "names none" in note


def test_the_writer_prefers_the_source_volume_s_nodes_besides_its_own_affinity():
    own = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["backup"]}]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}
            ],
        }
    }
    got = r.writer_affinity(NODE_B, own)
    node = got["nodeAffinity"]
    assert (
        node["requiredDuringSchedulingIgnoredDuringExecution"]
        == own["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    ), "the settings' own requirement stays"
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == [
        own["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0],
        {"weight": 100, "preference": NODE_B["nodeSelectorTerms"][0]},
    ]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in r.writer_affinity(NODE_B, None)["nodeAffinity"]
    assert r.writer_affinity(None, None) is None and r.writer_affinity(None, own) == own
    assert own["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 5, "not mutated"


def test_a_volume_restored_elsewhere_is_noted():
    def pv(selector):
        return {"spec": {"nodeAffinity": {"required": selector}} if selector else {}}

    node_a = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.hostpath.csi/node", "operator": "In", "values": ["node-a"]}]}
        ]
    }
    assert r.placement_note(NODE_B, pv(NODE_B)) is None
    assert r.placement_note(NODE_B, pv(None)) is None, "a volume reachable from every node is fine"
    assert r.placement_note(None, pv(node_a)) is None, "nothing recorded: nothing to compare"
    note = r.placement_note(NODE_B, pv(node_a))
    assert "topology.hostpath.csi/node In [node-a]" in note and "[node-b]" in note


@pytest.mark.parametrize("scale_down", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("source", ["repository", "auto", "snapshot"])
def test_the_preflight_asks_for_exactly_what_the_shipped_controller_role_grants(source, in_place, scale_down):
    from localcluster.shipped_rbac import controller_role

    role = controller_role()
    granted = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((verb, group, resource, tuple(rule.get("resourceNames") or ())))
    options = r.RestoreOptions(None, False, None, "cbt-mover-repo", "cbt-mover", source, in_place, scale_down)
    checks = r.required_permissions("shop", options)
    missing = []
    for c in checks:
        resource = c.resource + (f"/{c.subresource}" if c.subresource else "")
        if not ((c.verb, c.group, resource, ()) in granted or (c.verb, c.group, resource, (c.name,)) in granted):
            missing.append(c.describe())
    assert missing == [], "the restore needs what the shipped role does not grant"
    assert any(c.resource == "persistentvolumes" and c.verb == "create" for c in checks)
    reads_snapshots = any(c.resource == "volumesnapshotcontents" and c.verb == "patch" for c in checks)
    assert reads_snapshots == (source != "repository" or in_place), "the kept snapshots only when they may be used"
    snapshots_live = any(c.resource == "volumesnapshots" and c.verb == "create" for c in checks)
    asks_cbt = any(c.resource == "snapshotmetadataservices" for c in checks)
    assert snapshots_live == asks_cbt == in_place, "the live claims' snapshots and CBT only in place"
    scales = any(c.resource == "deployments" and c.subresource == "scale" and c.verb == "patch" for c in checks)
    assert scales == scale_down, "the workloads only when scale_down is asked"


@pytest.mark.parametrize("pvc", ["data", "a" * 253])
def test_target_round_trips_through_plain_data(pvc):
    t = r.Target(
        pvc,
        f"shop/{pvc}",
        "20260101T000000000000Z-abcdef",
        1 << 24,
        "fast",
        "Filesystem",
        r.write_claim_name(pvc, RUN),
        False,
        ("a note",),
        "xfs",
        NODE_B,
        "shop",
    )
    assert r.Target.from_dict(t.to_dict()) == t
    by_cbt = dataclasses.replace(t, in_place=True, cbt=CbtPath("handle-1", "aud", "csi-snapclass", "snap-1"))
    assert r.Target.from_dict(by_cbt.to_dict()) == by_cbt


def test_a_writer_in_place_by_cbt_asks_the_service_as_a_mover_does_and_the_cli_builds_its_request():
    """In place by CBT the writer pod gets what a backup mover gets to ask the SnapshotMetadata service (its
    ServiceAccount token for ``--kube``, a projected token of the service's audience named by file, never by value)
    and the delta between the backup's snapshot and the live claim's; the CLI's flags build the same request."""
    from movers.cli import build_parser
    from movers.cli.restore import restore_request

    t = r.Target("data", "shop/data", "20260101T000000000000Z-abcdef", 1 << 24, "fast", "Block", "data", False)
    t = dataclasses.replace(t, in_place=True, cbt=CbtPath("handle-1", "aud", "csi-snapclass"))
    delta = CbtDelta(namespace="restored", snapshot="live-data", base_handle="handle-1")
    pod = r.writer_pod(r.WriterRun("restored", RUN, MoverSettings(image="cbt-mover"), "cbt-mover-repo"), t, (), delta)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is True
    [token] = [v["projected"]["sources"][0]["serviceAccountToken"] for v in spec["volumes"] if "projected" in v]
    assert token["audience"] == "aud"
    args = spec["containers"][0]["args"]
    assert args[:4] == ["restore", "--request-env", REQUEST_ENV, "--kube"] and m.CBT_TOKEN_FILE in args
    flags = [
        "restore", "--repo", "file:///nowhere", "--volume", "shop/data", "--backup", t.backup_id,
        "--device", "/dev/xvda", "--verify-device", "--overwrite", "if-changed",
        "--namespace", "restored", "--snapshot", "live-data", "--base-handle", "handle-1",
    ]  # fmt: skip
    assert restore_request(build_parser().parse_args(flags)) == _request(pod)
    assert _request(pod).cbt == delta
    assert _request(r.writer_pod(r.WriterRun("restored", RUN, MoverSettings(image="cbt-mover"), "x"), t)).cbt is None


def test_the_writer_pod_mounts_no_token_and_carries_the_run_s_labels_and_placement():
    pvc = "orders.archive-" + "x" * 60
    t = r.Target(
        pvc,
        f"shop/{pvc}",
        "20260101T000000000000Z-abcdef",
        1 << 24,
        "fast",
        "Block",
        pvc,
        False,
        node_affinity=NODE_B,
        app="shop",
    )
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "backup", "effect": "NoSchedule"}]
    writer = MoverSettings(image="cbt-mover", tolerations=tolerations)
    pod = r.writer_pod(r.WriterRun("restored", RUN, writer, "cbt-mover-repo"), t)
    spec, labels = pod["spec"], pod["metadata"]["labels"]
    assert spec["automountServiceAccountToken"] is False and len(spec["volumes"]) == 1, "no API token"
    assert "readOnly" not in spec["volumes"][0]["persistentVolumeClaim"], "a writer writes its claim"
    assert spec["tolerations"] == tolerations and spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["affinity"] == r.writer_affinity(NODE_B, None)
    assert pod["metadata"]["name"] == r.pod_name(RUN, pvc)
    assert labels == {
        m.RUN_LABEL: RUN,
        m.NAME_LABEL: "cbt-mover",
        m.MANAGED_BY_LABEL: "cbt-mover",
        m.INSTANCE_LABEL: RUN,
        m.COMPONENT_LABEL: m.WRITER,
        m.PART_OF_LABEL: "shop",
        r.PVC_LABEL: m.label_value(pvc),
    }
    assert spec["containers"][0]["args"][:3] == ["restore", "--request-env", REQUEST_ENV]
    assert _request(pod) == RestoreRequest(
        volume=f"shop/{pvc}", backup=t.backup_id, device=podspec.DEVICE_PATH, verify_device=True
    )
    assert spec["containers"][0]["volumeDevices"][0]["devicePath"] == podspec.DEVICE_PATH


def _request(pod: dict) -> RestoreRequest:
    """The ``RestoreRequest`` a writer pod carries (``movers.restore.request.REQUEST_ENV``), read back by its class."""
    [value] = [e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == REQUEST_ENV]
    return RestoreRequest.model_validate_json(value)


@pytest.mark.parametrize("verify", [True, False])
def test_a_flow_and_the_cli_build_the_same_restore_request(verify):
    """The writer pod's request (the flow: a planned target's pod, its env value decoded) is the request the
    operator's CLI builds from the equivalent flags: one contract across the pod."""
    from movers.cli import build_parser
    from movers.cli.restore import restore_request

    t = r.Target("data", "shop/data", "20260101T000000000000Z-abcdef", 1 << 24, "fast", "Block", "data", False)
    run = r.WriterRun("restored", RUN, MoverSettings(image="cbt-mover"), "cbt-mover-repo", verify_device=verify)
    pod = r.writer_pod(run, t)
    flags = [
        "restore", "--repo", "file:///nowhere", "--volume", "shop/data", "--backup", t.backup_id,
        "--device", "/dev/xvda", *(["--verify-device"] if verify else []), "--json",
    ]  # fmt: skip
    assert restore_request(build_parser().parse_args(flags)) == _request(pod)


def test_movers_and_writers_share_one_retry_rule():
    """A failed pod is retried unless its exit status is a mover exit code a new pod would meet again; the
    pod's status is ``pod_exit_code`` (``exit_code`` stays the error's own, as for every MoverError)."""
    from movers import errors
    from movers.backup.movers import MoverPodFailed
    from movers.kube.pods import PodFailed
    from movers.restore.writers import WriterError

    for cls in (WriterError, MoverPodFailed):
        assert [cls("m", code).retriable for code in (None, 1, 5, 137)] == [True] * 4, cls
        assert not any(cls("m", code).retriable for code in PodFailed.PERMANENT_EXIT_CODES), cls
        assert cls("m", 6).pod_exit_code == 6 and cls("m", 6).exit_code == errors.EXIT_INTERNAL
