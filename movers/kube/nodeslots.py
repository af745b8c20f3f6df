"""The per-node slot gate of mover and writer pods: the node's slot is taken once the scheduler has picked the
node, and before the pod's mover container may start.

Why this design (and not another), on a real cluster:

* The node a mover pod runs on is not known before it is scheduled: its reader claim is a clone of a snapshot
  in a WaitForFirstConsumer class, so the volume (and its topology) exists only once the scheduler has chosen a
  node for the pod (it then sets ``volume.kubernetes.io/selected-node`` and the provisioner creates the volume
  there). Choosing the node ourselves (a ``nodeAffinity`` to a node with a free slot, e.g. added to a pod held
  by a scheduling gate, ``spec.schedulingGates``, KEP-3521/KEP-3838) would re-implement the scheduler's filters
  (taints, resources, the class's topology, the driver's nodes) and can pin a pod to a node it can never run on.
* A scheduling gate holds a pod *before* scheduling: while gated there is no node to count against.
* So the scheduler schedules the pod as usual, and the pod's first container is the slot gate: an init
  container (``SLOT_GATE``, no volume, no device, no token) that waits until the pod's annotation
  ``SLOT_ANNOTATION`` is ``granted``, read from a downwardAPI volume (the kubelet rewrites such a file when the
  pod's annotations change). The flow waits for ``spec.nodeName``, takes the slot of that node (a Prefect global
  concurrency limit, ``tasks.caps``), then grants the pod (``movers.kube.pods.grant_slot``, which also sets the
  pod's ``activeDeadlineSeconds``: it counts from the pod's start, and the wait must not use it up); the mover
  container starts only after that, and the flow releases the slot when the pod has finished.

What it costs: a pod waiting for its node's slot is scheduled, and its reader volume provisioned and attached
(it counts against the node's attach limit while it waits). That number is bounded by the cluster-wide cap,
which is taken before the pod (and its claim) is created. A pod never waits for a node it cannot run on.

No Prefect, no API calls here (pure builders): ``movers.kube.pods.run_scheduled`` calls the caller's
``NodeSlot`` with the node's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

SLOT_ANNOTATION = "cbt-mover.io/node-slot"  # "granted" once the flow holds the pod's node slot
GRANTED = "granted"
SLOT_GATE = "node-slot"  # the init container's name
SLOT_VOLUME = "node-slot"
SLOT_DIR = "/etc/cbt-mover/node-slot"
SLOT_FILE = f"{SLOT_DIR}/state"
POLL_S = 1

# the caller's slot of a node: entered once the pod is scheduled there, left once the pod has finished
NodeSlot = Callable[[str], AbstractContextManager[Any]]


def gate_container(image: str, pull_policy: str, security_context: Mapping[str, Any]) -> dict[str, Any]:
    """The init container that holds the pod's containers until ``SLOT_ANNOTATION`` is ``granted`` (a POSIX
    shell loop over ``SLOT_FILE``; the image's shell; tiny resources)."""
    wait = f'until [ "$(cat {SLOT_FILE} 2>/dev/null)" = {GRANTED} ]; do sleep {POLL_S}; done'
    return {
        "name": SLOT_GATE,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["sh", "-c", wait],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
        "volumeMounts": [{"name": SLOT_VOLUME, "mountPath": SLOT_DIR, "readOnly": True}],
        "securityContext": dict(security_context),
    }


def gate_volume() -> dict[str, Any]:
    """The downwardAPI volume with the pod's ``SLOT_ANNOTATION`` as file ``state``."""
    field = f"metadata.annotations['{SLOT_ANNOTATION}']"
    return {"name": SLOT_VOLUME, "downwardAPI": {"items": [{"path": "state", "fieldRef": {"fieldPath": field}}]}}


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` (a manifest) waits for its node's slot."""
    return any(c.get("name") == SLOT_GATE for c in (pod.get("spec") or {}).get("initContainers") or [])
