"""The nodes of the local cluster: what each kubelet registers (a test double, never the product).

``NodeSpec(name, os, zone, labels, taints)``: a node's operating system (``linux`` or ``windows``),
its zone (``topology.kubernetes.io/zone``), extra labels and taints (``Taint(key, value, effect)``).
``node_labels(arch)`` is the full label set a kubelet registers: ``kubernetes.io/{os,arch,hostname}``,
their ``beta.`` twins, the zone, then the extra labels. ``csi_drivers()`` names the CSI node plugins
running on the node: every driver of ``CSI_TOPOLOGY`` whose topology key is among the node's labels
(the kubelet publishes them in the node's CSINode object and its ``csi.volume.kubernetes.io/nodeid``
annotation, as the kubelet's plugin registration does).

``DEFAULT_NODES``: the strict cluster's nodes (two Linux nodes in two zones and a tainted Windows node):

- ``node-a``: linux, zone-a, ``topology.hostpath.csi/node=node-a``, ``topology.disk.csi.local/zone=zone-a``;
- ``node-b``: linux, zone-b, ``topology.hostpath.csi/node=node-b``, ``topology.disk.csi.local/zone=zone-b``;
- ``win-a``: windows, zone-a, ``node.kubernetes.io/windows-build=10.0.20348``,
  ``topology.disk.csi.local/zone=zone-a`` (no hostpath node plugin on Windows), tainted
  ``node.kubernetes.io/os=windows:NoSchedule``.

``LOCAL_NODE``: the one Linux node of a kubelet started alone (``local-node``, no zone, no drivers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ZONE_LABEL = "topology.kubernetes.io/zone"
WINDOWS_TAINT_KEY = "node.kubernetes.io/os"
WINDOWS_BUILD_LABEL = "node.kubernetes.io/windows-build"

# CSI driver -> the topology key its node plugin reports (NodeGetInfo's accessible topology)
CSI_TOPOLOGY: Mapping[str, str] = {
    "hostpath.csi.k8s.io": "topology.hostpath.csi/node",
    "disk.csi.local": "topology.disk.csi.local/zone",
}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def as_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class NodeSpec:
    name: str
    os: str = "linux"
    zone: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        if self.os not in ("linux", "windows"):
            raise ValueError(f"node {self.name}: os must be linux or windows, not {self.os!r}")

    def node_labels(self, arch: str) -> dict[str, str]:
        out = {
            "kubernetes.io/os": self.os,
            "kubernetes.io/arch": arch,
            "kubernetes.io/hostname": self.name,
            "beta.kubernetes.io/os": self.os,
            "beta.kubernetes.io/arch": arch,
        }
        if self.zone:
            out[ZONE_LABEL] = self.zone
        out.update(self.labels)
        return out

    def taint_dicts(self) -> list[dict[str, Any]]:
        return [t.as_dict() for t in self.taints]

    def csi_drivers(self) -> dict[str, str]:
        """driver -> topology key, for the CSI node plugins running here."""
        return {driver: key for driver, key in CSI_TOPOLOGY.items() if key in self.labels}


def _linux(name: str, zone: str) -> NodeSpec:
    return NodeSpec(name, "linux", zone, {"topology.hostpath.csi/node": name, "topology.disk.csi.local/zone": zone})


DEFAULT_NODES: tuple[NodeSpec, ...] = (
    _linux("node-a", "zone-a"),
    _linux("node-b", "zone-b"),
    NodeSpec(
        "win-a",
        "windows",
        "zone-a",
        {WINDOWS_BUILD_LABEL: "10.0.20348", "topology.disk.csi.local/zone": "zone-a"},
        (Taint(WINDOWS_TAINT_KEY, "windows", "NoSchedule"),),
    ),
)

LOCAL_NODE = NodeSpec("local-node")


def node_spec(node: str | NodeSpec) -> NodeSpec:
    """A NodeSpec from a NodeSpec or a name (a plain Linux node)."""
    return node if isinstance(node, NodeSpec) else NodeSpec(node)
