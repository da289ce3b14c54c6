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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.schemas import RecordKind
from graywire.detectors.base import Decision, EntityIndex, Hysteresis, HysteresisConfig, Scores
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.robust import group_median, sorted_codes


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
    #: Per-poll levels kept per group: both windows at a 10 s poll (a faster poll judges
    #: against the last ``max_samples`` polls instead of all of ``ref_s``).
    max_samples: int = 256
    max_groups: int = 16384  # live groups at most; past it new groups are counted, not judged


@dataclass(frozen=True, slots=True, kw_only=True)
class _StepScores(Scores):
    """Per judged group: the shift and the windows it was measured on."""

    shift: np.ndarray  # recent median minus the reference (log seconds)
    ref_level: np.ndarray
    n: np.ndarray  # samples held
    n_recent: np.ndarray  # of which in the recent window (the newest)
    n_ref: np.ndarray  # samples in the reference
    recent: np.ndarray  # ring positions of the recent window, per group


class NcclStepTime:
    """Two-window median shift of each communicator group's step time, rolled up per job.

    State is arrays with a row per live group (a ring of its last ``max_samples`` per-poll
    levels, and its hysteresis), scored and decided for all of a poll's groups at once. A group
    quiet for ``expire_s`` gives its row back; past ``max_groups`` live groups, new groups'
    rows are left out and counted in :attr:`over_capacity`, never judged on half a history.
    """

    name = "nccl_step_time"
    version = "2"
    consumes = RecordKind.NCCL_TIMING
    kinds = (Kind.NCCL_JOB_SLOWDOWN,)

    def __init__(self, cfg: NcclStepTimeConfig | None = None) -> None:
        self.cfg = cfg or NcclStepTimeConfig()
        self.index = EntityIndex(self.cfg.max_groups)
        self.over_capacity = 0  # rows left out because every group row was taken
        k = self.cfg.max_samples
        self._t = np.zeros((0, k))  # sample times, a ring per group row
        self._x = np.zeros((0, k))  # log step time
        self._flag = np.zeros((0, k), dtype=bool)  # taken while open: never part of a reference
        self._head = np.zeros(0, dtype=np.int64)  # next ring position
        self._n = np.zeros(0, dtype=np.int64)  # samples held
        self._level = np.zeros(0)  # frozen reference while open (NaN otherwise)
        self.hyst = Hysteresis(HysteresisConfig(self.cfg.open_after, self.cfg.close_after))
        self._last = np.zeros(0)
        self._jobs: list[str] = []
        self._evidence: dict[int, dict[str, Any]] = {}
        self.job_open: dict[str, set[int]] = {}
        self._next_compaction = 0.0

    @property
    def groups(self) -> int:
        """Live groups (for tests and the bench)."""
        return len(self.index.keys)

    def _grow(self, n: int) -> None:
        have = self._head.size
        if n <= have:
            return
        new = max(n, 2 * have, 64) - have
        k = self.cfg.max_samples
        self._t = np.vstack([self._t, np.zeros((new, k))])
        self._x = np.vstack([self._x, np.zeros((new, k))])
        self._flag = np.vstack([self._flag, np.zeros((new, k), dtype=bool)])
        for name, fill, dtype in (
            ("_head", 0, np.int64), ("_n", 0, np.int64), ("_level", np.nan, np.float64),
            ("_last", 0.0, np.float64),
        ):  # fmt: skip
            setattr(self, name, np.concatenate([getattr(self, name), np.full(new, fill, dtype=dtype)]))
        self.hyst.grow(have + new)
        self._jobs.extend([""] * new)

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
        now = batch.column("time")[0].as_py()
        t = now.timestamp()
        names, inv = self._group_names(batch)
        # Quiet groups give their rows back first (not those reporting now), so new ones can
        # take them in this very poll.
        out = self._expire(t, now, keep=self.index.find(names))
        slot = self.index.ids(names)[inv]
        self._grow(len(self.index.keys))
        if (slot < 0).any():
            self.over_capacity += int((slot < 0).sum())
            keep = slot >= 0
            batch, dur, slot = batch.filter(pa.array(keep)), dur[keep], slot[keep]
        if slot.size:
            used, inv = np.unique(slot, return_inverse=True)
            level = self._levels(batch, np.log(dur), inv, used.size)
            fresh = np.flatnonzero(self._last[used] == 0.0)  # rows new this poll
            if fresh.size:
                first = np.zeros(used.size, dtype=np.int64)
                first[inv[::-1]] = np.arange(inv.size)[::-1]
                jobs = batch.column("job").take(pa.array(first[fresh])).cast(pa.string()).to_pylist()
                for j, job in zip(fresh.tolist(), jobs, strict=True):
                    self._jobs[int(used[j])] = str(job)
            finite = np.isfinite(level)
            scores = self._score(used[finite], level[finite], t)
            out += self._changes(self.hyst.decide(scores), scores, now)
        return out

    def _expire(self, t: float, now: datetime, keep: np.ndarray) -> list[Finding]:
        """Drop the groups quiet for ``expire_s`` (not those in ``keep``, reporting now) and
        renumber the rest densely; an open one clears as stopped first."""
        n = len(self.index.keys)
        # Compaction copies every row: at most every tenth of expire_s, unless the rows are all
        # taken (then at once, so new groups find room).
        if t < self._next_compaction and n < self.cfg.max_groups:
            return []
        self._next_compaction = t + self.cfg.expire_s / 10
        quiet = self._last[:n] < t - self.cfg.expire_s
        quiet[keep[keep >= 0]] = False
        if not quiet.any():
            return []
        out: list[Finding] = []
        for g in np.flatnonzero(quiet & self.hyst.is_open[:n]).tolist():
            out += self._roll_up(g, "cleared", now, expired=True)
        stay = ~quiet
        new_id = np.cumsum(stay) - 1
        self.index.keep(stay)
        for name in ("_t", "_x", "_flag", "_head", "_n", "_level", "_last"):
            setattr(self, name, getattr(self, name)[:n][stay])
        self.hyst.keep(stay)
        self._jobs = [j for j, s in zip(self._jobs[:n], stay.tolist(), strict=True) if s]
        self._evidence = {int(new_id[g]): ev for g, ev in self._evidence.items() if stay[g]}
        self.job_open = {job: {int(new_id[g]) for g in rows} for job, rows in self.job_open.items()}
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
            s_span = int(ss.max() - ss.min()) + 1
            if n * s_span < 2**62:  # (group, seq) packed in one int64, in the same order
                _, inst = sorted_codes(gs * s_span + (ss - ss.min()))
            else:
                inst = np.unique(np.stack([gs, ss]), axis=1, return_inverse=True)[1].ravel()
            span = int(rs.max()) + 1
            vk, v_inv = sorted_codes(inst * span + rs)
            v = group_median(xs, v_inv, vk.size)
            lo = np.full(int(inst.max()) + 1, np.inf)
            np.minimum.at(lo, vk // span, v)
            inst_group = np.zeros(lo.size, dtype=np.int64)
            inst_group[inst] = gs
            with_seq = group_median(lo, inst_group, n)
            level = np.where(np.bincount(gs, minlength=n) > 0, with_seq, level)
        return level

    @staticmethod
    def _group_names(batch: pa.RecordBatch) -> tuple[pa.Array, np.ndarray]:
        """The distinct groups (communicator|collective|log2 size), built in Arrow, and each
        row's index into them."""
        size = batch.column("message_bytes").fill_null(0).to_numpy(zero_copy_only=False)
        bucket = np.floor(np.log2(np.maximum(size, 1))).astype(np.int64)
        comm, coll = batch.column("communicator"), batch.column("collective")
        if not pa.types.is_dictionary(comm.type):
            comm = comm.dictionary_encode()
        if not pa.types.is_dictionary(coll.type):
            coll = coll.dictionary_encode()
        n_coll = len(coll.dictionary)
        cc = comm.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        kc = coll.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        combo = (cc * n_coll + kc) * 64 + bucket
        uniq, inv = np.unique(combo, return_inverse=True)
        names = pc.binary_join_element_wise(
            comm.dictionary.cast(pa.string()).take(pa.array(uniq // 64 // n_coll)),
            coll.dictionary.cast(pa.string()).take(pa.array((uniq // 64) % n_coll)),
            pa.array(uniq % 64).cast(pa.string()),
            "|",
        )
        return names, inv

    def _score(self, g: np.ndarray, x: np.ndarray, t: float) -> _StepScores:
        """Add this poll's level to each group's ring, then score all of them at once: the
        recent median's shift over the reference (frozen while open)."""
        cfg = self.cfg
        k = cfg.max_samples
        pos = self._head[g]
        is_open = self.hyst.is_open[g]
        self._t[g, pos], self._x[g, pos], self._flag[g, pos] = t, x, is_open
        self._head[g] = (pos + 1) % k
        self._last[g] = t
        age = (self._head[g][:, None] - 1 - np.arange(k)[None, :]) % k  # 0: the newest sample
        ts = self._t[g]
        # Older than both windows goes, but the newest min_recent + min_ref always stay.
        held = np.minimum(self._n[g] + 1, k)
        keep = (age < held[:, None]) & (
            (ts >= t - cfg.recent_s - cfg.ref_s) | (age < cfg.min_recent + cfg.min_ref)
        )
        n = keep.sum(axis=1)
        self._n[g] = n
        # The recent window: the last recent_s seconds, but never fewer than min_recent samples
        # (at a slow poll a two-sample checkpoint must not be half the window).
        n_recent = np.maximum((keep & (ts > t - cfg.recent_s)).sum(axis=1), cfg.min_recent)
        recent = age < n_recent[:, None]
        ref = (age >= n_recent[:, None]) & (age < n[:, None]) & ~self._flag[g]
        xs = self._x[g]
        recent_med = _row_median(xs, recent)
        ref_med, n_ref = _row_median(xs, ref), ref.sum(axis=1)
        ref_level = np.where(is_open, self._level[g], ref_med)
        judged = (n > n_recent) & (is_open | (n_ref >= cfg.min_ref))
        shift = recent_med - ref_level
        j = judged
        return _StepScores(ids=g[j], bad=shift[j] >= math.log1p(cfg.open_shift),
                           holding=shift[j] >= math.log1p(cfg.close_shift), shift=shift[j],
                           ref_level=ref_level[j], n=n[j], n_recent=n_recent[j], n_ref=n_ref[j],
                           recent=recent[j])  # fmt: skip

    def _changes(self, decision: Decision, s: _StepScores, now: datetime) -> list[Finding]:
        """Freeze an opening group's reference (its slow samples never enter one), and roll the
        openings and closings up into per-job findings."""
        k = self.cfg.max_samples
        out: list[Finding] = []
        for status, row, i in decision.changes():  # rare: a few groups a day, in Python
            if status == "firing":
                self._level[row] = s.ref_level[i]
                # The samples that moved the median are not normal: keep them out of any baseline.
                self._flag[row, s.recent[i]] = True
                at = (self._head[row] - 1 - np.arange(s.n[i] - 1, -1, -1)) % k  # held samples, oldest first
                last = at[-2 * int(s.n_recent[i]) :]
                self._evidence[row] = self._describe(
                    row,
                    self._t[row, last],
                    self._x[row, last],
                    float(s.ref_level[i]),
                    int(s.n_ref[i]),
                    float(s.shift[i]),
                )
            else:
                self._level[row] = np.nan
                ev = self._evidence.get(row, {})
                self._evidence[row] = {**ev, "after_median_seconds": math.exp(s.ref_level[i] + s.shift[i])}
            out += self._roll_up(row, status, now)
        return out

    def _describe(
        self, g: int, times: np.ndarray, xs: np.ndarray, ref: float, n_ref: int, shift: float
    ) -> dict[str, Any]:
        """Before/after medians, the shift, and when it began: the CUSUM estimate, the split of
        the last two windows (``times``, ``xs``) after which the samples sit furthest above the
        halfway level."""
        tail = np.cumsum((xs - (ref + shift / 2))[::-1])[::-1]  # sum from each sample to the newest
        k = int(np.argmax(tail))
        # The recent median lags a step (it opens half way through); the samples since the
        # change say where the level went.
        shift = max(shift, float(np.median(xs[k:])) - ref)
        comm, coll, bucket = str(self.index.keys[g]).rsplit("|", 2)
        return {
            "job": self._jobs[g],
            "communicator": comm,
            "collective": coll,
            "size_bucket_log2": int(bucket),
            "before_median_seconds": math.exp(ref),
            "after_median_seconds": math.exp(ref + shift),
            "shift": math.expm1(shift),
            "expected": f"<= {self.cfg.open_shift:.0%} over the reference",
            "change_time": datetime.fromtimestamp(float(times[k]), tz=UTC).isoformat(),
            "reference_samples": n_ref,
            "recent_window_s": self.cfg.recent_s,
            "reference_window_s": self.cfg.ref_s,
        }

    def _roll_up(self, g: int, status: str, now: datetime, expired: bool = False) -> list[Finding]:
        """One incident per job: it opens with its first slow group and clears with its last."""
        job = self._jobs[g]
        groups = self.job_open.setdefault(job, set())
        if status == "firing":
            first = not groups
            groups.add(g)
            if not first:
                return []
        else:
            groups.discard(g)
            if groups:
                return []
            del self.job_open[job]
        ev = self._evidence.get(g, {})
        if status == "firing":
            summary = (
                f"job {job}: {ev['collective']} in {ev['communicator']} {ev['shift']:.0%} slower since "
                f"{ev['change_time']} ({ev['before_median_seconds'] * 1e3:.2f} ms -> "
                f"{ev['after_median_seconds'] * 1e3:.2f} ms), on every rank: a job-wide slowdown"
            )
        else:
            why = "stopped reporting (job ended?)" if expired else "back at its reference step time"
            summary = f"job {job}: {why}"
        return [
            Finding(
                kind=Kind.NCCL_JOB_SLOWDOWN,
                entity=job,
                status=status,  # type: ignore[arg-type]
                time=now,
                severity=Severity.WARNING,
                summary=summary,
                detector=f"{self.name}/{self.version}",
                score=float(ev.get("shift", 0.0)),
                confidence=float(min(1.0, ev.get("shift", 0.0) / (2 * self.cfg.open_shift))),
                evidence=dict(ev),
            )
        ]


def _row_median(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Median of each row's masked values (NaN for a row with none), with one sort."""
    n = mask.sum(axis=1)
    v = np.sort(np.where(mask, x, np.inf), axis=1)
    rows = np.arange(x.shape[0])
    lo = v[rows, np.maximum(n - 1, 0) // 2]
    hi = v[rows, np.minimum(n // 2, x.shape[1] - 1)]
    return np.where(n > 0, (lo + hi) / 2, np.nan)
