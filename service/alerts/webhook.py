"""Generic webhooks in Alertmanager's webhook format (version 4), signed with HMAC-SHA256.

Receivers written for Alertmanager's ``webhook_config`` accept these unchanged. One message
carries one incident: ``groupKey`` names it, so a receiver can dedupe redeliveries on
``groupKey`` + ``status`` (or on the ``X-Graywire-Delivery`` header, unique per message).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from graywire.service.alerts.alertmanager import fingerprint
from graywire.service.alerts.events import ZERO_TIME, AlertEvent, generator_url, rfc3339

SIGNATURE_HEADER = "X-Graywire-Signature"
DELIVERY_HEADER = "X-Graywire-Delivery"


def group_key(event: AlertEvent) -> str:
    """Alertmanager's groupKey form: the route's matchers, a colon, the group labels."""
    return f'{{}}:{{incident_id="{event.incident_id}"}}'


def alert(event: AlertEvent, external_url: str | None) -> dict[str, Any]:
    labels = event.labels()
    resolved = event.time("resolved_at") if event.status == "resolved" else None
    starts = event.time("started_at")
    return {
        "status": event.status,
        "labels": labels,
        "annotations": event.annotations(),
        "startsAt": rfc3339(starts) if starts else ZERO_TIME,
        "endsAt": rfc3339(resolved) if resolved else ZERO_TIME,
        "generatorURL": generator_url(external_url, event.incident_id),
        "fingerprint": fingerprint(labels),
    }


def payload(event: AlertEvent, receiver: str, external_url: str | None) -> dict[str, Any]:
    one = alert(event, external_url)
    return {
        "version": "4",
        "groupKey": group_key(event),
        "truncatedAlerts": 0,
        "status": event.status,
        "receiver": receiver,
        "groupLabels": {"incident_id": str(event.incident_id)},
        "commonLabels": one["labels"],
        "commonAnnotations": one["annotations"],
        "externalURL": external_url or "",
        "alerts": [one],
    }


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256 over the exact body bytes (GitHub's convention)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """What a receiver does: recompute and compare in constant time."""
    return header is not None and hmac.compare_digest(signature(secret, body), header)
