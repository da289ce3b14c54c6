"""Every member's loop: at each poll slot, scrape this member's share of the targets and publish
each scrape to the stream as soon as it is done.

Slots are wall-clock multiples of ``poll_interval``, the same on every member, so the leader
can tell which scrapes belong to one poll. The share is recomputed from the live members
before every slot: when a member joins or dies its targets move at the next slot after the
membership changed. A target failing twice in a row is backed off as the single-process
service does; meanwhile its owner reports it each slot without scraping it, so the leader
can tell a target that is backing off from one nobody is watching. A scrape that cannot be
published (NATS away) is dropped and counted: the leader then sees that target missing, and
its ports go stale; nothing is queued, since a stale counter reading is no use later.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from graywire.collectors.base import ScrapeResult, redact_url
from graywire.service.cluster.bus import Bus
from graywire.service.cluster.wire import encode_scrape
from graywire.service.runner import Runner
from graywire.service.targets import Target

log = logging.getLogger("graywire.cluster")


@dataclass
class MemberStats:
    """What this member scraped and published, for /metrics."""

    #: (source, result) -> scrapes; result is ok, failed or backoff.
    scrapes: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Scrapes that could not be published, and the bytes that were.
    unpublished: int = 0
    published_bytes: int = 0
    owned: int = 0
    last_slot: float = 0.0
    #: Seconds the last slot's scrapes and publishing took, all together.
    last_slot_seconds: float = 0.0


class Member:
    """Scrape this member's share every slot and publish it."""

    def __init__(
        self,
        runner: Runner,
        bus: Bus,
        member_id: str,
        incarnation: str,
        share: Callable[[], list[Target]],
    ) -> None:
        self.runner = runner
        self.bus = bus
        self.member_id = member_id
        self.share = share
        self.interval = runner.settings.poll_seconds
        self.prefix = bus.cfg.subject_prefix
        self._ids = itertools.count(1)
        self._scrape_prefix = f"{member_id}/{incarnation[:12]}"
        self.stats = MemberStats()
        self._warned_publish = 0.0
        #: Targets this member has owned (by object id: the runner's targets live as long as it).
        self._scraped: set[int] = set()

    async def run(self) -> None:
        while True:
            slot = (time.time() // self.interval + 1) * self.interval
            await asyncio.sleep(max(0.0, slot - time.time()))
            try:
                await self.collect(slot)
            except Exception:  # a bug in one slot must not end collection for good
                log.exception("member: the poll at %.0f failed; continuing with the next", slot)

    async def collect(self, slot: float) -> None:
        """Scrape and publish this member's share for ``slot`` (unix seconds)."""
        t0 = time.monotonic()
        owned = self.share()
        self.stats.owned = len(owned)
        await self._take_over_tails([t for t in owned if id(t) not in self._scraped])
        self._scraped.update(id(t) for t in owned)
        due = [t for t in owned if t.next_attempt <= t0]
        waiting = [t for t in owned if t.next_attempt > t0]
        await asyncio.gather(
            *(self._scrape_and_publish(t, slot) for t in due),
            *(self._publish_backoff(t, slot, t0) for t in waiting),
        )
        self.stats.last_slot = slot
        self.stats.last_slot_seconds = time.monotonic() - t0

    async def _take_over_tails(self, new: list[Target]) -> None:
        """A file-tailing target another member read until now (its share moved here) is read
        from where the files end: what they hold was judged already, and read again it would
        reach the detectors twice. What was written between the two owners' scrapes (at most
        the stale window) is not read at all."""
        for t in new:
            c = t.collector
            skip = getattr(c, "skip_existing", None)
            if skip is None:
                continue
            try:
                moved = await self.bus.reported_before(c.source, redact_url(c.target))
            except Exception as e:  # NATS away: read it all rather than lose it
                log.warning(
                    "member: cannot tell whether %s was read before (%s); reading it whole", c.target, e
                )
                continue
            if moved:
                log.info("member: %s %s moved here; reading what it gains from now on", c.source, c.target)
                skip()

    async def _scrape_and_publish(self, t: Target, slot: float) -> None:
        (result,) = await self.runner.scrape([t])
        self.runner.book.schedule([(t, result)], time.monotonic())
        c = t.collector
        self.stats.scrapes[(c.source, "ok" if result.ok else "failed")] += 1
        # Named as the leader knows the target (by its collector), never with a URL's password.
        result = replace(result, source=c.source, target=redact_url(c.target))
        await self._publish(result, slot, attempted=True)

    async def _publish_backoff(self, t: Target, slot: float, now: float) -> None:
        c = t.collector
        self.stats.scrapes[(c.source, "backoff")] += 1
        wait = t.next_attempt - now
        error = f"backing off after {t.failing} failed scrapes in a row; next attempt in {wait:.0f} s"
        await self._publish(ScrapeResult(c.source, redact_url(c.target), ok=False, error=error), slot, False)

    async def _publish(self, result: ScrapeResult, slot: float, attempted: bool) -> None:
        scrape_id = f"{self._scrape_prefix}/{next(self._ids)}"
        try:
            messages = await asyncio.to_thread(
                encode_scrape,
                result,
                prefix=self.prefix,
                scrape_id=scrape_id,
                slot=slot,
                member=self.member_id,
                finished_at=time.time(),
                max_payload=self.bus.max_payload,
                attempted=attempted,
            )
            sent = await self.bus.publish(messages)  # (not `+= await`: the read would race)
            self.stats.published_bytes += sent
        except Exception as e:  # NATS away or refusing: the leader sees this target missing
            self.stats.unpublished += 1
            now = time.monotonic()
            if now - self._warned_publish > 60:
                self._warned_publish = now
                log.warning(
                    "member: cannot publish scrapes (%s: %s); their targets go stale until NATS is back",
                    type(e).__name__,
                    e,
                )
