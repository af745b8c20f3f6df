"""The workload controllers of kube-controller-manager for apps/v1 (``pkg/controller/deployment``,
``replicaset`` and ``statefulset``), as a test double: one ``AppsController`` reconciling the three kinds.

- Deployment -> ReplicaSet: the template's ReplicaSet is ``<deployment>-<pod-template-hash>`` (the hash of the
  template, ``rand.SafeEncodeString`` of an FNV-32a as upstream's ``ComputeHash``; its labels, selector and pod
  template carry ``pod-template-hash``; annotations ``deployment.kubernetes.io/revision``, ``desired-replicas``,
  ``max-replicas``), owned by the Deployment (``controller: true``, ``blockOwnerDeletion: true``) and given the
  Deployment's replicas; the ReplicaSets of older templates are scaled to 0 (a rollout here replaces the pods at
  once rather than by maxSurge/maxUnavailable steps). The Deployment's status sums its ReplicaSets'
  (``replicas``, ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``, ``unavailableReplicas``,
  ``observedGeneration``) with the Available and Progressing conditions.
- ReplicaSet -> Pods: ``<replicaset>-<5 random>`` (generateName), owned by it; missing ones are created, surplus
  ones deleted in upstream's order (unscheduled, then pending, then not ready, then the newest first); Succeeded
  and Failed pods and pods being deleted (terminating) do not count (``FilterActivePods``), in status neither.
  Status: ``replicas``, ``fullyLabeledReplicas``, ``readyReplicas``,
  ``availableReplicas``, ``observedGeneration``.
- StatefulSet -> Pods ``<name>-<ordinal>`` (labels ``statefulset.kubernetes.io/pod-name``,
  ``apps.kubernetes.io/pod-index``, ``controller-revision-hash``; hostname and subdomain set), each claim of
  ``volumeClaimTemplates`` created first as ``<template>-<name>-<ordinal>`` and kept when the set scales down
  (whenScaled Retain, the default; Delete makes the set own them when they are condemned). OrderedReady (the
  default): one pod at a time, the next ordinal only once every lower one is Running and Ready; on scale down the
  highest ordinal first, one at a time, each only while every lower one is Running and Ready. Parallel: all at
  once. A Failed pod is deleted and made again. A terminating pod blocks OrderedReady progress, and its ordinal is
  made again only once it is gone. Status: ``replicas`` (terminating pods included, as upstream),
  ``readyReplicas``, ``currentReplicas`` and ``updatedReplicas`` (without terminating pods), ``availableReplicas``,
  ``currentRevision``/``updateRevision``, ``observedGeneration``.
  (ControllerRevisions are not served here: a template change replaces no running pod.)

Scale-down deletes pods through the API, as upstream does; the kubelet terminates them within their grace period.
Simplified: a ready pod counts as available at once (minReadySeconds is not waited out), and old ReplicaSets beyond
revisionHistoryLimit are not pruned.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from localcluster.controllers.kube import DEPLOYMENT, POD, PVC, REPLICASET, STATEFULSET, Obj, Res, rfc3339
from localcluster.controllers.runtime import Controller, Key, WatchSpec

TEMPLATE_HASH = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
POD_NAME = "statefulset.kubernetes.io/pod-name"
POD_INDEX = "apps.kubernetes.io/pod-index"
REVISION_HASH = "controller-revision-hash"
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # rand.SafeEncodeString's alphabet
_KINDS = {"Deployment": DEPLOYMENT, "ReplicaSet": REPLICASET, "StatefulSet": STATEFULSET}


def template_hash(template: Obj, collision_count: int = 0) -> str:
    """A pod template's ``pod-template-hash``: ``SafeEncodeString`` of the decimal FNV-32a of the template."""
    h = 0x811C9DC5
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    data += str(collision_count).encode() if collision_count else b""
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in str(h))


def controller_of(obj: Obj) -> Obj | None:
    """The ownerReference with ``controller: true``, or None."""
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def _owner_ref(res: Res, obj: Obj) -> Obj:
    md = obj["metadata"]
    return {
        "apiVersion": res.api_version,
        "kind": res.kind,
        "name": md["name"],
        "uid": md["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_ready(pod: Obj) -> bool:
    """Running with condition Ready True (what ``podutil.IsPodReady`` reads)."""
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def _active(pod: Obj) -> bool:
    """``controller.IsPodActive``: not Succeeded, not Failed, not being deleted."""
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def deletion_order(pods: list[Obj]) -> list[Obj]:
    """Upstream's ``ActivePods`` order for a scale down: unscheduled, pending, not ready before the rest; the
    newest first among equals."""
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)

    def rank(pod: Obj) -> tuple:
        phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get((pod.get("status") or {}).get("phase"), 1)
        return (bool((pod.get("spec") or {}).get("nodeName")), phase, is_ready(pod))

    return sorted(newest_first, key=rank)


class AppsController(Controller):
    """Deployments, ReplicaSets and StatefulSets (see the module doc); keys are (kind, namespace, name)."""

    name = "kube-controller-manager-apps"

    def watches(self) -> list[WatchSpec]:
        def own(kind: str):
            return lambda _t, obj: [(kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])]

        def owner(kinds: tuple[str, ...]):
            def keys(_t: str, obj: Obj) -> Iterable[Key]:
                ref = controller_of(obj)
                if ref is not None and ref.get("kind") in kinds:
                    yield (ref["kind"], obj["metadata"].get("namespace", ""), ref["name"])

            return keys

        def replica_set(t: str, obj: Obj) -> Iterable[Key]:
            yield from own("ReplicaSet")(t, obj)
            yield from owner(("Deployment",))(t, obj)

        return [
            WatchSpec(DEPLOYMENT, own("Deployment")),
            WatchSpec(REPLICASET, replica_set),
            WatchSpec(STATEFULSET, own("StatefulSet")),
            WatchSpec(POD, owner(("ReplicaSet", "StatefulSet"))),
        ]

    def reconcile(self, key: Key) -> float | None:
        kind, namespace, name = key
        obj = self.kube.get(_KINDS[kind], name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return None
        if kind == "Deployment":
            return self._deployment(obj)
        if kind == "ReplicaSet":
            return self._replica_set(obj)
        return self._stateful_set(obj)

    # ---- helpers ---------------------------------------------------------------------------------

    def _owned(self, res: Res, owner: Obj) -> list[Obj]:
        md = owner["metadata"]
        items, _ = self.kube.list(res, md["namespace"])
        return [o for o in items if (controller_of(o) or {}).get("uid") == md["uid"]]

    def _set_status(self, res: Res, obj: Obj, status: Obj) -> None:
        current = obj.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            md = obj["metadata"]
            self.kube.patch(res, md["name"], {"status": status}, md["namespace"], status=True)

    # ---- Deployment --------------------------------------------------------------------------------

    def _deployment(self, d: Obj) -> float | None:
        md, spec = d["metadata"], d["spec"]
        replicas = int(spec.get("replicas", 1))
        template = spec["template"]
        pod_hash = template_hash(template, int((d.get("status") or {}).get("collisionCount") or 0))
        sets = self._owned(REPLICASET, d)
        new_name = f"{md['name']}-{pod_hash}"
        new = next((rs for rs in sets if rs["metadata"]["name"] == new_name), None)
        revisions = [int((rs["metadata"].get("annotations") or {}).get(REVISION) or 0) for rs in sets]
        revision = str(max(revisions, default=0) + (0 if new is not None else 1))
        annotations = {REVISION: revision, DESIRED: str(replicas), MAX_REPLICAS: str(replicas)}
        if new is None:
            labels = {**(template.get("metadata") or {}).get("labels", {}), TEMPLATE_HASH: pod_hash}
            selector = json.loads(json.dumps(spec["selector"]))
            selector.setdefault("matchLabels", {})[TEMPLATE_HASH] = pod_hash
            pod_template = json.loads(json.dumps(template))
            pod_template.setdefault("metadata", {})["labels"] = labels
            body = {
                "metadata": {
                    "name": new_name,
                    "namespace": md["namespace"],
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [_owner_ref(DEPLOYMENT, d)],
                },
                "spec": {
                    "replicas": replicas,
                    "minReadySeconds": spec.get("minReadySeconds", 0),
                    "selector": selector,
                    "template": pod_template,
                },
            }
            new = self.kube.create(REPLICASET, body, md["namespace"])
            sets.append(new)
        elif new["spec"].get("replicas") != replicas or any(
            (new["metadata"].get("annotations") or {}).get(k) != v for k, v in annotations.items()
        ):
            patch = {"metadata": {"annotations": annotations}, "spec": {"replicas": replicas}}
            new = self.kube.patch(REPLICASET, new_name, patch, md["namespace"])
        for rs in sets:
            if rs["metadata"]["name"] != new_name and rs["spec"].get("replicas"):
                self.kube.patch(REPLICASET, rs["metadata"]["name"], {"spec": {"replicas": 0}}, md["namespace"])
        statuses = [rs.get("status") or {} for rs in sets]
        available = sum(int(s.get("availableReplicas") or 0) for s in statuses)
        status = {
            "observedGeneration": md.get("generation", 1),
            "replicas": sum(int(s.get("replicas") or 0) for s in statuses),
            "updatedReplicas": int((new.get("status") or {}).get("replicas") or 0),
            "readyReplicas": sum(int(s.get("readyReplicas") or 0) for s in statuses),
            "availableReplicas": available,
            "unavailableReplicas": max(replicas - available, 0),
            "conditions": self._conditions(d, available >= replicas, new_name),
        }
        self._set_status(DEPLOYMENT, d, status)
        return None

    @staticmethod
    def _conditions(d: Obj, available: bool, rs: str) -> list[Obj]:
        old = {c.get("type"): c for c in (d.get("status") or {}).get("conditions") or []}
        now = rfc3339(time.time())
        wanted = [
            (
                "Available",
                "True" if available else "False",
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            ),
            ("Progressing", "True", "NewReplicaSetAvailable", f'ReplicaSet "{rs}" has successfully progressed.'),
        ]
        out = []
        for kind, status, reason, message in wanted:
            prior = old.get(kind)
            if prior and (prior.get("status"), prior.get("reason")) == (status, reason):
                out.append(prior)
            else:
                out.append(
                    {
                        "type": kind,
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastUpdateTime": now,
                        "lastTransitionTime": now,
                    }
                )
        return out

    # ---- ReplicaSet ----------------------------------------------------------------------------------

    def _replica_set(self, rs: Obj) -> float | None:
        md, spec = rs["metadata"], rs["spec"]
        replicas = int(spec.get("replicas", 1))
        pods = [p for p in self._owned(POD, rs) if _active(p)]
        if len(pods) < replicas:
            template = spec["template"]
            tmd = template.get("metadata") or {}
            for _ in range(replicas - len(pods)):
                body = {
                    "metadata": {
                        "generateName": f"{md['name']}-",
                        "namespace": md["namespace"],
                        "labels": dict(tmd.get("labels") or {}),
                        "ownerReferences": [_owner_ref(REPLICASET, rs)],
                    },
                    "spec": json.loads(json.dumps(template.get("spec") or {})),
                }
                if tmd.get("annotations"):
                    body["metadata"]["annotations"] = dict(tmd["annotations"])
                pods.append(self.kube.create(POD, body, md["namespace"]))
        elif len(pods) > replicas:
            doomed = deletion_order(pods)[: len(pods) - replicas]
            for pod in doomed:
                self.kube.delete(POD, pod["metadata"]["name"], md["namespace"])
            pods = [p for p in pods if p not in doomed]
        ready = sum(1 for p in pods if is_ready(p))
        labels = (spec["template"].get("metadata") or {}).get("labels") or {}
        status = {
            "replicas": len(pods),
            "fullyLabeledReplicas": sum(
                1 for p in pods if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
            ),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": md.get("generation", 1),
        }
        self._set_status(REPLICASET, rs, status)
        return None

    # ---- StatefulSet -------------------------------------------------------------------------------

    def _stateful_set(self, ss: Obj) -> float | None:
        md, spec = ss["metadata"], ss["spec"]
        ns, name = md["namespace"], md["name"]
        replicas = int(spec.get("replicas", 1))
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        parallel = spec.get("podManagementPolicy") == "Parallel"
        revision = f"{name}-{template_hash(spec['template'])}"
        pods: dict[int, Obj] = {}
        for pod in self._owned(POD, ss):
            index = (pod["metadata"].get("labels") or {}).get(POD_INDEX)
            if index is not None and index.isdigit():
                pods[int(index)] = pod
        for ordinal, pod in list(pods.items()):
            if (pod.get("status") or {}).get("phase") == "Failed" and not pod["metadata"].get("deletionTimestamp"):
                self.kube.delete(POD, pod["metadata"]["name"], ns)  # made again below, on a later pass
                del pods[ordinal]
        wanted = range(start, start + replicas)
        waiting = False
        for ordinal in wanted:
            pod = pods.get(ordinal)
            if pod is None:
                self._claims(ss, ordinal)
                pods[ordinal] = self.kube.create(POD, self._pod(ss, ordinal, revision), ns)
                if not parallel:
                    waiting = True
                    break
            elif not parallel and not (is_ready(pod) and not pod["metadata"].get("deletionTimestamp")):
                waiting = True
                break
        condemned = sorted((o for o in pods if o not in wanted), reverse=True)
        if condemned and not waiting:
            if parallel:
                for ordinal in condemned:
                    self._condemn(ss, pods[ordinal])
            elif not any(pods[o]["metadata"].get("deletionTimestamp") for o in condemned):
                self._condemn(ss, pods[condemned[0]])  # the highest first, one at a time
        # upstream's computeReplicaStatus: a terminating pod still counts in replicas (and in readyReplicas while
        # running and ready), not in currentReplicas and updatedReplicas
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in pods.values() if is_ready(p))
        status = {
            "observedGeneration": md.get("generation", 1),
            "replicas": len(pods),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "currentReplicas": len(live),
            "updatedReplicas": len(live),
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        self._set_status(STATEFULSET, ss, status)
        return None

    def _condemn(self, ss: Obj, pod: Obj) -> None:
        md = ss["metadata"]
        if ((ss["spec"].get("persistentVolumeClaimRetentionPolicy") or {}).get("whenScaled")) == "Delete":
            for claim in self._claim_names(ss, int(pod["metadata"]["labels"][POD_INDEX])):
                found = self.kube.get(PVC, claim, md["namespace"])
                if found is not None:
                    refs = [
                        *(found["metadata"].get("ownerReferences") or []),
                        _owner_ref(POD, pod) | {"controller": False},
                    ]
                    self.kube.patch(PVC, claim, {"metadata": {"ownerReferences": refs}}, md["namespace"])
        self.kube.delete(POD, pod["metadata"]["name"], md["namespace"])

    @staticmethod
    def _claim_names(ss: Obj, ordinal: int) -> list[str]:
        name = ss["metadata"]["name"]
        return [f"{t['metadata']['name']}-{name}-{ordinal}" for t in ss["spec"].get("volumeClaimTemplates") or []]

    def _claims(self, ss: Obj, ordinal: int) -> None:
        """The claims of ``volumeClaimTemplates`` for ``ordinal`` (created when missing; never adopted or changed)."""
        md, spec = ss["metadata"], ss["spec"]
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        for template, claim in zip(spec.get("volumeClaimTemplates") or [], self._claim_names(ss, ordinal), strict=True):
            if self.kube.get(PVC, claim, md["namespace"]) is not None:
                continue
            tmd = template.get("metadata") or {}
            body = {
                "metadata": {
                    "name": claim,
                    "namespace": md["namespace"],
                    "labels": {**(tmd.get("labels") or {}), **selector},
                },
                "spec": json.loads(json.dumps(template.get("spec") or {})),
            }
            if tmd.get("annotations"):
                body["metadata"]["annotations"] = dict(tmd["annotations"])
            self.kube.create(PVC, body, md["namespace"])

    def _pod(self, ss: Obj, ordinal: int, revision: str) -> Obj:
        md, spec = ss["metadata"], ss["spec"]
        name = f"{md['name']}-{ordinal}"
        template = json.loads(json.dumps(spec["template"]))
        tmd = template.get("metadata") or {}
        pod_spec = template.get("spec") or {}
        claims = {
            t["metadata"]["name"]: c
            for t, c in zip(spec.get("volumeClaimTemplates") or [], self._claim_names(ss, ordinal), strict=True)
        }
        volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") not in claims]
        volumes += [{"name": t, "persistentVolumeClaim": {"claimName": c}} for t, c in claims.items()]
        if volumes:
            pod_spec["volumes"] = volumes
        pod_spec["hostname"] = name
        if spec.get("serviceName"):
            pod_spec["subdomain"] = spec["serviceName"]
        labels = {**(tmd.get("labels") or {}), POD_NAME: name, POD_INDEX: str(ordinal), REVISION_HASH: revision}
        body = {
            "metadata": {
                "name": name,
                "namespace": md["namespace"],
                "labels": labels,
                "ownerReferences": [_owner_ref(STATEFULSET, ss)],
            },
            "spec": pod_spec,
        }
        if tmd.get("annotations"):
            body["metadata"]["annotations"] = dict(tmd["annotations"])
        return body
