"""Alertmanager API v2 postable alerts (``POST /api/v2/alerts``) and its label fingerprint.

Alertmanager identifies an alert by its label set, keeps it firing until ``endsAt`` and treats
a post with ``endsAt`` in the past as resolved. graywire re-posts firing alerts every refresh
interval with ``endsAt`` four intervals ahead (as Prometheus does), so its alerts resolve by
themselves if graywire goes away, and posts ``endsAt`` = the resolution time when they clear.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from graywire.service.alerts.events import AlertEvent, generator_url, rfc3339

ALERTS_PATH = "/api/v2/alerts"
#: Firing alerts stay valid for this many refresh intervals.
VALIDITY_INTERVALS = 4

_FNV64_OFFSET = 14695981039346656037
_FNV64_PRIME = 1099511628211
_SEPARATOR = 0xFF


def fingerprint(labels: dict[str, str]) -> str:
    """Alertmanager's fingerprint of a label set (Prometheus ``model.LabelSet.Fingerprint``):
    FNV-1a 64 over the sorted names and values, each followed by a 0xff separator."""
    h = _FNV64_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                h = ((h ^ byte) * _FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
            h = ((h ^ _SEPARATOR) * _FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def postable_alert(event: AlertEvent, external_url: str | None, now: datetime, refresh_s: float) -> dict:
    starts = event.time("started_at") or now
    if event.status == "resolved":
        ends = max(event.time("resolved_at") or now, starts)
    else:
        # Never before startsAt (Alertmanager refuses that): data may be dated a little ahead.
        ends = max(now, starts) + timedelta(seconds=VALIDITY_INTERVALS * refresh_s)
    return {
        "labels": event.labels(),
        "annotations": event.annotations(),
        "startsAt": rfc3339(starts),
        "endsAt": rfc3339(ends),
        "generatorURL": generator_url(external_url, event.incident_id),
    }


def postable_alerts(
    events: Sequence[AlertEvent], external_url: str | None, now: datetime, refresh_s: float
) -> list[dict[str, Any]]:
    """The body of one ``POST /api/v2/alerts``: a JSON array, in the order given."""
    return [postable_alert(e, external_url, now, refresh_s) for e in events]
