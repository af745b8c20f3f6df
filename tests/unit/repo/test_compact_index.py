"""The compact chunk index (issue 12, maintenance at scale): id tables, the pack table read from index objects,
and chunk resolution over it, against the rules the dict-based index followed."""

from __future__ import annotations

import hashlib
import random

import pytest

from movers.errors import IntegrityError
from movers.repo.ids import IdHash, IdSet, sorted_by_id
from movers.repo.index import FIRST, LAST, MAGIC, TableIndex, encode_index, read_pack_table
from movers.repo.pack import ENTRY, PackEntry
from movers.repo.store import MemoryStore


def ident(*parts) -> bytes:
    return hashlib.sha256(repr(parts).encode()).digest()


def test_id_set_numbers_ids_as_added_and_grows():
    ids = [ident("id", n) for n in range(5000)]
    s = IdSet()
    assert [s.add(i) for i in ids] == list(range(5000))
    assert [s.add(i) for i in ids[:10]] == list(range(10)), "adding again keeps the number"
    assert len(s) == 5000 and list(s) == ids and s.id(4321) == ids[4321]
    assert all(i in s for i in ids) and ident("absent") not in s and s.index(ident("absent")) == -1
    assert s.index(ids[77]) == 77
    with pytest.raises(ValueError):
        s.add(b"short")
    order = sorted_by_id(s, range(0, 5000, 3))
    assert [s.id(n) for n in order] == sorted(ids[0:5000:3])


def test_id_hash_finds_every_record_of_an_id():
    keys = [ident("k", n % 700) for n in range(1000)]  # ids 0..299 twice
    buf = b"".join(k + bytes([n % 256]) * 5 for n, k in enumerate(keys))  # records of 37 bytes, the id first
    h = IdHash(buf, 37, len(keys))
    for n in random.Random(1).sample(range(1000), 1000):
        h.insert(n)
    assert h.find(keys[5]) == [5, 705] and h.find(keys[400]) == [400]
    assert h.first(keys[400]) == 400 and h.first(keys[5]) in (5, 705)
    assert h.find(ident("absent")) == [] and h.first(ident("absent")) == -1
    with pytest.raises(OverflowError):
        h.insert(0)


def entry(cid: bytes, offset: int, size: int = 10) -> PackEntry:
    return PackEntry(cid, offset, size, 2 * size, 0)


def put_index(store, packs) -> str:
    key, data = encode_index(packs)
    store.put(key, data)
    return key


def test_pack_table_is_the_union_of_the_listings_by_offset_first_listing_wins():
    """A pack listed in pieces (a sharded index), twice (an interrupted compaction), out of offset order, and an
    offset listed twice with different chunk ids: entries by offset, the first listing of an offset wins."""
    store = MemoryStore()
    a, b, c = ident("pack a"), ident("pack b"), ident("pack c")
    x = [ident("chunk", n) for n in range(8)]
    objects = [
        [(a, [entry(x[0], 8), entry(x[1], 18)]), (b, [entry(x[2], 8)])],
        [(a, [entry(x[3], 28), entry(x[1], 18)]), (c, [])],
        [(b, [entry(x[4], 40), entry(x[5], 30)]), (a, [entry(x[6], 8)])],  # a at 8 again: x[6] loses
    ]
    keys = sorted(put_index(store, o) for o in objects)
    first_listed = {}  # the rule, computed by hand: key order, then listing order
    read_order = sorted(range(3), key=lambda i: put_index(store, objects[i]))
    for i in read_order:
        for pid, entries in objects[i]:
            known = first_listed.setdefault(pid, {})
            for e in entries:
                known.setdefault(e.offset, e)
    listed, table = read_pack_table(store)
    table.finish()
    assert listed == keys
    got = {table.pack_id(p): table.entries(p) for p in range(len(table))}
    assert got == {pid: [es[o] for o in sorted(es)] for pid, es in first_listed.items()}
    assert [table.pack_id(p) for p in range(len(table))] == list(first_listed), "packs numbered as first listed"
    assert table.records(table.packs.index(a)) == b"".join(
        ENTRY.pack(e.chunk_id, e.offset, e.stored_len, e.raw_len, e.flags) for e in got[a]
    )
    assert [table.fields(n)[0] for n in table.find(x[1])] == [x[1]], "an entry listed twice is one entry"
    assert table.find(ident("absent")) == []


def test_pack_table_reads_an_index_object_larger_than_one_range():
    store = MemoryStore()
    packs = [(ident("p", p), [entry(ident("c", p, n), 8 + 10 * n) for n in range(500)]) for p in range(90)]
    key = put_index(store, packs)
    assert len(store.get(key)) > 1 << 20, "larger than the first range read"
    before = store.requests.as_dict()["range_get"]
    _keys, table = read_pack_table(store)
    table.finish()
    assert store.requests.as_dict()["range_get"] - before == 2
    assert [(table.pack_id(p), table.entries(p)) for p in range(len(table))] == packs
    assert table.order is None, "one run per pack, by offset: no regrouping"


@pytest.mark.parametrize("damage", ["magic", "truncated", "short"])
def test_a_damaged_index_object_is_an_integrity_error(damage):
    store = MemoryStore()
    key, data = encode_index([(ident("p"), [entry(ident("c", n), 8 + 10 * n) for n in range(50)])])
    data = {
        "magic": b"CBTIDX\x09" + data[len(MAGIC) :],
        "truncated": data[:-7],
        "short": data[:4],
    }[damage]
    store.put(key, data)
    with pytest.raises(IntegrityError, match=key):
        read_pack_table(store)


def test_table_index_resolves_a_chunk_as_the_dict_index_did():
    """Usable packs only; packs marked LAST after the others; then the pack seen first, and in it the first
    entry; packs added afterwards keep what is resolved already."""
    store = MemoryStore()
    early, late, listed, gone = (ident("pack", n) for n in range(4))
    shared, only_listed, twice, alone = (ident("chunk", n) for n in range(4))
    put_index(store, [(listed, [entry(shared, 8), entry(only_listed, 18)]), (early, [entry(twice, 30)])])
    put_index(store, [(early, [entry(shared, 50), entry(twice, 8)]), (late, [entry(shared, 8)]), (gone, [])])
    _keys, table = read_pack_table(store)
    table.finish()
    number = {pid: table.packs.index(pid) for pid in (early, late, listed, gone)}
    usable = bytearray(len(table))
    usable[number[early]] = usable[number[late]] = FIRST
    usable[number[listed]] = LAST
    index = TableIndex(table, usable)
    first = min(number[early], number[late])
    assert index.get(shared).pack_id == table.pack_id(first), "an unlisted copy, the pack seen first"
    assert index.get(only_listed).pack_id == listed and index.get(only_listed).offset == 18
    assert (index.get(twice).pack_id, index.get(twice).offset) == (early, 8), "the first entry of the pack"
    assert index.get(alone) is None and alone not in index and shared in index
    index.add_pack(gone, [entry(alone, 8), entry(shared, 99)])
    assert index.get(alone).pack_id == gone and index.get(shared).offset != 99
    assert early in index.packs and gone in index.packs and listed in index.packs and ident("x") not in index.packs


def test_a_drained_table_yields_the_packs_asked_for_last_records_first_and_frees_them():
    store = MemoryStore()
    packs = [(ident("p", p), [entry(ident("c", p, n), 8 + 10 * n) for n in range(5)]) for p in range(4)]
    put_index(store, packs)
    _keys, table = read_pack_table(store)
    table.finish()
    records = {table.pack_id(p): table.records(p) for p in range(len(table))}
    drained = [(table.pack_id(p), rec) for p, rec in table.drain([0, 2, 3])]
    assert drained == [(packs[p][0], records[packs[p][0]]) for p in (3, 2, 0)]
    assert len(table.rec) == 0 and table.chunks is None
