"""Every policy key is documented in the README's policy table (a key added to movers/policy/model.py without a
line there fails here)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

import movers.policy.model as p

README = Path(__file__).resolve().parents[3] / "README.md"


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """The YAML keys of a policy model (nested sections as ``section.key``)."""
    keys: set[str] = set()
    for name, f in model.model_fields.items():
        if f.exclude:  # the file it was loaded from, not a key
            continue
        key = prefix + (f.alias or name)
        args = () if typing.get_origin(f.annotation) is list else getattr(f.annotation, "__args__", ())
        section = next((t for t in (f.annotation, *args) if _is_section(t)), None)
        keys |= _keys(section, key + ".") if section else {key}
    return keys


def _is_section(t: object) -> bool:
    """A nested section (``Retention``, ``Schedule | None``), not a list of entries (``hooks.pre``)."""
    return isinstance(t, type) and issubclass(t, p.Section)


def _documented() -> set[str]:
    """The backquoted keys in the first cell of the README's table rows."""
    return {
        key
        for line in README.read_text().splitlines()
        if line.startswith("| `")
        for key in re.findall(r"`([a-z_.]+)`", line.split("|")[1])
    }


def test_every_policy_key_has_a_line_in_the_readme():
    keys = _keys(p.BackupPolicy)
    assert {"timeouts.pvc_bound", "group_snapshot.class", "hooks.pre", "retained_snapshots"} <= keys, keys
    missing = sorted(keys - _documented())
    assert not missing, f"policy keys the README's policy table does not name: {missing}"
