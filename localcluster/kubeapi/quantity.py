"""Resource quantities as the API server parses and writes them (``resource.Quantity``).

``parse(text)`` reads a quantity exactly as ``resource.ParseQuantity`` does: the same scanner,
suffixes (binary ``Ki``..``Ei``, decimal ``n``..``E``, exponents ``e3``/``E-2``), rounding up to
nano units, the cap at 2^63-1 for binary quantities, and the same three errors (``FORMAT_ERROR``
is the one clients see most). ``str(quantity)`` is what the server writes back: the input itself
when ``ParseQuantity`` keeps it (already canonical for its suffix type), otherwise the canonical
form (``1024Mi`` -> ``1Gi``, ``0.5Gi`` -> ``512Mi``, ``1000M`` -> ``1G``, ``1.5`` -> ``1500m``,
plain byte counts stay decimal).

``from_json(value)`` accepts what a JSON body holds (a string, a number, or null, which is zero).
Quantities compare by value (``<``, ``==``, ...); ``value()`` rounds up to an integer as
``Quantity.Value()`` does.
"""

from __future__ import annotations

import functools
from typing import Any

SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
FORMAT_ERROR = f"quantities must match the regular expression '{SPLIT_RE}'"
NUMERIC_ERROR = "unable to parse numeric part of quantity"
SUFFIX_ERROR = "unable to parse quantity's suffix"

DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"
_DECIMAL = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX = {e: s for s, e in _DECIMAL.items()}
_BINARY_SUFFIX = {e // 10: s for s, e in _BINARY.items()}
_NANO = 10**9
_MAX_INT64 = 2**63 - 1
_SUFFIX_CHARS = set("eEinumkKMGTP")
_DIGITS = set("0123456789")


class QuantityError(ValueError):
    """A string that is not a quantity; ``str()`` is the API server's message."""


@functools.total_ordering
class Quantity:
    """A parsed quantity: its value in nano units, its format and, when kept, its original text."""

    __slots__ = ("nanos", "format", "_text")

    def __init__(self, nanos: int, fmt: str, text: str | None = None) -> None:
        self.nanos = nanos
        self.format = fmt
        self._text = text

    def __str__(self) -> str:
        return self._text if self._text is not None else _canonical(self.nanos, self.format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.nanos == other.nanos

    def __lt__(self, other: Quantity) -> bool:
        return self.nanos < other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def value(self) -> int:
        """The value rounded up (away from zero) to an integer, as ``Quantity.Value()``."""
        q, r = divmod(abs(self.nanos), _NANO)
        return (q + (1 if r else 0)) * (1 if self.nanos >= 0 else -1)

    def milli_value(self) -> int:
        q, r = divmod(abs(self.nanos), 10**6)
        return (q + (1 if r else 0)) * (1 if self.nanos >= 0 else -1)


ZERO = Quantity(0, DECIMAL_SI)


def from_json(value: Any) -> Quantity:
    """A quantity from a decoded JSON value, as ``Quantity.UnmarshalJSON`` reads the raw bytes."""
    if value is None:
        return Quantity(0, "")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(FORMAT_ERROR)
    text = value.strip() if isinstance(value, str) else (str(value) if isinstance(value, int) else repr(value))
    return parse(text)


def parse(text: str) -> Quantity:
    """``resource.ParseQuantity``."""
    if not text:
        raise QuantityError(FORMAT_ERROR)
    if text == "0":
        return Quantity(0, DECIMAL_SI, "0")
    positive, value, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret(suffix)

    precision, scale, mantissa = 0, 0, 1
    if fmt in (DECIMAL_EXPONENT, DECIMAL_SI):
        scale = exponent
        precision = 18 - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        precision = -1
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            shifted = num + denom
            number = int(shifted)
            result = number * mantissa
            if result <= _MAX_INT64:
                result = result if positive else -result
                if fmt == BINARY_SI:
                    keep = exponent % 10 == 0 and number & 0x07 != 0
                else:
                    keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return Quantity(result * 10 ** (scale + 9), fmt, text if keep else None)

    unscaled, dec_scale = _decimal(value)
    if base == 10:
        dec_scale -= exponent
    else:
        unscaled <<= exponent
    amount = abs(unscaled)
    if amount:  # round non-zero values up to whole nano units
        if dec_scale > 9:
            q, r = divmod(amount, 10 ** (dec_scale - 9))
            amount = q + (1 if r else 0)
        else:
            amount *= 10 ** (9 - dec_scale)
    if fmt == BINARY_SI and amount > _MAX_INT64 * _NANO:
        amount = _MAX_INT64 * _NANO
    if fmt == BINARY_SI and 0 < amount < _NANO:
        fmt = DECIMAL_SI
    return Quantity(amount if unscaled >= 0 else -amount, fmt)


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: (positive, value, numerator, denominator, suffix)."""
    positive, pos, end = True, 0, len(text)
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value, suffix_start = text[:pos], pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(FORMAT_ERROR)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], DECIMAL_SI
    if suffix in _BINARY:
        return 2, _BINARY[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        digits = rest[1:] if rest[:1] in "+-" else rest
        if digits.isdigit() and digits.isascii() and int(rest) < 2**63:
            return 10, int(rest), DECIMAL_EXPONENT
    raise QuantityError(SUFFIX_ERROR)


def _decimal(value: str) -> tuple[int, int]:
    """A signed decimal string as (unscaled, scale): value == unscaled * 10**-scale."""
    sign = -1 if value.startswith("-") else 1
    body = value.lstrip("+-")
    whole, _, frac = body.partition(".")
    if not (whole + frac) or not (whole + frac).isdigit():
        raise QuantityError(NUMERIC_ERROR)
    return sign * int(whole + frac), len(frac)


def _canonical(nanos: int, fmt: str) -> str:
    """``Quantity.CanonicalizeBytes``: the largest suffix that loses no precision."""
    if nanos == 0:
        return "0"
    if fmt == BINARY_SI and (-1024 * _NANO < nanos < 1024 * _NANO or nanos % _NANO):
        fmt = DECIMAL_SI
    if fmt == BINARY_SI:
        number, exponent = _remove_factors(nanos // _NANO, 1024)
        return f"{number}{_BINARY_SUFFIX.get(exponent, '')}"
    number, exponent = _remove_factors(nanos, 10)
    exponent -= 9
    shift = exponent % 3
    number, exponent = number * 10**shift, exponent - shift
    if fmt == DECIMAL_EXPONENT:
        return f"{number}e{exponent}" if exponent else str(number)
    return f"{number}{_DECIMAL_SUFFIX.get(exponent, '')}"


def _remove_factors(value: int, base: int) -> tuple[int, int]:
    times, sign, value = 0, (-1 if value < 0 else 1), abs(value)
    while value >= base and value % base == 0:
        value //= base
        times += 1
    return sign * value, times
