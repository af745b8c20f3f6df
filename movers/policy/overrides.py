"""A backup flow run's policy: the policy file with the flow's parameters applied over it, the one owner of how a
flow parameter overrides a policy field.

* ``POLICY_OVERRIDES``: the flow parameters that override a policy's fields (``repo`` -> ``repository.url``,
  ``repo_secret`` -> ``repository.credentials_secret``, ``image`` / ``service_account`` -> ``mover.*``,
  ``selector`` -> ``pvc_selector`` (a plain label map is its ``matchLabels``), the others by their own name);
* ``resolve_policy(policy_path, **overrides)``: the file (if any) with the non-None overrides applied, validated
  as one ``BackupPolicy`` (``PolicyError`` naming the file and the field otherwise); without a ``name`` the
  policy is named after its namespace;
* ``policy_from_parameters(parameters)``: the same from a flow run's parameters as Prefect holds them (the run's
  name and its cancellation/crash hooks recompute the run's policy from them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from movers.policy.model import BackupPolicy, parse_policy

POLICY_OVERRIDES = ("namespace", "selector", "repo", "repo_secret", "hooks", "image", "service_account", "parallelism")


def resolve_policy(policy_path: str | None, **overrides: Any) -> BackupPolicy:
    """The policy file (if any) with the non-None ``overrides`` applied, validated as one policy."""
    import yaml

    data: dict[str, Any] = {}
    if policy_path:
        with open(policy_path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "repo":
            data.setdefault("repository", {})["url"] = value
        elif key == "repo_secret":
            data.setdefault("repository", {})["credentials_secret"] = value
        elif key == "image":
            data.setdefault("mover", {})["image"] = value
        elif key == "service_account":
            data.setdefault("mover", {})["service_account"] = value
        elif key == "selector":
            data["pvc_selector"] = (
                value if "matchLabels" in value or "matchExpressions" in value else {"matchLabels": value}
            )
        else:
            data[key] = value
    data.setdefault("name", data.get("namespace", "app"))
    return parse_policy(data, policy_path)


def policy_from_parameters(parameters: Mapping[str, Any]) -> BackupPolicy:
    """``resolve_policy`` of a backup flow run's parameters: its ``policy_path`` and those of ``POLICY_OVERRIDES``."""
    return resolve_policy(parameters.get("policy_path"), **{key: parameters.get(key) for key in POLICY_OVERRIDES})
