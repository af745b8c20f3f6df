"""The resource types the emulator serves, and which versions of them.

A ``ResourceType`` describes one REST resource (group, plural, kind, scope, known versions,
subresources, extra field-selector labels, printer columns, OpenAPI schemas for CRD kinds). Objects
are stored once per resource, in ``storage_version`` form; every served version is a view of the
same object (``convert`` rewrites it, by default only ``apiVersion``).

``Registry`` holds the types and the served-versions setting: ``served_versions`` maps a group to
the versions served (an empty sequence removes the group, emulating a cluster without that CRD);
a group that is not named serves each type's ``default_served`` versions.

To add a custom resource, pass a CRD (dict as in YAML) to ``ResourceType.from_crd`` and
``Registry.add`` it (``KubeAPI(extra_crds=[...])`` does this).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

Obj = dict[str, Any]
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_ONLY = ("create",)
VGS_GROUP = "groupsnapshot.storage.k8s.io"
VGS_VERSIONS = ("v1beta1", "v1beta2", "v1")


def default_convert(obj: Obj, group: str, version: str) -> Obj:
    """Only the apiVersion changes between versions (the common case)."""
    obj["apiVersion"] = f"{group}/{version}" if group else version
    return obj


@dataclass(frozen=True)
class ResourceType:
    group: str
    plural: str
    kind: str
    versions: tuple[str, ...]
    storage_version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = VERBS
    default_served: tuple[str, ...] | None = None  # None: all of ``versions``
    field_labels: tuple[str, ...] = ()  # field-selector labels beyond metadata.name/namespace
    printer_columns: tuple[tuple[str, str, str], ...] = ()  # (name, type, jsonPath)
    schemas: Mapping[str, Obj] = field(default_factory=dict)  # version -> openAPIV3Schema (CRD kinds)
    crd: bool = False  # a CustomResourceDefinition kind (merge patch only, objects listed with kind)
    return_deleted: bool = False  # DELETE answers the object rather than a Status
    convert: Callable[[Obj, str, str], Obj] = default_convert  # (obj, group, to_version) -> obj

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def schema_for(self, version: str) -> Obj | None:
        return self.schemas.get(version) or self.schemas.get(self.storage_version)

    @classmethod
    def from_crd(cls, crd: Obj) -> ResourceType:
        """A type from a CustomResourceDefinition (apiextensions.k8s.io/v1) as loaded from YAML."""
        spec = crd["spec"]
        names = spec["names"]
        versions = spec["versions"]
        storage = next(v["name"] for v in versions if v.get("storage"))
        subresources = set()
        for v in versions:
            subresources.update((v.get("subresources") or {}).keys())
        columns = tuple(
            (c["name"], c.get("type", "string"), c["jsonPath"])
            for c in (next((v for v in versions if v["name"] == storage), {}).get("additionalPrinterColumns") or [])
        )
        return cls(
            group=spec["group"],
            plural=names["plural"],
            kind=names["kind"],
            versions=tuple(v["name"] for v in versions),
            storage_version=storage,
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            subresources=tuple(sorted(s for s in subresources if s == "status")),
            default_served=tuple(v["name"] for v in versions if v.get("served", True)),
            printer_columns=columns,
            schemas={v["name"]: v["schema"]["openAPIV3Schema"] for v in versions if v.get("schema")},
            crd=True,
        )

    def with_crd(self, crd: Obj) -> ResourceType:
        """This type with the schemas and printer columns of ``crd`` (same group and plural)."""
        loaded = ResourceType.from_crd(crd)
        columns = loaded.printer_columns or self.printer_columns
        return replace(self, schemas=dict(loaded.schemas), printer_columns=columns)


_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA > beta > alpha, then by number (v1 > v1beta2 > v1beta1)."""
    m = _VERSION.match(version)
    if not m:
        return (-1, 0, 0)
    stage = {"alpha": 0, "beta": 1, None: 2}[m.group(2)]
    return (stage, int(m.group(1)), int(m.group(3) or 0))


class Registry:
    """Resource types by (group, plural), filtered by the served-versions setting."""

    def __init__(self, types: Iterable[ResourceType], served_versions: Mapping[str, Sequence[str]] | None = None):
        self._types: dict[tuple[str, str], ResourceType] = {}
        self._served_setting = {g: tuple(v) for g, v in (served_versions or {}).items()}
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        wanted = self._served_setting.get(rt.group)
        if wanted is not None:
            unknown = set(wanted) - set(rt.versions)
            if unknown:
                raise ValueError(f"{rt.plural}.{rt.group} has no version(s) {sorted(unknown)}: {rt.versions}")
        self._types[rt.key] = rt

    def replace(self, rt: ResourceType) -> None:
        self._types[rt.key] = rt

    def served(self, rt: ResourceType) -> tuple[str, ...]:
        wanted = self._served_setting.get(rt.group)
        if wanted is None:
            wanted = rt.default_served if rt.default_served is not None else rt.versions
        return tuple(sorted((v for v in rt.versions if v in wanted), key=version_priority, reverse=True))

    def types(self) -> list[ResourceType]:
        return list(self._types.values())

    def get(self, group: str, plural: str) -> ResourceType | None:
        return self._types.get((group, plural))

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``group/version`` under ``plural``, or None."""
        rt = self._types.get((group, plural))
        return rt if rt is not None and version in self.served(rt) else None

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        return next((rt for rt in self._types.values() if rt.group == group and rt.kind == kind), None)

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (preferred first), for discovery."""
        out: dict[str, set[str]] = {}
        for rt in self._types.values():
            out.setdefault(rt.group, set()).update(self.served(rt))
        return {g: sorted(vs, key=version_priority, reverse=True) for g, vs in out.items() if vs}

    def in_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and version in self.served(rt)]
