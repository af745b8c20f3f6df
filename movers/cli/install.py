"""``cbt-mover install controller|movers``: print the objects to apply, as ``velero install --dry-run -o yaml``.

``controller [--namespace NS]`` (once per cluster) and ``movers --namespace NS [--namespace NS ...]`` (per
application namespace) write multi-document YAML to stdout for ``kubectl apply -f -``
(``movers.install`` renders it). Nothing talks to a cluster.
"""

from __future__ import annotations

import argparse
import sys

from movers import install


def add_parsers(sub) -> None:
    """The ``install`` and its ``controller`` and ``movers`` subcommands, with its handler."""
    p = sub.add_parser(
        "install",
        help="print the Kubernetes objects to apply (kubectl apply -f -): the controller's, or the movers'",
    )
    isub = p.add_subparsers(dest="install_command", required=True, metavar="{controller,movers}")
    q = isub.add_parser(
        "controller",
        help="once per cluster: the flows' namespace, ServiceAccount and ClusterRole, and the movers' ClusterRole",
    )
    q.add_argument(
        "--namespace",
        default=install.DEFAULT_CONTROLLER_NAMESPACE,
        help="where the flow-run Jobs run (default: %(default)s; the Kubernetes work pool's namespace)",
    )
    q = isub.add_parser(
        "movers",
        help="per application namespace (and restore target): the mover pods' ServiceAccount, Role and bindings",
    )
    q.add_argument(
        "--namespace",
        action="append",
        required=True,
        dest="namespaces",
        metavar="NAMESPACE",
        help="an application namespace (repeat for several)",
    )
    p.set_defaults(handler=cmd_install)


def cmd_install(args: argparse.Namespace) -> int:
    if args.install_command == "controller":
        text = install.render_controller(args.namespace)
    else:
        text = install.render_movers(args.namespaces)
    sys.stdout.write(text)
    return 0
