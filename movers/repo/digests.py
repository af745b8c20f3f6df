"""Block digests: what a scan compares to find the blocks that changed since the parent.

Every map page may carry one digest per ``DIGEST_BLOCK`` bytes of volume it covers (blocks are
aligned to absolute volume offsets; the last block of a volume is clipped to its capacity).
A digest is the first ``DIGEST_LEN`` bytes of the repository's content hash (the hash of its chunk
ids, ``ContentHash.block_digest`` in ``movers.repo.contenthash``) of the block as the map restores it,
or ``UNKNOWN`` when the backup did not read the whole block (a CBT extent covering part of it).
Invariant: a known digest always describes the map's content for that block, so a scan may
treat a block whose digest matches as unchanged.
"""

from __future__ import annotations

DIGEST_BLOCK = 64 * 1024
DIGEST_LEN = 16
UNKNOWN = b"\xff" * DIGEST_LEN


def block_span(index: int, capacity: int) -> tuple[int, int]:
    """``[start, end)`` of digest block ``index`` of a volume of ``capacity`` bytes."""
    start = index * DIGEST_BLOCK
    return start, min(start + DIGEST_BLOCK, capacity)


def recorded(digests: bytes, page_start: int, block: int) -> bytes | None:
    """The digest of ``block`` that a page starting at volume offset ``page_start`` records in ``digests`` (its
    block digests), or None when it records none (``UNKNOWN``, or a page without digests)."""
    i = (block - page_start // DIGEST_BLOCK) * DIGEST_LEN
    digest = digests[i : i + DIGEST_LEN]
    return digest if len(digest) == DIGEST_LEN and digest != UNKNOWN else None


def blocks_touching(start: int, end: int) -> range:
    """Indexes of the digest blocks that ``[start, end)`` touches."""
    return range(start // DIGEST_BLOCK, -(-end // DIGEST_BLOCK))


def blocks_within(start: int, end: int, capacity: int) -> range:
    """Indexes of the digest blocks lying wholly inside ``[start, end)`` (clipped blocks count)."""
    first = -(-start // DIGEST_BLOCK)
    last = end // DIGEST_BLOCK if end < capacity else -(-end // DIGEST_BLOCK)
    return range(first, max(first, last))
