"""``meta.k8s.io/v1`` Table answers, which kubectl asks for (``Accept: ...;as=Table``) to print
``kubectl get``: Name, the type's printer columns (the CRD's additionalPrinterColumns for CRD kinds),
and Age (``date`` columns shown as ages, as upstream). Only simple ``.a.b.c`` JSON paths are evaluated.
"""

from __future__ import annotations

import datetime

from localcluster.kubeapi.resources import Obj, ResourceType


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _lookup(obj: Obj, path: str):
    cur = obj
    for part in path.strip(".").split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _age(created: str | None, now: float) -> str:
    if not created:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<invalid>"
    secs = max(0, int(now - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= 2 * size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def table(rt: ResourceType, objs: list[Obj], resource_version: str, now: float) -> Obj:
    columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    for name, typ, _ in rt.printer_columns:
        columns.append({"name": name, "type": typ, "format": "", "description": name, "priority": 0})
    own_age = any(name == "Age" for name, _, _ in rt.printer_columns)
    if not own_age:
        columns.append({"name": "Age", "type": "date", "format": "", "description": "Age", "priority": 0})
    rows = []
    for obj in objs:
        md = obj.get("metadata") or {}
        cells: list = [md.get("name", "")]
        for _, typ, path in rt.printer_columns:
            value = _lookup(obj, path)
            if typ == "date" and isinstance(value, str):
                value = _age(value, now)
            cells.append(value if value is not None else "")
        if not own_age:
            cells.append(_age(md.get("creationTimestamp"), now))
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}
        rows.append({"cells": cells, "object": partial})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }
