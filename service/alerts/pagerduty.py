"""PagerDuty Events API v2 (``POST https://events.pagerduty.com/v2/enqueue``).

Every event of one incident carries the same ``dedup_key``, so a redelivered trigger updates
the open PagerDuty alert instead of paging again, and the resolve closes it. A trigger and its
resolve sent back to back (an episode stored only after it ended) open an incident, which
notifies, and resolve it; a resolve for a key with no open alert is ignored by PagerDuty.

An operator's acknowledgement in graywire (``POST /api/v1/incidents/{id}/ack``) reaches
PagerDuty as an ``acknowledge`` event under the same key: the sync enqueues it once per episode,
as a ``refresh`` of the acknowledged incident (the only refresh a direct receiver is sent). An
acknowledged PagerDuty incident stops escalating and notifies no more, even on later triggers
(an escalation), until it is resolved.
"""

from __future__ import annotations

from typing import Any

from graywire.service.alerts.events import AlertEvent, absolute_url, generator_url, rfc3339
from graywire.service.models import AlertAction

#: PagerDuty's own severities; graywire's map onto them one to one.
SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}
SUMMARY_LIMIT = 1024


def event_action(ev: AlertEvent, action: AlertAction = "trigger") -> str:
    """``trigger``, ``acknowledge`` or ``resolve``: what the outbox message asks of PagerDuty."""
    if ev.status == "resolved":
        return "resolve"
    if action == "refresh" and ev.acknowledged:
        return "acknowledge"
    return "trigger"


def event(
    ev: AlertEvent,
    routing_key: str,
    external_url: str | None,
    dedup_prefix: str = "graywire",
    action: AlertAction = "trigger",
) -> dict[str, Any]:
    key = ev.dedup_key_with(dedup_prefix)
    what = event_action(ev, action)
    if what != "trigger":  # acknowledge and resolve need nothing but the key
        return {"routing_key": routing_key, "event_action": what, "dedup_key": key}
    when = ev.time("last_seen_at") or ev.time("started_at")
    summary = ev.summary
    if ev.stored_late and ev.stored_late.get("cleared_at"):
        # Over before it could be sent: the resolve follows at once. Say so where on-call reads
        # first, and date the event when it fired.
        summary = f"[cleared {ev.stored_late['cleared_at']}, stored late] {summary}"
        when = ev.time("started_at")
    link = generator_url(external_url, ev.incident_id)
    links = [{"href": link, "text": "graywire incident and evidence"}]
    runbook = absolute_url(ev.runbook_url)  # PagerDuty wants absolute hrefs
    if runbook:
        links.append({"href": runbook, "text": f"runbook: {ev.kind}"})
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": key,
        "payload": {
            "summary": summary[:SUMMARY_LIMIT],
            "source": ev.node or ev.entity,
            "severity": SEVERITY.get(ev.severity, "error"),
            **({"timestamp": rfc3339(when)} if when else {}),
            "component": ev.port or ev.link or ev.entity,
            "group": ev.detector,
            "class": ev.kind,
            "custom_details": {
                "incident_id": ev.incident_id,
                "entity": ev.entity,
                "node": ev.node,
                "port": ev.port,
                "link": ev.link,
                "labels": ev.labels(),
                **({"runbook_url": ev.runbook_url} if ev.runbook_url else {}),
                **({"effects": ev.effects} if ev.effects else {}),
                "score": ev.score,
                "confidence": ev.confidence,
                "opened_at": ev.opened_at,
                "reopen_count": ev.reopen_count,
                **({"stored_late": ev.stored_late} if ev.stored_late else {}),
            },
        },
        "client": "graywire",
        "client_url": link,
        "links": links,
    }
