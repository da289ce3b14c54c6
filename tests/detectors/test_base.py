"""Shared detector pieces: the hysteresis state machine and stable entity ids."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from graywire.detectors.base import RUN_MAX, EntityIndex, Hysteresis, HysteresisConfig


def step(h: Hysteresis, idx: list[int], bad: list[bool]) -> tuple[list[int], list[int]]:
    opened, closed = h.update(np.array(idx, dtype=np.int64), np.array(bad, dtype=bool))
    return opened.tolist(), closed.tolist()


# -- Hysteresis -------------------------------------------------------------------------------------
def test_opens_after_open_after_consecutive_bad_polls() -> None:
    h = Hysteresis(HysteresisConfig(open_after=3, close_after=2), size=2)
    assert step(h, [0, 1], [True, True]) == ([], [])
    assert step(h, [0, 1], [True, False]) == ([], [])  # entity 1's run is broken
    assert step(h, [0, 1], [True, True]) == ([0], [])
    assert h.is_open.tolist() == [True, False]
    assert h.bad_run.tolist() == [3, 1]
    # Staying bad does not open again.
    assert step(h, [0, 1], [True, True]) == ([], [])
    assert step(h, [0, 1], [True, True]) == ([1], [])
    assert h.is_open.tolist() == [True, True]


def test_closes_after_close_after_good_polls_and_a_bad_poll_restarts_the_count() -> None:
    h = Hysteresis(HysteresisConfig(open_after=1, close_after=3), size=1)
    assert step(h, [0], [True]) == ([0], [])
    assert step(h, [0], [False]) == ([], [])
    assert step(h, [0], [False]) == ([], [])
    assert step(h, [0], [True]) == ([], [])  # still open; the good run starts over
    assert h.good_run.tolist() == [0]
    assert step(h, [0], [False]) == ([], [])
    assert step(h, [0], [False]) == ([], [])
    assert step(h, [0], [False]) == ([], [0])
    assert h.is_open.tolist() == [False]
    # Closed and good stays quiet.
    assert step(h, [0], [False]) == ([], [])


def test_absent_entities_keep_their_runs() -> None:
    h = Hysteresis(HysteresisConfig(open_after=3, close_after=2), size=3)
    assert step(h, [0, 1, 2], [True, True, False]) == ([], [])
    assert step(h, [0, 1, 2], [True, True, False]) == ([], [])
    # A collector outage: entity 0 is not polled, its run of two bad polls is kept.
    assert step(h, [1, 2], [False, False]) == ([], [])
    assert h.bad_run.tolist() == [2, 0, 0]
    assert step(h, [0], [True]) == ([0], [])
    # And an open entity absent for many polls does not close.
    for _ in range(5):
        assert step(h, [1, 2], [False, False]) == ([], [])
    assert h.is_open.tolist() == [True, False, False]
    assert step(h, [0], [False]) == ([], [])
    assert step(h, [0], [False]) == ([], [0])


def test_grows_for_new_ids() -> None:
    h = Hysteresis(HysteresisConfig(open_after=1, close_after=1))
    assert h.is_open.size == 0
    assert step(h, [4], [True]) == ([4], [])
    assert h.is_open.tolist() == [False, False, False, False, True]
    assert h.bad_run.tolist() == [0, 0, 0, 0, 1]
    assert h.good_run.tolist() == [0, 0, 0, 0, 0]
    h.grow(3)  # never shrinks
    assert h.is_open.size == 5
    h.grow(7)
    assert h.is_open.tolist() == [False, False, False, False, True, False, False]
    assert h.bad_run.dtype == np.int16 and h.good_run.dtype == np.int16
    assert step(h, [6, 4], [True, False]) == ([6], [4])


def test_empty_update_is_a_no_op() -> None:
    h = Hysteresis(HysteresisConfig(), size=2)
    opened, closed = h.update(np.array([], dtype=np.int64), np.array([], dtype=bool))
    assert opened.size == 0 and closed.size == 0
    assert h.is_open.size == 2


def test_default_config() -> None:
    cfg = HysteresisConfig()
    assert (cfg.open_after, cfg.close_after) == (2, 2)
    with pytest.raises(AttributeError):
        cfg.open_after = 3  # type: ignore[misc]


# -- EntityIndex ------------------------------------------------------------------------------------
def test_ids_are_stable_and_new_keys_are_appended_in_first_seen_order() -> None:
    ix = EntityIndex()
    first = ix.ids(pa.array(["a", "b", "a"]))
    assert first.tolist() == [0, 1, 0]
    assert first.dtype == np.int64
    assert ix.ids(pa.array(["c", "b", "d", "c", "a"])).tolist() == [2, 1, 3, 2, 0]
    assert ix.keys == ["a", "b", "c", "d"]
    # Only known keys: nothing is added.
    assert ix.ids(pa.array(["d", "a"])).tolist() == [3, 0]
    assert ix.keys == ["a", "b", "c", "d"]


def test_dictionary_arrays() -> None:
    ix = EntityIndex()
    assert ix.ids(pa.array(["x", "y"])).tolist() == [0, 1]
    enc = pa.array(["y", "z", "y", "x"]).dictionary_encode()
    assert pa.types.is_dictionary(enc.type)
    assert ix.ids(enc).tolist() == [1, 2, 1, 0]
    # A dictionary entry no row uses gets no id.
    unused = pa.DictionaryArray.from_arrays(pa.array([1, 1], pa.int32()), pa.array(["never", "w"]))
    assert ix.ids(unused).tolist() == [3, 3]
    assert ix.keys == ["x", "y", "z", "w"]


def test_empty_keys() -> None:
    ix = EntityIndex()
    assert ix.ids(pa.array([], type=pa.string())).tolist() == []
    assert ix.keys == []


def test_runs_saturate_instead_of_wrapping() -> None:
    h = Hysteresis(HysteresisConfig(open_after=3, close_after=2), size=1)
    h.bad_run[0] = RUN_MAX - 1  # a port bad for days: its run stops at the top, never negative
    h.is_open[0] = True
    for _ in range(3):
        h.update(np.array([0]), np.array([True]))
    assert int(h.bad_run[0]) == RUN_MAX and h.is_open[0]
    assert step(h, [0], [False]) == ([], []) and step(h, [0], [False]) == ([], [0])
    with pytest.raises(ValueError, match="open_after must be 1 to 32767"):
        HysteresisConfig(open_after=40_000)
