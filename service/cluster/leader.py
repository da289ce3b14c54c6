"""The leader's loop: take over, warm the detectors up, then judge every poll the members report.

Members scrape at the same wall-clock slots (multiples of ``poll_interval``) and publish each
scrape with its slot. The leader reads the stream through its term's durable consumer and
judges slot after slot, as one runner poll each (every source's batches together, as the
single-process service does): a slot is judged once every target has reported for it, or at
its deadline (the scrape timeout and a margin after the slot began). A target nobody reported
by then is *missing*: it counts as a failed scrape, so its ports go stale after
``stale_after_polls``, and nothing about them is judged (unknown is not healthy). A report that
arrives after its slot was judged is judged with the next one, unless the target already has a
newer one judged (it would go back in time); a second report of one target and slot (two
members briefly owned it) is dropped.

Messages are acknowledged once their slot is judged and its findings stored; while the
database refuses them they stay unacknowledged, so a leader that dies before storing them
leaves them to the next.

On taking over, the new leader first replays the stream's history up to what the previous term
acknowledged (``cluster.warmup`` back at most) through fresh detectors, storing nothing: the
statistical detectors come out warm and judge the first live poll as the old leader would have,
so a failover neither opens nor closes incidents of its own making. Deterministic ones would
judge at once anyway. Then it judges, live, everything after that point: the polls published
while nobody led are judged late, not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from graywire.collectors.base import redact_url
from graywire.detectors.pipeline import Pipeline
from graywire.service.cluster.bus import FETCH_BATCH, Bus
from graywire.service.cluster.shard import target_key
from graywire.service.cluster.wire import Assembler, Report, WireError
from graywire.service.runner import Runner
from graywire.service.targets import Scraped

log = logging.getLogger("graywire.cluster")

#: Why a report or message was not judged (``graywire_cluster_reports_dropped_total{reason}``).
DROP_REASONS = ("late", "duplicate", "unknown_target", "incomplete", "unreadable")


def runner_key(source: str, target: str) -> str:
    """A target's key as members publish it (the target redacted: it crosses NATS)."""
    return target_key(source, redact_url(target))


class ConsumerGone(RuntimeError):
    """This term's consumer was deleted under it: pulls from it only time out, so the term's
    loop starts again and makes it anew."""


class SlotBook:
    """Reports waiting to be judged, per target in slot order, and the newest slot judged of
    each target. Thread-safe: messages are absorbed and slots taken from different threads."""

    def __init__(self, keys: list[str], interval_s: float) -> None:
        self.keys = keys
        self.known = set(keys)
        self.interval = interval_s
        self._lock = threading.Lock()
        self._pending: dict[str, list[tuple[int, Report]]] = {}
        self.last_judged: dict[str, int] = {}
        self.newest = -1

    def slot_of(self, report: Report) -> int:
        return round(report.slot / self.interval)

    def add(self, key: str, report: Report) -> str | None:
        """File a report; the reason it is dropped instead, if it is."""
        if key not in self.known:
            return "unknown_target"
        k = self.slot_of(report)
        with self._lock:
            if k <= self.last_judged.get(key, -1):
                return "late"
            queue = self._pending.setdefault(key, [])
            if any(s == k for s, _ in queue):
                return "duplicate"
            queue.append((k, report))
            queue.sort(key=lambda x: x[0])
            self.newest = max(self.newest, k)
        return None

    def oldest(self) -> int | None:
        with self._lock:
            slots = [q[0][0] for q in self._pending.values() if q]
        return min(slots) if slots else None

    def complete(self, k: int) -> bool:
        """Every target has a report for slot ``k`` or earlier waiting."""
        with self._lock:
            return all(self._pending.get(key) and self._pending[key][0][0] <= k for key in self.keys)

    def take(self, k: int) -> tuple[list[list[tuple[str, Report]]], list[str]]:
        """The reports of slot ``k`` and earlier, in rounds (a target's older reports first, one
        per round), and the targets with none (missing)."""
        rounds: list[list[tuple[str, Report]]] = []
        missing: list[str] = []
        with self._lock:
            for key in self.keys:
                queue = self._pending.get(key) or []
                mine = [r for s, r in queue if s <= k]
                if not mine:
                    missing.append(key)
                    continue
                self._pending[key] = [(s, r) for s, r in queue if s > k]
                self.last_judged[key] = max(self.last_judged.get(key, -1), *(self.slot_of(r) for r in mine))
                for i, r in enumerate(mine):
                    if i == len(rounds):
                        rounds.append([])
                    rounds[i].append((key, r))
        return rounds, missing


@dataclass
class LeaderStats:
    """What the leader's loop did, for /metrics."""

    slots_judged: int = 0
    slots_warmed: int = 0
    #: Seconds the takeover took to warm the detectors up (the replay, and building them).
    warmup_seconds: float = 0.0
    #: Slot (unix seconds) of the newest poll judged, and when it was judged.
    last_slot: float = 0.0
    last_judged_at: float = 0.0
    #: Reports and messages not judged, by reason (``DROP_REASONS``).
    dropped: Counter[str] = field(default_factory=Counter)


class Leader:
    """One leadership term: from the takeover until this member steps down (the task is cancelled)."""

    def __init__(
        self,
        runner: Runner,
        bus: Bus,
        pipelines: Callable[[], Pipeline],
        token: int,
        history_s: float,
        warmup_s: float,
        prepare: Callable[[], object],
    ) -> None:
        self.runner = runner
        self.bus = bus
        self.pipelines = pipelines
        self.token = token
        self.history_s = history_s
        self.warmup_s = min(warmup_s, history_s)
        self.prepare = prepare
        s = runner.settings
        self.interval = s.poll_seconds
        #: How long after a slot begins its reports may still arrive: a scrape may take the
        #: scrape timeout, then it is encoded and published.
        self.wait_s = s.scrape_timeout_seconds + max(0.5, 0.1 * self.interval)
        self.targets = {runner_key(t.collector.source, t.collector.target): t for t in runner.targets}
        self.book = SlotBook(list(self.targets), self.interval)
        self.assembler = Assembler()
        self.stats = LeaderStats()
        self._arrived = asyncio.Event()
        #: The last fetch returned all the consumer had.
        self._caught_up = False
        self._held: list[Any] = []  # judged, but the findings are not stored yet

    # -- the term -----------------------------------------------------------------------------
    async def run(self) -> None:
        started = time.monotonic()
        # Fresh detectors (their state arrays sized to the fabric): off the event loop.
        await asyncio.to_thread(lambda: self.runner.new_term(self.pipelines()))
        await asyncio.to_thread(self.prepare)
        judged_up_to = await self.bus.judged_up_to(self.token)
        if judged_up_to is None:
            # Nobody judged anything yet (the first leader, or the stream was lost): the last
            # two polls' worth is live, what is older only warms the detectors up.
            judged_up_to = await self.bus.first_sequence_since(time.time() - 2 * self.interval) - 1
        await self._warm_up(judged_up_to)
        self.stats.warmup_seconds = time.monotonic() - started
        log.info(
            "leader (token %d): warmed up on %d polls in %.1f s; judging from stream sequence %d",
            self.token,
            self.stats.slots_warmed,
            self.stats.warmup_seconds,
            judged_up_to + 1,
        )
        sub = await self.bus.term_consumer(self.token, judged_up_to + 1, ack_wait_s=self.history_s)
        fetcher = asyncio.create_task(self._fetch(sub))
        judge = asyncio.create_task(self._judge_slots())
        try:
            # Either ends only by failing: the term's loop then starts again.
            done, _ = await asyncio.wait({fetcher, judge}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in (fetcher, judge):
                task.cancel()
            await asyncio.gather(fetcher, judge, return_exceptions=True)

    # -- warm-up ------------------------------------------------------------------------------
    async def _warm_up(self, until_seq: int) -> None:
        since = datetime.now(UTC) - timedelta(seconds=self.warmup_s)
        async for batch in self.bus.history(since, until_seq):
            await asyncio.to_thread(self._absorb, batch, False)
            # A slot is replayed once reports two slots newer arrived: its own are all in by then.
            oldest = self.book.oldest()
            while oldest is not None and oldest <= self.book.newest - 2:
                await asyncio.to_thread(self._warm, oldest)
                oldest = self.book.oldest()
        oldest = self.book.oldest()
        while oldest is not None:
            await asyncio.to_thread(self._warm, oldest)
            oldest = self.book.oldest()
        self.assembler.drop_all()

    def _warm(self, k: int) -> None:
        rounds, _ = self.book.take(k)
        for r in rounds:
            self.runner.warm(self._scraped(r), time.time())
        self.stats.slots_warmed += 1

    # -- live ---------------------------------------------------------------------------------
    async def _fetch(self, sub: Any) -> None:
        """Take what the consumer delivers into the book, for ever."""
        quiet_until = 0.0
        heard = time.monotonic()  # the last fetch that brought something
        while True:
            try:
                msgs = await self.bus.fetch(sub, timeout_s=1.0)
                self._caught_up = len(msgs) < FETCH_BATCH
                if not msgs and time.monotonic() - heard > max(10.0, 2 * self.interval):
                    heard = time.monotonic()
                    if await self.bus.consumer_gone(self.token):
                        raise ConsumerGone(f"the consumer of term {self.token} was deleted")
                if msgs:
                    heard = time.monotonic()
                    spoiled = await asyncio.to_thread(self._absorb, msgs, True)
                    if spoiled and self.runner.has_unstored:
                        # Some may be redeliveries of messages judged but not stored yet (the
                        # store failing for ack_wait): acknowledged with the rest, once stored.
                        self._held += spoiled
                    elif spoiled:
                        await self.bus.ack(spoiled)
                    self._arrived.set()
                expired = self.assembler.expire(time.monotonic() - 2 * self.interval - self.wait_s)
                if expired:
                    self.stats.dropped["incomplete"] += 1
                    log.warning("leader: dropped a scrape whose member stopped publishing it mid-way")
                    await self.bus.ack(expired)
            except (asyncio.CancelledError, ConsumerGone):
                raise
            except Exception as e:  # NATS away: the slots go on, their targets missing
                self._caught_up = True
                if time.monotonic() > quiet_until:
                    quiet_until = time.monotonic() + 60
                    log.warning("leader: reading the stream failed (%s: %s); retrying", type(e).__name__, e,
                                exc_info=not isinstance(e, (TimeoutError, ConnectionError)))  # fmt: skip
                await asyncio.sleep(1.0)

    def _absorb(self, msgs: list[Any], live: bool) -> list[Any]:
        """File messages into the book; the handles of messages dropped (to acknowledge)."""
        spoiled: list[Any] = []
        now = time.monotonic()
        for m in msgs:
            try:
                report = self.assembler.add(
                    m.subject, m.headers, m.data, m.metadata.sequence.stream, m if live else None, now
                )
            except WireError as e:
                self.stats.dropped["unreadable"] += 1
                log.error("leader: dropped a message it cannot read: %s", e)
                spoiled += [h for h in e.handles if h is not None]
                continue
            finally:
                # Filed (the assembler keeps what it still needs): the message is only a handle
                # to acknowledge from here on, which may wait long while stores fail.
                m.data = b""
            if report is None:
                continue
            r = report.result
            reason = self.book.add(runner_key(r.source, r.target), report)
            if reason is not None:
                self.stats.dropped[reason] += 1
                if reason == "unknown_target":
                    log.warning(
                        "leader: a report of %s %s, which is not in this configuration", r.source, r.target
                    )
                spoiled += [h for h in report.handles if h is not None]
        return spoiled

    def _ready(self, k: int) -> bool:
        """Slot ``k`` may be judged: every target reported, or its deadline passed and its
        reports are all in (the consumer caught up, or newer slots are arriving)."""
        if self.book.complete(k):
            return True
        if time.time() < k * self.interval + self.wait_s:
            return False
        return self._caught_up or self.book.newest >= k + 2

    async def _judge_slots(self) -> None:
        # The first slot is the oldest the stream still holds unjudged (the polls published
        # while nobody led), else the current one.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), timeout=self.wait_s)
        k = self.book.oldest()
        if k is None:
            k = int(time.time() // self.interval)
        while True:
            while not self._ready(k):
                self._arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), timeout=0.25)
            handles = await asyncio.to_thread(self._judge, k)
            self._held += handles
            if not self.runner.has_unstored:
                held, self._held = self._held, []
                await self.bus.ack(held)
            k += 1

    def _judge(self, k: int) -> list[Any]:
        rounds, missing = self.book.take(k)
        gone = [
            (self.targets[key], f"no member reported a scrape for the poll at {_hms(k * self.interval)}")
            for key in missing
        ]
        handles: list[Any] = []
        now = time.time()
        if not rounds:
            rounds = [[]]
        for i, r in enumerate(rounds):
            self.runner.judge(self._scraped(r), now, gone if i == len(rounds) - 1 else ())
            handles += [h for _, report in r for h in report.handles if h is not None]
        self.stats.slots_judged += 1
        self.stats.last_slot = k * self.interval
        self.stats.last_judged_at = now
        return handles

    def _scraped(self, reports: list[tuple[str, Report]]) -> list[Scraped]:
        """The runner's view of a round: attempted scrapes only (a member backing off from a
        failing target reports it without scraping: nothing new to account for)."""
        return [(self.targets[key], r.result) for key, r in reports if r.attempted]


def _hms(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")
