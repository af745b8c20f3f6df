"""Names of the objects a run derives from other names (a run id and a PVC name): valid whatever those are.

A PVC name is a DNS-1123 subdomain of up to 253 characters (dots allowed); the objects a run names after it
(the claim a mover reads, the mover pod, a per-PVC VolumeSnapshot) must be valid names too, and distinct
for distinct PVCs. ``derived_name(*parts)`` joins the parts with ``-``; when that is a DNS-1123 label
(at most 63 characters of ``[a-z0-9-]``, alphanumeric at both ends: valid as the name of any object, as a
pod's hostname and as a label value) it is the name. Otherwise it is the joined text made one (lower case,
other characters turned into ``-``, cut to fit) and ``-`` + 8 hex digits of the joined text's SHA-256, so
that names differing only beyond the cut, or only in a ``.`` against a ``-``, stay different.
"""

from __future__ import annotations

import hashlib
import re

MAX_LENGTH = 63  # a DNS-1123 label
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_dns_label(name: str) -> bool:
    """Whether ``name`` is a DNS-1123 label (RFC 1123: at most 63 of ``[a-z0-9-]``, alphanumeric ends)."""
    return len(name) <= MAX_LENGTH and _DNS_LABEL.fullmatch(name) is not None


def derived_name(*parts: str, max_length: int = MAX_LENGTH) -> str:
    """``parts`` joined by ``-`` as a DNS-1123 label of at most ``max_length`` characters (see the module doc)."""
    if not 10 <= max_length <= MAX_LENGTH:
        raise ValueError(f"max_length must be between 10 and {MAX_LENGTH}")
    joined = "-".join(str(p) for p in parts)
    if len(joined) <= max_length and is_dns_label(joined):
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:8]
    readable = re.sub(r"[^a-z0-9]+", "-", joined.lower())[: max_length - 9].strip("-")
    return f"{readable}-{digest}" if readable else digest
