"""One replica's part in the cluster, as the app runs it.

A coordinator thread, with connections of its own so a busy poll never delays it, heartbeats
this member, renews the lease while it leads, tries to take it while nobody does (if this member
may lead), and publishes what it saw as an immutable :class:`ClusterView`. On the event loop:

- the member loop (``member.py``) scrapes this member's share every slot, computed from the
  view's collecting members;
- while this member leads, the leader loop (``leader.py``) and the alert dispatcher run; they
  are cancelled the moment it stops leading: a renewal refused, the lease unrenewable past its
  local validity, or any write refused by the fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from graywire.detectors.pipeline import Pipeline
from graywire.service.alerts.dispatcher import Dispatcher
from graywire.service.cluster.bus import Bus, BusError
from graywire.service.cluster.fence import Fence
from graywire.service.cluster.leader import Leader, LeaderStats, runner_key
from graywire.service.cluster.lease import Lease, Takeover
from graywire.service.cluster.member import Member, MemberStats
from graywire.service.cluster.membership import MemberIdInUse, MemberInfo, Members
from graywire.service.cluster.shard import Shards
from graywire.service.config import Settings
from graywire.service.models.engine import make_engine
from graywire.service.runner import Runner
from graywire.service.targets import Target

log = logging.getLogger("graywire.cluster")

#: Seconds a stopping replica waits for its leader's loop (a poll in flight) before going on.
STOP_TIMEOUT_S = 10.0


def _version() -> str:
    try:
        return version("graywire")
    except PackageNotFoundError:
        return "unknown"


def default_member_id(settings: Settings) -> str:
    return f"{socket.gethostname()}:{settings.port}"


def default_url(settings: Settings) -> str:
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"{'https' if settings.tls.enabled else 'http'}://{host}:{settings.port}"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the coordinator last saw (replaced whole, read without a lock)."""

    members: tuple[MemberInfo, ...] = ()
    leader: str | None = None
    leader_url: str | None = None
    #: The lease's fencing token (whoever holds it).
    token: int | None = None
    lease_live: bool = False
    #: Monotonic time of the reading; 0: none yet.
    seen_at: float = 0.0


class ClusterNode:
    """This replica: member always, leader while it holds the lease."""

    def __init__(
        self,
        settings: Settings,
        runner: Runner,
        fence: Fence,
        pipelines: Callable[[], Pipeline],
        prepare: Callable[[], object],
        dispatcher: Dispatcher | None,
    ) -> None:
        cfg = settings.cluster
        assert cfg is not None
        self.settings = settings
        self.cfg = cfg
        self.timing = settings.cluster_timing
        self.runner = runner
        self.fence = fence
        self.pipelines = pipelines
        self.prepare = prepare
        self.dispatcher = dispatcher
        self.member_id = cfg.member_id or default_member_id(settings)
        self.url = (cfg.advertise_url or default_url(settings)).rstrip("/")
        self.incarnation = uuid.uuid4().hex
        # The coordinator's own connections. A renewal that hangs (a half-open connection after
        # a database failover) would keep this replica leading in its own eyes: the server
        # ends a statement past the lease's lifetime, TCP keepalives find a dead peer within it.
        ttl = self.timing.lease_ttl
        ttl_ms = max(1000, round(ttl * 1000))
        self._engine = make_engine(
            settings.db_url,
            {"statement_timeout": f"{ttl_ms}ms"},
            {
                "keepalives": 1,
                "keepalives_idle": max(1, round(ttl / 2)),
                "keepalives_interval": 1,
                "keepalives_count": 3,
                "tcp_user_timeout": ttl_ms,
            },
        )
        me = MemberInfo(self.member_id, self.url, cfg.lead, cfg.collect)
        self.members = Members(self._engine, me, self.incarnation, self.timing.member_ttl, _version())
        self.lease = Lease(self._engine, self.member_id, self.url, self.timing.lease_ttl, self.timing.tick)
        self.bus = Bus(cfg, self.member_id)
        self.shards = Shards([runner_key(t.collector.source, t.collector.target) for t in runner.targets])
        self.view = ClusterView()
        self.member_stats = MemberStats()
        self.leader_stats: LeaderStats | None = None
        self.takeovers = 0
        self.stepdowns = 0
        self.led_since: float | None = None  # unix seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._leading: asyncio.Task[None] | None = None
        self._leading_token: int | None = None  # the term ``_leading`` runs
        #: A term begins and ends one at a time: an ending that waits on a slow judge must not
        #: reset the state of the term that began meanwhile, nor cancel it.
        self._term_lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._last_error = 0.0
        fence.on_refused(lambda message: self._lost(f"the database refused a write: {message}"))

    # -- roles --------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.fence.token is not None

    @property
    def role(self) -> str:
        return "leader" if self.is_leader else "follower"

    def share(self) -> list[Target]:
        """The targets this member scrapes now (none until the first view, or if it does not
        collect)."""
        if not self.cfg.collect or not self.view.seen_at:
            return []
        names = [m.member_id for m in self.view.members if m.collect]
        idx = self.shards.share(names, self.member_id)
        return [self.runner.targets[i] for i in idx.tolist()]

    def assignment(self) -> dict[str, int]:
        """Targets per collecting member, as every member computes it now."""
        names, owner = self.shards.owners(m.member_id for m in self.view.members if m.collect)
        counts = np.bincount(owner[owner >= 0], minlength=len(names)) if names else np.zeros(0, int)
        return dict(zip(names, counts.tolist(), strict=True))

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to NATS (retrying until it answers), then start heartbeating and collecting."""
        self._loop = asyncio.get_running_loop()
        self.runner.state.exported = False  # the fabric's series come from the leader alone
        try:  # a second live process under this member id fails its start-up, here
            await asyncio.to_thread(self.members.heartbeat)
        except MemberIdInUse:
            raise
        except Exception as e:  # the database away: the coordinator keeps trying
            log.warning("cluster: first heartbeat failed (%s: %s); retrying", type(e).__name__, e)
        self._tasks.append(asyncio.create_task(self._connect_and_collect()))
        self._tasks.append(asyncio.create_task(self._watch_lease()))
        self._thread = threading.Thread(target=self._coordinate, name="graywire-cluster", daemon=True)
        self._thread.start()

    async def _watch_lease(self) -> None:
        """Step down once the lease has been out here for a whole lease lifetime unrenewed,
        whatever the coordinator is doing: it may be stuck in a renewal that never answers
        while another member takes the lease over. (Sooner, the coordinator's own renewal,
        refused by the database, steps it down: the fence at work.)"""
        ttl = self.timing.lease_ttl
        while True:
            await asyncio.sleep(self.timing.tick / 2)
            if self.fence.token is not None and time.monotonic() > self.fence.valid_until + ttl:
                self._lost("the lease ran out before it could be renewed (the database did not answer)")

    async def _connect_and_collect(self) -> None:
        delay = 1.0
        while True:
            try:
                await self.bus.connect()
                break
            except BusError as e:
                log.warning("%s; retrying in %.0f s", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        log.info(
            "cluster member %s (%s): NATS connected, stream %s", self.member_id, self.url, self.cfg.stream
        )
        if self.cfg.collect:
            member = Member(self.runner, self.bus, self.member_id, self.incarnation, self.share)
            self.member_stats = member.stats
            await member.run()

    async def stop(self) -> None:
        """Stop leading (releasing the lease, so another member takes over at once), leave the
        membership (so the targets move at once), and close NATS."""
        self._stop.set()
        try:
            await asyncio.wait_for(self._end_term("this member is stopping"), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("cluster: the leader's loop did not stop within %.0f s", STOP_TIMEOUT_S)
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
        token = self.fence.drop()
        with contextlib.suppress(Exception):
            if token is not None:
                await asyncio.to_thread(self.lease.release, token)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.members.leave)
        await self.bus.close()
        self._engine.dispose()

    # -- the coordinator thread ---------------------------------------------------------------
    def _coordinate(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._tick()
            except Exception as e:  # the database away: keep the last view, retry next tick
                if self.fence.token is not None and not self.fence.locally_valid:
                    self._lost(f"the lease could not be renewed before it ran out ({type(e).__name__}: {e})")
                if time.monotonic() - self._last_error > 30:
                    self._last_error = time.monotonic()
                    log.warning("cluster: membership and lease unavailable: %s: %s", type(e).__name__, e)
            self._stop.wait(max(0.0, self.timing.tick - (time.monotonic() - started)))

    def _tick(self) -> None:
        self.members.heartbeat()
        token = self.fence.token
        if token is not None:
            valid = self.lease.renew(token)
            if valid is None:  # a write under a stale token, refused: the fence at work
                self.fence.refused(
                    f"graywire fence: renewal of the lease under fencing token {token} refused: "
                    "another member holds it now"
                )
            else:
                self.fence.extend(token, valid)
        elif self.cfg.lead and not self._stop.is_set():
            current = self.lease.read()
            if not current.live:
                taken = self.lease.acquire()
                if taken is not None:
                    self.fence.hold(taken.token, taken.valid_until)
                    self._on_loop(self._begin_term, taken)
        lease = self.lease.read()
        live = tuple(self.members.live())
        url = next((m.url for m in live if m.member_id == lease.holder), None)
        self.view = ClusterView(live, lease.holder, url, lease.token, lease.live, time.monotonic())

    def _on_loop(self, fn: Callable[..., object], *args: object) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    def _lost(self, reason: str) -> None:
        """Stop leading at once (any thread): drop the token first, so no write carries it."""
        token = self.fence.drop()
        if token is None:
            return
        log.error("cluster: %s stops leading (token %d): %s", self.member_id, token, reason)
        self.stepdowns += 1
        # The coroutine is made on the loop: with no loop yet there is nothing to end.
        self._on_loop(lambda: self._spawn(self._end_term(reason, token)))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task this node keeps a reference to until it is done (the loop
        itself keeps only a weak one: a task awaiting nothing else could be collected)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- a term -------------------------------------------------------------------------------
    def _begin_term(self, taken: Takeover) -> None:
        self._spawn(self._start_term(taken))

    async def _start_term(self, taken: Takeover) -> None:
        async with self._term_lock:
            if self.fence.token != taken.token:
                return  # lost again before the loop got to it
            await self._stop_leading()  # a term whose ending has not come round yet
            self._start_leading(taken)

    def _start_leading(self, taken: Takeover) -> None:
        self.takeovers += 1
        self.led_since = time.time()
        self.runner.state.reset()
        self.runner.state.exported = True
        log.warning(
            "cluster: %s leads now (fencing token %d%s)",
            self.member_id,
            taken.token,
            f", after {taken.previous_holder}" if taken.previous_holder else "",
        )
        self._leading = asyncio.create_task(self._lead(taken))
        self._leading_token = taken.token

    async def _lead(self, taken: Takeover) -> None:
        alerts = asyncio.create_task(self.dispatcher.run()) if self.dispatcher is not None else None
        leader = Leader(self.runner, self.bus, self.pipelines, taken.token, *self._windows(), self.prepare)
        self.leader_stats = leader.stats
        try:
            while True:
                try:
                    await leader.run()
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # NATS away at the takeover: retry, the lease stays
                    log.warning(
                        "cluster: the leader loop failed (%s: %s); starting it again", type(e).__name__, e
                    )
                    await asyncio.sleep(1.0)
                    leader = Leader(
                        self.runner,
                        self.bus,
                        self.pipelines,
                        taken.token,
                        *self._windows(),
                        self.prepare,
                    )
                    self.leader_stats = leader.stats
        finally:
            if alerts is not None:
                alerts.cancel()
                await asyncio.gather(alerts, return_exceptions=True)

    def _windows(self) -> tuple[float, float]:
        """Seconds of history the stream keeps, and of it a new leader replays."""
        history = self.cfg.history.total_seconds()
        return history, self.cfg.warmup.total_seconds() if self.cfg.warmup else history

    async def _end_term(self, reason: str, token: int | None = None) -> None:
        """End term ``token`` (None: whichever runs); a later term is left alone."""
        async with self._term_lock:
            if self._leading is None or (token is not None and token != self._leading_token):
                return
            await self._stop_leading()
            await asyncio.to_thread(self.runner.new_term, None)
            self.runner.state.exported = False
            self.runner.state.reset()
            self.led_since = None
            log.warning("cluster: %s follows now (%s)", self.member_id, reason)

    async def _stop_leading(self) -> None:
        task, self._leading, self._leading_token = self._leading, None, None
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
