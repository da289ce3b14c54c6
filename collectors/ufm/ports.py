"""From what UFM calls a port to the canonical port key, cached across polls.

UFM names ports by GUID and port number, spelled differently from line to line (``0x0002c903…``,
``2c903…``). Ports are normalized and resolved with Arrow string and hash kernels over whole
arrays, once per distinct *spelling* (a Prometheus label block, a CSV ``guid|num`` triple), and
remembered: later polls map their distinct spellings to cached port ids with one vectorized hash
lookup (``pyarrow.compute.index_in``). The port dictionary of the batches is one Arrow array reused
for every poll (the fabric's own key array when every port is known), so the rates stage and
detectors hit their dictionary caches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric


class PortKeys:
    """Canonical port keys with stable ids: the fabric's ports first (in fabric order), then any
    unknown GUIDs in order of first sight, as ``0x<guid>/<port number>`` (see KeyResolver).

    The fabric's GUIDs are indexed as Arrow arrays (``guid|number`` and bare GUID), so both the
    index and every lookup are hash kernels over whole arrays, not Python per port.
    """

    def __init__(self, fabric: Fabric | None) -> None:
        self._fabric_array = fabric.key_array if fabric is not None else None
        self.keys: list[str] = list(fabric.keys) if fabric is not None else []
        self._array: pa.Array | None = self._fabric_array
        self._pairs, self._pair_ids, self._guids, self._guid_ids = _fabric_index(fabric)

    def resolve_ids(
        self,
        guids: Sequence[str | None] | pa.Array,
        nums: Sequence[int | None] | pa.Array,
        *,
        lenient: bool = False,
    ) -> np.ndarray:
        """Port ids for (GUID, port number) pairs; -1 where the GUID is missing.

        GUIDs are normalized vectorized (:func:`normalize_guids`), then looked up as
        :class:`KeyResolver` does: (GUID, number), then the GUID alone, else ``0x<guid>/<number>``.
        Raises ValueError naming the value when a GUID is not a GUID (garbage, not a port), or,
        when ``lenient``, gives it :data:`BAD` so the caller skips (and counts) that record.
        """
        norm, bad = _normalized(guids)
        if bad.any() and not lenient:
            raise ValueError(f"not a GUID: {_first(guids, bad)!r}")
        num = nums if isinstance(nums, pa.Array) else pa.array(list(nums), pa.int64())
        num = num.cast(pa.int64())
        out = np.full(len(norm), -1, dtype=np.int32)
        out[bad] = BAD
        by_pair = pc.index_in(pc.binary_join_element_wise(norm, num.cast(pa.string()), "|"), self._pairs)
        by_guid = pc.index_in(norm, self._guids)
        hit = by_pair.is_valid().to_numpy(zero_copy_only=False)
        out[hit] = self._pair_ids[by_pair.drop_null().to_numpy()]
        guid_hit = by_guid.is_valid().to_numpy(zero_copy_only=False) & ~hit
        out[guid_hit] = self._guid_ids[by_guid.filter(pa.array(guid_hit)).to_numpy()]
        # Not in the inventory: a key of its own (port number 1 when it has none, or 0).
        other = pa.array(np.flatnonzero(norm.is_valid().to_numpy(zero_copy_only=False) & ~hit & ~guid_hit))
        if len(other):
            n = num.take(other)
            n = pc.if_else(pc.equal(pc.fill_null(n, 0), 0), 1, n).cast(pa.string())
            out[other.to_numpy()] = self._ids_of(pc.binary_join_element_wise(norm.take(other), n, "/"))
        return out

    def _ids_of(self, keys: pa.Array) -> np.ndarray:
        """Ids of port keys, new keys appended in order of first sight."""
        pos = pc.index_in(keys, self.dictionary)
        ids = pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
        new = np.flatnonzero(ids < 0)
        if new.size:
            enc = pc.dictionary_encode(keys.take(pa.array(new)))
            ids[new] = len(self.keys) + enc.indices.to_numpy(zero_copy_only=False)
            self.keys.extend(enc.dictionary.to_pylist())
            self._array = None
        return ids

    @property
    def dictionary(self) -> pa.Array:
        """The port dictionary; the same object from poll to poll until a new port appears."""
        if self._array is None or len(self._array) != len(self.keys):
            self._array = pa.array(self.keys, type=pa.string())
        return self._array

    def port_column(self, ids: np.ndarray) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(ids.astype(np.int32, copy=False)), self.dictionary)


def _fabric_index(fabric: Fabric | None) -> tuple[pa.Array, np.ndarray, pa.Array, np.ndarray]:
    """The fabric's ports by ``guid|number`` (where the number is known; the last port wins) and
    by GUID alone (GUIDs that name one port only: a switch's ports share their node's), as
    :meth:`KeyResolver.from_fabric` indexes them. Raises ValueError for a GUID that is none."""
    if fabric is None or not fabric.guids:
        empty = pa.array([], pa.string())
        return empty, np.zeros(0, np.int32), empty, np.zeros(0, np.int32)
    raw = pa.array(fabric.guids, pa.string())
    norm = normalize_guids(raw)
    blank = pc.fill_null(pc.equal(raw, ""), True)
    blanks = pc.and_(norm.is_null(), pc.invert(blank)).to_numpy(zero_copy_only=False)
    if blanks.any():  # only blanks: what the normalizer takes for a missing GUID
        raise ValueError(f"not a GUID: {_first(raw, blanks)!r}")
    nums = fabric.port_num if fabric.port_num is not None else np.zeros(len(fabric.guids), np.int16)
    num = pa.array(nums.astype(np.int64), mask=nums == 0)
    ports = np.arange(len(fabric.guids))

    def last_of(values: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        enc = pc.dictionary_encode(values)
        codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        last = np.full(len(enc.dictionary), -1, np.int64)
        np.maximum.at(last, codes[codes >= 0], ports[codes >= 0])
        return enc.dictionary, last.astype(np.int32), np.bincount(codes[codes >= 0], minlength=len(last))

    pairs, pair_ids, _ = last_of(pc.binary_join_element_wise(norm, num.cast(pa.string()), "|"))
    guids, guid_ids, count = last_of(norm)
    once = count == 1
    return pairs, pair_ids, guids.filter(pa.array(once)), guid_ids[once]


#: The id :meth:`PortKeys.resolve_ids` gives a record whose GUID or port number is garbage.
BAD = -2


def _first(values: Sequence[str | None] | pa.Array, mask: np.ndarray) -> object:
    i = int(np.flatnonzero(mask)[0])
    v = values[i]
    return v.as_py() if isinstance(v, pa.Scalar) else v


def _normalized(guids: Sequence[str | None] | pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Normalized GUIDs (null where missing or not a GUID) and the mask of those not a GUID."""
    arr = guids if isinstance(guids, pa.Array) else pa.array(list(guids), pa.string())
    arr = arr.cast(pa.string())
    s = pc.replace_substring(pc.utf8_lower(pc.utf8_trim_whitespace(arr)), ":", "")
    s = pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)
    s = pc.replace_substring_regex(s, "^0x", "")
    ok = pc.fill_null(pc.match_substring_regex(s, "^[0-9a-f]{1,16}$"), True)
    s = pc.if_else(ok, s, pa.scalar(None, pa.string()))
    bad = ~ok.to_numpy(zero_copy_only=False).astype(bool)
    return pc.binary_join_element_wise("0x", pc.utf8_lpad(s, 16, "0"), ""), bad


def normalize_guids(guids: Sequence[str | None] | pa.Array) -> pa.Array:
    """:func:`graywire.collectors.keys.normalize_guid` over an array: ``0x`` + 16 lower-case hex digits.

    Null or empty entries stay null; anything else that is not a GUID raises ValueError.
    """
    arr, bad = _normalized(guids)
    if bad.any():
        raise ValueError(f"not a GUID: {_first(guids, bad)!r}")
    return arr


def same_strings(a: pa.Array, b: pa.Array | None) -> bool:
    """Whether ``b`` holds the same strings as ``a``, in the same order (a memcmp, no hashing)."""
    if b is None or len(a) != len(b) or a.type != b.type:
        return False
    return a is b or bool(pc.all(pc.equal(a, b)).as_py() is not False)


class SpellingCache:
    """Distinct source spellings of a port (strings) -> port id, learned once, looked up vectorized."""

    #: Forget everything when the cache holds this many times more spellings than a poll uses
    #: (labels that change every poll would otherwise grow it without bound).
    MAX_GROWTH = 4

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.known: pa.Array = pa.array([], type=pa.string())
        self.ids = np.zeros(0, dtype=np.int32)
        #: The spellings of the latest lookup and their ids: a poll like the one before (the
        #: usual case) is one comparison, not a hash lookup.
        self.last: pa.Array | None = None
        self.last_ids = np.zeros(0, dtype=np.int32)

    def lookup(self, spellings: pa.Array, resolve_new: Callable[[pa.Array], np.ndarray]) -> np.ndarray:
        """Port id (or -1) for each distinct spelling; ``resolve_new`` is called on unseen ones."""
        spellings = spellings.cast(pa.string()) if spellings.type != pa.string() else spellings
        if same_strings(spellings, self.last):
            return self.last_ids.copy()
        if len(self.known) > self.MAX_GROWTH * max(len(spellings), 1024):
            self.reset()
        out = self._lookup(spellings, resolve_new)
        self.last, self.last_ids = spellings, out.copy()
        return out

    def _lookup(self, spellings: pa.Array, resolve_new: Callable[[pa.Array], np.ndarray]) -> np.ndarray:
        pos = pc.index_in(spellings, value_set=self.known)
        if pos.null_count == 0:
            return self.ids[pos.to_numpy()]
        found = pos.is_valid().to_numpy(zero_copy_only=False)
        out = np.full(len(spellings), -1, dtype=np.int32)
        out[found] = self.ids[pos.filter(pos.is_valid()).to_numpy()]
        new_idx = np.flatnonzero(~found)
        new = spellings.take(pa.array(new_idx))
        new_ids = np.asarray(resolve_new(new), dtype=np.int32)
        out[new_idx] = new_ids
        self.known = pa.concat_arrays([self.known, new])
        self.ids = np.concatenate([self.ids, new_ids])
        return out
