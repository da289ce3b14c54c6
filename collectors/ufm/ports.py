"""From what UFM calls a port to the canonical port key, cached across polls.

UFM names ports by GUID and port number, spelled differently from line to line (``0x0002c903…``,
``2c903…``). Normalizing and resolving 500,000 ports is Python work, so it is done once per
distinct *spelling* (a Prometheus label block, a CSV ``guid|num`` pair) and remembered: later
polls map their distinct spellings to cached port ids with one vectorized hash lookup
(``pyarrow.compute.index_in``). The port dictionary of the batches is one Arrow array reused
for every poll (the fabric's own key array when every port is known), so the rates stage and
detectors hit their dictionary caches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.base import KeyResolver
from graywire.collectors.keys import port_key
from graywire.collectors.model import Fabric


class PortKeys:
    """Canonical port keys with stable ids: the fabric's ports first (in fabric order), then any
    unknown GUIDs in order of first sight, as ``0x<guid>/<port number>`` (see KeyResolver)."""

    def __init__(self, fabric: Fabric | None) -> None:
        self.resolver = KeyResolver.from_fabric(fabric)
        self._fabric_array = fabric.key_array if fabric is not None else None
        self.keys: list[str] = list(fabric.keys) if fabric is not None else []
        self._index: dict[str, int] = {k: i for i, k in enumerate(self.keys)}
        self._array: pa.Array | None = self._fabric_array

    def id_of(self, key: str) -> int:
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.keys)
            self.keys.append(key)
            self._array = None
        return i

    def resolve_ids(
        self, guids: Sequence[str | None] | pa.Array, nums: Sequence[int | None], *, lenient: bool = False
    ) -> np.ndarray:
        """Port ids for (GUID, port number) pairs; -1 where the GUID is missing.

        GUIDs are normalized vectorized (:func:`normalize_guids`), then looked up as
        :class:`KeyResolver` does: (GUID, number), then the GUID alone, else ``0x<guid>/<number>``.
        Raises ValueError naming the value when a GUID is not a GUID (garbage, not a port), or,
        when ``lenient``, gives it :data:`BAD` so the caller skips (and counts) that record.
        """
        arr, bad = _normalized(guids)
        if bad.any() and not lenient:
            raise ValueError(f"not a GUID: {_first(guids, bad)!r}")
        norm = arr.to_pylist()
        by_port, by_guid = self.resolver.by_guid_port, self.resolver.by_guid
        out = np.full(len(norm), -1, dtype=np.int32)
        out[bad] = BAD
        for i, (g, n) in enumerate(zip(norm, nums, strict=True)):
            if g is None:
                continue
            key = (by_port.get((g, n)) if n is not None else None) or by_guid.get(g) or port_key(g, n or 1)
            out[i] = self.id_of(key)
        return out

    @property
    def dictionary(self) -> pa.Array:
        """The port dictionary; the same object from poll to poll until a new port appears."""
        if self._array is None or len(self._array) != len(self.keys):
            self._array = pa.array(self.keys, type=pa.string())
        return self._array

    def port_column(self, ids: np.ndarray) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(ids.astype(np.int32, copy=False)), self.dictionary)


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

    def lookup(self, spellings: pa.Array, resolve_new: Callable[[pa.Array], np.ndarray]) -> np.ndarray:
        """Port id (or -1) for each distinct spelling; ``resolve_new`` is called on unseen ones."""
        spellings = spellings.cast(pa.string()) if spellings.type != pa.string() else spellings
        if len(self.known) > self.MAX_GROWTH * max(len(spellings), 1024):
            self.reset()
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
