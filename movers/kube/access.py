"""What the caller's own identity may do: SelfSubjectAccessReview for each needed permission.

``denied(api, checks)`` asks the API server once per distinct ``Check`` (verb, API group, resource,
subresource, namespace, name) whether the identity of ``api`` may do it, and returns one readable line
per refused check, in the order given (empty: everything is allowed). A preflight calls it before it
freezes anything, so that a missing grant is one line instead of a failure halfway through a run.

Each review is ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` with
``spec.resourceAttributes`` {verb, group, resource, subresource, namespace, name} (empty ones left out);
the answer's ``status.allowed`` decides, its ``reason`` / ``evaluationError`` are quoted in the line.
Every authenticated user may create SelfSubjectAccessReviews (``system:basic-user``); a refusal of the
review itself raises ``apply.ForbiddenError`` (exit code 6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from movers.kube.apply import _call, api_error

REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass(frozen=True)
class Check:
    """One permission: ``verb`` on ``resource`` (plural) of API ``group`` ("" for core), optionally a
    ``subresource`` (``pods/exec`` is resource pods, subresource exec), in ``namespace`` (None:
    cluster-scoped, or every namespace), on the object ``name`` (None: any)."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str | None = None
    name: str | None = None

    def attributes(self) -> dict[str, str]:
        """``spec.resourceAttributes`` of the review: the non-empty fields."""
        attrs = {
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
            "subresource": self.subresource,
            "namespace": self.namespace or "",
            "name": self.name or "",
        }
        return {k: v for k, v in attrs.items() if v or k in ("verb", "resource")}

    def describe(self) -> str:
        """E.g. ``patch volumegroupsnapshots.groupsnapshot.storage.k8s.io in namespace shop``."""
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        what += f".{self.group}" if self.group else ""
        if self.name:
            what += f' "{self.name}"'
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {what} {where}"


def refusal_line(check: Check, status: Mapping[str, Any]) -> str | None:
    """The line for a review's ``status``: None when allowed, else ``cannot <check>[: <reason>]``."""
    if status.get("allowed") is True:
        return None
    why = "; ".join(str(status[k]) for k in ("reason", "evaluationError") if status.get(k))
    return f"cannot {check.describe()}" + (f" ({why})" if why else "")


def review_body(check: Check) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": check.attributes()},
    }


def denied(api, checks: Iterable[Check | tuple]) -> list[str]:
    """One line per check the identity of ``api`` is not allowed (see the module doc); tuples are
    ``Check`` fields in order."""
    from kubernetes.client.exceptions import ApiException

    lines: list[str] = []
    seen: set[Check] = set()
    for item in checks:
        check = item if isinstance(item, Check) else Check(*item)
        if check in seen:
            continue
        seen.add(check)
        try:
            answer = _call(api, "POST", REVIEW_PATH, body=review_body(check))
        except ApiException as err:
            raise api_error(err, f"asking whether this identity may {check.describe()}") from None
        line = refusal_line(check, (answer or {}).get("status") or {})
        if line:
            lines.append(line)
    return lines
