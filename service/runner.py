"""The poll loop: scrape the targets that are due, hand their batches (and what pushes brought)
to the pipeline, store the findings, publish the poll.

Scrapes are concurrent and each is bounded by a timeout, so one hung switch never stalls the
rest; nothing a failed scrape half-returned reaches the detectors, so a broken source cannot
raise a false finding. The loop's collaborators each keep one concern: the targets' backoff and
accounting (:class:`~graywire.service.targets.TargetBook`), the archive
(:class:`~graywire.service.archive.Archive`), the drain policy run
(:class:`~graywire.service.drain_engine.DrainEngine`) and the published state
(:class:`~graywire.service.state.fabric.StateBoard`). Accounting for the scrapes and processing
a poll are CPU work (Arrow + numpy) and run in a worker thread so the API stays responsive.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.base import Collector, ScrapeResult, failed
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind, record_kind
from graywire.detectors.findings import Finding
from graywire.detectors.pipeline import Pipeline, nccl_timing_detectors
from graywire.service.archive import Archive
from graywire.service.config import Settings
from graywire.service.drain_engine import DrainEngine
from graywire.service.models.engine import is_fence_refusal
from graywire.service.state.fabric import StateBoard
from graywire.service.state.read_cache import ReadCache
from graywire.service.store import IncidentStore
from graywire.service.targets import Missing, Scraped, Target, TargetBook

log = logging.getLogger("graywire.runner")


@dataclass(frozen=True, slots=True)
class Judged:
    """What the detectors made of one poll's batches, before anything is stored."""

    findings: list[Finding]
    #: The batches judged (collected, then pushed), and the cables.
    judged: list[pa.RecordBatch]
    port_rates: pa.RecordBatch | None
    newest: float
    ingested: Counter[str]
    dropped: Counter[str]
    rejected: Counter[tuple[str, str]]


class Runner:
    def __init__(
        self,
        settings: Settings,
        fabric: Fabric,
        collectors: list[Collector],
        store: IncidentStore,
        state: StateBoard,
        pipeline: Pipeline | None = None,
        drain: DrainEngine | None = None,
        cache: ReadCache | None = None,
        lead: bool = True,
    ) -> None:
        """``lead`` False: a replica that judges nothing until it takes the lead
        (:meth:`new_term`), and keeps no detector state meanwhile."""
        self.settings = settings
        #: The API's rendered answers: a poll's writes are background changes to them.
        self.cache = cache
        self.fabric = fabric
        self.store = store
        #: Where every poll publishes what it learned (the only writer of the fabric state).
        self.state = state
        self._pipeline: Pipeline | None = (pipeline or Pipeline(fabric)) if lead else None
        self.drain = drain
        #: The targets, their backoff and what each reported (published to the state).
        self.book = TargetBook(settings, fabric, collectors, state)
        self.targets = self.book.targets
        self.archive = (
            Archive(settings, fabric, state.count_archive_error) if settings.archive.enabled else None
        )
        self._pushed: collections.deque[pa.RecordBatch] = collections.deque()
        #: Pushed timings are judged apart from collected data (their findings say so, and
        #: alone they never drain a host); they cannot skew the collected peers either.
        self.push_pipeline = Pipeline(fabric, nccl_timing_detectors(fabric, settings.detectors))
        self._max_skew = settings.ingest.max_clock_skew.total_seconds()
        #: Counts the times this runner started over (:meth:`new_term`): push admission keeps no
        #: state of an earlier term.
        self.term = 0
        self._unstored: list[Finding] = []
        #: When storing ``_unstored`` first failed: what is stored after that is stored late.
        self._unstored_since: datetime | None = None
        #: The incidents a restart or a takeover left open go back to their detectors before
        #: the term's first judged poll (retried while the database is away).
        self._resume_pending = lead
        self._busy = threading.Lock()
        self._scrape_slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            raise RuntimeError("this replica does not lead: it keeps no detector state")
        return self._pipeline

    @property
    def has_unstored(self) -> bool:
        """Findings the database has not taken yet (kept, and stored by a later poll)."""
        return bool(self._unstored)

    def new_term(self, pipeline: Pipeline | None) -> None:
        """Start over with ``pipeline`` (a replica that takes the lead: fresh detector state, no
        pushes or findings of an earlier term), or none at all (one that steps down)."""
        with self._busy:
            self._pipeline = pipeline
            self._resume_pending = pipeline is not None
            self.book.start_over()
            self.push_pipeline = Pipeline(
                self.fabric, nccl_timing_detectors(self.fabric, self.settings.detectors)
            )
            self.term += 1
            self._pushed.clear()
            self._unstored.clear()
            self._unstored_since = None

    def push(self, batch: pa.RecordBatch) -> None:
        """Queue a batch push admission let in (NCCL timings, stamped with their receipt time);
        it is judged with the next poll."""
        self._pushed.append(batch)

    def _judge_pushed(self, pushed: list[pa.RecordBatch]) -> list[Finding]:
        """Pushed timings through their own detectors; each finding says where it came from."""
        if not pushed:
            return []
        result = self.push_pipeline.process_poll(pushed)
        return [
            replace(f, entity=f"push|{f.entity}", evidence={**f.evidence, "provenance": "push"})
            for f in result.findings
        ]

    # -- scraping -----------------------------------------------------------------------------
    async def _scrape(self, t: Target) -> ScrapeResult:
        c = t.collector
        t0 = time.perf_counter()
        started = False

        async def bounded() -> ScrapeResult:
            nonlocal started
            async with self._concurrency():
                started = True
                return await c.scrape()

        try:
            res = await asyncio.wait_for(bounded(), timeout=self.settings.scrape_timeout_seconds)
        except TimeoutError:
            limit = self.settings.scrape_timeout_seconds
            why = f"timed out after {limit:g} s" if started else (
                f"not scraped within {limit:g} s: {self.settings.max_concurrent_scrapes} scrapes of this "
                "process were running (max_concurrent_scrapes); it has more targets than it can scrape a poll"
            )  # fmt: skip
            res = failed(c.source, c.target, why, time.perf_counter() - t0)
        except Exception as e:  # a collector bug must not take the loop down
            log.exception("collector %s %s raised", c.source, c.target)
            res = failed(c.source, c.target, e, time.perf_counter() - t0)
        if not res.duration_s:
            res = replace(res, duration_s=time.perf_counter() - t0)
        return res

    async def poll_once(self) -> list[Finding]:
        """Scrape the targets that are due, then process what came back."""
        now = time.monotonic()
        due = self.book.due(now)
        results = await asyncio.gather(*(self._scrape(t) for t in due))
        return await asyncio.to_thread(self._after_scrapes, due, results, now)

    def _concurrency(self) -> asyncio.Semaphore:
        """At most ``max_concurrent_scrapes`` scrapes at once (one semaphore per event loop):
        thousands of host agents started at once would each open a connection and all time out
        together, where a bounded queue scrapes them in turn."""
        loop = asyncio.get_running_loop()
        if self._scrape_slots is None or self._scrape_slots[0] is not loop:
            self._scrape_slots = (loop, asyncio.Semaphore(self.settings.max_concurrent_scrapes))
        return self._scrape_slots[1]

    async def scrape(self, targets: list[Target]) -> list[ScrapeResult]:
        """Scrape ``targets`` at once (each under the scrape timeout), in their order."""
        return list(await asyncio.gather(*(self._scrape(t) for t in targets)))

    def _after_scrapes(self, due: list[Target], results: list[ScrapeResult], now: float) -> list[Finding]:
        """Account for the scrapes, then process what they brought: both CPU work over the
        fabric's ports, so both run in the poll's worker thread, never on the event loop."""
        scraped = list(zip(due, results, strict=True))
        self.book.schedule(scraped, now)
        return self.judge(scraped, time.time())

    def judge(self, scraped: list[Scraped], wall: float, missing: Sequence[Missing] = ()) -> list[Finding]:
        """Account for a poll's scrapes (and targets nobody reported, ``missing``: target and
        why), then judge and store what they brought."""
        self.book.record(scraped, wall, missing)
        return self._process([b for _, r in scraped if r.ok for b in r.batches])

    def tick(self) -> list[Finding]:
        """One poll, synchronously (tests and tools; the service uses :meth:`run`)."""
        return asyncio.run(self.poll_once())

    # -- processing ---------------------------------------------------------------------------
    def _process(self, batches: list[pa.RecordBatch]) -> list[Finding]:
        with self._busy:  # close() waits for a poll in flight instead of pulling the archive away
            if self.cache is None:
                return self._process_locked(batches)
            # Requests keep the answers from before the poll until its own are rendered.
            with self.cache.background():
                self.cache.touch()  # the fabric state it publishes
                return self._process_locked(batches)

    def warm(self, scraped: list[Scraped], wall: float, missing: Sequence[Missing] = ()) -> list[Finding]:
        """A poll a former leader judged already, replayed to bring the detectors' state up to
        date: accounted and judged, nothing stored, archived or decided. Returns the findings
        the replay gave (for the log: the database has the real ones)."""
        with self._busy:
            self.book.record(scraped, wall, missing)
            j = self._judge([b for _, r in scraped if r.ok for b in r.batches])
            self.state.observe_poll(j.judged, j.port_rates, j.ingested, j.dropped, j.rejected)
            self.state.record_port_rates(j.port_rates)
            return j.findings

    def _judge(self, batches: list[pa.RecordBatch]) -> Judged:
        """The poll's batches (and what was pushed since the last) through the detectors."""
        newest = 0.0
        judged, pushed, links = [], [], []
        ahead_of = time.time() + self._max_skew
        ingested: Counter[str] = Counter()
        dropped: Counter[str] = Counter()
        rejected: Counter[tuple[str, str]] = Counter()
        for batch in batches:
            kind = record_kind(batch.schema)
            ingested[kind] += batch.num_rows
            if kind == RecordKind.LINK:  # cables: judged against the model; no time, not archived
                links.append(batch)
                continue
            if batch.num_rows:
                t = batch.column("time")[0].as_py().timestamp()
                if t > ahead_of:  # data never decides what "now" is: a clock far ahead says nothing
                    log.warning("a %s batch dated %.0f s ahead of this host's clock was dropped", kind,
                                t - ahead_of + self._max_skew)  # fmt: skip
                    rejected[(kind, "clock_ahead")] += batch.num_rows
                    continue
                newest = max(newest, t)  # what collectors last saw, for the lag gauge
            judged.append(batch)
        # Pushes were judged at the door (push admission: their clock too) and stamped on receipt.
        while self._pushed:
            batch = self._pushed.popleft()
            ingested[record_kind(batch.schema)] += batch.num_rows
            pushed.append(batch)
        # One view of the fabric per poll: every source's batches reach the detectors together.
        result = self.pipeline.process_poll(judged + links)
        for kind, rows, reason in result.dropped:
            log.error("dropped a %s batch of %d rows: %s", kind, rows, reason)
            dropped[kind] += rows
        findings = result.findings + self._judge_pushed(pushed)
        judged += pushed
        return Judged(findings, judged, result.port_rates, newest, ingested, dropped, rejected)

    def _resume(self) -> None:
        """Give the detectors back the incidents left open before this term: each closes its
        own once the entity is healthy for its clean window, as it would without a restart.
        Pushed timings' incidents stay as they are: a job pushes again or its window ends."""
        try:
            active = [i for i in self.store.active_incidents() if not str(i["entity"]).startswith("push|")]
        except Exception as e:
            _log_failure(e, "reading the open incidents to resume failed; the next poll retries")
            return
        self._resume_pending = False
        if not active:
            return
        left = self.pipeline.resume(active)
        log.info("resumed %d open incidents; %d are judged again by their detectors", len(active),
                 len(active) - len(left))  # fmt: skip
        if left:
            kinds = Counter(str(i["kind"]) for i in left)
            log.warning(
                "%d open incidents have no detector to judge them again (their kind or port is not "
                "in this model): they stay open until seen again or resolved by hand: %s",
                len(left), ", ".join(f"{k} ({n})" for k, n in sorted(kinds.items())),
            )  # fmt: skip
            note = (
                f"graywire restarted at {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} and no detector judges this "
                "incident again: unknown, not healthy; it stays open until seen again or resolved by hand"
            )
            try:
                self.store.note_unjudged((int(i["id"]) for i in left), note)
            except Exception as e:  # the log above said it; the next restart says it again
                _log_failure(e, "noting the incidents no detector judges again failed")

    def _process_locked(self, batches: list[pa.RecordBatch]) -> list[Finding]:
        t0 = time.perf_counter()
        if self._resume_pending:
            self._resume()
        j = self._judge(batches)
        findings, judged, newest = j.findings, j.judged, j.newest
        self.state.observe_poll(judged, j.port_rates, j.ingested, j.dropped, j.rejected)
        self.state.record_port_rates(j.port_rates)
        if self.archive is not None:
            self.archive.write(judged)
        # Detectors report changes only once: findings not stored yet are kept and retried.
        # The database being away fails none of the rest of the poll: scrapes, detector
        # state, metrics and the archive carry on, and the poll counts as an error.
        db_failed = False
        self._unstored.extend(findings)
        if self._unstored:
            try:
                self.store.apply(
                    self._unstored,
                    stored_late_since=self._unstored_since,
                    link=self.drain.link_causes_in if self.drain is not None else None,
                )
            except Exception as e:
                _log_failure(e, f"storing {len(self._unstored)} findings failed; will retry next poll")
                db_failed = True
                self._unstored_since = self._unstored_since or datetime.now(UTC)
            else:
                for f in self._unstored:
                    log.info("%s %s %s: %s", f.status, f.kind, f.node or f.entity, f.summary)
                if self._unstored_since is not None:
                    log.warning(
                        "stored %d findings held since storing failed at %s",
                        len(self._unstored),
                        self._unstored_since,
                    )
                self._unstored.clear()
                self._unstored_since = None
        if self.drain is not None:
            try:  # every poll, findings or not: clean windows and expiries run on time
                self.drain.evaluate()
            except Exception as e:
                _log_failure(e, "drain policy run failed; the next poll retries from the stored state")
                db_failed = True
        try:
            self.state.set_incidents(self.store.open_counts(), self.store.active_on_ports())
        except Exception as e:  # the gauges keep their last values until the database is back
            log.warning("reading open incidents for the metrics failed: %s", e)
            db_failed = True
        if self.archive is not None:
            self.archive.prune_if_due()
        self.state.finish_poll(
            seconds=time.perf_counter() - t0,
            finished_at=time.time(),
            failed=db_failed,
            newest_data=newest,
            findings=Counter((f.kind, f.status) for f in findings),
            # Pushed timings' own detectors too, as push/<stage>: their bounds guard the least
            # trusted input, so what they leave out must show.
            stages=dict(self.pipeline.stats)
            | {f"push/{name}": st for name, st in self.push_pipeline.stats.items()},
        )
        return findings

    async def run(self) -> None:
        """Poll every interval until cancelled; a late poll shifts nothing after it."""
        interval = self.settings.poll_seconds
        start = time.monotonic()
        k = 0
        try:
            while True:
                delay = start + k * interval - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    await self.poll_once()
                except Exception:
                    log.exception("poll failed; continuing with the next one")
                    self.state.poll_failed()
                k = max(k + 1, int((time.monotonic() - start) // interval))
        finally:
            self.close()

    def close(self) -> None:
        with self._busy:
            if self.archive is not None:
                self.archive.close()
                self.archive = None

    async def aclose(self) -> None:
        """Close the archive (after any poll in flight) and the collectors' connections."""
        await asyncio.to_thread(self.close)
        for t in self.targets:
            c = t.collector
            try:
                await c.aclose()
            except Exception:  # closing is best effort; the process is going away
                log.debug("closing %s %s failed", c.source, c.target, exc_info=True)


def _log_failure(e: Exception, what: str) -> None:
    """A write's failure with its traceback, or in one line when the fence refused it: this
    replica wrote under a lease it lost, and it is stepping down (the fence logged why)."""
    if is_fence_refusal(e):
        log.warning("%s: refused by the fence (this replica no longer leads)", what)
    else:
        log.exception("%s", what)
