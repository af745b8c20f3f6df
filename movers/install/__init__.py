"""The objects a user applies to a cluster, rendered from the templates packaged next to this module.

``controller.yaml`` (once per cluster: the controller's namespace, ServiceAccount, ClusterRole and binding,
and the movers' shared ClusterRole) and ``movers.yaml`` (once per application namespace: the movers'
ServiceAccount, Role, RoleBinding and ClusterRoleBinding) are the only copy of the shipped RBAC. Each has one
placeholder, ``${NAMESPACE}``, always inside double quotes so that a namespace YAML reads as something else
(``null``, ``123``, ``on``) stays a string; rendering replaces it and nothing else, comments included.

``render_controller(namespace)`` and ``render_movers(namespaces)`` return multi-document YAML for
``kubectl apply -f -``; a namespace that is not a DNS-1123 label is a ``UsageError`` (exit 2).
``objects(text)`` parses a rendering into its objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from movers.errors import UsageError

PLACEHOLDER = "${NAMESPACE}"
DEFAULT_CONTROLLER_NAMESPACE = "cbt-mover-system"
CONTROLLER_SERVICE_ACCOUNT = "cbt-mover-controller"
MOVER_SERVICE_ACCOUNT = "cbt-mover"
CONTROLLER_TEMPLATE = "controller.yaml"
MOVERS_TEMPLATE = "movers.yaml"


def template(name: str) -> str:
    """The text of a packaged template (``CONTROLLER_TEMPLATE``, ``MOVERS_TEMPLATE``)."""
    from importlib.resources import files  # here: every command imports this module (for its defaults)

    return files(__name__).joinpath(name).read_text(encoding="utf-8")


def check_namespace(namespace: str) -> str:
    """``namespace`` when it is a DNS-1123 label (what Kubernetes requires of a namespace name), else
    ``UsageError``."""
    from movers.policy.checks import DNS_LABEL  # here: the policy model (pydantic) stays out of the CLI's start

    if not DNS_LABEL.match(namespace):
        raise UsageError(
            f"invalid namespace {namespace!r}: a namespace name is a DNS-1123 label (at most 63 characters"
            " a-z, 0-9 and '-', starting and ending with a letter or digit)"
        )
    return namespace


def _render(name: str, namespace: str) -> str:
    text = template(name).replace(PLACEHOLDER, check_namespace(namespace))
    return text if text.endswith("\n") else text + "\n"


def render_controller(namespace: str = DEFAULT_CONTROLLER_NAMESPACE) -> str:
    """The cluster-wide objects, the controller's in ``namespace``: apply once per cluster."""
    return _render(CONTROLLER_TEMPLATE, namespace)


def render_movers(namespaces: Iterable[str]) -> str:
    """The movers' objects of each namespace (every one checked before any is rendered), in order, once each."""
    unique = list(dict.fromkeys(check_namespace(ns) for ns in namespaces))
    if not unique:
        raise UsageError("give at least one application namespace (--namespace)")
    return "---\n".join(_render(MOVERS_TEMPLATE, ns) for ns in unique)


def objects(text: str) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML rendering (empty documents skipped)."""
    import yaml

    return [doc for doc in yaml.safe_load_all(text) if doc]
