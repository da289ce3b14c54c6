"""The detector interface and the pieces every detector shares.

A detector keeps per-entity state in arrays and turns a batch into findings. Scoring (how
abnormal is each entity now) is separate from deciding (a hysteresis rule that opens after
``open_after`` bad polls in a row and closes after ``close_after`` good ones), so the
decision rule can be tuned without touching the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from detectors.findings import Finding


class Detector(Protocol):
    """``consumes`` is the record a detector reads: ``port_rates`` or ``nccl_timing``."""

    name: ClassVar[str]
    version: ClassVar[str]
    consumes: ClassVar[str]

    def observe(self, batch: pa.RecordBatch) -> list[Finding]: ...


@dataclass(frozen=True, slots=True)
class HysteresisConfig:
    open_after: int = 2
    close_after: int = 2


class Hysteresis:
    """Vectorized open/close state machine over a growing set of entities."""

    def __init__(self, cfg: HysteresisConfig, size: int = 0) -> None:
        self.cfg = cfg
        self.bad_run = np.zeros(size, dtype=np.int32)
        self.good_run = np.zeros(size, dtype=np.int32)
        self.is_open = np.zeros(size, dtype=bool)

    def grow(self, n: int) -> None:
        if n > self.is_open.size:
            extra = n - self.is_open.size
            self.bad_run = np.concatenate([self.bad_run, np.zeros(extra, np.int32)])
            self.good_run = np.concatenate([self.good_run, np.zeros(extra, np.int32)])
            self.is_open = np.concatenate([self.is_open, np.zeros(extra, bool)])

    def update(self, idx: np.ndarray, bad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Feed one poll's verdicts for entities ``idx``; return (newly opened, newly closed).

        Entities not in ``idx`` (no data this poll) keep their runs: a collector outage
        neither opens nor closes anything.
        """
        if idx.size:
            self.grow(int(idx.max()) + 1)
        self.bad_run[idx] = np.where(bad, self.bad_run[idx] + 1, 0)
        self.good_run[idx] = np.where(bad, 0, self.good_run[idx] + 1)
        was = self.is_open[idx]
        opens = ~was & (self.bad_run[idx] >= self.cfg.open_after)
        closes = was & (self.good_run[idx] >= self.cfg.close_after)
        self.is_open[idx[opens]] = True
        self.is_open[idx[closes]] = False
        return idx[opens], idx[closes]


class EntityIndex:
    """Stable integer ids for string entity keys that appear over time (e.g. NCCL ranks).

    Known keys are found with one vectorized hash lookup; only keys never seen before go
    through Python, once each.
    """

    def __init__(self) -> None:
        self.keys: list[str] = []
        self._known = pa.array([], type=pa.string())

    def ids(self, keys: pa.Array) -> np.ndarray:
        """Ids for an array of string keys, assigning new ids in first-seen order."""
        if pa.types.is_dictionary(keys.type):
            keys = keys.cast(pa.string())
        found = pc.index_in(keys, value_set=self._known)
        if found.null_count:
            new = pc.unique(keys.filter(pc.is_null(found))).to_pylist()
            self.keys.extend(new)
            self._known = pa.array(self.keys, type=pa.string())
            found = pc.index_in(keys, value_set=self._known)
        return found.to_numpy(zero_copy_only=False).astype(np.int64)
