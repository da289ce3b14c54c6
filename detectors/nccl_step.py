"""Job step-time slowdown: the whole job's collectives got slower and stayed slower.

Peer comparisons cannot see this (every rank moved together), so each communicator group
(communicator, collective, message-size bucket) is compared with its own past. A poll's level
is the collective's own time: per instance, the duration of the rank that arrived last (it
waited for no one), so a compute straggler, which makes every other rank wait, is not a
job-wide slowdown (detectors/nccl_straggler.py names it). The judgement is the median of
the last ``recent_s`` seconds of per-poll step times against the median of the ``ref_s``
seconds before them (a two-window median shift). It opens when the shift is at least
``open_shift`` on ``open_after`` polls in a row; a slow step or a checkpoint shorter than half
the recent window cannot move a median, so it never pages. While open, the reference level is
frozen and the slow samples never enter it. Findings roll up per job.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from detectors.base import EntityIndex
from detectors.findings import Finding
from detectors.robust import group_median


@dataclass(frozen=True, slots=True)
class NcclStepTimeConfig:
    recent_s: float = 300.0  # the window judged: a shift must last half of it to count
    ref_s: float = 1800.0  # the reference window before it
    #: Opens at this relative shift. Below the 10% rule on purpose: a true 10% shift then fires
    #: despite sampling noise in the two medians, and noise alone never reaches it.
    open_shift: float = 0.08
    close_shift: float = 0.04
    open_after: int = 2
    close_after: int = 3
    min_ref: int = 6  # reference samples needed before judging
    min_recent: int = 10  # the recent window holds at least this many samples
    expire_s: float = 3600.0  # a group that stops reporting for this long is dropped


@dataclass
class _Group:
    job: str
    name: str
    samples: deque[tuple[float, float, bool]] = field(default_factory=deque)  # (t, log step, flagged)
    level: float | None = None  # frozen reference while open
    is_open: bool = False
    bad_run: int = 0
    good_run: int = 0
    last: float = 0.0
    evidence: dict[str, Any] = field(default_factory=dict)


class NcclStepTime:
    """Two-window median shift of each communicator group's step time, rolled up per job."""

    name = "nccl_step_time"
    version = "1"
    consumes = "nccl_timing"
    kinds = ("nccl_job_slowdown",)

    def __init__(self, cfg: NcclStepTimeConfig | None = None) -> None:
        self.cfg = cfg or NcclStepTimeConfig()
        self.index = EntityIndex()
        self.groups: dict[int, _Group] = {}
        self.job_open: dict[str, set[int]] = {}

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        dur = batch.column("duration_seconds").to_numpy(zero_copy_only=False)
        ok = np.isfinite(dur) & (dur > 0)
        if not ok.any():
            return []
        if not ok.all():
            batch = batch.filter(pa.array(ok))
            dur = dur[ok]
        gid = self._group_ids(batch)
        used, inv = np.unique(gid, return_inverse=True)
        level = self._levels(batch, np.log(dur), inv, used.size)
        first = np.zeros(used.size, dtype=np.int64)
        first[inv[::-1]] = np.arange(inv.size)[::-1]
        jobs = batch.column("job")
        now = batch.column("time")[0].as_py()
        t = now.timestamp()
        out: list[Finding] = []
        for j, g in enumerate(used.tolist()):
            grp = self.groups.get(g)
            if grp is None:
                grp = self.groups[g] = _Group(str(jobs[int(first[j])].as_py()), self.index.keys[g])
            out += self._step(g, grp, t, float(level[j]), now)
        for g, grp in list(self.groups.items()):
            if t - grp.last > self.cfg.expire_s:
                del self.groups[g]
                if grp.is_open:
                    out += self._roll_up(g, grp, "cleared", now, expired=True)
        return out

    @staticmethod
    def _levels(batch: pa.RecordBatch, x: np.ndarray, inv: np.ndarray, n: int) -> np.ndarray:
        """Per group, the poll's level: the median over its collective instances of the fastest
        rank's (log) duration. The rank that arrived last waited for no one, so its duration is
        the collective's own time: a straggler makes every other rank wait but leaves this
        alone (it is the straggler detector's finding), while a slower fabric moves it. Rows
        without a sequence number fall back to the median of all rows."""
        seq = batch.column("seq")
        if seq.null_count == len(seq):
            return group_median(x, inv, n)
        s = seq.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        rank = batch.column("rank").to_numpy(zero_copy_only=False).astype(np.int64)
        has = s >= 0  # rows without a sequence number: their group's plain median, apart
        level = group_median(x[~has], inv[~has], n) if not has.all() else np.full(n, np.nan)
        if has.any():
            xs, gs, ss, rs = x[has], inv[has], s[has], rank[has]
            # (group, seq) instances, then (instance, rank) values: the median of a rank's rows.
            _, inst = np.unique(np.stack([gs, ss]), axis=1, return_inverse=True)
            inst = inst.ravel()
            span = int(rs.max()) + 1
            vk, v_inv = np.unique(inst * span + rs, return_inverse=True)
            v = group_median(xs, v_inv, vk.size)
            lo = np.full(int(inst.max()) + 1, np.inf)
            np.minimum.at(lo, vk // span, v)
            inst_group = np.zeros(lo.size, dtype=np.int64)
            inst_group[inst] = gs
            with_seq = group_median(lo, inst_group, n)
            level = np.where(np.bincount(gs, minlength=n) > 0, with_seq, level)
        return level

    def _group_ids(self, batch: pa.RecordBatch) -> np.ndarray:
        """Group id (communicator|collective|log2 size) per row; strings only for distinct groups."""
        size = batch.column("message_bytes").fill_null(0).to_numpy(zero_copy_only=False)
        bucket = np.floor(np.log2(np.maximum(size, 1))).astype(np.int64)
        comm, coll = batch.column("communicator"), batch.column("collective")
        if not pa.types.is_dictionary(comm.type):
            comm = comm.dictionary_encode()
        if not pa.types.is_dictionary(coll.type):
            coll = coll.dictionary_encode()
        cc = comm.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        kc = coll.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        combo = (cc * len(coll.dictionary) + kc) * 64 + bucket
        uniq, inv = np.unique(combo, return_inverse=True)
        names = [
            f"{comm.dictionary[int(u // 64 // len(coll.dictionary))]}|"
            f"{coll.dictionary[int((u // 64) % len(coll.dictionary))]}|{int(u % 64)}"
            for u in uniq.tolist()
        ]
        return self.index.ids(pa.array(names, pa.string()))[inv]

    def _step(self, g: int, grp: _Group, t: float, x: float, now: datetime) -> list[Finding]:
        cfg = self.cfg
        grp.last = t
        grp.samples.append((t, x, grp.is_open))
        horizon = t - cfg.recent_s - cfg.ref_s
        while len(grp.samples) > cfg.min_recent + cfg.min_ref and grp.samples[0][0] < horizon:
            grp.samples.popleft()
        # The recent window: the last recent_s seconds, but never fewer than min_recent samples
        # (at a slow poll a two-sample checkpoint must not be half the window).
        n_recent = max(sum(1 for s in grp.samples if s[0] > t - cfg.recent_s), cfg.min_recent)
        if len(grp.samples) <= n_recent:
            return []
        cut = grp.samples[-n_recent - 1][0]  # samples after this time are recent
        recent = [s[1] for s in grp.samples if s[0] > cut]
        if grp.level is not None and grp.is_open:
            ref_level = grp.level
            n_ref = None
        else:
            ref = [s[1] for s in grp.samples if s[0] <= cut and not s[2]]
            if len(ref) < cfg.min_ref:
                return []
            ref_level, n_ref = float(np.median(ref)), len(ref)
        shift = float(np.median(recent)) - ref_level
        bad = shift >= math.log1p(cfg.close_shift if grp.is_open else cfg.open_shift)
        grp.bad_run, grp.good_run = (grp.bad_run + 1, 0) if bad else (0, grp.good_run + 1)
        if not grp.is_open and grp.bad_run >= cfg.open_after:
            grp.is_open = True
            grp.level = ref_level
            # The samples that moved the median are not normal: keep them out of any baseline.
            grp.samples = deque((s[0], s[1], s[0] > cut or s[2]) for s in grp.samples)
            grp.evidence = self._evidence(grp, ref_level, n_ref, shift, cut)
            return self._roll_up(g, grp, "firing", now)
        if grp.is_open and grp.good_run >= cfg.close_after:
            grp.is_open = False
            grp.level = None
            grp.evidence = {**grp.evidence, "after_median_seconds": math.exp(ref_level + shift)}
            return self._roll_up(g, grp, "cleared", now)
        return []

    def _evidence(
        self, grp: _Group, ref: float, n_ref: int | None, shift: float, cut: float
    ) -> dict[str, Any]:
        """Before/after medians, the shift, and when it began: the CUSUM estimate, the split of
        the last two windows after which the samples sit furthest above the halfway level."""
        n = sum(1 for s in grp.samples if s[0] > cut)
        pts = [(s[0], s[1]) for s in list(grp.samples)[-2 * n :]]
        xs = np.array([x for _, x in pts]) - (ref + shift / 2)
        tail = np.cumsum(xs[::-1])[::-1]  # sum from each sample to the newest
        k = int(np.argmax(tail))
        change = pts[k][0]
        # The recent median lags a step (it opens half way through); the samples since the
        # change say where the level went.
        shift = max(shift, float(np.median([x for _, x in pts[k:]])) - ref)
        comm, coll, bucket = grp.name.rsplit("|", 2)
        return {
            "job": grp.job,
            "communicator": comm,
            "collective": coll,
            "size_bucket_log2": int(bucket),
            "before_median_seconds": math.exp(ref),
            "after_median_seconds": math.exp(ref + shift),
            "shift": math.expm1(shift),
            "expected": f"<= {self.cfg.open_shift:.0%} over the reference",
            "change_time": datetime.fromtimestamp(change, tz=UTC).isoformat(),
            "reference_samples": n_ref,
            "recent_window_s": self.cfg.recent_s,
            "reference_window_s": self.cfg.ref_s,
        }

    def _roll_up(
        self, g: int, grp: _Group, status: str, now: datetime, expired: bool = False
    ) -> list[Finding]:
        """One incident per job: it opens with its first slow group and clears with its last."""
        groups = self.job_open.setdefault(grp.job, set())
        if status == "firing":
            first = not groups
            groups.add(g)
            if not first:
                return []
        else:
            groups.discard(g)
            if groups:
                return []
            del self.job_open[grp.job]
        ev = grp.evidence
        if status == "firing":
            summary = (
                f"job {grp.job}: {ev['collective']} in {ev['communicator']} {ev['shift']:.0%} slower since "
                f"{ev['change_time']} ({ev['before_median_seconds'] * 1e3:.2f} ms -> "
                f"{ev['after_median_seconds'] * 1e3:.2f} ms), on every rank: a job-wide slowdown"
            )
        else:
            why = "stopped reporting (job ended?)" if expired else "back at its reference step time"
            summary = f"job {grp.job}: {why}"
        return [
            Finding(
                kind="nccl_job_slowdown",
                entity=grp.job,
                status=status,  # type: ignore[arg-type]
                time=now,
                severity="warning",
                summary=summary,
                detector=f"{self.name}/{self.version}",
                score=float(ev.get("shift", 0.0)),
                confidence=float(min(1.0, ev.get("shift", 0.0) / (2 * self.cfg.open_shift))),
                evidence=dict(ev),
            )
        ]
