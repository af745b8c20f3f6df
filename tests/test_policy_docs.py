"""Every policy key is documented in the README's policy table (a key added to movers/policy.py without a
line there fails here)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import movers.policy as p

README = Path(__file__).resolve().parent.parent / "README.md"
YAML_NAMES = {"class_name": "class"}  # dataclass field -> YAML key
SECTIONS = {
    c.__name__: c
    for c in (
        p.Repository,
        p.Schedule,
        p.Hooks,
        p.Retention,
        p.MoverSettings,
        p.CBTSettings,
        p.GroupSnapshotSettings,
        p.Timeouts,
    )
}


def _keys(cls: type, prefix: str = "") -> set[str]:
    """The YAML keys of a policy dataclass (nested sections as ``section.key``)."""
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        if f.name == "source":  # the file it was loaded from, not a key
            continue
        name, section = prefix + YAML_NAMES.get(f.name, f.name), str(f.type).split("|")[0].strip()
        keys |= _keys(SECTIONS[section], name + ".") if section in SECTIONS else {name}
    return keys


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
    assert {"timeouts.pvc_bound", "group_snapshot.class", "hooks.pre"} <= keys, keys
    missing = sorted(keys - _documented())
    assert not missing, f"policy keys the README's policy table does not name: {missing}"
