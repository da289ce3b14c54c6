"""Deliver the outbox: receivers in parallel, each receiver strictly in order.

Every cycle runs the sync step (new triggers, resolves, refreshes) and then sends what is due.
A 2xx acknowledges; a timeout, transport error, 408, 429 or 5xx retries with backoff; any
other 4xx except 400, 413 and 422 retries too (a wrong URL or key gets fixed, the page must
not be lost meanwhile); 400, 413 and 422 mean the payload itself was refused and the message is
set aside as ``dead`` (logged, counted) so it does not block the receiver forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy.engine import Engine

from graywire.collectors.model import Fabric
from graywire.service.alert_settings import AlertsSettings, ReceiverConfig
from graywire.service.alerts import alertmanager, outbox, pagerduty, slack, webhook
from graywire.service.alerts.events import NO_CONTEXT, AlertContext, AlertEvent
from graywire.service.alerts.places import FabricPlaces
from graywire.service.alerts.sync import SyncResult, SyncTarget, sync_alerts
from graywire.service.models import OutboxMessage
from graywire.service.models.engine import is_fence_refusal

log = logging.getLogger("graywire.alerts")

REFUSED = frozenset({400, 413, 422})
ALERTMANAGER_BATCH = 64

Render = Callable[[Sequence[OutboxMessage], datetime], tuple[bytes, dict[str, str]]]


def _json(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _events(messages: Sequence[OutboxMessage]) -> list[AlertEvent]:
    return [AlertEvent.from_dict(m.event) for m in messages]


@dataclass(frozen=True, slots=True)
class Destination:
    """A configured receiver, ready to send to."""

    name: str
    type: str
    url: str
    timeout_s: float
    batch: int
    render: Render
    sync: SyncTarget


def _delivery_headers(messages: Sequence[OutboxMessage]) -> dict[str, str]:
    ids = ",".join(str(m.id) for m in messages)
    return {"Content-Type": "application/json", webhook.DELIVERY_HEADER: ids}


def _without_password(url: str) -> str:
    """``url`` with any password masked: the receiver's name is a /metrics label, a database
    key and in every log line about it; the password itself is only ever sent to the URL."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{host}"))


def default_instance(settings: AlertsSettings, service_url: str | None = None) -> str:
    """The ``instance`` label when ``alerts.instance`` is not set: the host (and port) of the
    configured ``external_url``, else this machine's hostname with the service's port."""
    if settings.instance:
        return settings.instance
    if settings.external_url:
        return urlsplit(settings.external_url).netloc.rpartition("@")[2]
    port = urlsplit(service_url).port if service_url else None
    host = socket.gethostname()
    return f"{host}:{port}" if port else host


def alert_context(
    settings: AlertsSettings, instance: str | None, fabric: Fabric | None = None
) -> AlertContext:
    """What every event of this deployment carries besides its incident."""
    return AlertContext(
        labels=dict(settings.labels),
        instance=instance,
        runbook_base_url=settings.runbook_base_url,
        places=FabricPlaces(fabric) if fabric is not None else None,
    )


def _alertmanager_destination(url: str, settings: AlertsSettings, context: AlertContext) -> Destination:
    refresh_s = settings.alertmanager.refresh_interval.total_seconds()

    def render(messages: Sequence[OutboxMessage], now: datetime) -> tuple[bytes, dict[str, str]]:
        body = alertmanager.postable_alerts(_events(messages), settings.external_url, now, refresh_s)
        return _json(body), _delivery_headers(messages)

    name = f"alertmanager {_without_password(url)}"
    return Destination(
        name=name,
        type="alertmanager",
        url=url + alertmanager.ALERTS_PATH,
        timeout_s=settings.alertmanager.timeout.total_seconds(),
        batch=ALERTMANAGER_BATCH,
        render=render,
        sync=SyncTarget(
            name, settings.min_severity, refresh_s, max_pending=settings.max_outbox, context=context
        ),
    )


def _receiver_destination(rc: ReceiverConfig, settings: AlertsSettings, context: AlertContext) -> Destination:
    external = settings.external_url
    secret = rc.secret_value()
    routing_key = rc.routing_key_value()

    def render(messages: Sequence[OutboxMessage], now: datetime) -> tuple[bytes, dict[str, str]]:
        (event,) = _events(messages)
        action = messages[0].action
        headers = _delivery_headers(messages)
        if rc.type == "webhook":
            body = _json(webhook.payload(event, rc.name, external))
            if secret:
                headers[webhook.SIGNATURE_HEADER] = webhook.signature(secret, body)
        elif rc.type == "pagerduty":
            body = _json(pagerduty.event(event, routing_key or "", external, rc.dedup_prefix, action))
        else:
            body = _json(slack.message(event, external))
        return body, headers

    return Destination(
        name=rc.name,
        type=rc.type,
        url=rc.endpoint,
        timeout_s=rc.timeout.total_seconds(),
        batch=1,
        render=render,
        sync=SyncTarget(
            rc.name,
            rc.min_severity or settings.min_severity,
            inhibit=True,
            group_wait_s=settings.group_wait.total_seconds(),
            max_pending=settings.max_outbox,
            context=context,
            acknowledge=rc.type == "pagerduty",
        ),
    )


def destinations(settings: AlertsSettings, context: AlertContext = NO_CONTEXT) -> list[Destination]:
    return [
        *(_alertmanager_destination(u, settings, context) for u in settings.alertmanager.urls),
        *(_receiver_destination(rc, settings, context) for rc in settings.receivers),
    ]


class Dispatcher:
    """Syncs incidents into the outbox and delivers it, until cancelled."""

    def __init__(
        self,
        engine: Engine,
        settings: AlertsSettings,
        client: httpx.AsyncClient | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        default_external_url: str | None = None,
        fabric: Fabric | None = None,
        may_send: Callable[[], bool] | None = None,
    ) -> None:
        self.engine = engine
        #: Asked just before each POST (a replica: "do I still hold the lease?"). The database
        #: fences the claim and the acknowledgement, not the HTTP request between them: a
        #: leader paused past its lease must not page from a claim it no longer owns.
        self.may_send = may_send
        #: The ``instance`` label, decided before external_url takes its default (which may
        #: be a wildcard address such as 0.0.0.0).
        self.instance = default_instance(settings, default_external_url)
        if settings.external_url is None and default_external_url:
            settings = settings.model_copy(update={"external_url": default_external_url.rstrip("/")})
        self.settings = settings
        #: Fabric facts (switch, rail labels) come from ``fabric`` when given.
        self.context = alert_context(settings, self.instance, fabric)
        self.destinations = {d.name: d for d in destinations(settings, self.context)}
        self._client = client
        self._own_client = client is None
        self.rng = rng or random.Random()
        self.clock = clock
        #: Per receiver, since start: messages delivered, failed attempts, messages set aside.
        self.delivered: Counter[str] = Counter()
        self.failed_attempts: Counter[str] = Counter()
        self.dead: Counter[str] = Counter()
        #: Pending messages dropped over alerts.max_outbox: (receiver, reason, severity) -> count.
        self.dropped: Counter[tuple[str, str, str]] = Counter()
        #: The outbox as of the last cycle (for /metrics, which never queries the database).
        self.backlog: dict[str, outbox.Backlog] = {}
        #: What the last sync enqueued, held back (group_wait) and inhibited (failed switch).
        self.last_sync = SyncResult()
        self._warned_unknown: set[str] = set()

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False)
        return self._client

    def sync(self) -> None:
        self.last_sync = sync_alerts(
            self.engine,
            [d.sync for d in self.destinations.values()],
            self.clock(),
            self.settings.retention.total_seconds(),
        )
        self.dropped.update(self.last_sync.dropped)

    async def run(self) -> None:
        """Sync every ``sync_interval`` and keep one sender task per receiver with work.

        Senders run apart from the sync loop, so a slow or hanging receiver delays neither
        the sync nor any other receiver.
        """
        interval = self.settings.sync_interval.total_seconds()
        senders: dict[str, asyncio.Task[int]] = {}
        try:
            while True:
                try:
                    await asyncio.to_thread(self.sync)
                    for dest in await self._due_destinations():
                        task = senders.get(dest.name)
                        if task is None or task.done():
                            senders[dest.name] = asyncio.create_task(self._drain_logged(dest))
                except Exception as e:  # a database hiccup must not end alerting for good
                    if is_fence_refusal(e):  # this replica lost the lead: it stops this loop soon
                        log.warning(
                            "alert dispatch cycle refused by the fence (this replica no longer leads)"
                        )
                    else:
                        log.exception("alert dispatch cycle failed; retrying")
                await asyncio.sleep(interval)
        finally:
            for task in senders.values():
                task.cancel()
            await asyncio.gather(*senders.values(), return_exceptions=True)
            await self.aclose()

    async def deliver_due(self) -> int:
        """Send everything due now and wait for it, receivers concurrently (tests, tools)."""
        counts = await asyncio.gather(*(self._drain(d) for d in await self._due_destinations()))
        return sum(counts)

    async def _due_destinations(self) -> list[Destination]:
        """Configured receivers with pending messages; refreshes the backlog snapshot."""
        self.backlog = await asyncio.to_thread(outbox.backlog, self.engine)
        receivers = [name for name, b in self.backlog.items() if b.pending]
        for name in receivers:
            if name not in self.destinations and name not in self._warned_unknown:
                self._warned_unknown.add(name)
                log.warning("alerts: receiver %r has pending messages but is no longer configured", name)
        return [self.destinations[n] for n in receivers if n in self.destinations]

    async def _drain_logged(self, dest: Destination) -> int:
        try:
            return await self._drain(dest)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the lease runs out and the next cycle retries
            if is_fence_refusal(e):
                log.warning(
                    "alerts: sending to %s refused by the fence (this replica no longer leads)", dest.name
                )
            else:
                log.exception("alerts: sending to %s failed unexpectedly", dest.name)
            return 0

    async def _drain(self, dest: Destination) -> int:
        """Send ``dest``'s due messages in order until it is empty or a send fails."""
        sent = 0
        lease_s = 2 * dest.timeout_s + 1.0
        while True:
            claimed_at = self.clock()
            batch = await asyncio.to_thread(
                outbox.claim_head, self.engine, dest.name, claimed_at, lease_s, dest.batch
            )
            if not batch:
                return sent
            if not await self._send(dest, batch, claimed_at + timedelta(seconds=lease_s)):
                return sent
            sent += len(batch)

    def _still_ours(self, dest: Destination, claimed_until: datetime) -> bool:
        """The claim outlasts the POST about to be made, and this process may still send."""
        if self.clock() + timedelta(seconds=dest.timeout_s) > claimed_until:
            return False  # paused since the claim: another sender may have taken it over
        return self.may_send is None or self.may_send()

    async def _send(self, dest: Destination, batch: list[OutboxMessage], claimed_until: datetime) -> bool:
        ids = [m.id for m in batch]
        now = self.clock()
        try:
            body, headers = dest.render(batch, now)
        except Exception as e:  # a message that cannot be rendered never will be: set it aside
            log.exception("alerts: cannot render messages %s for %s", ids, dest.name)
            await asyncio.to_thread(outbox.give_up, self.engine, ids, f"render failed: {e!r}")
            self.dead[dest.name] += len(ids)
            return True
        if not self._still_ours(dest, claimed_until):
            log.warning(
                "alerts: not sending messages %s to %s: their claim ran out or this replica no longer "
                "leads (whoever sends next sends them)",
                ids,
                dest.name,
            )
            return False
        try:
            response = await self.client.post(dest.url, content=body, headers=headers, timeout=dest.timeout_s)
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}"
            status = None
        else:
            if response.is_success:
                await asyncio.to_thread(outbox.ack, self.engine, ids, self.clock())
                self.delivered[dest.name] += len(ids)
                return True
            status = response.status_code
            error = f"HTTP {status}: {response.text[:500]}"
        if status in REFUSED:
            log.error("alerts: %s refused messages %s for good: %s", dest.name, ids, error)
            await asyncio.to_thread(outbox.give_up, self.engine, ids, error)
            self.dead[dest.name] += len(ids)
            return True  # the next message may go now
        attempts = max(m.attempts for m in batch) + 1
        retry = self.settings.retry
        delay = outbox.backoff_seconds(
            attempts,
            retry.initial_backoff.total_seconds(),
            retry.max_backoff.total_seconds(),
            retry.jitter,
            self.rng,
        )
        log.warning(
            "alerts: delivery to %s failed (attempt %d), retrying in %.1f s: %s",
            dest.name,
            attempts,
            delay,
            error,
        )
        await asyncio.to_thread(outbox.retry, self.engine, ids, error, self.clock(), delay)
        self.failed_attempts[dest.name] += len(ids)
        return False

    async def aclose(self) -> None:
        if self._own_client and self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None
