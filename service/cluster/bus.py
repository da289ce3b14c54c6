"""One replica's connection to NATS JetStream: the stream, publishing scrapes, the leader's
consumers (the official client, nats-py).

- The stream keeps every scrape for ``cluster.history`` (file storage, so a NATS restart loses
  nothing it acknowledged), de-duplicates re-sent publishes by ``Nats-Msg-Id``, and drops its
  oldest scrapes past ``stream_max_bytes``.
- Each leadership term reads through a durable pull consumer of its own, ``leader-<token>``: it
  starts right after the last message the previous term acknowledged (its ack floor), so what
  was judged is not judged again and nothing published meanwhile is skipped. A paused former
  leader that wakes up finds its consumer gone instead of taking messages from the new one.
- A new leader's warm-up reads the history before that point through an ephemeral consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from graywire.collectors.extras import require
from graywire.service.cluster.wire import Outgoing, status_subject, subjects
from graywire.service.config import ClusterSettings

log = logging.getLogger("graywire.cluster")

CONSUMER_PREFIX = "leader-"
#: Seconds a publish waits for JetStream's acknowledgement.
PUBLISH_TIMEOUT_S = 5.0
#: Messages asked for at once by a fetch.
FETCH_BATCH = 512


class BusError(RuntimeError):
    """NATS is unreachable or refused an operation."""


def consumer_name(token: int) -> str:
    return f"{CONSUMER_PREFIX}{token}"


def term_of(name: str) -> int | None:
    """The term whose consumer ``name`` is; None for any other consumer."""
    tail = name.removeprefix(CONSUMER_PREFIX)
    return int(tail) if name.startswith(CONSUMER_PREFIX) and tail.isdigit() else None


class Bus:
    """The stream and this replica's connection to it."""

    def __init__(self, cfg: ClusterSettings, member_id: str) -> None:
        self.cfg = cfg
        self.member_id = member_id
        self.filter = f"{cfg.subject_prefix}.>"
        self._nc: Any = None
        self._js: Any = None
        #: Times the connection dropped, and whether it is up now (for /metrics and /healthz).
        self.disconnects = 0
        self._closing = False

    # -- connection ---------------------------------------------------------------------------
    async def connect(self, timeout_s: float = 5.0) -> None:
        """Connect (reconnecting by itself afterwards, for ever) and make sure the stream exists."""
        nats = require("nats", "cluster (NATS JetStream)")

        async def disconnected() -> None:
            if self._closing:
                return
            self.disconnects += 1
            log.warning("NATS connection lost; reconnecting")

        async def reconnected() -> None:
            log.warning("NATS connection back (%s)", self._nc.connected_url.netloc if self._nc else "?")

        async def error(e: Exception) -> None:
            log.warning("NATS: %s: %s", type(e).__name__, e)

        options: dict[str, Any] = dict(
            servers=self.cfg.nats_url,
            name=f"graywire {self.member_id}",
            connect_timeout=timeout_s,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            allow_reconnect=True,
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=error,
            # Publishes made while disconnected wait here at most this much (then fail at once):
            # a scrape that cannot be sent is stale news, not something to pile up.
            pending_size=8 * 2**20,
        )
        if self.cfg.nats_credentials is not None:
            options["user_credentials"] = str(self.cfg.nats_credentials)
        try:
            self._nc = await nats.connect(**options)
        except Exception as e:
            raise BusError(f"cannot connect to NATS at {', '.join(self.cfg.nats_url)}: {e}") from e
        self._js = self._nc.jetstream()
        await self.ensure_stream()

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def max_payload(self) -> int:
        return int(self._nc.max_payload) if self._nc is not None else 1024 * 1024

    async def close(self) -> None:
        self._closing = True
        if self._nc is not None:
            try:  # what was acknowledged is sent (publishes are awaited one by one), then close:
                await self._nc.flush(timeout=2)  # a drain would wait for the leader's fetches
            except Exception:  # closing is best effort; the process is going away
                log.debug("flushing the NATS connection failed", exc_info=True)
            try:
                await self._nc.close()
            except Exception:
                log.debug("closing the NATS connection failed", exc_info=True)
            self._nc = self._js = None

    async def ensure_stream(self) -> None:
        """Create the stream, or bring its limits to the settings'."""
        api = require("nats.js.api", "cluster (NATS JetStream)")
        errors = require("nats.js.errors", "cluster (NATS JetStream)")
        config = api.StreamConfig(
            name=self.cfg.stream,
            subjects=subjects(self.cfg.subject_prefix),
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE,
            max_age=self.cfg.history.total_seconds(),
            max_bytes=self.cfg.stream_max_bytes,
            num_replicas=self.cfg.stream_replicas,
            duplicate_window=120.0,
            discard=api.DiscardPolicy.OLD,
        )
        jsm = self._js
        try:
            info = await jsm.stream_info(self.cfg.stream)
        except errors.NotFoundError:
            try:
                await jsm.add_stream(config)
                return
            except errors.BadRequestError:  # another member created it meanwhile
                info = await jsm.stream_info(self.cfg.stream)
        have = info.config
        if (have.max_age, have.max_bytes, sorted(have.subjects or [])) != (
            config.max_age,
            config.max_bytes,
            sorted(config.subjects),
        ):
            await jsm.update_stream(config)

    # -- members ------------------------------------------------------------------------------
    async def publish(self, messages: list[Outgoing]) -> int:
        """Publish in order, each acknowledged by JetStream; bytes sent. Raises on failure."""
        sent = 0
        for m in messages:
            await self._js.publish(m.subject, m.data, timeout=PUBLISH_TIMEOUT_S, headers=m.headers)
            sent += len(m.data)
        return sent

    async def reported_before(self, source: str, target: str) -> bool:
        """Whether the stream holds a report of this target (another member scraped it)."""
        errors = require("nats.js.errors", "cluster (NATS JetStream)")
        try:
            await self._js.get_last_msg(
                self.cfg.stream, status_subject(self.cfg.subject_prefix, source, target)
            )
        except errors.NotFoundError:
            return False
        return True

    # -- the leader ---------------------------------------------------------------------------
    async def last_sequence(self) -> int:
        info = await self._js.stream_info(self.cfg.stream)
        return int(info.state.last_seq)

    async def first_sequence_since(self, t: float) -> int:
        """The stream sequence of the first message published at or after unix time ``t``
        (one past the last if none was)."""
        api = require("nats.js.api", "cluster (NATS JetStream)")
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_TIME,
            opt_start_time=datetime.fromtimestamp(t, UTC),
            ack_policy=api.AckPolicy.NONE,
            inactive_threshold=60.0,
            filter_subject=self.filter,
        )
        sub = await self._js.pull_subscribe(self.filter, stream=self.cfg.stream, config=config)
        try:
            msgs = await sub.fetch(1, timeout=1.0)
            return int(msgs[0].metadata.sequence.stream)
        except TimeoutError:  # nats-py's own or the builtin one: nothing since
            return await self.last_sequence() + 1
        finally:
            await self._end(sub)

    async def _end(self, sub: Any) -> None:
        """Unsubscribe and delete an ephemeral consumer."""
        try:
            await sub.unsubscribe()
            await self._js.delete_consumer(self.cfg.stream, sub._consumer)
        except Exception:  # it expires by itself (inactive_threshold)
            log.debug("ending an ephemeral consumer failed", exc_info=True)

    async def judged_up_to(self, token: int) -> int | None:
        """The last stream sequence the latest term up to ``token`` acknowledged, with all
        before it (its consumer's ack floor): an earlier leader's, or this term's own when its
        loop starts again. None if no term left a consumer."""
        terms = [(term_of(info.name), info) for info in await self._js.consumers_info(self.cfg.stream)]
        earlier = [(t, info) for t, info in terms if t is not None and t <= token]
        if not earlier:
            return None
        info = max(earlier, key=lambda x: x[0])[1]
        # A consumer that acknowledged nothing yet reports an ack floor of 0 (nats-server
        # 2.9), not the sequence before its start: the term that made it had judged up to there.
        return max(int(info.ack_floor.stream_seq), int(info.config.opt_start_seq or 1) - 1)

    async def term_consumer(self, token: int, start_seq: int, ack_wait_s: float) -> Any:
        """The durable consumer of term ``token``, reading from ``start_seq`` on; the other
        terms' consumers are deleted."""
        api = require("nats.js.api", "cluster (NATS JetStream)")
        name = consumer_name(token)
        errors = require("nats.js.errors", "cluster (NATS JetStream)")
        with contextlib.suppress(errors.NotFoundError):  # this term's own, from a loop started again
            await self._js.delete_consumer(self.cfg.stream, name)
        config = api.ConsumerConfig(
            durable_name=name,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(1, start_seq),
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=ack_wait_s,
            max_ack_pending=-1,
            filter_subject=self.filter,
        )
        sub = await self._js.pull_subscribe(self.filter, durable=name, stream=self.cfg.stream, config=config)
        await self._delete_earlier_terms(token)
        return sub

    async def consumer_gone(self, token: int) -> bool:
        """Term ``token``'s consumer no longer exists (a pull from a deleted consumer just
        times out, like one from an idle stream)."""
        errors = require("nats.js.errors", "cluster (NATS JetStream)")
        try:
            await self._js.consumer_info(self.cfg.stream, consumer_name(token))
        except errors.NotFoundError:
            return True
        return False

    async def _delete_earlier_terms(self, token: int) -> None:
        """Earlier terms' consumers, never a later one's: a leader paused past its lease that
        wakes up here must not take the new leader's consumer away."""
        for info in await self._js.consumers_info(self.cfg.stream):
            name = info.name
            term = term_of(name)
            if term is not None and term < token:
                try:
                    await self._js.delete_consumer(self.cfg.stream, name)
                except Exception as e:  # it may be gone already: another term's clean-up
                    log.debug("deleting consumer %s: %s", name, e)

    async def history(self, since: datetime, until_seq: int) -> AsyncIterator[list[Any]]:
        """Batches of the stream's messages from ``since`` up to ``until_seq`` (inclusive), in
        order, through an ephemeral consumer nobody acknowledges to."""
        if until_seq < 1:
            return
        api = require("nats.js.api", "cluster (NATS JetStream)")
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_TIME,
            opt_start_time=since.astimezone(UTC),
            ack_policy=api.AckPolicy.NONE,
            inactive_threshold=60.0,
            filter_subject=self.filter,
        )
        sub = await self._js.pull_subscribe(self.filter, stream=self.cfg.stream, config=config)
        try:
            while True:
                try:
                    msgs = await sub.fetch(FETCH_BATCH, timeout=1.0)
                except TimeoutError:  # nats-py's own or the builtin one: the history is read
                    return
                batch = [m for m in msgs if m.metadata.sequence.stream <= until_seq]
                if batch:
                    yield batch
                if len(batch) < len(msgs) or msgs[-1].metadata.sequence.stream >= until_seq:
                    return
        finally:
            await self._end(sub)

    @staticmethod
    async def fetch(sub: Any, timeout_s: float) -> list[Any]:
        """What a consumer has now, waiting up to ``timeout_s`` for the first message.

        nats-py says "nothing came" with its own TimeoutError, or, when its second pull
        request finds the deadline spent, with the builtin one (nats-py 2.16, ``_fetch_n``):
        both are an empty fetch, not a failure."""
        try:
            return list(await sub.fetch(FETCH_BATCH, timeout=timeout_s))
        except TimeoutError:  # nats.errors.TimeoutError is one too
            return []

    @staticmethod
    async def ack(handles: list[Any]) -> None:
        """Acknowledge judged messages (fire and forget: an ack lost is a message redelivered,
        which the leader recognizes by its stream sequence)."""
        for m in handles:
            try:
                await m.ack()
            except Exception as e:  # a dropped connection: the consumer redelivers after ack_wait
                log.debug("ack of %s failed: %s", m.metadata.sequence.stream, e)
                return
        await asyncio.sleep(0)
