"""A backup flow run's policy: the policy file with the run's overrides applied over it, the one owner of how an
override maps onto a policy field.

* ``PolicyOverrides``: the policy fields a run may give itself (``repo`` -> ``repository.url``, ``repo_secret`` ->
  ``repository.credentials_secret``, ``image`` / ``service_account`` -> ``mover.*``, ``selector`` ->
  ``pvc_selector`` (a plain label map is its ``matchLabels``), the others by their own name), as one typed object:
  the ``backup-app`` deployment's form next to ``policy_path``;
* ``resolve_policy(policy_path, overrides)``: the file (if any) with the overrides given applied, validated as one
  ``BackupPolicy`` (``PolicyError`` naming the file and the field otherwise); without a ``name`` the policy is
  named after its namespace;
* ``policy_from_parameters(parameters)``: the same from a flow run's parameters as Prefect holds them (the run's
  name and its cancellation/crash hooks recompute the run's policy from them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from movers.policy.hooks import Hooks
from movers.policy.model import BackupPolicy, DnsLabel, ObjectName, RepoUrl, Text, Workers, parse_policy

# override -> (section, field) of the policy where it is not a top-level field of its own name
_PLACED = {
    "repo": ("repository", "url"),
    "repo_secret": ("repository", "credentials_secret"),
    "image": ("mover", "image"),
    "service_account": ("mover", "service_account"),
}


class PolicyOverrides(BaseModel):
    """The policy fields a backup run gives itself over its policy file (see the module doc); None: the file's.
    Each is checked as the policy checks it, so a deployment refuses a bad value before the run starts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: DnsLabel | None = None
    selector: dict[str, Any] | None = None
    repo: RepoUrl | None = None
    repo_secret: ObjectName | None = None
    hooks: Hooks | None = None
    image: Text | None = None
    service_account: ObjectName | None = None
    parallelism: Workers | None = None

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (a policy file's mapping) with the overrides given set in it (changed in place, returned)."""
        for key in type(self).model_fields:
            value = getattr(self, key)
            if value is None:
                continue
            if key in _PLACED:
                section, field = _PLACED[key]
                data.setdefault(section, {})[field] = value
            elif key == "selector":
                plain = "matchLabels" not in value and "matchExpressions" not in value
                data["pvc_selector"] = {"matchLabels": value} if plain else value
            else:
                data[key] = value
        return data


def resolve_policy(policy_path: str | None, overrides: PolicyOverrides | None = None) -> BackupPolicy:
    """The policy file (if any) with ``overrides`` applied, validated as one policy."""
    import yaml

    data: dict[str, Any] = {}
    if policy_path:
        with open(policy_path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    data = (overrides or PolicyOverrides()).apply(data)
    data.setdefault("name", data.get("namespace", "app"))
    return parse_policy(data, policy_path)


def policy_from_parameters(parameters: Mapping[str, Any]) -> BackupPolicy:
    """``resolve_policy`` of a backup flow run's parameters (``policy_path``, ``overrides``: a mapping or the
    model)."""
    overrides = PolicyOverrides.model_validate(parameters.get("overrides") or {})
    return resolve_policy(parameters.get("policy_path"), overrides)
