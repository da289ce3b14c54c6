"""Grouped robust statistics against numpy, one group at a time."""

from __future__ import annotations

import numpy as np
import pytest

from graywire.detectors.robust import (
    MAD_TO_SIGMA,
    group_median,
    group_median_mad,
    median_through,
    sorted_codes,
)


def per_group(values: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    med = np.full(n_groups, np.nan)
    mad = np.full(n_groups, np.nan)
    for g in range(n_groups):
        v = values[groups == g]
        if v.size:
            med[g] = np.median(v)
            mad[g] = np.median(np.abs(v - med[g]))
    return med, mad


def test_small_groups_by_hand() -> None:
    values = np.array([5.0, 1.0, 3.0, 10.0, 2.0, 4.0, 7.0])
    groups = np.array([0, 0, 0, 2, 2, 2, 2])
    # group 0: {1, 3, 5} odd; group 1: empty; group 2: {2, 4, 7, 10} even.
    med = group_median(values, groups, 3)
    assert med[0] == 3.0
    assert np.isnan(med[1])
    assert med[2] == 5.5
    med, mad = group_median_mad(values, groups, 3)
    # |v - 3| = {2, 2, 0} -> 2;  |v - 5.5| = {3.5, 1.5, 1.5, 4.5} -> 2.5
    assert mad[0] == 2.0
    assert np.isnan(mad[1])
    assert mad[2] == 2.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_numpy_per_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = [1, 2, 3, 4, 0, 7, 8, 0, 101, 100]  # odd, even, empty
    groups = np.concatenate([np.full(s, g) for g, s in enumerate(sizes)]).astype(np.int64)
    rng.shuffle(groups)
    values = rng.lognormal(0.0, 1.0, groups.size)
    values[::5] = np.round(values[::5], 1)  # some ties
    med, mad = group_median_mad(values, groups, len(sizes))
    want_med, want_mad = per_group(values, groups, len(sizes))
    np.testing.assert_array_equal(np.isnan(med), [s == 0 for s in sizes])
    np.testing.assert_allclose(med, want_med, rtol=0, atol=1e-12, equal_nan=True)
    np.testing.assert_allclose(mad, want_mad, rtol=0, atol=1e-12, equal_nan=True)
    np.testing.assert_allclose(group_median(values, groups, len(sizes)), want_med, atol=1e-12, equal_nan=True)


def test_trailing_empty_groups_and_negative_values() -> None:
    values = np.array([-3.0, -1.0, 4.0, 0.5])
    groups = np.array([1, 1, 1, 0])
    med, mad = group_median_mad(values, groups, 4)
    assert med[:2].tolist() == [0.5, -1.0]
    assert np.isnan(med[2:]).all()
    assert mad[:2].tolist() == [0.0, 2.0]
    assert np.isnan(mad[2:]).all()


def test_no_values() -> None:
    med, mad = group_median_mad(np.array([]), np.array([], dtype=np.int64), 2)
    assert np.isnan(med).all() and med.size == 2
    assert np.isnan(mad).all() and mad.size == 2


def test_input_order_does_not_matter_and_inputs_are_not_modified() -> None:
    rng = np.random.default_rng(7)
    values = rng.normal(size=60)
    groups = rng.integers(0, 6, 60)
    v0, g0 = values.copy(), groups.copy()
    med, mad = group_median_mad(values, groups, 6)
    np.testing.assert_array_equal(values, v0)
    np.testing.assert_array_equal(groups, g0)
    perm = rng.permutation(60)
    med2, mad2 = group_median_mad(values[perm], groups[perm], 6)
    np.testing.assert_array_equal(med, med2)
    np.testing.assert_array_equal(mad, mad2)


def test_mad_to_sigma_recovers_a_normal_standard_deviation() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(10.0, 2.0, 200_000)
    _, mad = group_median_mad(values, np.zeros(values.size, dtype=np.int64), 1)
    assert MAD_TO_SIGMA * mad[0] == pytest.approx(2.0, rel=0.01)


def test_median_through_matches_numpy_for_odd_and_even_sizes() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 10):
        v = rng.exponential(1e3, n)
        med, log_med = median_through(v, lambda x: np.log10(x + 1.0))
        assert med == np.median(v)
        assert log_med == np.median(np.log10(v + 1.0))


def test_group_median_of_single_value_groups_is_the_value() -> None:
    values = np.array([3.0, np.nan, -1.5, 7.0])
    groups = np.array([2, 0, 3, 1])
    assert np.array_equal(group_median(values, groups, 5), [np.nan, 7.0, 3.0, -1.5, np.nan], equal_nan=True)
    assert np.array_equal(group_median(values, groups, 5), per_group(values, groups, 5)[0], equal_nan=True)


def test_sorted_codes_is_numpy_unique_with_inverse() -> None:
    rng = np.random.default_rng(9)
    for keys in (rng.integers(-5, 50, 400), np.array([7]), np.array([], dtype=np.int64), np.full(9, 3)):
        uniq, inv = sorted_codes(keys)
        want_u, want_inv = np.unique(keys, return_inverse=True)
        assert np.array_equal(uniq, want_u) and np.array_equal(inv, want_inv.ravel())
