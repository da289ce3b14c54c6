"""Payload builders: each receiver type's documented wire format, field by field."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime

from graywire.service.alerts import alertmanager, pagerduty, slack, webhook
from graywire.service.alerts.events import ZERO_TIME, AlertEvent, rfc3339

NOW = datetime(2025, 3, 1, 12, 10, 0, 123456, tzinfo=UTC)
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
EXTERNAL = "https://graywire.example.com"

FIRING = AlertEvent(
    incident_id=42,
    status="firing",
    kind="speed_downgrade",
    entity="gpu-0002/mlx5_5",
    severity="critical",
    summary="gpu-0002/mlx5_5 runs at 400G, expected 800G",
    detector="link/1.0",
    score=1.0,
    confidence=0.99,
    node="gpu-0002",
    port="gpu-0002/mlx5_5",
    link=None,
    started_at="2025-03-01T12:00:00+00:00",
    opened_at="2025-03-01T12:00:00+00:00",
    last_seen_at="2025-03-01T12:09:50+00:00",
    resolved_at=None,
    reopen_count=0,
    finding_count=60,
)
RESOLVED = dataclasses.replace(FIRING, status="resolved", resolved_at="2025-03-01T12:10:00+00:00")


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(NOW) == "2025-03-01T12:10:00.123Z"


def test_labels_identify_the_incident_and_omit_absent_fields() -> None:
    assert FIRING.labels() == {
        "alertname": "GraywireSpeedDowngrade",
        "severity": "critical",
        "kind": "speed_downgrade",
        "entity": "gpu-0002/mlx5_5",
        "incident_id": "42",
        "node": "gpu-0002",
        "port": "gpu-0002/mlx5_5",
    }
    assert FIRING.dedup_key == RESOLVED.dedup_key == "graywire-incident-42"


def test_alertmanager_firing_alert_is_valid_for_four_refreshes() -> None:
    (alert,) = alertmanager.postable_alerts([FIRING], EXTERNAL, NOW, refresh_s=60)
    assert set(alert) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
    assert alert["labels"]["alertname"] == "GraywireSpeedDowngrade"
    assert alert["annotations"]["summary"] == FIRING.summary
    assert "link/1.0" in alert["annotations"]["description"]
    assert alert["startsAt"] == "2025-03-01T12:00:00.000Z"
    assert alert["endsAt"] == "2025-03-01T12:14:00.123Z"
    assert alert["generatorURL"] == f"{EXTERNAL}/api/v1/incidents/42"
    assert all(RFC3339.match(alert[k]) for k in ("startsAt", "endsAt"))


def test_alertmanager_resolved_alert_ends_at_resolution_with_the_same_labels() -> None:
    (alert,) = alertmanager.postable_alerts([RESOLVED], EXTERNAL, NOW, refresh_s=60)
    assert alert["endsAt"] == "2025-03-01T12:10:00.000Z"
    assert alert["labels"] == FIRING.labels()


def test_alertmanager_end_never_precedes_start() -> None:
    odd = dataclasses.replace(RESOLVED, resolved_at="2025-03-01T11:00:00+00:00")
    (alert,) = alertmanager.postable_alerts([odd], EXTERNAL, NOW, refresh_s=60)
    assert alert["endsAt"] == alert["startsAt"]


def test_alertmanager_firing_alert_dated_ahead_still_ends_after_it_starts() -> None:
    # Data may be dated up to ingest.max_clock_skew ahead of graywire's clock; Alertmanager
    # answers 400 "start time must be before end time" to an alert ending before it starts.
    ahead = dataclasses.replace(FIRING, started_at="2025-03-01T12:12:00+00:00")
    (alert,) = alertmanager.postable_alerts([ahead], EXTERNAL, NOW, refresh_s=60)
    assert alert["startsAt"] == "2025-03-01T12:12:00.000Z"
    assert alert["endsAt"] == "2025-03-01T12:16:00.000Z"


def test_fingerprint_matches_prometheus_label_set_fingerprint() -> None:
    # Values from prometheus/common model's signature tests (FNV-1a 64 over sorted labels).
    assert alertmanager.fingerprint({}) == f"{14695981039346656037:016x}"
    fp = alertmanager.fingerprint({"name": "garland, briggs", "fear": "love is not enough"})
    assert int(fp, 16) == 5799056148416392346


def test_webhook_v4_payload_shape() -> None:
    body = webhook.payload(FIRING, "noc", EXTERNAL)
    assert set(body) == {
        "version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
        "commonLabels", "commonAnnotations", "externalURL", "alerts",
    }  # fmt: skip
    assert body["version"] == "4"
    assert body["status"] == "firing"
    assert body["receiver"] == "noc"
    assert body["groupKey"] == '{}:{incident_id="42"}'
    assert body["groupLabels"] == {"incident_id": "42"}
    assert body["commonLabels"] == FIRING.labels()
    assert body["externalURL"] == EXTERNAL
    (alert,) = body["alerts"]
    assert set(alert) == {
        "status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint",
    }  # fmt: skip
    assert alert["endsAt"] == ZERO_TIME  # firing: no end, as Alertmanager sends it
    assert alert["fingerprint"] == alertmanager.fingerprint(FIRING.labels())
    resolved = webhook.payload(RESOLVED, "noc", EXTERNAL)
    assert resolved["status"] == resolved["alerts"][0]["status"] == "resolved"
    assert resolved["alerts"][0]["endsAt"] == "2025-03-01T12:10:00.000Z"
    assert resolved["alerts"][0]["fingerprint"] == alert["fingerprint"]


def test_hmac_signature_over_exact_body() -> None:
    body = json.dumps(webhook.payload(FIRING, "noc", EXTERNAL)).encode()
    sig = webhook.signature("s3cret", body)
    # Independently: HMAC-SHA256 per RFC 2104, hex, prefixed with the algorithm.
    import hashlib
    import hmac

    assert sig == "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert webhook.verify("s3cret", body, sig)
    assert not webhook.verify("other", body, sig)
    assert not webhook.verify("s3cret", body + b" ", sig)
    assert not webhook.verify("s3cret", body, None)


def test_pagerduty_trigger_event() -> None:
    ev = pagerduty.event(FIRING, "R0UT1NGKEY0000000000000000000000", EXTERNAL)
    assert ev["routing_key"] == "R0UT1NGKEY0000000000000000000000"
    assert ev["event_action"] == "trigger"
    assert ev["dedup_key"] == "graywire-incident-42"
    p = ev["payload"]
    assert p["summary"] == FIRING.summary
    assert p["source"] == "gpu-0002"
    assert p["severity"] == "critical"
    assert p["severity"] in {"critical", "error", "warning", "info"}
    assert RFC3339.match(p["timestamp"])
    assert p["component"] == "gpu-0002/mlx5_5"
    assert p["class"] == "speed_downgrade"
    assert p["group"] == "link/1.0"
    assert p["custom_details"]["incident_id"] == 42
    assert ev["client_url"] == f"{EXTERNAL}/api/v1/incidents/42"


def test_pagerduty_resolve_needs_only_key_action_and_dedup_key() -> None:
    ev = pagerduty.event(RESOLVED, "R0UT1NGKEY0000000000000000000000", EXTERNAL)
    assert ev == {
        "routing_key": "R0UT1NGKEY0000000000000000000000",
        "event_action": "resolve",
        "dedup_key": "graywire-incident-42",
    }


def test_pagerduty_summary_is_truncated_to_the_api_limit() -> None:
    long = dataclasses.replace(FIRING, summary="x" * 5000)
    assert len(pagerduty.event(long, "k", None)["payload"]["summary"]) == 1024


def test_slack_message_has_text_and_blocks_with_escaped_user_text() -> None:
    ev = dataclasses.replace(FIRING, summary="rank <3> & friends")
    msg = slack.message(ev, EXTERNAL)
    assert msg["text"].startswith(":red_circle: CRITICAL speed_downgrade on gpu-0002")
    assert [b["type"] for b in msg["blocks"]] == ["section", "context", "section"]
    assert "rank &lt;3&gt; &amp; friends" in msg["blocks"][0]["text"]["text"]
    assert f"<{EXTERNAL}/api/v1/incidents/42|#42>" in json.dumps(msg)
    done = slack.message(RESOLVED, EXTERNAL)
    assert done["text"].startswith(":white_check_mark: RESOLVED")


def test_slack_section_text_stays_within_slack_limit() -> None:
    msg = slack.message(dataclasses.replace(FIRING, summary="y" * 10_000), EXTERNAL)
    assert len(msg["blocks"][0]["text"]["text"]) <= slack.SECTION_LIMIT


def test_pagerduty_dedup_prefix_separates_deployments_sharing_a_routing_key() -> None:
    key = "R0UT1NGKEY0000000000000000000000"
    assert pagerduty.event(FIRING, key, EXTERNAL, "graywire-eu1")["dedup_key"] == "graywire-eu1-incident-42"
    assert pagerduty.event(RESOLVED, key, EXTERNAL, "graywire-eu1")["dedup_key"] == "graywire-eu1-incident-42"


LATE = dataclasses.replace(
    FIRING,
    stored_late={
        "fired_at": "2025-03-01T12:00:00+00:00",
        "cleared_at": "2025-03-01T12:05:00+00:00",
        "unstored_since": "2025-03-01T11:59:00+00:00",
        "stored_at": "2025-03-01T12:09:00+00:00",
    },
)


def test_an_episode_stored_late_says_when_it_fired_and_cleared_in_every_payload() -> None:
    pd = pagerduty.event(LATE, "k", EXTERNAL)["payload"]
    assert pd["summary"].startswith("[cleared 2025-03-01T12:05:00+00:00, stored late] ")
    assert pd["timestamp"] == "2025-03-01T12:00:00.000Z"  # when it fired, not when it was sent
    assert pd["custom_details"]["stored_late"] == LATE.stored_late
    note = webhook.payload(LATE, "noc", EXTERNAL)["alerts"][0]["annotations"]["stored_late"]
    assert note.startswith("fired 2025-03-01T12:00:00+00:00 and cleared 2025-03-01T12:05:00+00:00")
    assert "2025-03-01T11:59:00+00:00" in note
    (alert,) = alertmanager.postable_alerts([LATE], EXTERNAL, NOW, refresh_s=60)
    assert alert["annotations"]["stored_late"] == note
    assert any("stored late" in json.dumps(b) for b in slack.message(LATE, EXTERNAL)["blocks"])
    assert "stored_late" not in FIRING.annotations()


def test_an_event_enqueued_before_stored_late_existed_still_loads() -> None:
    old = FIRING.to_dict()
    del old["stored_late"]
    assert AlertEvent.from_dict(old) == FIRING
