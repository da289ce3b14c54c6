"""Slack incoming webhook messages: ``text`` (notifications, fallback) plus Block Kit blocks."""

from __future__ import annotations

from typing import Any

from graywire.service.alerts.events import AlertEvent, absolute_url, generator_url

#: Slack rejects a section text over 3,000 characters.
SECTION_LIMIT = 3000
_ICON = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}


def _escape(text: str) -> str:
    """Slack mrkdwn control characters (&, <, >) must be escaped in user text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def message(ev: AlertEvent, external_url: str | None) -> dict[str, Any]:
    link = generator_url(external_url, ev.incident_id)
    if ev.status == "resolved":
        head = f":white_check_mark: RESOLVED {ev.kind} on {ev.node or ev.entity}"
    else:
        head = f"{_ICON.get(ev.severity, '')} {ev.severity.upper()} {ev.kind} on {ev.node or ev.entity}"
    places = (("port", ev.port), ("link", ev.link), ("switch", ev.switch), ("rail", ev.rail), ("job", ev.job))
    where = ", ".join(f"{k} `{_escape(v)}`" for k, v in places if v)
    fields = [
        f"*Incident* <{link}|#{ev.incident_id}>",
        f"*Detector* {_escape(ev.detector)}",
        f"*Since* {ev.started_at}",
    ]
    if ev.status == "resolved" and ev.resolved_at:
        fields.append(f"*Resolved* {ev.resolved_at}")
    note = ev.late_note()
    if note:
        fields.append(f"*Late* {_escape(note)}")
    runbook = absolute_url(ev.runbook_url)
    if runbook:
        fields.append(f"*Runbook* <{runbook}|{_escape(ev.kind)}>")
    elif ev.runbook_url:
        fields.append(f"*Runbook* `{_escape(ev.runbook_url)}`")
    title = f"*{_escape(head)}*\n{_escape(ev.summary)}"[:SECTION_LIMIT]
    return {
        "text": f"{head}: {ev.summary}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": title}},
            *([{"type": "context", "elements": [{"type": "mrkdwn", "text": where}]}] if where else []),
            {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
        ],
    }
