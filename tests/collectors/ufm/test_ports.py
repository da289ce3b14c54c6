"""Port keys and the per-spelling cache: stable ids, one resolution per spelling, bounded growth."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.ufm.ports import PortKeys, SpellingCache


def fabric() -> Fabric:
    return Fabric.from_specs(
        {"h": "host", "sw": "leaf"},
        [PortSpec("h", "mlx5_0", guid="0xa1", num=1), PortSpec("sw", "p1", guid="0xb0", num=1),
         PortSpec("sw", "p2", guid="0xb0", num=2)],
        [],
    )  # fmt: skip


def test_fabric_ports_first_then_unknown_guids_in_order_of_sight() -> None:
    keys = PortKeys(fabric())
    dictionary = keys.dictionary
    assert keys.resolve_ids(["0XB0", "a1", "0x00b0"], [2, 1, 1]).tolist() == [2, 0, 1]
    assert keys.dictionary is dictionary  # nothing new: the same array object
    assert keys.resolve_ids(["0xc0", None, ""], [7, 1, 1]).tolist() == [3, -1, -1]
    assert keys.dictionary.to_pylist() == ["h/mlx5_0", "sw/p1", "sw/p2", "0x00000000000000c0/7"]
    with pytest.raises(ValueError, match="not a GUID: 'g00d'"):
        keys.resolve_ids(["g00d"], [1])


def test_spelling_cache_resolves_each_spelling_once() -> None:
    calls: list[list[str]] = []

    def resolve(new: pa.Array) -> np.ndarray:
        calls.append(new.to_pylist())
        return np.array([len(s) for s in new.to_pylist()], np.int32)

    cache = SpellingCache()
    assert cache.lookup(pa.array(["a", "bb"]), resolve).tolist() == [1, 2]
    assert cache.lookup(pa.array(["bb", "ccc", "a"]), resolve).tolist() == [2, 3, 1]
    assert calls == [["a", "bb"], ["ccc"]]


def test_spelling_cache_forgets_when_spellings_churn() -> None:
    cache = SpellingCache()
    for k in range(6):
        cache.lookup(pa.array([f"{k}-{i}" for i in range(1000)]), lambda new: np.zeros(len(new), np.int32))
    assert len(cache.known) <= SpellingCache.MAX_GROWTH * 1024 + 1000


def test_spelling_cache_takes_a_poll_like_the_one_before_as_it_was() -> None:
    cache = SpellingCache()
    first = cache.lookup(pa.array(["a", "bb"]), lambda new: np.array([5, 6], np.int32))
    again = cache.lookup(pa.array(["a", "bb"]), lambda new: pytest.fail("looked up as new"))
    assert first.tolist() == again.tolist() == [5, 6]
    again[0] = 9  # the caller's copy
    assert cache.lookup(pa.array(["a", "bb"]), lambda new: np.zeros(0, np.int32)).tolist() == [5, 6]
    assert cache.lookup(pa.array(["bb", "a"]), lambda new: np.zeros(0, np.int32)).tolist() == [6, 5]
