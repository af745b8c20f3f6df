"""Sizes as people read them."""

from __future__ import annotations


def human_bytes(n: float | None, missing: str = "-") -> str:
    """``n`` bytes in B/KiB/MiB/GiB/TiB (``512 B``, ``1.5 MiB``); ``missing`` when ``n`` is None."""
    if n is None:
        return missing
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
