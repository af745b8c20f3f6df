"""Create the caps on mover and writer pods (Prefect global concurrency limits, ``tasks.caps``); safe to run again.

    python -m deploy.limits                                  # the defaults: 8 movers, 8 writers, 1 of each per node
    python -m deploy.limits --movers 4 --movers-per-node 2   # change them
    python -m deploy.limits --class ssd=2 --driver ebs.csi.aws.com=6   # movers of a class / a driver

Idempotent. A limit that does not exist is created with the number given, else the default
(``tasks.caps.CapSettings``); an existing one is changed only when its number is given here, so that a number an
operator set in the UI (``prefect gcl update``) survives ``make pools``. The per-node numbers are kept in the
Prefect Variable ``cbt-mover-caps`` (runs create a node's limit from it the first time they meet the node); given
here, they are written there and to every existing node limit of that role. ``--class``/``--driver`` caps (movers
and writers together: ``--class-role``) exist only where created here. Talks to the API only through the Prefect
client.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tasks.caps import MOVERS, PREFIX, SETTINGS_VARIABLE, WRITERS, CapSettings, class_limit, cluster_limit, driver_limit


def _set(client: Any, name: str, limit: int | None, default: int) -> str:
    """Limit ``name`` created with ``limit`` (None: ``default``), or set to ``limit`` if given; what was done."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    try:
        current = client.read_global_concurrency_limit_by_name(name)
    except ObjectNotFound:
        client.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name=name, limit=default if limit is None else limit)
        )
        return "created"
    if limit is None or current.limit == limit:
        return "unchanged"
    client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=limit))
    return "updated"


def ensure_limits(
    movers: int | None = None,
    writers: int | None = None,
    movers_per_node: int | None = None,
    writers_per_node: int | None = None,
    classes: dict[str, int] | None = None,
    drivers: dict[str, int] | None = None,
    roles: tuple[str, ...] = (MOVERS, WRITERS),
) -> dict[str, str]:
    """Ensure the limits on the API of the current Prefect settings (see the module's doc); ``{name: created |
    updated | unchanged}``, the Variable under its own name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate

    defaults = CapSettings()
    done: dict[str, str] = {}
    with get_client(sync_client=True) as client:
        done[cluster_limit(MOVERS)] = _set(client, cluster_limit(MOVERS), movers, defaults.movers)
        done[cluster_limit(WRITERS)] = _set(client, cluster_limit(WRITERS), writers, defaults.writers)
        for role in roles:
            for name, n in (classes or {}).items():
                done[class_limit(role, name)] = _set(client, class_limit(role, name), n, n)
            for name, n in (drivers or {}).items():
                done[driver_limit(role, name)] = _set(client, driver_limit(role, name), n, n)
        variable = client.read_variable_by_name(SETTINGS_VARIABLE)
        stored = variable.value if variable is not None and isinstance(variable.value, dict) else {}
        wanted = defaults.variable() | stored
        given = {"movers_per_node": movers_per_node, "writers_per_node": writers_per_node}
        wanted |= {k: v for k, v in given.items() if v is not None}
        if variable is None:
            client.create_variable(VariableCreate(name=SETTINGS_VARIABLE, value=wanted))
            done[SETTINGS_VARIABLE] = "created"
        elif wanted != variable.value:
            client.update_variable(VariableUpdate(name=SETTINGS_VARIABLE, value=wanted))
            done[SETTINGS_VARIABLE] = "updated"
        else:
            done[SETTINGS_VARIABLE] = "unchanged"
        for role, n in ((MOVERS, movers_per_node), (WRITERS, writers_per_node)):
            if n is not None:
                for limit in _node_limits(client, role):
                    done[limit] = _set(client, limit, n, n)
    return done


def _node_limits(client: Any, role: str) -> list[str]:
    """The names of the existing node limits of ``role``."""
    prefix, names, offset = f"{PREFIX}-{role}-node-", [], 0
    while True:
        page = client.read_global_concurrency_limits(limit=200, offset=offset)
        names += [limit.name for limit in page if limit.name.startswith(prefix)]
        if len(page) < 200:
            return names
        offset += 200


def _caps(values: list[str], flag: str) -> dict[str, int]:
    """``NAME=N`` pairs as a mapping; a bad one is a usage error."""
    out = {}
    for value in values:
        name, _, n = value.partition("=")
        if not name or not n.isdigit():
            raise ValueError(f"{flag} takes NAME=N (N slots, 0 or more), not {value!r}")
        out[name] = int(n)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.limits", description=__doc__.split("\n\n")[0])
    d = CapSettings()
    count = {"type": int, "metavar": "N"}
    parser.add_argument("--movers", **count, help=f"mover pods in the cluster (created with {d.movers})")
    parser.add_argument("--writers", **count, help=f"writer pods in the cluster (created with {d.writers})")
    parser.add_argument("--movers-per-node", **count, help=f"mover pods per node (default {d.movers_per_node})")
    parser.add_argument("--writers-per-node", **count, help=f"writer pods per node (default {d.writers_per_node})")
    parser.add_argument("--class", dest="classes", action="append", default=[], metavar="CLASS=N")
    parser.add_argument("--driver", dest="drivers", action="append", default=[], metavar="DRIVER=N")
    args = parser.parse_args(argv)
    for flag in ("movers", "writers", "movers_per_node", "writers_per_node"):
        if getattr(args, flag) is not None and getattr(args, flag) < 0:
            print(f"error: --{flag.replace('_', '-')} must be 0 or more", file=sys.stderr)
            return 2
    try:
        classes, drivers = _caps(args.classes, "--class"), _caps(args.drivers, "--driver")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import httpx
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    if not api:
        print("error: PREFECT_API_URL is not set: limits belong to a running Prefect server", file=sys.stderr)
        return 2
    try:
        done = ensure_limits(args.movers, args.writers, args.movers_per_node, args.writers_per_node, classes, drivers)
    except httpx.HTTPError as err:
        print(f"error: Prefect API {api}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    for name, what in done.items():
        print(f"{name}: {what} ({api})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
