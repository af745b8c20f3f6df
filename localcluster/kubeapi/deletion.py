"""Deletion and garbage collection, as the API server and the garbage collector do them.

``DeletionMixin`` is mixed into ``Rest`` and uses its ``registry``, ``store``, ``clock`` and
``to_version``; every method except ``delete``/``delete_collection`` expects the caller to hold
``store.lock``. Semantics:
- ``delete`` honours preconditions (uid, resourceVersion: 409) and ``propagationPolicy``:
  Background (default: the object goes, then its dependents), Foreground (the owner gets
  ``deletionTimestamp`` and the ``foregroundDeletion`` finalizer and goes once its dependents are
  gone) or Orphan (the dependents lose their reference to it);
- pods are deleted gracefully (``graceful.py``): ``deletionTimestamp`` and ``deletionGracePeriodSeconds``
  are set and the pod stays until a DELETE with grace 0 (its kubelet's) removes it;
- finalizers defer removal: ``deletionTimestamp`` is set and the object goes when they are all removed
  (and, for a pod, its grace period is 0);
- when an owner goes, each dependent whose other owners are gone too is deleted, otherwise only
  the reference is dropped (a dependent created with only dangling references goes at once);
- a namespace being deleted turns Terminating, deletes its objects, and goes once it is empty;
- the answer is the deleted object for kinds that return it (pods, PVCs, PVs ...), the object
  while it waits for finalizers, else a Status Success.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from localcluster.kubeapi import meta
from localcluster.kubeapi.errors import ApiError, bad_request, conflict, not_found
from localcluster.kubeapi.graceful import first_grace, graceful, requested_grace, shifted
from localcluster.kubeapi.resources import Obj, ResourceType

FOREGROUND = "foregroundDeletion"


class DeletionMixin:
    def delete(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        options: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Obj:
        options = options or {}
        with self.store.lock:
            obj = self.store.find(rt, namespace, name)
            if obj is None:
                raise not_found(rt.plural, rt.group, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
                raise conflict(
                    rt.plural,
                    rt.group,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']},"
                    f" UID in object meta: {obj['metadata']['uid']}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                raise conflict(
                    rt.plural,
                    rt.group,
                    name,
                    "Precondition failed: ResourceVersion in precondition:"
                    f" {pre['resourceVersion']}, ResourceVersion in object meta:"
                    f" {obj['metadata']['resourceVersion']}",
                )
            policy = options.get("propagationPolicy") or ("Orphan" if options.get("orphanDependents") else None)
            if policy not in (None, "Background", "Foreground", "Orphan"):
                raise bad_request(f"propagationPolicy: Unsupported value: {policy!r}")
            grace = requested_grace(options)
            if dry_run:  # the answer as the write would give it, nothing stored
                preview = copy.deepcopy(obj)
                pmd = preview["metadata"]
                if graceful(rt) and not pmd.get("deletionTimestamp"):
                    period = first_grace(preview, grace)
                    pmd["deletionTimestamp"] = meta.rfc3339(self.clock() + period)
                    pmd["deletionGracePeriodSeconds"] = period
                return self._delete_answer(rt, version, preview, removed=True)
            last, removed = self._delete(rt, copy.deepcopy(obj), policy or "Background", grace)
            return self._delete_answer(rt, version, last, removed)

    def _delete_answer(self, rt: ResourceType, version: str, obj: Obj, removed: bool) -> Obj:
        if rt.return_deleted or not removed:
            return self.to_version(rt, obj, version)
        md = obj["metadata"]
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": md["name"], "group": rt.group, "kind": rt.plural, "uid": md["uid"]},
        }

    def _delete(self, rt: ResourceType, obj: Obj, policy: str, grace: int | None = None) -> tuple[Obj, bool]:
        """Delete the stored ``obj`` (a copy) with the requested grace period (pods; ``graceful.py``);
        (last state, removed now). Caller holds the lock."""
        md = obj["metadata"]
        if rt.key == ("", "namespaces"):
            return self._delete_namespace(obj)
        uid = md["uid"]
        if policy == "Orphan":
            self._orphan_dependents(uid)
        if md.get("deletionTimestamp"):
            return self._delete_again(rt, obj, grace)
        finalizers = list(md.get("finalizers") or [])
        if policy == "Foreground" and self._dependents(uid):
            finalizers.append(FOREGROUND)
        period = first_grace(obj, grace) if graceful(rt) else None
        if not finalizers and period is None:
            return self._remove(rt, obj), True
        if finalizers:
            md["finalizers"] = finalizers
        md["deletionTimestamp"] = meta.rfc3339(self.clock() + (period or 0))
        md["deletionGracePeriodSeconds"] = period or 0
        if int(md.get("generation") or 0) > 0:
            md["generation"] = int(md["generation"]) + 1
        obj = self.store.replace(rt, obj)
        if not finalizers:
            return (self._remove(rt, obj), True) if period == 0 else (obj, False)
        if FOREGROUND in finalizers:
            for dep_rt, dep in self._dependents(uid):
                current = self._current(dep_rt, dep)
                if current is not None:
                    self._delete(dep_rt, copy.deepcopy(current), "Foreground")
            obj = self._release_foreground(rt, uid) or obj
        return obj, False

    def _delete_again(self, rt: ResourceType, obj: Obj, grace: int | None) -> tuple[Obj, bool]:
        """A DELETE of an object already being deleted: a pod's grace period may only shrink."""
        md = obj["metadata"]
        current = md.get("deletionGracePeriodSeconds")
        if graceful(rt) and current:
            if grace is None or grace >= current:
                return obj, False
            md["deletionTimestamp"] = shifted(md["deletionTimestamp"], grace - current)
            md["deletionGracePeriodSeconds"] = grace
            obj = self.store.replace(rt, obj)
            if grace > 0 or md.get("finalizers"):
                return obj, False
        elif md.get("finalizers"):
            return obj, False
        return self._remove(rt, obj), True

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        md = obj["metadata"]
        last = self.store.remove(rt, md.get("namespace", ""), md["name"])
        self._collect(md["uid"])
        for ref in md.get("ownerReferences") or []:
            owner_rt = self._rt_of_ref(ref)
            if owner_rt is not None:
                self._release_foreground(owner_rt, ref.get("uid"))
        if rt.namespaced:
            self._finish_namespace(md.get("namespace", ""))
        return last

    def _dependents(self, uid: str) -> list[tuple[ResourceType, Obj]]:
        out = []
        for key, obj in self.store.all_items():
            if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or []):
                out.append((self.registry.get(*key), obj))
        return out

    def _collect(self, uid: str) -> None:
        """The garbage collector for a removed owner: drop the reference, or delete the dependent
        when it has no other live owner."""
        for dep_rt, dep in self._dependents(uid):
            current = self._current(dep_rt, dep)
            refs = current["metadata"].get("ownerReferences") or [] if current is not None else []
            if not any(r.get("uid") == uid for r in refs):
                continue  # gone or changed on another path meanwhile
            dep = copy.deepcopy(current)
            refs = dep["metadata"]["ownerReferences"]
            others = [r for r in refs if r.get("uid") != uid]
            if any(self._owner_alive(r, dep["metadata"].get("namespace", "")) for r in others):
                dep["metadata"]["ownerReferences"] = others
                self.store.replace(dep_rt, dep)
            else:
                self._delete(dep_rt, dep, "Background")

    def _current(self, rt: ResourceType, obj: Obj) -> Obj | None:
        """The stored object with the name of ``obj`` now, if it is still the same object (uid)."""
        md = obj["metadata"]
        current = self.store.find(rt, md.get("namespace", ""), md["name"])
        return current if current is not None and current["metadata"].get("uid") == md.get("uid") else None

    def _orphan_dependents(self, uid: str) -> None:
        for dep_rt, dep in self._dependents(uid):
            dep = copy.deepcopy(dep)
            dep["metadata"]["ownerReferences"] = [
                r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != uid
            ] or None
            if dep["metadata"]["ownerReferences"] is None:
                del dep["metadata"]["ownerReferences"]
            self.store.replace(dep_rt, dep)

    def _release_foreground(self, rt: ResourceType, uid: str | None) -> Obj | None:
        """Remove the foregroundDeletion finalizer of owner ``uid`` once it has no dependents left."""
        owner = next((o for k, o in self.store.all_items() if k == rt.key and o["metadata"].get("uid") == uid), None)
        if owner is None or FOREGROUND not in (owner["metadata"].get("finalizers") or []) or self._dependents(uid):
            return None
        owner = copy.deepcopy(owner)
        owner["metadata"]["finalizers"] = [f for f in owner["metadata"]["finalizers"] if f != FOREGROUND]
        stored = self.store.replace(rt, owner)
        return self._remove(rt, stored) if not stored["metadata"]["finalizers"] else stored

    def _rt_of_ref(self, ref: Mapping[str, Any]) -> ResourceType | None:
        api_version = str(ref.get("apiVersion") or "")
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        return self.registry.by_kind(group, str(ref.get("kind") or ""))

    def _owner_alive(self, ref: Mapping[str, Any], namespace: str) -> bool:
        rt = self._rt_of_ref(ref)
        if rt is None:
            return True  # an unknown kind: the real collector cannot resolve it and leaves the dependent
        owner = self.store.find(rt, namespace, str(ref.get("name") or ""))
        return owner is not None and owner["metadata"].get("uid") == ref.get("uid")

    def _delete_namespace(self, ns: Obj) -> tuple[Obj, bool]:
        name = ns["metadata"]["name"]
        if not ns["metadata"].get("deletionTimestamp"):
            ns["metadata"]["deletionTimestamp"] = meta.rfc3339(self.clock())
            ns["metadata"]["deletionGracePeriodSeconds"] = 0
            ns.setdefault("status", {})["phase"] = "Terminating"
            ns = self.store.replace(self.registry.get("", "namespaces"), ns)
            for key, obj in list(self.store.all_items()):
                rt = self.registry.get(*key)
                if not rt.namespaced or obj["metadata"].get("namespace") != name:
                    continue
                current = self._current(rt, obj)
                if current is not None and not current["metadata"].get("deletionTimestamp"):
                    self._delete(rt, copy.deepcopy(current), "Background")
        last = self._finish_namespace(name)
        return (last, True) if last is not None else (ns, False)

    def _finish_namespace(self, name: str) -> Obj | None:
        ns_rt = self.registry.get("", "namespaces")
        ns = self.store.find(ns_rt, "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp") or ns["metadata"].get("finalizers"):
            return None
        for key, obj in self.store.all_items():
            if self.registry.get(*key).namespaced and obj["metadata"].get("namespace") == name:
                return None
        return self._remove(ns_rt, copy.deepcopy(ns))

    def delete_collection(
        self,
        rt: ResourceType,
        version: str,
        namespace: str | None,
        query: Mapping[str, str],
        options: Mapping[str, Any] | None = None,
    ) -> Obj:
        with self.store.lock:
            listed = self.list(rt, version, namespace, {k: v for k, v in query.items() if k != "limit"})
            for item in listed["items"]:
                md = item["metadata"]
                try:
                    self.delete(rt, version, md.get("namespace", ""), md["name"], options)
                except ApiError as err:
                    if err.code != 404:
                        raise
        listed["metadata"] = {"resourceVersion": str(self.store.resource_version)}
        return listed
