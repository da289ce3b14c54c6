"""The poll loop's scrape targets and their accounting: which are due, this process's backoff,
what each last reported, the ports it speaks for, and which of them are stale.

A target that failed twice in a row or more waits, doubling from one interval up to
``max_backoff``, before it is scraped again. Its ports are stale after ``stale_after_polls``
failed scrapes in a row (a target in backoff keeps its count), or while it has never answered;
metrics and ``/api/v1/sources`` say so. Every poll's accounting is published to the state
board at once. The cluster shares the targets out among replicas by :class:`Target`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from graywire.collectors.base import Collector, ScrapeResult
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind, record_kind
from graywire.detectors.base import PortIndexer
from graywire.service.config import Settings
from graywire.service.state.fabric import StateBoard, TargetStatus

log = logging.getLogger("graywire.targets")


@dataclass
class Target:
    """One scrape target as the poll loop keeps it: its collector, what was last reported of
    it, and this process's backoff. The cluster shares targets out among replicas by these."""

    collector: Collector
    status: TargetStatus
    indexer: PortIndexer
    next_attempt: float = 0.0  # monotonic seconds
    ports: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    #: Failed scrapes in a row by this process (its backoff; ``status`` is what was reported).
    failing: int = 0


#: A scrape's target and outcome: what :meth:`TargetBook.record` accounts for.
Scraped = tuple[Target, ScrapeResult]
#: A target no scrape was reported for, and why.
Missing = tuple[Target, str]


class TargetBook:
    """Every target of this process, and the accounting of their scrapes."""

    def __init__(
        self, settings: Settings, fabric: Fabric, collectors: list[Collector], state: StateBoard
    ) -> None:
        self.settings = settings
        self.fabric = fabric
        self.state = state
        self.targets = [Target(c, TargetStatus(c.source, c.target), PortIndexer(fabric)) for c in collectors]
        #: A port without a reading this recent has no data: a few polls (a source refreshing
        #: every 30 s, as UFM Telemetry does, dates its rows by its own sample), at least 2 minutes.
        self.data_window_s = max(120.0, (settings.stale_after_polls + 2) * settings.poll_seconds)
        state.set_targets([t.status for t in self.targets], np.zeros(fabric.n_ports, dtype=bool))

    def due(self, now: float) -> list[Target]:
        """The targets whose backoff has run out at monotonic time ``now``."""
        return [t for t in self.targets if t.next_attempt <= now]

    def start_over(self) -> None:
        """Forget what was accounted: an earlier term's is not this one's to go on."""
        for t in self.targets:
            t.status = TargetStatus(t.collector.source, t.collector.target)
            t.ports = np.zeros(0, dtype=np.int32)

    def schedule(self, scraped: list[Scraped], now: float) -> None:
        """This process's backoff: a target that failed twice in a row or more waits, doubling
        from one interval up to ``max_backoff``, before it is scraped again."""
        interval = self.settings.poll_seconds
        max_backoff = self.settings.max_backoff.total_seconds()
        for t, r in scraped:
            if r.ok:
                t.failing, t.next_attempt = 0, 0.0
                continue
            t.failing += 1
            backoff = min(interval * 2 ** (t.failing - 1), max_backoff)
            t.next_attempt = now + backoff if t.failing > 1 else 0.0
            log.warning("%s %s failed (%d in a row): %s", r.source, r.target, t.failing, r.error)

    def record(self, scraped: list[Scraped], wall: float, missing: Sequence[Missing] = ()) -> None:
        """Each target's status after a poll, its ports, and which ports are stale (published)."""
        skipped: Counter[tuple[str, str]] = Counter()
        unmatched_rows: Counter[str] = Counter()
        for t, r in scraped:
            s = t.status
            if r.ok:
                t.ports, unmatched, examples = self._ports_of(t, r.batches)
                skipped.update({(r.source, reason): n for reason, n in r.skipped.items()})
                if unmatched and not s.unmatched_rows:  # once, when it starts
                    log.warning(
                        "%s %s: %d port rows match no port of the fabric model (e.g. %s): their keys "
                        "are not the inventory's; they are counted, not judged",
                        r.source, r.target, unmatched, ", ".join(examples),
                    )  # fmt: skip
                s = replace(
                    s,
                    ok=True,
                    last_success=wall,
                    samples=r.samples,
                    error=None,
                    note=r.error,  # an ok scrape's remark: what it read despite its source
                    consecutive_failures=0,
                    unmatched_rows=unmatched,
                    unmatched_examples=examples,
                )
                unmatched_rows[r.source] += unmatched
                left_out = sum(r.skipped.values())
                if not (left_out or r.samples):  # nothing new (a tail between writes): the last read stands
                    s = replace(s, note=t.status.note or r.error, skipped=t.status.skipped)
                elif left_out:
                    why = ", ".join(f"{reason} {n}" for reason, n in sorted(r.skipped.items()))
                    detail = r.error or f"{left_out} left out ({why})"
                    note = f"read nothing: {detail}" if r.samples == 0 else detail
                    if r.samples == 0 and not (t.status.note or "").startswith("read nothing"):  # once
                        log.warning("%s %s: read nothing but %d unreadable (%s)",
                                    r.source, r.target, left_out, why)  # fmt: skip
                    s = replace(s, note=note, skipped=left_out)
                else:
                    s = replace(s, skipped=left_out)
            else:
                s = replace(
                    s,
                    ok=False,
                    failures=s.failures + 1,
                    consecutive_failures=s.consecutive_failures + 1,
                    error=r.error,
                    samples=0,
                )
            t.status = replace(s, scrapes=s.scrapes + 1, last_attempt=wall, duration_s=r.duration_s)
        for t, reason in missing:
            s = t.status
            t.status = replace(
                s, ok=False, consecutive_failures=s.consecutive_failures + 1, error=reason, samples=0
            )
        stale = np.zeros(self.fabric.n_ports, dtype=bool)
        for t in self.targets:
            s = t.status
            # Stale after `stale_after_polls` failed scrapes in a row (a target in backoff
            # keeps its count), or while it has never answered.
            fresh = s.last_success is not None and s.consecutive_failures < self.settings.stale_after_polls
            t.status = replace(
                s,
                stale_ports=() if fresh else tuple(self.fabric.keys[i] for i in t.ports[:1000]),
                stale_port_count=0 if fresh else int(t.ports.size),
            )
            if not fresh:
                stale[t.ports] = True
        self.state.set_targets(
            [t.status for t in self.targets], stale, skipped, unmatched_rows, self.data_window_s
        )

    def _ports_of(
        self, t: Target, batches: tuple[pa.RecordBatch, ...]
    ) -> tuple[np.ndarray, int, tuple[str, ...]]:
        """Fabric ports a target reported (cached per dictionary: collectors reuse theirs), and
        its port rows that match no modelled port, with up to five of their keys."""
        parts = [b for b in batches if record_kind(b.schema) == RecordKind.PORT_SAMPLE]
        if not parts:
            return t.ports, 0, ()
        found = [t.indexer(b.column("port")) for b in parts]
        idx = np.concatenate(found)
        unmatched = int((idx < 0).sum())
        examples: tuple[str, ...] = ()
        if unmatched:
            keys: list[str] = []
            for b, ix in zip(parts, found, strict=True):
                rows = np.flatnonzero(ix < 0)[: 5 - len(keys)]
                if rows.size:
                    keys += b.column("port").take(pa.array(rows)).cast(pa.string()).to_pylist()
                if len(keys) >= 5:
                    break
            examples = tuple(keys)
        idx = idx[idx >= 0]
        if idx.size * 64 < self.fabric.n_ports:
            # A host's few ports: sorting them beats clearing a fabric-wide mask, once per target
            # (12,500 agents x 400,000 ports would be 5 GB of mask a poll).
            return np.unique(idx).astype(np.int32), unmatched, examples
        seen = np.zeros(self.fabric.n_ports, dtype=bool)  # a mask, not np.unique: no sort
        seen[idx] = True
        return np.flatnonzero(seen).astype(np.int32), unmatched, examples
