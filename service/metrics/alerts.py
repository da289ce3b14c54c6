"""Prometheus metrics of alert delivery, from the dispatcher's in-memory snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from graywire.service.alerts.dispatcher import Dispatcher


class AlertsExporter(Collector):
    """``graywire_alert_*``: deliveries by result and the outbox backlog, per receiver.

    The backlog age is what to alert on: a receiver whose oldest pending message keeps getting
    older is not reachable, and pages are queueing up behind it.
    """

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def collect(self) -> Iterator[Metric]:
        d = self.dispatcher
        receivers = sorted(set(d.destinations) | set(d.backlog))
        c = CounterMetricFamily(
            "graywire_alert_messages",
            "Outbox messages by final result since start: delivered, or dead (refused for good)",
            labels=["receiver", "result"],
        )
        for r in receivers:
            c.add_metric([r, "delivered"], d.delivered[r])
            c.add_metric([r, "dead"], d.dead[r])
        yield c
        c = CounterMetricFamily(
            "graywire_alert_delivery_failures", "Failed delivery attempts (retried)", labels=["receiver"]
        )
        for r in receivers:
            c.add_metric([r], d.failed_attempts[r])
        yield c
        c = CounterMetricFamily(
            "graywire_alert_outbox_dropped",
            "Pending messages dropped over alerts.max_outbox, by reason (superseded, resolved,"
            " resolve, firing) and severity",
            labels=["receiver", "reason", "severity"],
        )
        for (r, reason, severity), n in sorted(d.dropped.items()):
            c.add_metric([r, reason, severity], n)
        yield c
        pending = GaugeMetricFamily(
            "graywire_alert_outbox_pending", "Messages waiting for delivery", labels=["receiver"]
        )
        age = GaugeMetricFamily(
            "graywire_alert_outbox_oldest_pending_seconds",
            "Age of the oldest message waiting for delivery (0 when none waits)",
            labels=["receiver"],
        )
        dead = GaugeMetricFamily(
            "graywire_alert_outbox_dead", "Messages refused for good, kept in the outbox", labels=["receiver"]
        )
        now = datetime.now(UTC)
        for r in receivers:
            b = d.backlog.get(r)
            pending.add_metric([r], b.pending if b else 0)
            oldest = b.oldest_pending if b else None
            age.add_metric([r], max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
            dead.add_metric([r], b.dead if b else 0)
        yield pending
        yield age
        yield dead
        last = d.last_sync
        yield GaugeMetricFamily(
            "graywire_alert_incidents_held",
            "Incident pages the last sync held back for alerts.group_wait (summed over direct receivers)",
            value=last.held,
        )
        yield GaugeMetricFamily(
            "graywire_alert_incidents_inhibited",
            "Incident pages the last sync withheld because their switch has failed as a whole",
            value=last.inhibited,
        )
