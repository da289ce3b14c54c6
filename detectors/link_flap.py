"""Link flaps: a link that keeps going down and coming back.

A single outage shorter than a retrain (~30 s) is normal and pages nobody; it is only counted.
A link that went down ``flaps_to_open`` times within ``window_s`` is a flapping link (warning),
and ``flaps_critical`` times is critical; it clears after ``window_s`` without a new outage.
Outages are counted from ``link_downed`` increments and from up→down transitions of the
physical state, on both ends of the link as one entity: signals of one outage (both ends' state,
both ends' counters, several sources, arriving over a few polls) form one episode, and an
episode counts as many outages as the one signal that reports most, so one outage is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PHYS_LINK_UP
from graywire.detectors.base import PORT_RATES, LinkEntities, PortIndexer, Scores, column, open_ports
from graywire.detectors.findings import Finding, Kind, Severity

HISTORY = 16  # outage times kept per link
MAX_SOURCES = 8  # distinct source names whose port state is tracked apart (more share the last slot)


@dataclass(frozen=True, slots=True)
class LinkFlapConfig:
    window_s: float = 600.0
    flaps_to_open: int = 3
    flaps_critical: int = 6
    #: Signals of one outage arrive over a few polls (the state on the poll it drops, each end's
    #: counter when it is read again, UFM REST and telemetry on their own cadences): signals no
    #: further apart than this are one episode, whose outage count is the most any one signal says.
    merge_s: float = 60.0

    def __post_init__(self) -> None:
        if not 1 <= self.flaps_to_open <= self.flaps_critical <= HISTORY:
            raise ValueError(f"need 1 <= flaps_to_open <= flaps_critical <= {HISTORY}")


@dataclass(frozen=True, slots=True, kw_only=True)
class _FlapScores(Scores):
    recent: np.ndarray  # outages within the window, per link in ``ids``
    reported: np.ndarray  # whether a source reported the link this poll, per link in ``ids``


class LinkFlapDetector:
    """Outage counts per link over a sliding window, decided by count rather than hysteresis.

    It scores and decides apart like the other detectors, but not through the shared
    hysteresis: the count over ``window_s`` is the debounce already, and a finding fires again
    as the count grows and clears only after a whole window without an outage.
    """

    name = "link_flap"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.LINK_FLAP,)

    def __init__(self, fabric: Fabric, cfg: LinkFlapConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or LinkFlapConfig()
        n = fabric.n_ports
        self.port_index = PortIndexer(fabric)
        self.links = LinkEntities(fabric)
        # Per port and source: -1 unknown (never seen, or no state), 0 down, 1 up.
        self.was_up = np.full((n, MAX_SOURCES), -1, dtype=np.int8)
        self._sources: dict[str, int] = {}
        # Open episodes per link entity: until when they merge, outages counted, and per signal
        # (port, "state" or "counter", source slot) the outages that signal reported.
        self.episodes: dict[int, tuple[float, int, dict[tuple[int, str, int], int]]] = {}
        # Outage times (unix s), HISTORY per link entity that ever had one: most links never
        # flap, so a row is taken at an entity's first outage (a 16-slot history for every port
        # was 128 bytes a port). ``row`` maps entity -> row, -1 for none yet.
        self.row = np.full(n, -1, dtype=np.int32)
        self.events = np.full((0, HISTORY), -np.inf)
        self.head = np.zeros(0, dtype=np.int64)
        self._rows = 0  # rows taken
        self.last_event = np.full(n, -np.inf)  # the latest of each entity's outage times
        self.open_sev = np.zeros(n, dtype=np.int8)  # 0 closed, 1 warning, 2 critical
        #: Outages the open finding last reported: a growing count fires again (the incident
        #: then says 4, not the 3 it opened with).
        self.reported = np.zeros(n, dtype=np.int32)

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Open incidents of its kinds, back after a restart (:class:`Resumable`): each link
        gets back the outages its incident listed, so it clears a whole window after the last."""
        ports, taken = open_ports(self.fabric, incidents, self.kinds)
        for e, inc in zip(self.links.of_port[ports].tolist(), taken, strict=True):
            evidence = inc.get("evidence") or {}
            times = []
            for x in evidence.get("outage_times") or []:
                try:
                    times.append(datetime.fromisoformat(str(x)).timestamp())
                except ValueError:
                    continue  # a time this detector did not write: the others still count
            r = self._row(e)
            for t in sorted(times)[-HISTORY:]:
                self.events[r, self.head[r] % HISTORY] = t
                self.head[r] += 1
            self.last_event[e] = max(times, default=self.last_event[e])
            self.open_sev[e] = 2 if inc.get("severity") == Severity.CRITICAL else 1
            self.reported[e] = len(times)
        return taken

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        cfg = self.cfg
        now = batch.column("time")[0].as_py()
        s = self._score(batch, now)
        # The decision: a link opens at flaps_to_open outages in the window, fires again when
        # its count grows or it turns critical, and clears after a window without outages, on a
        # poll that reports it.
        touched, recent = s.ids, s.recent
        sev = np.where(recent >= cfg.flaps_critical, 2, np.where(s.bad, 1, 0))
        old = self.open_sev[touched]
        grew = (old > 0) & (recent > self.reported[touched])
        fire = ((sev > old) | grew).nonzero()[0]
        # Only a link some source reports is calm: one nobody reports is unknown, not healthy.
        clear = ((old > 0) & (recent == 0) & s.reported).nonzero()[0]
        out = []
        for j in fire.tolist():  # only the links whose state changes: a handful per poll
            e = int(touched[j])
            level = max(int(sev[j]), int(old[j]))
            out.append(self._finding(e, "firing", now, level, int(recent[j])))
            self.open_sev[e] = level
            self.reported[e] = recent[j]
        for j in clear.tolist():
            e = int(touched[j])
            out.append(self._finding(e, "cleared", now, int(old[j]), 0))
            self.open_sev[e] = 0
            self.reported[e] = 0
        return out

    def _score(self, batch: pa.RecordBatch, now: datetime) -> _FlapScores:
        """Count this poll's outages into the links' histories (one episode, one outage) and
        score every link with data or open: its outages within ``window_s``."""
        cfg = self.cfg
        idx = self.port_index(batch.column("port"))
        known: np.ndarray | slice = idx >= 0
        if known.all():  # type: ignore[union-attr]
            known = slice(None)  # views, not copies
        p = idx[known]
        phys = column(batch, "phys_state")[known]
        dt = column(batch, "interval_seconds")[known]
        downs = np.rint(np.nan_to_num(column(batch, "link_downed_per_second")[known] * dt, nan=0.0))
        slot = self._slots(batch.column("source"))[known]
        has_state = np.isfinite(phys)
        up = has_state & (phys == PHYS_LINK_UP)
        # Only a port seen up before (by the same source) counts an up->down transition; no
        # state says nothing.
        prev = self.was_up[p, slot]
        went_down = (prev == 1) & has_state & ~up
        self.was_up[p, slot] = np.where(has_state, up.astype(np.int8), prev)
        t = now.timestamp()
        ent = self.links.of_port[p]
        for e in [k for k, ep in self.episodes.items() if ep[0] < t]:
            del self.episodes[e]
        rows = np.flatnonzero(went_down | (downs > 0))
        for j in rows.tolist():  # ports with an outage signal this poll: a handful
            e = int(ent[j])
            _, counted, sig = self.episodes.get(e, (t, 0, {}))
            if went_down[j]:
                k = (int(p[j]), "state", int(slot[j]))
                sig[k] = sig.get(k, 0) + 1
            if downs[j] > 0:
                k = (int(p[j]), "counter", int(slot[j]))
                sig[k] = sig.get(k, 0) + int(min(downs[j], HISTORY))
            total = max(sig.values())
            if total > counted:
                r = self._row(e)
                for _ in range(total - counted):
                    self.events[r, self.head[r] % HISTORY] = t
                    self.head[r] += 1
                self.last_event[e] = t
            self.episodes[e] = (t + cfg.merge_s, max(total, counted), sig)
        # Judged: the links with data this poll and an outage in the window, and the open ones
        # (a link with neither has no outage to count: nothing to open, nothing to close).
        data = np.zeros(self.fabric.n_ports, dtype=bool)
        data[ent] = True
        since = t - cfg.window_s
        touched = np.flatnonzero((data & (self.last_event >= since)) | (self.open_sev > 0))
        recent = (self.events[self.row[touched]] >= since).sum(axis=1)  # each had an outage: a row
        bad = recent >= cfg.flaps_to_open
        return _FlapScores(ids=touched, bad=bad, recent=recent, reported=data[touched])

    def _row(self, ent: int) -> int:
        """The history row of a link entity, taken at its first outage."""
        r = int(self.row[ent])
        if r < 0:
            r = self._rows
            self.row[ent] = r
            self._rows += 1
            if r == len(self.events):  # grow by half: a storm of first outages stays linear
                grow = max(64, r // 2)
                self.events = np.concatenate([self.events, np.full((grow, HISTORY), -np.inf)])
                self.head = np.concatenate([self.head, np.zeros(grow, dtype=np.int64)])
        return r

    def _slots(self, source: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """A small integer per row for its source name, so each source's state is its own."""
        if isinstance(source, pa.ChunkedArray):
            source = source.combine_chunks()
        if not pa.types.is_dictionary(source.type):
            source = source.dictionary_encode()
        names = source.dictionary.to_pylist()
        for name in names:
            if name not in self._sources:
                self._sources[name] = min(len(self._sources), MAX_SOURCES - 1)
        codes = np.array([self._sources[name] for name in names], dtype=np.int64)
        return codes[source.indices.to_numpy(zero_copy_only=False)]

    def _finding(self, ent: int, status: str, now: datetime, sev: int, count: int) -> Finding:
        place = self.links.place(ent)
        mins = self.cfg.window_s / 60
        r = int(self.row[ent])
        times = sorted(float(x) for x in self.events[r] if np.isfinite(x)) if r >= 0 else []
        summary = (
            f"{place['link'] or place['port']} went down {count} times in {mins:g} min"
            if status == "firing"
            else f"{place['link'] or place['port']} stable for {mins:g} min"
        )
        return Finding(
            kind=Kind.LINK_FLAP,
            entity=str(place["entity"]),
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.CRITICAL if sev == 2 else Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=place["node"],
            port=place["port"],
            link=place["link"],
            score=float(count),
            evidence={
                "outages_in_window": count,
                "window_seconds": self.cfg.window_s,
                "outage_times": [datetime.fromtimestamp(x, now.tzinfo).isoformat() for x in times[-HISTORY:]],
                "peer_port": place["peer_port"],
            },
        )
