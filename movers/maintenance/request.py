"""What one ``maintain-repo`` run is asked to do, as one typed request: the form of the ``maintenance`` deployment.

``MaintenanceRequest`` names the repository (``repo``), whose retention applies (``policy_paths``, and ``keep_*``
rules that override theirs), the consolidation of each volume's newest backup (``consolidate``, its
``dead_fraction``: ``movers.pipeline.consolidate``), the prune (``prune``, its ``grace`` and ``lock_wait``), the
verify (``verify``, ``sample``, ``seed``), ``dry_run``, and where an encrypted repository's key is read (``key_secret``:
``namespace/name`` of a repository Secret; None: the worker's environment). The flow takes it as its one parameter,
so the Prefect UI renders it as one form and Prefect's parameter validation refuses a request that cannot work
before the run starts, naming the field. Validation is pure: nothing here reads the repository or the cluster.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from movers.pipeline.consolidate import DEAD_FRACTION
from movers.policy import checks as c
from movers.policy.model import RepoUrl

RULES = ("keep_last", "keep_daily", "keep_weekly", "keep_monthly")


def _grace(value: Any) -> float:
    """Seconds, not negative: a number or a Go duration (``0``, ``90m``, ``24h``, ``7d``)."""
    return c.duration(value, zero=True)


def _secret_ref(value: Any) -> str | None:
    """``namespace/name`` of a Secret, each part as Kubernetes checks it, or None."""
    namespace, slash, name = value.partition("/") if isinstance(value, str) else ("", "", "")
    if value is None or (slash and c.DNS_LABEL.match(namespace) and c.DNS_SUBDOMAIN.match(name)):
        return value
    raise c.problem("", f"must be namespace/name of a Secret, not {value!r}")


Grace = Annotated[
    float,
    BeforeValidator(_grace),
    WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}], "description": "0, 90m, 24h"}),
]
SecretRef = Annotated[str | None, BeforeValidator(_secret_ref)]
KeepRule = Annotated[int | None, Field(ge=0)]


class MaintenanceRequest(BaseModel):
    """One ``maintain-repo`` run (see the module doc). ``grace``: a pack unreferenced for less long is kept by the
    prune. ``lock_wait``: seconds to wait for another prune of the repository (its prune lock), then the prune is
    skipped (reported). ``sample``: the fraction of packs a ``sampled`` verify reads (``seed`` picks them).
    ``dead_fraction``: consolidate a newest backup whose restore would fetch more than ``1 / (1 - dead_fraction)``
    of what its data takes in fully used chunks. ``dry_run``: say what would be forgotten, consolidated and pruned,
    change nothing (verify still reads)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: RepoUrl
    policy_paths: list[str] = []
    keep_last: KeepRule = None
    keep_daily: KeepRule = None
    keep_weekly: KeepRule = None
    keep_monthly: KeepRule = None
    consolidate: bool = True
    dead_fraction: float = Field(default=DEAD_FRACTION, gt=0, lt=1)
    prune: bool = True
    grace: Grace = 24 * 3600.0
    verify: Literal["sampled", "full", "off"] = "sampled"
    sample: float = Field(default=0.05, ge=0, le=1)
    seed: int | None = None
    dry_run: bool = False
    lock_wait: float = Field(default=600.0, ge=0)
    key_secret: SecretRef = None

    def rule_overrides(self) -> dict[str, int | None]:
        """The ``keep_*`` rules by name, None where the request gives none (the policies' then apply)."""
        return {name: getattr(self, name) for name in RULES}

    def key_secret_ref(self) -> tuple[str, str] | None:
        """``(namespace, name)`` of ``key_secret``, or None."""
        if self.key_secret is None:
            return None
        namespace, _, name = self.key_secret.partition("/")
        return namespace, name
