"""NCCL start-up: a communicator whose init stalled on a missing rank, or took far longer than its size.

Rules (docs/detectors.md, NCCL start-up; docs/phases/start-up.md):

- **Stall** (``nccl_bootstrap_stall``). NCCL init is collective: every rank waits in bootstrap
  (and in the allgathers after it) for every other, so one rank that never arrives holds the
  whole job (gang semantics). The clock is graywire's, from the first time it read any rank's
  ``Init START`` of the communicator (NCCL's INFO lines carry no time). Past the timeout
  (``stall_timeout_s``, or ``stall_factor`` times the fleet's median init for that size when
  that is longer) with ranks still in init, the culprits are the ranks the others' lines show
  to be behind: ranks that never logged ``Init START`` while others did; once some ranks logged
  ``Init COMPLETE``, the ranks that did not (NCCL's last init step is a barrier within each
  node, 2.28 ``bootstrapIntraNodeBarrier``: whole hosts can hang in their connections while the
  others complete); else ranks stopped at an earlier step than the rest. Where every rank
  stopped at the same step, nobody can be blamed, nor a stall told from logs gone quiet: that is
  said once, for the communicator (entity ``<communicator>|*``), naming its hosts. A missing
  rank's host is the host of the rest of its block of ranks (ranks per host as the others show
  it); a block with no rank seen has no host to name and the finding names the ranks. A split
  (``ncclCommSplit``) is one communicator on all its ranks: its parent's ``commId``, its split
  count and colour (collectors/nccl/debug_log.py).
- **Slow init** (``nccl_init_slow``). Init time grows with size (bootstrap ring, allgathers,
  connections): a 4,096-rank init is not judged by a 64-rank one's figures. Each completed
  communicator's init time (the slowest rank's ``Init timings`` total, NCCL 2.22+) is judged
  against, in turn: the job's previous attempt on the same hosts and size (other processes: a
  restart), slow past ``slow_factor`` times it, no history needed; the fleet's history for its
  size (nranks within a factor of ~1.4, one power-of-two bucket), slow past ``slow_factor``
  times the bucket's median and the median plus ``slow_mads`` scaled MADs, by at least
  ``slow_min_excess_s``, once the bucket holds ``min_history`` inits; else a cost model fitted
  over every size seen (log time against log ranks, at least ``min_history`` inits of two sizes
  or more), slow past ``slow_factor`` times its prediction and ``slow_mads`` spreads. Nothing to
  compare with: not judged (null rather than a guess). A slow init does not join the history,
  so a fleet-wide regression pages every time instead of becoming the norm. Without ``Init
  timings`` (NCCL before 2.22) the reader's clock only resolves an init to a poll, so nothing
  is judged. A split (``ncclCommSplit``) reuses its parent's bootstrap and takes a fraction of
  an init: it is neither judged nor taken into the history.

Findings: a stall is one per (communicator, host) at fault, naming the host (``node``), its
ranks and every host stuck in the same communicator (``stuck_hosts``: the drain acts per host,
the reader sees one stall). It clears when the communicator completes or progresses, when a
later communicator of the same job completes in other processes (the job was restarted and came
up), or when no rank of it logged a line for ``expire_s``. A slow init is one per job, cleared
by that job's next init of normal length or by expiry.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import RecordKind
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.robust import MAD_TO_SIGMA

KINDS = (Kind.NCCL_BOOTSTRAP_STALL, Kind.NCCL_INIT_SLOW)
#: As collectors/nccl/debug_log.py INIT_STAGES: how far a rank got.
STAGES = ("start", "bootstrap", "topology", "connect", "complete")
_COMPLETE = len(STAGES) - 1
_STAGE_OF = {s: i for i, s in enumerate(STAGES)}
#: A communicator larger than this is refused as implausible (no fabric has 2^24 GPUs).
MAX_RANKS = 1 << 24


@dataclass(frozen=True, slots=True)
class NcclBootstrapConfig:
    #: No rank complete this long after the first Init START: judged for a stall.
    stall_timeout_s: float = 300.0
    #: ... or this many times the fleet's median init for the size, when that is longer.
    stall_factor: float = 5.0
    slow_factor: float = 2.0
    slow_mads: float = 6.0
    slow_min_excess_s: float = 1.0
    #: Completed inits of a size bucket needed before one is judged slow.
    min_history: int = 5
    #: Inits remembered per size bucket (the newest).
    history: int = 200
    #: A communicator none of whose ranks logged a line for this long is forgotten.
    expire_s: float = 3600.0


@dataclass
class _Comm:
    job: str
    nranks: int
    stage: np.ndarray  # int8 per rank: -1 never seen, else index into STAGES
    host: np.ndarray  # object per rank: None until seen
    init_s: np.ndarray  # float per rank: NCCL's Init timings total, NaN unknown
    pids: set[tuple[str, int]] = field(default_factory=set)  # its processes (a restart has new ones)
    first_start: datetime | None = None
    last_line: datetime | None = None
    done: bool = False


@dataclass
class _Open:
    ranks: list[int]
    evidence: dict[str, Any] = field(default_factory=dict)


def _strings(arr: pa.Array) -> np.ndarray:
    vals = arr.cast(pa.string()) if pa.types.is_dictionary(arr.type) else arr
    return np.asarray(vals.to_pylist(), dtype=object)


def _times(arr: pa.Array) -> np.ndarray:
    """Microseconds since the epoch, -1 where null."""
    return arr.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)


def size_bucket(nranks: int) -> int:
    """The fleet-history bucket of a communicator size: nearest power of two."""
    return round(math.log2(max(nranks, 1)))


class NcclBootstrapDetector:
    """Communicator inits against their own ranks (stall) and the fleet's history (slow)."""

    name = "nccl_bootstrap"
    version = "1"
    consumes = RecordKind.NCCL_INIT
    kinds = KINDS

    def __init__(self, cfg: NcclBootstrapConfig | None = None) -> None:
        self.cfg = cfg or NcclBootstrapConfig()
        self.comms: dict[str, _Comm] = {}
        #: size bucket -> the latest normal init times (seconds) of the fleet
        self.history: dict[int, deque[float]] = {}
        #: (nranks, seconds) of the latest normal inits of every size: the cost model's points
        self.sizes: deque[tuple[int, float]] = deque(maxlen=self.cfg.history)
        #: hosts -> (nranks, seconds, communicator, processes) of the last normal init on them
        self.attempts: dict[frozenset[str], tuple[int, float, str, frozenset[tuple[str, int]]]] = {}
        self.stalls: dict[tuple[str, str], _Open] = {}  # (communicator, host) -> open finding
        self.slow: dict[str, tuple[str, dict[str, Any]]] = {}  # job -> (communicator, evidence)
        self.rejected_rows = 0  # rows without a usable rank / size

    # -- input ------------------------------------------------------------------------------
    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        now = batch.column("time")[0].as_py()
        comm = _strings(batch.column("communicator"))
        rank = batch.column("rank").to_numpy(zero_copy_only=False).astype(np.int64)
        nranks = batch.column("nranks").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        stage = np.array([_STAGE_OF.get(s, -2) for s in _strings(batch.column("stage")).tolist()])
        ok = (rank >= 0) & (nranks > 0) & (rank < nranks) & (nranks <= MAX_RANKS) & (stage >= 0)
        self.rejected_rows += int((~ok).sum())
        cols = {
            "job": _strings(batch.column("job")),
            "host": _strings(batch.column("host")),
            "started": _times(batch.column("started_at")),
            "pid": batch.column("pid").fill_null(-1).to_numpy(zero_copy_only=False),
            "last": _times(batch.column("last_line_at")),
            "init_s": batch.column("init_seconds").fill_null(np.nan).to_numpy(zero_copy_only=False),
        }
        out: list[Finding] = []
        names, inv = np.unique(comm[ok].astype(str), return_inverse=True)
        idx = np.flatnonzero(ok)
        for g, c in enumerate(names.tolist()):
            rows = idx[inv == g]
            st = self._update(
                c, rank[rows], int(nranks[rows].max()), stage[rows], {k: v[rows] for k, v in cols.items()}
            )
            out += self._judge(c, st, now)
        out += self._expire(now)
        return out

    def _update(self, c: str, rank: np.ndarray, n: int, stage: np.ndarray, v: dict[str, np.ndarray]) -> _Comm:
        st = self.comms.get(c)
        if st is None or st.nranks != n:
            st = _Comm(
                str(v["job"][0]), n, np.full(n, -1, np.int8), np.full(n, None, object), np.full(n, np.nan)
            )
            self.comms[c] = st
        st.stage[rank] = np.maximum(st.stage[rank], stage)
        st.host[rank] = v["host"]
        st.pids.update(zip(v["host"].tolist(), v["pid"].tolist(), strict=True))
        st.init_s[rank] = np.where(np.isfinite(v["init_s"]), v["init_s"], st.init_s[rank])
        started = v["started"][v["started"] >= 0]
        if started.size:
            t = _dt(int(started.min()))
            st.first_start = t if st.first_start is None else min(st.first_start, t)
        last = v["last"][v["last"] >= 0]
        if last.size:
            t = _dt(int(last.max()))
            st.last_line = t if st.last_line is None else max(st.last_line, t)
        return st

    # -- judgement ----------------------------------------------------------------------------
    def _baseline(self, n: int) -> float | None:
        h = self.history.get(size_bucket(n))
        return float(np.median(h)) if h is not None and len(h) >= self.cfg.min_history else None

    def _judge(self, c: str, st: _Comm, now: datetime) -> list[Finding]:
        if st.done:
            return []
        complete = st.stage == _COMPLETE
        if complete.all():
            return self._completed(c, st, now)
        if st.first_start is None:
            return []  # read without a clock: how long it has waited is unknown
        waited = (now - st.first_start).total_seconds()
        med = self._baseline(st.nranks)
        timeout = max(self.cfg.stall_timeout_s, self.cfg.stall_factor * med if med is not None else 0.0)
        if waited < timeout:
            return []
        seen = st.stage >= 0
        ahead = int(st.stage.max())
        if not seen.all():
            behind, how = ~seen, "never logged Init START"
        elif complete.any():
            # NCCL's last step of init is a barrier within each node only (2.28: bootstrap-
            # IntraNodeBarrier): the hosts that completed are through; these are stuck.
            behind, how = ~complete, f"never logged Init COMPLETE ({int(complete.sum())} ranks did)"
        elif (st.stage < ahead).any():
            behind = st.stage < ahead
            how = "stopped before the others' last step"
        else:
            return self._stuck_together(c, st, now, waited, timeout, med)
        hosts = self._hosts_of(st, np.flatnonzero(behind))
        stuck_hosts = sorted(h for h in hosts if h != "?")
        judged: dict[tuple[str, str], _Open] = {}
        for h, ranks in hosts.items():
            reached = int(st.stage[ranks].max())
            ev = {
                "job": st.job, "communicator": c, "nranks": st.nranks, "host": None if h == "?" else h,
                "ranks": ranks, "stuck_hosts": stuck_hosts, "what": how,
                "stage_reached": STAGES[reached] if reached >= 0 else None,
                "others_reached": STAGES[ahead], "ranks_started": int(seen.sum()),
                "waited_s": waited, "timeout_s": timeout, "fleet_median_init_s": med, "side": "host",
            }  # fmt: skip
            judged[(c, h)] = _Open(ranks, ev)
        return self._update_stalls(c, judged, now, waited)

    def _stuck_together(
        self, c: str, st: _Comm, now: datetime, waited: float, timeout: float, med: float | None
    ) -> list[Finding]:
        """Every rank stopped at the same step: nobody to blame, and the lines cannot tell a
        shared hang from logs that went quiet. Said once, for the communicator, with its hosts."""
        hosts = sorted({h for h in st.host.tolist() if h})
        stage = STAGES[int(st.stage.max())]
        ev = {
            "job": st.job, "communicator": c, "nranks": st.nranks, "host": None, "hosts": hosts,
            "ranks": list(range(st.nranks)), "what": f"all {st.nranks} ranks stopped at {stage}",
            "stage_reached": stage, "others_reached": stage, "ranks_started": st.nranks,
            "waited_s": waited, "timeout_s": timeout, "fleet_median_init_s": med, "side": "communicator",
        }  # fmt: skip
        return self._update_stalls(c, {(c, "*"): _Open(ev["ranks"], ev)}, now, waited)

    def _update_stalls(
        self, c: str, judged: dict[tuple[str, str], _Open], now: datetime, waited: float
    ) -> list[Finding]:
        out = []
        for key in sorted(k for k in self.stalls if k[0] == c and k not in judged):
            out.append(self._stall_finding(key, self.stalls.pop(key), "cleared", now, "no longer behind"))
        for key, op in sorted(judged.items()):
            prev = self.stalls.get(key)
            if prev is not None and prev.ranks == op.ranks:
                prev.evidence["waited_s"] = waited
                if "stuck_hosts" in op.evidence:
                    prev.evidence["stuck_hosts"] = op.evidence["stuck_hosts"]
                continue
            self.stalls[key] = op
            out.append(self._stall_finding(key, op, "firing", now))
        return out

    def _hosts_of(self, st: _Comm, ranks: np.ndarray) -> dict[str, list[int]]:
        """Culprit ranks grouped by host; a never-seen rank takes its block's host (``?`` if none)."""
        seen = np.flatnonzero(st.host != None)  # noqa: E711 (element-wise)
        host = st.host[ranks].copy()
        unknown = host == None  # noqa: E711
        if unknown.any() and seen.size:
            _, per_host = np.unique(st.host[seen].astype(str), return_counts=True)
            block = int(per_host.max())
            blocks = seen // block
            pairs = {(b, h) for b, h in zip(blocks.tolist(), st.host[seen].tolist(), strict=True)}
            owner: dict[int, str | None] = {}
            for b, h in pairs:
                owner[b] = h if b not in owner else None  # two hosts in one block: no owner
            host[unknown] = [owner.get(int(r) // block) for r in ranks[unknown].tolist()]
        out: dict[str, list[int]] = {}
        for r, h in zip(ranks.tolist(), host.tolist(), strict=True):
            out.setdefault(h or "?", []).append(int(r))
        return out

    def _completed(self, c: str, st: _Comm, now: datetime) -> list[Finding]:
        st.done = True
        out = self._clear_stalls(c, now, "init completed")
        # A later communicator of the job came up in other processes: the job was restarted past
        # its stall (a sibling split completing in the same processes is not a restart).
        for other, ost in self.comms.items():
            earlier = ost.first_start is None or st.first_start is None or ost.first_start <= st.first_start
            restarted = not (ost.pids & st.pids)
            if other != c and ost.job == st.job and not ost.done and earlier and restarted:
                ost.done = True  # superseded: its ranks were killed, it is not judged again
                out += self._clear_stalls(other, now, f"job {st.job} came up again ({c})")
        if not np.isfinite(st.init_s).all():
            return out  # no Init timings (NCCL < 2.22): the duration is not known well enough
        if "/split" in c:
            return out  # a split reuses its parent's bootstrap: its time is no measure of an init
        took = float(st.init_s.max())
        hosts = frozenset(x for x in st.host.tolist() if x)
        ev = {"job": st.job, "communicator": c, "nranks": st.nranks, "init_seconds": took,
              "slowest_rank": int(np.argmax(st.init_s)), "hosts": sorted(hosts)}  # fmt: skip
        previous = self._against_previous(st, hosts, took)
        fleet = self._against_fleet(st.nranks, took)
        judged = [v for v in (previous, fleet) if v is not None]
        slow = any(v["slow"] for v in judged)
        # The evidence of the rule that found it slow (the previous attempt first), else the first.
        ev |= next((v for v in judged if v["slow"]), judged[0] if judged else {})
        if previous is not None and fleet is not None:
            ev["also"] = fleet if ev["rule"] == previous["rule"] else previous
        prev = self.slow.get(st.job)
        if slow:
            self.slow[st.job] = (c, ev)
            out.append(self._slow_finding(st.job, ev, "firing", now))
        elif prev is not None and judged:
            del self.slow[st.job]
            out.append(
                self._slow_finding(st.job, prev[1], "cleared", now, f"next init ({c}) took {took:.2f} s")
            )
        if not slow:  # a slow init teaches nothing: a fleet-wide regression pages every time
            self.history.setdefault(size_bucket(st.nranks), deque(maxlen=self.cfg.history)).append(took)
            self.sizes.append((st.nranks, took))
            self.attempts[hosts] = (st.nranks, took, c, frozenset(st.pids))
        return out

    def _against_previous(self, st: _Comm, hosts: frozenset[str], took: float) -> dict[str, Any] | None:
        """This init against the job's previous attempt on the same hosts (other processes, the
        same size): a restart whose init takes ``slow_factor`` times as long needs no history."""
        prev = self.attempts.get(hosts)
        if prev is None or prev[0] != st.nranks or prev[3] & st.pids:
            return None
        limit = max(self.cfg.slow_factor * prev[1], prev[1] + self.cfg.slow_min_excess_s)
        return {"slow": took > limit, "rule": "previous attempt on the same hosts",
                "previous_init_s": prev[1], "previous_communicator": prev[2], "limit_s": limit}  # fmt: skip

    def _against_fleet(self, n: int, took: float) -> dict[str, Any] | None:
        """This init against the fleet: its size bucket's history when it has ``min_history``
        inits, else a per-rank cost model fitted across every size seen (log time against log
        ranks), so a bigger job is judged by what its size costs, not by a smaller one's time."""
        cfg = self.cfg
        b = size_bucket(n)
        h = self.history.get(b)
        if h is not None and len(h) >= cfg.min_history:
            med = float(np.median(h))
            mad = float(np.median(np.abs(np.asarray(h) - med))) * MAD_TO_SIGMA
            limit = max(cfg.slow_factor * med, med + cfg.slow_mads * mad, med + cfg.slow_min_excess_s)
            return {"slow": took > limit, "rule": "fleet inits of its size", "fleet_median_s": med,
                    "fleet_scaled_mad_s": mad, "limit_s": limit, "fleet_inits": len(h),
                    "size_bucket": f"{2 ** (b - 0.5):.0f}-{2 ** (b + 0.5):.0f} ranks"}  # fmt: skip
        sizes = np.asarray([s for s, _ in self.sizes], dtype=float)
        if len(sizes) < cfg.min_history or np.unique(sizes).size < 2:
            return None
        x, y = np.log(sizes), np.log(np.maximum([t for _, t in self.sizes], 1e-3))
        k = float(np.clip(np.polyfit(x, y, 1)[0], 0.0, 2.0))
        a = float(np.median(y - k * x))
        spread = max(float(np.median(np.abs(y - a - k * x))) * MAD_TO_SIGMA, 0.1)
        expected = math.exp(a + k * math.log(n))
        limit = max(cfg.slow_factor * expected, expected * math.exp(cfg.slow_mads * spread),
                    expected + cfg.slow_min_excess_s)  # fmt: skip
        return {"slow": took > limit, "rule": "fleet cost model across sizes", "expected_init_s": expected,
                "cost_exponent": k, "limit_s": limit, "fleet_inits": len(self.sizes)}  # fmt: skip

    def _clear_stalls(self, c: str, now: datetime, why: str) -> list[Finding]:
        keys = sorted(k for k in self.stalls if k[0] == c)
        return [self._stall_finding(k, self.stalls.pop(k), "cleared", now, why) for k in keys]

    def _expire(self, now: datetime) -> list[Finding]:
        out = []
        for c, st in list(self.comms.items()):
            last = st.last_line or st.first_start
            if last is not None and (now - last).total_seconds() > self.cfg.expire_s:
                del self.comms[c]
                out += self._clear_stalls(c, now, "no rank logged a line for an hour (job ended?)")
                if (s := self.slow.get(st.job)) is not None and s[0] == c:
                    del self.slow[st.job]
                    out.append(self._slow_finding(st.job, s[1], "cleared", now, "no longer logging"))
        return out

    # -- findings -----------------------------------------------------------------------------
    def _stall_finding(
        self, key: tuple[str, str], op: _Open, status: str, now: datetime, why: str | None = None
    ) -> Finding:
        c, h = key
        ev = op.evidence
        ranks = op.ranks
        who = (
            f"rank {ranks[0]}"
            if len(ranks) == 1
            else f"{len(ranks)} ranks ({', '.join(map(str, ranks[:8]))})"
        )
        if h == "*":
            where = ", ".join(ev.get("hosts", [])[:8]) or "its hosts"
        else:
            where = f"{h}, {who}" if h != "?" else f"{who} (host unknown)"
            others = [x for x in ev.get("stuck_hosts", []) if x != h]
            if others:  # one stall seen from each host it holds: say which hosts share it
                where += f" (stuck with {', '.join(others[:8])})"
        summary = (
            f"{where} of {c} ({ev['job']}): {ev['what']}; {ev['ranks_started']} of {ev['nranks']} ranks "
            f"started and wait in init for {ev['waited_s']:.0f} s"
            if why is None
            else f"{where} of {c}: {why}"
        )
        return Finding(
            kind=Kind.NCCL_BOOTSTRAP_STALL,
            entity=f"{c}|{h}",
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=None if h in ("?", "*") else h,
            score=float(ev["waited_s"]),
            confidence=1.0 if h not in ("?", "*") else 0.5,
            evidence=dict(ev),
        )

    def _slow_finding(
        self, job: str, ev: dict[str, Any], status: str, now: datetime, why: str | None = None
    ) -> Finding:
        took = f"{ev['communicator']} ({job}, {ev['nranks']} ranks): init took {ev['init_seconds']:.2f} s"
        if why is not None:
            summary = f"{job}: {why}"
        elif ev.get("rule") == "previous attempt on the same hosts":
            summary = (
                f"{took} where its previous attempt on the same hosts took {ev['previous_init_s']:.2f} s"
            )
        elif ev.get("rule") == "fleet cost model across sizes":
            summary = f"{took} where the fleet's inits predict {ev['expected_init_s']:.2f} s for its size"
        else:
            fleet = f"the fleet's {ev['size_bucket']} inits take {ev['fleet_median_s']:.2f} s"
            summary = f"{took} where {fleet} (median of {ev['fleet_inits']})"
        base = ev.get("previous_init_s") or ev.get("expected_init_s") or ev.get("fleet_median_s") or 0.0
        return Finding(
            kind=Kind.NCCL_INIT_SLOW,
            entity=f"{job}",
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.INFO,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            score=ev["init_seconds"] / base if base > 0 else 0.0,
            evidence=dict(ev),
        )


def _dt(us: int) -> datetime:
    return pa.scalar(us, pa.timestamp("us", tz="UTC")).as_py()
