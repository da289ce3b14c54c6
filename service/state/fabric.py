"""What the service knows of the fabric now, as one immutable snapshot the runner publishes.

The runner is the only writer: after each step of a poll it publishes a new
:class:`FabricState` through its :class:`StateBoard`, replacing the old one whole. Readers
(``/metrics``, the ports and sources API, the status page, ``/healthz``) take
``board.current`` and read it without a lock for as long as they like: nothing in it changes,
arrays are read-only and mappings are read-only views. A new state shares every part the step
did not change, so publishing costs one copy of what changed, not of everything.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.keys import keys_named
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind, record_kind
from graywire.detectors.base import PortIndexer
from graywire.detectors.findings import PORT_HEALTH
from graywire.detectors.pipeline import StageStats
from graywire.service.state.figures import (
    FIGURES,
    HEALTH_STATES,
    RawCounterBook,
    leaf_of_ports,
    port_figures,
)
from graywire.service.state.nccl import NcclSnapshot, nccl_snapshot
from graywire.service.state.readings import PortReadings

_EMPTY: Mapping[Any, int] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return _EMPTY


@dataclass(frozen=True, slots=True)
class TargetStatus:
    """Health of one scrape target, as the API and metrics report it."""

    source: str
    target: str
    ok: bool | None = None  # None until the first scrape
    scrapes: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_attempt: float | None = None  # unix seconds
    last_success: float | None = None
    duration_s: float = 0.0
    samples: int = 0
    error: str | None = None
    stale_port_count: int = 0
    stale_ports: tuple[str, ...] = ()
    #: Port rows of its last good scrape whose key matches no port of the fabric model (a
    #: source naming NICs differently from the inventory), and a few of those keys.
    unmatched_rows: int = 0
    unmatched_examples: tuple[str, ...] = ()
    #: What the last good scrape read although its source got it wrong (a known upstream bug),
    #: or what it left out (lines, records, values it could not read).
    note: str | None = None
    #: Lines, records and values its last good scrape left out; with ``samples`` 0, everything
    #: it found was unreadable (a format graywire does not take): not ok, whatever ``ok`` says.
    skipped: int = 0


#: How long a (job, host) pair seen in NCCL timings stays a job's host without new timings.
JOB_HOSTS_TTL_S = 900.0


@dataclass(frozen=True)
class FabricState:
    """One consistent view: the poll's counts, every target's health, and per-port arrays by
    fabric port index (NaN or 0 where nothing was read yet)."""

    fabric: Fabric
    per_port: bool
    leaf_of_port: np.ndarray
    rows_ingested: Mapping[str, int] = field(default_factory=_empty)
    rows_dropped: Mapping[str, int] = field(default_factory=_empty)
    #: Rows refused before detection, by (record, reason): unknown hosts, clocks far ahead.
    rows_rejected: Mapping[tuple[str, str], int] = field(default_factory=_empty)
    #: Lines, records and values parsers left out of good scrapes, by (source, reason).
    parse_skipped: Mapping[tuple[str, str], int] = field(default_factory=_empty)
    #: Port rows of good scrapes that matched no port of the fabric model, by source.
    unmatched_rows: Mapping[str, int] = field(default_factory=_empty)
    targets: tuple[TargetStatus, ...] = ()
    findings: Mapping[tuple[str, str], int] = field(default_factory=_empty)
    polls: int = 0
    poll_errors: int = 0
    archive_errors: int = 0
    last_poll_seconds: float = 0.0
    last_poll_timestamp: float = 0.0
    last_data_timestamp: float = 0.0
    #: Rows and batches the last poll brought, by record.
    poll_rows: Mapping[str, int] = field(default_factory=_empty)
    poll_batches: Mapping[str, int] = field(default_factory=_empty)
    stages: Mapping[str, StageStats] = field(default_factory=_empty)
    open_incidents: tuple[tuple[str, str, int], ...] = ()
    #: The poll's figures by port (see ``state.figures.FIGURES``); empty before the first rates.
    figures: Mapping[str, np.ndarray] = field(default_factory=_empty)
    port_reported: np.ndarray | None = None  # ports any source has reported since start
    port_stale: np.ndarray | None = None
    port_severity: np.ndarray | None = None  # worst open incident: 0 ok, 1 warning, 2 critical
    nccl: NcclSnapshot | None = None
    #: The latest raw reading of each port (0 / NaN = none), for the ports API.
    port_speed_bps: np.ndarray | None = None
    port_width: np.ndarray | None = None
    port_phys_state: np.ndarray | None = None
    port_logical_state: np.ndarray | None = None
    port_updated: np.ndarray | None = None  # unix seconds of the sample
    #: A port without a reading this recent before the last poll has no data (not ok).
    data_window_s: float = 120.0
    #: The sources' cumulative counters as last reported, by source and column, indexed by
    #: fabric port (NaN = none); empty unless per-port series and ``metrics.raw_counters`` are on.
    raw_counters: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=_empty)
    #: The hosts each job's NCCL timings came from within ``JOB_HOSTS_TTL_S``: how a finding on
    #: a host (a GPU's NIC affinity, a link) joins the job running there.
    job_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)
    #: How many states the board published before this one: an answer computed from one
    #: state can be kept under this number, since no two states share it.
    published: int = 0


def ports_without_data(s: FabricState) -> np.ndarray:
    """Ports no source reported within ``data_window_s`` before the last poll (never, or not
    lately): unknown, which is not healthy. All of them before the first poll."""
    n = s.fabric.n_ports
    if s.port_updated is None or not s.last_poll_timestamp:
        return np.ones(n, dtype=bool)
    with np.errstate(invalid="ignore"):
        recent = s.port_updated >= s.last_poll_timestamp - s.data_window_s
    return ~recent


def port_health(s: FabricState) -> np.ndarray:
    """Index into ``HEALTH_STATES`` per port (critical > warning > stale > no data > ok)."""
    n = s.fabric.n_ports
    health = np.zeros(n, dtype=np.int64)
    health[ports_without_data(s)] = HEALTH_STATES.index("no_data")
    if s.port_stale is not None:
        health[s.port_stale] = HEALTH_STATES.index("stale")
    if s.port_severity is not None:
        health[s.port_severity == 1] = HEALTH_STATES.index("warning")
        health[s.port_severity == 2] = HEALTH_STATES.index("critical")
    return health


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _updated(current: np.ndarray | None, empty: np.ndarray, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A new read-only array: ``current`` (or ``empty``) with ``values`` written at ``at``."""
    out = empty if current is None else current.copy()
    out[at] = values
    return _frozen(out)


def _plus(counts: Mapping[Any, int], more: Mapping[Any, int]) -> Mapping[Any, int]:
    if not more:
        return counts
    total = Counter(counts)
    total.update(more)
    return MappingProxyType(dict(total))


class StateBoard:
    """The runner's side: it publishes; everyone else reads :attr:`current`.

    Writers (the poll thread, and the event loop counting refused pushes) take a lock among
    themselves so no update is lost; readers never take it.
    """

    def __init__(self, fabric: Fabric, per_port: bool = True, raw_counters: bool = True) -> None:
        self.fabric = fabric
        self._lock = threading.Lock()
        self._indexer = PortIndexer(fabric)
        self._readings = PortReadings(fabric)
        self._per_port, self._raw_counters = per_port, raw_counters
        self.reset()
        #: Whether /metrics shows this state: a replica that does not lead knows nothing of the
        #: fabric, and its empty state must not count beside the leader's (every port unknown,
        #: no poll for ever) in a sum across replicas.
        self.exported = True

    def reset(self) -> None:
        """Forget everything (a replica that starts or stops leading)."""
        with self._lock:
            raw = self._raw_counters and self._per_port
            self._raw = RawCounterBook(self.fabric) if raw else None
            self._state = FabricState(self.fabric, self._per_port, _frozen(leaf_of_ports(self.fabric)))
            self._job_seen: dict[tuple[str, str], float] = {}  # (job, host) -> monotonic seen

    @property
    def current(self) -> FabricState:
        return self._state

    def _job_hosts(self, nccl: list[pa.RecordBatch]) -> Mapping[str, tuple[str, ...]]:
        """Each job's hosts, from the (job, host) pairs of this poll's timings (one group-by over
        the batches) and those seen within ``JOB_HOSTS_TTL_S`` (an ended job's hosts age out)."""
        now = time.monotonic()
        for b in nccl:
            pairs = pa.table(
                {"job": b.column("job").cast(pa.string()), "host": b.column("host").cast(pa.string())}
            )
            pairs = pairs.filter(pc.and_(pc.is_valid(pairs["job"]), pc.is_valid(pairs["host"])))
            unique = pairs.group_by(["job", "host"]).aggregate([])
            for job, host in zip(unique["job"].to_pylist(), unique["host"].to_pylist(), strict=True):
                self._job_seen[(job, host)] = now
        self._job_seen = {k: t for k, t in self._job_seen.items() if now - t <= JOB_HOSTS_TTL_S}
        out: dict[str, list[str]] = {}
        for job, host in sorted(self._job_seen):
            out.setdefault(job, []).append(host)
        return MappingProxyType({j: tuple(h) for j, h in out.items()})

    def _publish(self, **changes: Any) -> None:
        self._state = replace(self._state, **changes, published=self._state.published + 1)

    # -- between polls ------------------------------------------------------------------------
    def count_rejected(self, record: str, reason: str, rows: int) -> None:
        with self._lock:
            self._publish(rows_rejected=_plus(self._state.rows_rejected, {(record, reason): rows}))

    def poll_failed(self) -> None:
        with self._lock:
            self._publish(poll_errors=self._state.poll_errors + 1)

    def set_targets(
        self,
        targets: Iterable[TargetStatus],
        port_stale: np.ndarray,
        parse_skipped: Mapping[tuple[str, str], int] = _EMPTY,
        unmatched_rows: Mapping[str, int] = _EMPTY,
        data_window_s: float | None = None,
    ) -> None:
        with self._lock:
            self._publish(
                targets=tuple(targets),
                data_window_s=self._state.data_window_s if data_window_s is None else data_window_s,
                port_stale=_frozen(port_stale),
                parse_skipped=_plus(self._state.parse_skipped, parse_skipped),
                unmatched_rows=_plus(self._state.unmatched_rows, +Counter(unmatched_rows)),
            )

    # -- one poll -----------------------------------------------------------------------------
    def observe_poll(
        self,
        batches: Iterable[pa.RecordBatch],
        port_rates: pa.RecordBatch | None,
        ingested: Mapping[str, int],
        dropped: Mapping[str, int],
        rejected: Mapping[tuple[str, str], int],
    ) -> None:
        """The poll's records: batch sizes, the ports' figures from its rates, its NCCL latency.

        The arithmetic runs before the lock; publishing is one swap.
        """
        rows: Counter[str] = Counter()
        count: Counter[str] = Counter()
        nccl_batches, samples = [], []
        for b in batches:
            kind = record_kind(b.schema)
            rows[kind] += b.num_rows
            count[kind] += 1
            if kind == RecordKind.NCCL_TIMING:
                nccl_batches.append(b)
            elif kind == RecordKind.PORT_SAMPLE:
                samples.append(b)
        snap = nccl_snapshot(nccl_batches)
        job_hosts = self._job_hosts(nccl_batches)
        raw = self._raw.observe(samples) if self._raw is not None and samples else None
        idx = figures = None
        if port_rates is not None and port_rates.num_rows:
            idx = self._indexer(port_rates.column("port"))
            keep = idx >= 0
            idx = idx[keep]
            figures = {k: v[keep] for k, v in port_figures(port_rates).items()}
        n = self.fabric.n_ports
        with self._lock:
            s = self._state
            changes: dict[str, Any] = {
                "poll_rows": MappingProxyType(dict(rows)),
                "poll_batches": MappingProxyType(dict(count)),
                "nccl": snap,
                "job_hosts": job_hosts,
                "rows_ingested": _plus(s.rows_ingested, ingested),
                "rows_dropped": _plus(s.rows_dropped, dropped),
                "rows_rejected": _plus(s.rows_rejected, rejected),
            }
            if idx is not None and figures is not None:
                current: Mapping[str, np.ndarray | None] = s.figures or dict.fromkeys(FIGURES)
                changes["figures"] = MappingProxyType(
                    {
                        k: _updated(a, np.full(n, np.nan), idx, figures[k])
                        if k in figures
                        else (a if a is not None else _frozen(np.full(n, np.nan)))
                        for k, a in current.items()
                    }
                )
                changes["port_reported"] = _updated(s.port_reported, np.zeros(n, dtype=bool), idx, True)
            if raw:
                changes["raw_counters"] = MappingProxyType(
                    {**s.raw_counters, **{src: MappingProxyType(a) for src, a in raw.items()}}
                )
            self._publish(**changes)

    def record_port_rates(self, port_rates: pa.RecordBatch | None) -> None:
        """The latest reading of each port from a poll's port rates (see ``state.readings``)."""
        if (r := self._readings.latest(port_rates)) is not None:
            self.record_ports(*r)

    def record_ports(
        self,
        idx: np.ndarray,
        speed_bps: np.ndarray,
        width: np.ndarray,
        phys_state: np.ndarray,
        logical_state: np.ndarray,
        updated: np.ndarray,
    ) -> None:
        """The latest reading per port (all of a poll's samples at once); rows whose port the
        model does not know are ignored."""
        n = self.fabric.n_ports
        # A port read twice in a poll keeps its last reading, as if the batches came in turn:
        # the latest row of each port, by a scatter over the ports (np.unique sorts, and is
        # the slower by tens of times at 500,000 rows).
        rows = np.flatnonzero(idx >= 0)
        latest = np.full(n, -1, dtype=np.int64)
        np.maximum.at(latest, idx[rows], rows)
        at = np.flatnonzero(latest >= 0)
        ok = latest[at]
        with self._lock:
            s = self._state
            self._publish(
                port_speed_bps=_updated(s.port_speed_bps, np.full(n, np.nan), at, speed_bps[ok]),
                port_width=_updated(s.port_width, np.zeros(n, dtype=np.int16), at, width[ok]),
                port_phys_state=_updated(s.port_phys_state, np.zeros(n, dtype=np.uint8), at, phys_state[ok]),
                port_logical_state=_updated(
                    s.port_logical_state, np.zeros(n, dtype=np.uint8), at, logical_state[ok]
                ),
                port_updated=_updated(s.port_updated, np.full(n, np.nan), at, updated[ok]),
            )

    def count_archive_error(self) -> None:
        with self._lock:
            self._publish(archive_errors=self._state.archive_errors + 1)

    def set_incidents(
        self, counts: list[tuple[str, str, int]], on_ports: Iterable[tuple[str | None, str | None, str]]
    ) -> None:
        """Open incidents by (kind, severity), and the worst severity on each port.

        ``on_ports`` holds (port, link, severity) of every open incident; a link incident
        marks both of its ends.
        """
        by_key: dict[str, int] = {}
        for port, link, severity in on_ports:
            code = PORT_HEALTH.get(severity, 1)
            ends = keys_named(link)
            for key in {port, *ends} - {None, ""}:
                assert key is not None
                by_key[key] = max(by_key.get(key, 0), code)
        sev = np.zeros(self.fabric.n_ports, dtype=np.int8)
        if by_key:
            keys = list(by_key)
            idx = self.fabric.lookup(pa.array(keys, type=pa.string()))
            codes = np.array([by_key[k] for k in keys], dtype=np.int8)
            ok = idx >= 0
            np.maximum.at(sev, idx[ok], codes[ok])
        with self._lock:
            self._publish(open_incidents=tuple(counts), port_severity=_frozen(sev))

    def finish_poll(
        self,
        *,
        seconds: float,
        finished_at: float,
        failed: bool,
        newest_data: float,
        findings: Mapping[tuple[str, str], int],
        stages: Mapping[str, StageStats],
    ) -> None:
        with self._lock:
            s = self._state
            self._publish(
                polls=s.polls + 1,
                poll_errors=s.poll_errors + int(failed),
                last_poll_seconds=seconds,
                last_poll_timestamp=finished_at,
                last_data_timestamp=newest_data or s.last_data_timestamp,
                findings=_plus(s.findings, findings),
                # Copies: the pipeline keeps counting into its own StageStats.
                stages=MappingProxyType({k: copy.copy(v) for k, v in stages.items()}),
            )
