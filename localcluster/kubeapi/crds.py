"""Upstream CRD files, read at run time (never copied into the project).

``default_crd_dir()`` is ``../shared/reference/crds`` next to the repository root (override with the
environment variable ``KUBEAPI_CRD_DIR``); ``load_crds(dir)`` reads every ``*.yaml`` CRD there
(an absent directory gives none). ``apply_crds`` gives the built-in types their schemas and printer
columns, and adds the CRDs that match no built-in type as new types.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import yaml

from localcluster.kubeapi.resources import Obj, Registry, ResourceType

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_crd_dir() -> Path:
    env = os.environ.get("KUBEAPI_CRD_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "reference" / "crds"


def load_crds(directory: str | Path | None) -> list[Obj]:
    """The CustomResourceDefinitions in ``directory`` (sorted by file name); [] when it is absent.
    Parsed files are cached by path and modification time (callers must not mutate the result)."""
    if directory is None:
        return []
    path = Path(directory)
    if not path.is_dir():
        return []
    out = []
    for f in sorted(path.glob("*.y*ml")):
        out.extend(_load_file(str(f), f.stat().st_mtime_ns))
    return out


@functools.lru_cache(maxsize=256)
def _load_file(path: str, mtime_ns: int) -> tuple[Obj, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as f:
        docs = list(yaml.load_all(f, Loader=loader))  # noqa: S506 - a safe loader
    return tuple(d for d in docs if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition")


def apply_crds(registry: Registry, crds: list[Obj]) -> None:
    for crd in crds:
        spec = crd["spec"]
        known = registry.get(spec["group"], spec["names"]["plural"])
        registry.replace(known.with_crd(crd)) if known is not None else registry.add(ResourceType.from_crd(crd))
