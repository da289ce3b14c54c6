"""The figures the fabric state holds per port and per channel, against the plain numpy they replace."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import PFC_PRIORITIES
from graywire.service.state.figures import port_figures
from graywire.service.state.nccl import NcclSnapshot, per_channel_max


def test_pfc_figures_are_the_max_and_sum_over_priorities_nan_only_when_all_are() -> None:
    rng = np.random.default_rng(7)
    n = 2000
    cols: dict[str, pa.Array] = {"port": pa.array([f"p{i}" for i in range(n)])}
    for d in ("rx", "tx"):
        for p in PFC_PRIORITIES:
            for what, scale in (("seconds", 1.5), ("frames", 1e6)):
                v = rng.random(n) * scale
                v[rng.random(n) < 0.6] = np.nan  # most priorities unused, some ports none at all
                v[::331] = np.inf
                cols[f"pfc{p}_{d}_pause_{what}_per_second"] = pa.array(v, from_pandas=True)
    got = port_figures(pa.RecordBatch.from_pydict(cols))

    def stacked(d: str, what: str) -> np.ndarray:
        names = (f"pfc{p}_{d}_pause_{what}_per_second" for p in PFC_PRIORITIES)
        return np.vstack([cols[name].to_numpy(False) for name in names])

    for d in ("rx", "tx"):
        secs, frames = stacked(d, "seconds"), stacked(d, "frames")
        none = np.isnan(secs).all(axis=0)
        with np.errstate(all="ignore"):
            ratio = np.where(none, np.nan, np.clip(np.nanmax(np.where(none, 0, secs), axis=0), 0, 1))
        total = np.where(np.isnan(frames).all(axis=0), np.nan, np.nansum(frames, axis=0))
        assert none.any() and np.array_equal(got[f"pause_ratio_{d}"], ratio, equal_nan=True)
        assert np.array_equal(got[f"pause_frames_{d}"], total, equal_nan=True)


def test_worst_ratio_per_channel_whatever_the_channel_numbers() -> None:
    channel = np.array([3, 0, 3, 17, 0, -1, 17, 3], dtype=np.int16)
    ratio = np.array([1.0, np.nan, 2.5, np.nan, 0.9, 1.1, np.nan, np.inf])
    snap = NcclSnapshot(pa.array(["h"] * 8), np.arange(8), channel, np.ones(8), ratio, ranks=8)
    channels, worst = per_channel_max(snap)
    assert channels.tolist() == [-1, 0, 3, 17]  # as np.unique would list them
    assert np.array_equal(worst, [1.1, 0.9, np.inf, np.nan], equal_nan=True)  # all NaN: NaN


def test_every_figure_the_state_computes_is_exported_and_nothing_else() -> None:
    """``/metrics`` names what ``state.figures`` computes: a figure without a series is
    computed for nobody, a series without a figure would fail at scrape time."""
    from graywire.service.metrics.ports import PORT_SERIES
    from graywire.service.state.figures import FIGURES

    assert sorted({s.figure for s in PORT_SERIES}) == sorted(FIGURES)
    rates = pa.RecordBatch.from_pydict({"port": pa.array(["a"])})
    assert sorted(port_figures(rates)) == sorted(FIGURES)
