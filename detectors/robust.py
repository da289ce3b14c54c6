"""Robust statistics over groups, vectorized: medians and MADs for many groups at once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


def group_median(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of ``values`` within each group id in ``0..n_groups-1`` (NaN for empty groups).

    Sorted by value, then stably by group: the values come out as ``lexsort((values, groups))``
    orders them (equal values in another order, which no median sees), several times faster,
    the group pass a radix sort when the ids fit 16 bits.
    """
    counts = np.bincount(groups, minlength=n_groups)
    out = np.full(n_groups, np.nan)
    if values.size and counts.max() == 1:  # one value a group (a rank's one channel): itself
        out[groups] = (values + values) / 2  # as the general case computes it, NaN and all
        return out
    by_value = np.argsort(values)
    narrow = np.uint16 if n_groups <= 2**16 else np.int64
    order = by_value[np.argsort(groups[by_value].astype(narrow, copy=False), kind="stable")]
    v_sorted = values[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    lo = starts[has] + (counts[has] - 1) // 2
    hi = starts[has] + counts[has] // 2
    out[has] = (v_sorted[lo] + v_sorted[hi]) / 2
    return out


def group_median_mad(values: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-group median and median absolute deviation (unscaled)."""
    med = group_median(values, groups, n_groups)
    mad = group_median(np.abs(values - med[groups]), groups, n_groups)
    return med, mad


def median_through(values: np.ndarray, transform: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float]:
    """``median(values)`` and ``median(transform(values))`` for an increasing ``transform``,
    from one partition: the middle elements are the same ones either way (``values`` finite,
    at least one)."""
    n = values.size
    lo, hi = (n - 1) // 2, n // 2
    part = np.partition(values, (lo, hi) if lo != hi else lo)
    mid = part[[lo, hi]]
    return float(mid.mean()), float(transform(mid).mean())


def sorted_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for 1-D integer keys, by one sort: numpy's own
    hashes first and then sorts, several times slower on large arrays."""
    if not keys.size:
        return keys[:0], np.zeros(0, dtype=np.intp)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.empty(ordered.size, dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(ordered.size, dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse
