"""In-memory object storage with a global resourceVersion and a watchable change log.

Objects are kept per resource type key ``(group, plural)`` and ``(namespace, name)`` (namespace ""
for cluster-scoped kinds), in storage-version form. Every write takes the next value of one
global counter as ``metadata.resourceVersion`` and appends an ``Event`` (ADDED, MODIFIED, DELETED)
to a bounded log. ``subscribe`` returns the logged events after a given resourceVersion and
registers a callback for later ones, atomically, so a watch neither misses nor repeats an event;
asking for a resourceVersion older than the log raises 410 Expired.

All methods are thread-safe (one re-entrant lock, ``Store.lock``, which callers also hold across
a read-modify-write). Returned objects are copies; callbacks run under the lock and must not block.
The semantics of the verbs (finalizers, cascading, validation) live in ``rest.py``.
"""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from localcluster.kubeapi.errors import already_exists, gone, not_found
from localcluster.kubeapi.resources import Obj, ResourceType

Key = tuple[str, str]  # (group, plural)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: Key
    obj: Obj  # the object after the change (the last state for DELETED); never mutated
    old: Obj | None  # the object before the change (None for ADDED)


class Subscription:
    def __init__(self, store: Store, key: Key, callback: Callable[[Event], None]):
        self.store, self.key, self.callback = store, key, callback

    def close(self) -> None:
        with self.store.lock:
            self.store._subs.discard(self)


class Store:
    def __init__(self, log_size: int = 100_000) -> None:
        self.lock = threading.RLock()
        self._objs: dict[Key, dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        self._rv = 0
        self._log: collections.deque[Event] = collections.deque(maxlen=log_size)
        self._subs: set[Subscription] = set()

    @property
    def resource_version(self) -> int:
        return self._rv

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        """The stored object itself (not a copy; hold ``lock`` and do not mutate), or None."""
        return self._objs[rt.key].get((namespace if rt.namespaced else "", name))

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self.find(rt, namespace, name)
            if obj is None:
                raise not_found(rt.plural, rt.group, name)
            return copy.deepcopy(obj)

    def items(self, rt: ResourceType, namespace: str | None = None) -> Iterator[Obj]:
        """Stored objects (not copies), ordered by namespace and name; all namespaces for None."""
        objs = self._objs[rt.key]
        for ns_name in sorted(objs):
            if namespace is None or ns_name[0] == namespace:
                yield objs[ns_name]

    def list(self, rt: ResourceType, namespace: str | None = None) -> tuple[list[Obj], int]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.items(rt, namespace)], self._rv

    def all_items(self) -> Iterator[tuple[Key, Obj]]:
        for key, objs in list(self._objs.items()):
            for obj in list(objs.values()):
                yield key, obj

    def insert(self, rt: ResourceType, obj: Obj) -> Obj:
        with self.lock:
            meta = obj["metadata"]
            ns_name = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
            if ns_name in self._objs[rt.key]:
                raise already_exists(rt.plural, rt.group, meta["name"])
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            stored = copy.deepcopy(obj)
            self._objs[rt.key][ns_name] = stored
            self._emit(Event(self._rv, "ADDED", rt.key, stored, None))
            return copy.deepcopy(stored)

    def replace(self, rt: ResourceType, obj: Obj) -> Obj:
        """Store ``obj`` over the object of the same name (which must exist) with a new resourceVersion."""
        with self.lock:
            meta = obj["metadata"]
            ns_name = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
            old = self._objs[rt.key].get(ns_name)
            if old is None:
                raise not_found(rt.plural, rt.group, meta["name"])
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            stored = copy.deepcopy(obj)
            self._objs[rt.key][ns_name] = stored
            self._emit(Event(self._rv, "MODIFIED", rt.key, stored, old))
            return copy.deepcopy(stored)

    def remove(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        """Remove the object; the DELETED event carries its last state with a new resourceVersion."""
        with self.lock:
            ns_name = (namespace if rt.namespaced else "", name)
            old = self._objs[rt.key].pop(ns_name, None)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            self._rv += 1
            last = copy.deepcopy(old)
            last["metadata"]["resourceVersion"] = str(self._rv)
            self._emit(Event(self._rv, "DELETED", rt.key, last, old))
            return copy.deepcopy(last)

    def subscribe(
        self, key: Key, since: int | None, callback: Callable[[Event], None]
    ) -> tuple[list[Event], Subscription]:
        """Events of ``key`` after resourceVersion ``since`` (none for None), and a subscription
        delivering the later ones to ``callback``. 410 Expired when ``since`` predates the log."""
        with self.lock:
            backlog: list[Event] = []
            if since is not None and since < self._rv:
                oldest = self._log[0].rv if self._log else self._rv + 1
                if since < oldest - 1:
                    raise gone(f"too old resource version: {since} ({oldest - 1})")
                backlog = [e for e in self._log if e.rv > since and e.key == key]
            sub = Subscription(self, key, callback)
            self._subs.add(sub)
            return backlog, sub

    def _emit(self, event: Event) -> None:
        self._log.append(event)
        for sub in list(self._subs):
            if sub.key == event.key:
                sub.callback(event)
