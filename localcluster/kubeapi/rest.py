"""The verbs of the API, with the API server's semantics, independent of HTTP.

``Rest`` implements get, list, create, update (PUT), patch, delete and deletecollection for every
``ResourceType`` over a ``Store``. Objects come in and go out in the request's version and are
stored in the storage version. What it does like the real server:
- metadata: generateName, uid, creationTimestamp, generation (bumped when anything but metadata
  and status changes), resourceVersion preconditions (409 Conflict on a stale update or patch),
  name/namespace checks (400), namespaced objects only in existing, non-terminating namespaces;
- status subresources: writes to ``.../status`` change only ``status``; writes to the main
  resource keep the stored ``status``; CRD kinds drop ``status`` on create;
- no-op updates change nothing (no new resourceVersion, no event);
- deletion and garbage collection (``deletion.py``), graceful for pods (``graceful.py``); no new
  finalizers once ``deletionTimestamp`` is set, and the object goes when an update removes the last
  finalizer (a pod only once its grace period is 0);
- decoding and admission: scheme defaults (``meta.py``), quantities parsed and stored in their
  canonical form (``validation.decode``; 400 on create/update, 422 on patch, as upstream),
  NamespaceLifecycle (404/403), validation of every kind (422: ``validation.py`` for built-in
  kinds and every kind's ObjectMeta, ``schema.py`` for CRD schemas) after defaulting and after a
  patch is applied, before anything is stored; RBAC kinds are defaulted and validated by
  ``rbac_objects.py``;
- admission before validation: pods naming a missing ServiceAccount (``serviceaccount_admission.py``), pods that
  violate their namespace's Pod Security level (``podsecurity_admission.py``), and the caller's ``admit(obj, old)``
  callback (the server's RBAC escalation checks);
- dryRun=All: everything but the write.
- ``scale`` of the apps/v1 workloads (``get_scale``, ``update_scale``; ``apps.py``).
Subresources other than status and scale (tokens, reviews, binding) are in ``authn.py`` and ``Rest.bind``.
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from localcluster.kubeapi import (
    apps,
    fields,
    meta,
    patching,
    podsecurity_admission,
    rbac_objects,
    serviceaccount_admission,
    validation,
)
from localcluster.kubeapi.deletion import DeletionMixin
from localcluster.kubeapi.errors import already_exists, bad_request, conflict, invalid, not_found
from localcluster.kubeapi.resources import Obj, Registry, ResourceType
from localcluster.kubeapi.schema import SchemaValidator
from localcluster.kubeapi.selectors import parse_field_selector, parse_label_selector
from localcluster.kubeapi.store import Store

Admit = Callable[[Obj, "Obj | None"], None]
"""A check of the request's object (and the stored one on update) before validation: raises ApiError
(the server's RBAC escalation checks, which need the requesting user)."""

_SERVER_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "managedFields",
)
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


class Rest(DeletionMixin):
    def __init__(self, registry: Registry, store: Store, clock: Callable[[], float]) -> None:
        self.registry = registry
        self.store = store
        self.clock = clock
        self._validators: dict[tuple[tuple[str, str], str], SchemaValidator | None] = {}

    # ---- conversion and validation -------------------------------------------------------------

    def to_version(self, rt: ResourceType, obj: Obj, version: str) -> Obj:
        return rt.convert(copy.deepcopy(obj), rt.group, version)

    def _to_storage(self, rt: ResourceType, obj: Obj) -> Obj:
        return rt.convert(copy.deepcopy(obj), rt.group, rt.storage_version)

    def _validator(self, rt: ResourceType, version: str) -> SchemaValidator | None:
        key = (rt.key, version)
        if key not in self._validators:
            schema = rt.schema_for(version)
            self._validators[key] = SchemaValidator(schema) if schema else None
        return self._validators[key]

    def validate(self, rt: ResourceType, version: str, obj: Obj, old: Obj | None, sub: str | None = None) -> None:
        causes: list = list(validation.validate(rt, obj, old, sub)) + rbac_objects.errors(rt, obj, old)
        validator = self._validator(rt, version)
        if validator is not None:
            causes += validator.errors(obj, old)
        if causes:
            name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName", "")
            raise invalid(rt.kind, rt.group, name, causes)

    # ---- reads ---------------------------------------------------------------------------------

    def get(self, rt: ResourceType, version: str, namespace: str, name: str) -> Obj:
        return self.to_version(rt, self.store.get(rt, namespace, name), version)

    def list(self, rt: ResourceType, version: str, namespace: str | None, query: Mapping[str, str]) -> Obj:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), rt.field_labels)
        with self.store.lock:
            objs, rv = self.store.list(rt, namespace)
        items = [o for o in objs if labels(o) and fields(o)]
        start = 0
        if query.get("continue"):
            try:
                start = int(query["continue"])
            except ValueError:
                raise bad_request("continue key is not valid") from None
        limit = int(query.get("limit") or 0)
        end = start + limit if limit > 0 else len(items)
        list_meta: Obj = {"resourceVersion": str(rv)}
        if end < len(items):
            list_meta["continue"] = str(end)
            list_meta["remainingItemCount"] = len(items) - end
        out_items = []
        for o in items[start:end]:
            item = self.to_version(rt, o, version)
            if not rt.crd:  # built-in lists carry kind and apiVersion only at the top
                item.pop("kind", None)
                item.pop("apiVersion", None)
            out_items.append(item)
        return {"kind": rt.list_kind, "apiVersion": rt.api_version(version), "metadata": list_meta, "items": out_items}

    # ---- writes --------------------------------------------------------------------------------

    def _check_body(self, rt: ResourceType, version: str, body: Any, namespace: str, patch: Any = None) -> Obj:
        """The body decoded as the server does: kind and version checked, scheme defaults set,
        quantities canonical. ``patch`` (the patch, on a patch request) makes a decoding error a 422."""
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj = copy.deepcopy(body)
        want = rt.api_version(version)
        if obj.get("apiVersion") not in (None, "", want) or obj.get("kind") not in (None, "", rt.kind):
            raise bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API version"
                f" ({want})"
                if obj.get("apiVersion") not in (None, "", want)
                else f"the kind in the data ({obj.get('kind')}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"], obj["kind"] = want, rt.kind
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        if not rt.crd:
            meta.defaults(rt, obj)
            try:
                validation.decode(rt, obj)
            except validation.DecodeError as err:
                if patch is None:
                    raise bad_request(
                        f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {err}'
                    ) from None
                raise invalid("", "", "", [fields.invalid("patch", _patch_text(patch), str(err))]) from None
        return obj

    def _check_namespace(self, rt: ResourceType, namespace: str, md: Obj) -> None:
        if rt.namespaced:
            ns = self.store.find(self.registry.get("", "namespaces"), "", namespace)
            validation.namespace_lifecycle(rt, namespace, md.get("name") or md.get("generateName") or "", ns)

    def create(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        body: Any,
        dry_run: bool = False,
        admit: Admit | None = None,
    ) -> Obj:
        obj = self._check_body(rt, version, body, namespace)
        md = obj["metadata"]
        if md.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        for key in _SERVER_META:
            md.pop(key, None)
        if rt.crd and rt.has_status:
            obj.pop("status", None)
        meta.prepare_for_create(rt, obj)
        rbac_objects.defaults(rt, obj)
        with self.store.lock:
            self._check_namespace(rt, namespace, md)
            serviceaccount_admission.admit(self.store, self.registry, rt, obj, namespace)
            podsecurity_admission.admit(self.store, self.registry, rt, obj, namespace)
            if admit is not None:
                admit(obj, None)
            if not md.get("name") and md.get("generateName"):
                for _ in range(100):
                    name = md["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
                    if self.store.find(rt, namespace, name) is None:
                        md["name"] = name
                        break
            self.validate(rt, version, obj, None)
            if self.store.find(rt, namespace, md["name"]) is not None:
                raise already_exists(rt.plural, rt.group, md["name"])
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = meta.rfc3339(self.clock())
            md["generation"] = 1
            if dry_run:
                return obj
            stored = self.store.insert(rt, self._to_storage(rt, obj))
            if rt.key == ("", "namespaces"):
                self._default_service_account(md["name"])
            if md.get("ownerReferences") and not any(self._owner_alive(r, namespace) for r in md["ownerReferences"]):
                self._delete(rt, stored, "Background")  # the garbage collector removes orphans at once
            return self.to_version(rt, stored, version)

    def _default_service_account(self, namespace: str) -> None:
        sa = self.registry.get("", "serviceaccounts")
        if self.store.find(sa, namespace, "default") is None:
            self.create(sa, "v1", namespace, {"metadata": {"name": "default"}})

    def update(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        admit: Admit | None = None,
    ) -> Obj:
        obj = self._check_body(rt, version, body, namespace)
        if obj["metadata"].get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({obj['metadata']['name']}) does not match the name on the URL ({name})"
            )
        obj["metadata"]["name"] = name
        with self.store.lock:
            old = self.store.find(rt, namespace, name)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            uid = obj["metadata"].get("uid")
            if uid and uid != old["metadata"].get("uid"):  # the body's UID is a precondition of a PUT
                why = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old['metadata']['uid']}"
                raise conflict(rt.plural, rt.group, name, why)
            return self._update(rt, version, old, obj, subresource, dry_run, admit)

    def patch(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        admit: Admit | None = None,
    ) -> Obj:
        with self.store.lock:
            old = self.store.find(rt, namespace, name)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            current = self.to_version(rt, old, version)
            patched = patching.apply_patch(content_type, current, body, rt.crd)
            if not isinstance(patched, dict):
                raise bad_request("the patch did not produce an object")
            pmeta = patched.setdefault("metadata", {})
            if pmeta.get("name", name) != name:
                raise bad_request("the patch may not change the name")
            obj = self._check_body(rt, version, patched, namespace, patch=body)
            return self._update(rt, version, old, obj, subresource, dry_run, admit)

    def _update(
        self,
        rt: ResourceType,
        version: str,
        old: Obj,
        obj: Obj,
        sub: str | None,
        dry_run: bool,
        admit: Admit | None = None,
    ) -> Obj:
        """Caller holds the lock; ``old`` is stored (storage version), ``obj`` in ``version``."""
        md, old_md = obj["metadata"], old["metadata"]
        name = old_md["name"]
        rv = md.get("resourceVersion")
        if rv and rv != old_md["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name)
        if not rv and rt.crd:  # custom resources allow no unconditional update
            cause = fields.invalid("metadata.resourceVersion", 0, "must be specified for an update")
            raise invalid(rt.kind, rt.group, name, [cause])
        old_v = self.to_version(rt, old, version)
        if sub == "status":
            new = copy.deepcopy(old_v)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        else:
            new = obj
            rbac_objects.defaults(rt, new)
            if rt.has_status:
                if "status" in old_v:
                    new["status"] = copy.deepcopy(old_v["status"])
                else:
                    new.pop("status", None)
            nmd = new["metadata"]
            uid = nmd.get("uid")  # a changed UID is refused by validation (a PUT's is a precondition)
            for key in _SERVER_META:
                nmd.pop(key, None)
                if key in old_md:
                    nmd[key] = copy.deepcopy(old_md[key])
            if uid:
                nmd["uid"] = uid
            if rt.namespaced:
                nmd["namespace"] = old_md["namespace"]
            if _spec_of(new, rt) != _spec_of(old_v, rt):
                nmd["generation"] = int(old_md.get("generation") or 1) + 1
        if admit is not None:
            admit(new, old_v)
        if _same(new, old_v):
            return old_v  # a no-op: no new resourceVersion, no event
        self.validate(rt, version, new, old_v, sub)
        if dry_run:
            return new
        new["metadata"]["resourceVersion"] = old_md["resourceVersion"]
        stored = self.store.replace(rt, self._to_storage(rt, new))
        smd = stored["metadata"]
        if smd.get("deletionTimestamp") and not smd.get("finalizers") and not smd.get("deletionGracePeriodSeconds"):
            stored = self._remove(rt, stored)  # a pod in its grace period waits for its kubelet's DELETE
        return self.to_version(rt, stored, version)

    # ---- the scale subresource of the apps/v1 workloads -----------------------------------------

    def get_scale(self, rt: ResourceType, version: str, namespace: str, name: str) -> Obj:
        """GET ``.../NAME/scale``: the workload's autoscaling/v1 ``Scale``."""
        return apps.scale_of(self.get(rt, version, namespace, name))

    def update_scale(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        content_type: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PUT (``content_type`` None) or PATCH of ``.../NAME/scale``: the Scale's ``spec.replicas`` becomes the
        workload's (a spec change: generation bumped, the full object validated), after ``ValidateScale`` and the
        Scale's preconditions (resourceVersion, uid: 409 Conflict). The answer is the new Scale."""
        with self.store.lock:
            old = self.store.find(rt, namespace, name)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            current = self.to_version(rt, old, version)
            if content_type is None:
                scale = body
                if isinstance(scale, dict) and (scale.get("kind"), scale.get("apiVersion")) not in (
                    (None, None),
                    ("Scale", "autoscaling/v1"),
                ):
                    raise bad_request(
                        f"the API version in the data ({scale.get('apiVersion')}) does not match the expected API"
                        " version (autoscaling/v1)"
                    )
            else:
                scale = patching.apply_patch(content_type, apps.scale_of(current), body, False)
            if not isinstance(scale, dict):
                raise bad_request("the body of the request must be a JSON object")
            scale = copy.deepcopy(scale)
            smd = scale.setdefault("metadata", {})
            if not isinstance(smd, dict):
                raise bad_request("metadata must be an object")
            if smd.get("name") not in (None, name):
                raise bad_request(f"the name of the object ({smd['name']}) does not match the name on the URL ({name})")
            smd["name"], smd["namespace"] = name, namespace
            causes = apps.validate_scale(scale)
            if causes:
                raise invalid("Scale", "autoscaling", name, causes)
            if smd.get("resourceVersion") and smd["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(rt.plural, rt.group, name)
            if smd.get("uid") and smd["uid"] != old["metadata"]["uid"]:
                why = f"Precondition failed: UID in precondition: {smd['uid']}, UID in object meta: "
                why += old["metadata"]["uid"]
                raise conflict(rt.plural, rt.group, name, why)
            new = self._update(rt, version, old, apps.scaled(current, scale), None, dry_run)
            return apps.scale_of(new)

    # ---- pods/binding --------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, body: Any) -> Obj:
        """POST pods/NAME/binding: set spec.nodeName once (the scheduler's way)."""
        pods = self.registry.get("", "pods")
        target = (body or {}).get("target") or {}
        node = target.get("name")
        causes = (
            []
            if target.get("kind") in (None, "", "Node")
            else [fields.not_supported("target.kind", target["kind"], ["Node", "<empty>"])]
        )
        if not node:
            causes.append(fields.required("target.name"))
        if causes:  # ValidatePodBinding
            raise invalid("Binding", "", name, causes)
        with self.store.lock:
            pod = self.store.find(pods, namespace, name)
            if pod is None:
                raise not_found("pods", "", name)
            if pod["spec"].get("nodeName"):
                raise conflict(
                    "pods/binding", "", name, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
                )
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = node
            self.store.replace(pods, pod)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _patch_text(patch: Any) -> str:
    """The patch as the server prints it in a decoding error (Go's ``%+v`` of a map is close enough)."""
    return patch if isinstance(patch, str) else json.dumps(patch, separators=(",", ":"))


def _spec_of(obj: Obj, rt: ResourceType) -> Obj:
    return {
        k: v for k, v in obj.items() if k not in ("metadata", "status" if rt.has_status else "", "apiVersion", "kind")
    }


def _same(a: Obj, b: Obj) -> bool:
    strip = ("resourceVersion", "managedFields")
    ma = {k: v for k, v in a.get("metadata", {}).items() if k not in strip and v not in (None, [], {})}
    mb = {k: v for k, v in b.get("metadata", {}).items() if k not in strip and v not in (None, [], {})}
    rest_a = {k: v for k, v in a.items() if k != "metadata"}
    rest_b = {k: v for k, v in b.items() if k != "metadata"}
    return ma == mb and rest_a == rest_b
