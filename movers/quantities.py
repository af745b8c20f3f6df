"""Kubernetes quantities (``500m``, ``1Gi``, ``1e3``): the one parser, ``kubernetes.utils.parse_quantity``
(exact decimals, the API server's suffixes)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any


def parse_quantity(value: Any) -> Decimal:
    """The exact value of a quantity given as a string or a number; ``ValueError`` for anything else."""
    from kubernetes.utils import parse_quantity as parse

    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, str) and any(c.isspace() for c in value):  # parse() strips them; the API server does not
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return parse(value)


def quantity_bytes(value: Any) -> int | None:
    """Bytes of a size quantity (``"1Gi"``, ``"500M"``, ``1073741824``; a fraction rounds up), None for None."""
    return None if value is None else math.ceil(parse_quantity(value))
