"""The scheduler's matching rules against the cases component-helpers' own tests pin down: tolerations,
node selector requirements and terms, PV node affinity, allowed topologies, the volume binder's
classification of claims and its choice of static volumes."""

from __future__ import annotations

from localcluster.controllers.scheduling import (
    label_selector_ok,
    match_terms,
    node_affinity_ok,
    pv_affinity_ok,
    requirement_ok,
    tolerates,
    topology_ok,
    untolerated_taint,
)
from localcluster.controllers.volumebinding import (
    REASON_BIND_CONFLICT,
    REASON_NODE_CONFLICT,
    REASON_NOT_ENOUGH_SPACE,
    REASON_PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    Snapshot,
    filter_node,
    prefilter,
)

TAINT = {"key": "node.kubernetes.io/os", "value": "windows", "effect": "NoSchedule"}


def test_tolerations():
    assert tolerates({"operator": "Exists"}, TAINT)  # empty key and Exists: every taint
    assert tolerates({"key": "node.kubernetes.io/os", "operator": "Exists"}, TAINT)
    assert tolerates({"key": "node.kubernetes.io/os", "value": "windows"}, TAINT)  # no operator: Equal
    assert not tolerates({"key": "node.kubernetes.io/os", "value": "linux", "operator": "Equal"}, TAINT)
    assert not tolerates({"key": "node.kubernetes.io/os", "operator": "Exists", "effect": "NoExecute"}, TAINT)
    assert not tolerates({"key": "other", "operator": "Exists"}, TAINT)
    # Toleration.ToleratesTaint compares values when the key is empty (validation forbids Equal without a key)
    assert tolerates({"value": "windows"}, TAINT) and not tolerates({"value": "linux"}, TAINT)
    prefer = {"key": "k", "effect": "PreferNoSchedule"}
    assert untolerated_taint([prefer, TAINT], []) == TAINT  # PreferNoSchedule never filters
    assert untolerated_taint([prefer], []) is None


def test_requirements_and_terms():
    labels = {"zone": "a", "size": "10"}
    assert requirement_ok({"key": "zone", "operator": "NotIn", "values": ["b"]}, labels)
    assert requirement_ok({"key": "missing", "operator": "NotIn", "values": ["b"]}, labels)  # absent: not in
    assert not requirement_ok({"key": "missing", "operator": "In", "values": ["b"]}, labels)
    assert requirement_ok({"key": "size", "operator": "Gt", "values": ["9"]}, labels)
    assert not requirement_ok({"key": "zone", "operator": "Gt", "values": ["1"]}, labels)  # not an integer
    assert requirement_ok({"key": "size", "operator": "Gt", "values": ["x"]}, labels) is None  # malformed
    assert requirement_ok({"key": "zone", "operator": "In", "values": []}, labels) is None
    assert requirement_ok({"key": "zone", "operator": "Exists", "values": ["a"]}, labels) is None
    assert not match_terms([], labels) and not match_terms([{}], labels)  # nothing matches no terms
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
    ]
    assert match_terms(terms, labels)  # ORed
    by_name = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    assert match_terms(by_name, labels, "n1") and not match_terms(by_name, labels, "n2")
    assert match_terms(by_name, labels)  # no node name (PV affinity): fields are not looked at
    assert not match_terms(
        [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}], labels, "a"
    )


def test_pod_node_affinity_and_pv_affinity():
    node = {"metadata": {"name": "n1", "labels": {"zone": "a", "disk": "ssd"}}}
    pod = {
        "spec": {
            "nodeSelector": {"disk": "ssd"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            },
        }
    }
    assert node_affinity_ok(pod, node)
    pod["spec"]["nodeSelector"] = {"disk": "hdd"}  # both must hold
    assert not node_affinity_ok(pod, node)
    pv = {
        "spec": {
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]
                }
            }
        }
    }
    assert not pv_affinity_ok(pv, node["metadata"]["labels"]) and pv_affinity_ok({"spec": {}}, {})
    allowed = [{"matchLabelExpressions": [{"key": "zone", "values": ["b", "c"]}]}]
    assert topology_ok(None, {}) and topology_ok(allowed, {"zone": "c"}) and not topology_ok(allowed, {"zone": "a"})
    assert label_selector_ok({"matchLabels": {"tier": "db"}}, {"tier": "db"})
    assert not label_selector_ok({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {})


def _claim(name, cls=None, volume=None, bound=False, annotations=None, size="1Gi"):
    md = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": dict(annotations or {})}
    if bound:
        md["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, "storageClassName": cls}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": md, "spec": spec}


def _pod(*claims):
    return {"spec": {"volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]}}


def _snap(pvcs=(), pvs=(), classes=(), csinodes=(), drivers=()):
    return Snapshot(
        [],
        [],
        {c["metadata"]["name"]: c for c in pvcs},
        {p["metadata"]["name"]: p for p in pvs},
        {c["metadata"]["name"]: c for c in classes},
        {c["metadata"]["name"]: c for c in csinodes},
        set(drivers),
    )


def _pv(name, node=None, cls="local", size="1Gi", phase="Available", claim_ref=None):
    spec = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls}
    if node:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
                ]
            }
        }
    if claim_ref:
        spec["claimRef"] = claim_ref
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


NODE_A = {"metadata": {"name": "a", "labels": {"kubernetes.io/hostname": "a", "zone": "z1"}}}
WFFC = {"metadata": {"name": "wffc"}, "provisioner": "csi.example", "volumeBindingMode": "WaitForFirstConsumer"}
LOCAL = {
    "metadata": {"name": "local"},
    "provisioner": "kubernetes.io/no-provisioner",
    "volumeBindingMode": "WaitForFirstConsumer",
}
IMMEDIATE = {"metadata": {"name": "imm"}, "provisioner": "csi.example", "volumeBindingMode": "Immediate"}


def test_prefilter_sorts_claims():
    snap = _snap(
        [_claim("b", "imm", "pv-b", bound=True), _claim("w", "wffc"), _claim("i", "imm")], classes=[WFFC, IMMEDIATE]
    )
    assert prefilter(_pod("b", "w"), snap)[0].delayed[0]["metadata"]["name"] == "w"
    assert prefilter(_pod("b", "w", "i"), snap) == (None, UNBOUND_IMMEDIATE)
    pre_bound = _snap([_claim("p", "wffc", volume="pv-x")], classes=[WFFC])  # names its volume: immediate
    assert prefilter(_pod("p"), pre_bound) == (None, UNBOUND_IMMEDIATE)
    assert prefilter(_pod("nope"), snap) == (None, 'persistentvolumeclaim "nope" not found')


def test_filter_reasons_and_static_choice():
    bound = _claim("b", "local", "pv-b", bound=True)
    snap = _snap([bound], [_pv("pv-b", node="other", phase="Bound")], [LOCAL])
    claims, _ = prefilter(_pod("b"), snap)
    assert filter_node(claims, NODE_A, snap)[0] == [REASON_NODE_CONFLICT]
    missing = _snap([bound], [], [LOCAL])
    assert filter_node(prefilter(_pod("b"), missing)[0], NODE_A, missing)[0] == [REASON_PV_NOT_EXIST]
    # the smallest free PV that fits the node; a PV of another node or too small is passed over
    claim = _claim("c", "local", size="2Gi")
    pvs = [
        _pv("big", "a", size="10Gi"),
        _pv("fits", "a", size="3Gi"),
        _pv("small", "a", size="1Gi"),
        _pv("elsewhere", "b", size="2Gi"),
        _pv("taken", "a", size="2Gi", claim_ref={"name": "x", "namespace": "ns"}),
    ]
    snap = _snap([claim], pvs, [LOCAL])
    reasons, volumes = filter_node(prefilter(_pod("c"), snap)[0], NODE_A, snap)
    assert reasons == [] and [pv["metadata"]["name"] for pv, _ in volumes.static] == ["fits"]
    none_left = _snap([claim], pvs[2:], [LOCAL])
    assert filter_node(prefilter(_pod("c"), none_left)[0], NODE_A, none_left)[0] == [REASON_BIND_CONFLICT]
    # provisioning: a selected node elsewhere, a driver not running here
    elsewhere = _snap([_claim("w", "wffc", annotations={"volume.kubernetes.io/selected-node": "b"})], classes=[WFFC])
    assert filter_node(prefilter(_pod("w"), elsewhere)[0], NODE_A, elsewhere)[0] == [REASON_BIND_CONFLICT]
    no_plugin = _snap([_claim("w", "wffc")], classes=[WFFC], drivers=["csi.example"])
    assert filter_node(prefilter(_pod("w"), no_plugin)[0], NODE_A, no_plugin)[0] == [REASON_NOT_ENOUGH_SPACE]
    csinode = {"metadata": {"name": "a"}, "spec": {"drivers": [{"name": "csi.example", "topologyKeys": ["zone"]}]}}
    plugin = _snap([_claim("w", "wffc")], classes=[WFFC], csinodes=[csinode], drivers=["csi.example"])
    reasons, volumes = filter_node(prefilter(_pod("w"), plugin)[0], NODE_A, plugin)
    assert reasons == [] and [c["metadata"]["name"] for c in volumes.provision] == ["w"]
