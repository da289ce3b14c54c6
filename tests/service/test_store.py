"""IncidentStore: how findings roll up into incidents, and how incidents read back."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from graywire.detectors.findings import Finding
from graywire.service.models import FindingRecord, Incident
from graywire.service.store import INCIDENT_FINDINGS_LIMIT, ApplyResult, IncidentStore

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def finding(
    entity: str = "leaf01/p1",
    status: str = "firing",
    t: float = 0,
    *,
    kind: str = "link_speed_degraded",
    severity: str = "warning",
    **kwargs: Any,
) -> Finding:
    """A finding ``t`` seconds after T0; defaults describe a degraded link on node gpu001."""
    values: dict[str, Any] = {
        "summary": f"{kind} on {entity}",
        "detector": "link/1.0",
        "node": "gpu001",
        "port": "gpu001/mlx5_0/1",
        "score": 1.0,
        "evidence": {"t": t},
    }
    values.update(kwargs)
    return Finding(
        kind=kind,
        entity=entity,
        status=status,  # type: ignore[arg-type]
        time=T0 + timedelta(seconds=t),
        severity=severity,  # type: ignore[arg-type]
        **values,
    )


@contextmanager
def count_selects(engine: Engine) -> Iterator[list[str]]:
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def only_incident(store: IncidentStore) -> dict[str, Any]:
    items = store.list_incidents()
    assert len(items) == 1, items
    return items[0]


def test_lifecycle_open_update_resolve_reopen(store: IncidentStore) -> None:
    assert store.apply([finding(t=0)]) == ApplyResult(opened=1)
    inc = only_incident(store)
    assert inc["status"] == "open"
    assert inc["opened_at"] == inc["last_seen_at"] == "2025-03-01T12:00:00+00:00"
    assert inc["resolved_at"] is None
    assert (inc["finding_count"], inc["reopen_count"]) == (1, 0)

    result = store.apply([finding(t=10, summary="still degraded", score=3.5, confidence=0.9)])
    assert result == ApplyResult(updated=1)
    inc = only_incident(store)
    assert inc["status"] == "open"
    assert inc["last_seen_at"] == "2025-03-01T12:00:10+00:00"
    assert inc["opened_at"] == "2025-03-01T12:00:00+00:00"
    assert (inc["summary"], inc["score"], inc["confidence"]) == ("still degraded", 3.5, 0.9)
    assert inc["evidence"] == {"t": 10}
    assert inc["finding_count"] == 2

    assert store.apply([finding(status="cleared", t=20)]) == ApplyResult(resolved=1)
    inc = only_incident(store)
    assert inc["status"] == "resolved"
    assert inc["resolved_at"] == "2025-03-01T12:00:20+00:00"
    assert inc["finding_count"] == 2  # counts sightings, not clears

    assert store.apply([finding(t=30)]) == ApplyResult(reopened=1)
    reopened = only_incident(store)
    assert reopened["id"] == inc["id"]
    assert reopened["status"] == "open"
    assert reopened["resolved_at"] is None
    assert (reopened["reopen_count"], reopened["finding_count"]) == (1, 3)
    assert reopened["opened_at"] == "2025-03-01T12:00:00+00:00"
    assert reopened["last_seen_at"] == "2025-03-01T12:00:30+00:00"

    detail = store.get_incident(inc["id"])
    assert detail is not None
    assert [(f["status"], f["time"]) for f in detail["findings"]] == [
        ("firing", "2025-03-01T12:00:30+00:00"),
        ("cleared", "2025-03-01T12:00:20+00:00"),
        ("firing", "2025-03-01T12:00:10+00:00"),
        ("firing", "2025-03-01T12:00:00+00:00"),
    ]
    assert {f["incident_id"] for f in detail["findings"]} == {inc["id"]}


def test_dedup_by_kind_and_entity(store: IncidentStore) -> None:
    result = store.apply(
        [
            finding("leaf01/p1", t=0),
            finding("leaf01/p1", t=1),
            finding("leaf01/p2", t=1),
            finding("leaf01/p1", t=2, kind="ber_high"),
        ]
    )
    assert result == ApplyResult(opened=3, updated=1)
    store.apply([finding("leaf01/p1", t=3), finding("leaf01/p2", t=3)])

    items = store.list_incidents()
    by_key = {(i["kind"], i["entity"]): i for i in items}
    assert set(by_key) == {
        ("link_speed_degraded", "leaf01/p1"),
        ("link_speed_degraded", "leaf01/p2"),
        ("ber_high", "leaf01/p1"),
    }
    assert by_key[("link_speed_degraded", "leaf01/p1")]["finding_count"] == 3
    assert by_key[("link_speed_degraded", "leaf01/p2")]["finding_count"] == 2
    assert by_key[("ber_high", "leaf01/p1")]["finding_count"] == 1


def test_severity_keeps_max_within_episode_and_restarts_on_reopen(store: IncidentStore) -> None:
    store.apply([finding(t=0, severity="warning")])
    store.apply([finding(t=1, severity="critical")])
    store.apply([finding(t=2, severity="info")])
    assert only_incident(store)["severity"] == "critical"

    store.apply([finding(status="cleared", t=3), finding(t=4, severity="info")])
    inc = only_incident(store)
    assert (inc["status"], inc["severity"], inc["reopen_count"]) == ("open", "info", 1)


def test_cleared_without_open_incident_is_recorded_only(store: IncidentStore, engine: Engine) -> None:
    assert store.apply([finding(status="cleared", t=0)]) == ApplyResult()
    assert store.list_incidents() == []
    with engine.connect() as conn:
        rows = conn.execute(sa.select(FindingRecord.status, FindingRecord.incident_id)).all()
    assert rows == [("cleared", None)]

    # A second clear of an already resolved incident changes nothing either.
    store.apply([finding(t=1)])
    store.apply([finding(status="cleared", t=2)])
    assert store.apply([finding(status="cleared", t=3)]) == ApplyResult()
    inc = only_incident(store)
    assert (inc["status"], inc["resolved_at"]) == ("resolved", "2025-03-01T12:00:02+00:00")


def test_acknowledged_incident_is_updated_and_resolved(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    with engine.begin() as conn:
        conn.execute(sa.update(Incident).values(status="acknowledged"))
    assert store.apply([finding(t=5)]) == ApplyResult(updated=1)
    inc = only_incident(store)
    assert (inc["status"], inc["finding_count"]) == ("acknowledged", 2)
    assert store.apply([finding(status="cleared", t=6)]) == ApplyResult(resolved=1)
    assert only_incident(store)["status"] == "resolved"


def test_batch_is_applied_in_time_order(store: IncidentStore) -> None:
    # Handed over out of order: the clear at t=10 comes after both firings.
    result = store.apply([finding(status="cleared", t=10), finding(t=5), finding(t=0)])
    assert result == ApplyResult(opened=1, updated=1, resolved=1)
    inc = only_incident(store)
    assert inc["status"] == "resolved"
    assert inc["opened_at"] == "2025-03-01T12:00:00+00:00"
    assert inc["last_seen_at"] == "2025-03-01T12:00:05+00:00"


def test_late_findings_do_not_flap_incidents(store: IncidentStore) -> None:
    store.apply([finding(t=0), finding(t=10, summary="newest")])
    # A clear from before the last firing is stale: recorded, incident stays open.
    assert store.apply([finding(status="cleared", t=5)]) == ApplyResult()
    inc = only_incident(store)
    assert inc["status"] == "open"
    # A late firing counts as a sighting but does not roll the incident's view back.
    store.apply([finding(t=7, summary="older")])
    inc = only_incident(store)
    assert (inc["summary"], inc["last_seen_at"], inc["finding_count"]) == (
        "newest",
        "2025-03-01T12:00:10+00:00",
        3,
    )
    store.apply([finding(status="cleared", t=20)])
    # A firing from before the resolution does not reopen it.
    assert store.apply([finding(t=15)]) == ApplyResult()
    inc = only_incident(store)
    assert (inc["status"], inc["reopen_count"]) == ("resolved", 0)
    detail = store.get_incident(inc["id"])
    assert detail is not None and len(detail["findings"]) == 6


def test_times_read_back_as_utc(store: IncidentStore, engine: Engine) -> None:
    cest = timezone(timedelta(hours=2))
    local = datetime(2025, 3, 1, 14, 0, tzinfo=cest)  # 12:00 UTC
    store.apply([Finding("k", "e", "firing", local, "info", "s", "d")])
    inc = only_incident(store)
    assert inc["opened_at"] == "2025-03-01T12:00:00+00:00"
    with engine.connect() as conn:
        opened = conn.execute(sa.select(Incident.opened_at)).scalar_one()
    assert opened.tzinfo is not None and opened.utcoffset() == timedelta(0)
    assert opened == local


def test_evidence_is_stored_as_strict_json(store: IncidentStore) -> None:
    evidence = {
        "window": np.array([1.5, 2.5]),
        "peer_median": np.float32(0.25),
        "count": np.int64(7),
        "ber": math.nan,
        "limit": math.inf,
        "at": T0,
        "nested": {"lanes": (1, 2)},
    }
    store.apply([finding(evidence=evidence)])
    inc = only_incident(store)
    assert inc["evidence"] == {
        "window": [1.5, 2.5],
        "peer_median": 0.25,
        "count": 7,
        "ber": None,
        "limit": None,
        "at": "2025-03-01T12:00:00+00:00",
        "nested": {"lanes": [1, 2]},
    }


def test_invalid_batch_writes_nothing(store: IncidentStore, engine: Engine) -> None:
    with pytest.raises(ValueError, match="unknown severity"):
        store.apply([finding(t=0), finding("x", severity="fatal")])
    naive = Finding("k", "e", "firing", datetime(2025, 3, 1), "info", "s", "d")
    with pytest.raises(ValueError, match="time zone"):
        store.apply([naive])
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(FindingRecord)).scalar_one() == 0
    assert store.list_incidents() == []
    assert store.apply([]) == ApplyResult()


def test_apply_loads_incidents_in_one_query(store: IncidentStore, engine: Engine) -> None:
    batch = [finding(f"leaf{i // 64:02d}/p{i % 64}", t=0) for i in range(300)]
    with count_selects(engine) as selects:
        assert store.apply(batch) == ApplyResult(opened=300)
    assert len([s for s in selects if "FROM incidents" in s]) == 1

    again = [finding(f.entity, t=10) for f in batch]
    with count_selects(engine) as selects:
        assert store.apply(again) == ApplyResult(updated=300)
    assert len([s for s in selects if "FROM incidents" in s]) == 1
    assert len(store.list_incidents(limit=1000)) == 300


def test_apply_handles_more_keys_than_one_lookup_chunk(store: IncidentStore) -> None:
    batch = [finding(f"port{i}", t=0) for i in range(1000)]
    assert store.apply(batch).opened == 1000
    cleared = [finding(f"port{i}", status="cleared", t=1) for i in range(1000)]
    assert store.apply(cleared).resolved == 1000
    assert store.open_counts() == []


def test_list_filters_and_pagination(store: IncidentStore) -> None:
    store.apply(
        [
            finding("a", t=0, kind="link_speed_degraded", node="gpu001"),
            finding("b", t=1, kind="ber_high", node="gpu002"),
            finding("c", t=2, kind="ber_high", node="gpu001"),
            finding("d", t=3, kind="pfc_storm", node=None, port=None),
            finding("e", t=3, kind="pfc_storm", node="gpu003"),
        ]
    )
    store.apply([finding("c", status="cleared", t=4, kind="ber_high")])

    # Newest first; equal opened_at falls back to id, newest id first.
    assert [i["entity"] for i in store.list_incidents()] == ["e", "d", "c", "b", "a"]
    assert [i["entity"] for i in store.list_incidents(status="open")] == ["e", "d", "b", "a"]
    assert [i["entity"] for i in store.list_incidents(status="resolved")] == ["c"]
    assert store.list_incidents(status="acknowledged") == []
    assert [i["entity"] for i in store.list_incidents(kind="ber_high")] == ["c", "b"]
    assert [i["entity"] for i in store.list_incidents(node="gpu001")] == ["c", "a"]
    assert [i["entity"] for i in store.list_incidents(kind="ber_high", node="gpu001", status="open")] == []

    pages = [store.list_incidents(limit=2, offset=o) for o in (0, 2, 4, 6)]
    assert [[i["entity"] for i in page] for page in pages] == [["e", "d"], ["c", "b"], ["a"], []]

    with pytest.raises(ValueError, match="unknown incident status"):
        store.list_incidents(status="closed")
    with pytest.raises(ValueError):
        store.list_incidents(limit=0)


def test_get_incident_returns_latest_findings(store: IncidentStore) -> None:
    store.apply([finding(t=t) for t in range(INCIDENT_FINDINGS_LIMIT + 10)])
    inc = only_incident(store)
    detail = store.get_incident(inc["id"])
    assert detail is not None
    assert detail["finding_count"] == INCIDENT_FINDINGS_LIMIT + 10
    times = [f["time"] for f in detail["findings"]]
    assert len(times) == INCIDENT_FINDINGS_LIMIT
    assert times[0] == (T0 + timedelta(seconds=INCIDENT_FINDINGS_LIMIT + 9)).isoformat()
    assert times == sorted(times, reverse=True)
    first = detail["findings"][0]
    assert set(first) >= {"id", "incident_id", "kind", "entity", "status", "severity", "evidence"}
    assert store.get_incident(inc["id"] + 1000) is None


def test_open_counts(store: IncidentStore, engine: Engine) -> None:
    assert store.open_counts() == []
    store.apply(
        [
            finding("a", t=0, kind="ber_high", severity="warning"),
            finding("b", t=0, kind="ber_high", severity="warning"),
            finding("c", t=0, kind="ber_high", severity="critical"),
            finding("d", t=0, kind="link_down", severity="critical"),
            finding("e", t=0, kind="link_down", severity="critical"),
        ]
    )
    store.apply([finding("e", status="cleared", t=1, kind="link_down")])
    with engine.begin() as conn:
        conn.execute(sa.update(Incident).where(Incident.entity == "d").values(status="acknowledged"))
    assert store.open_counts() == [
        ("ber_high", "critical", 1),
        ("ber_high", "warning", 2),
        ("link_down", "critical", 1),
    ]


def test_active_on_ports(store: IncidentStore) -> None:
    """Port, link and severity of active incidents: what per-port health in /metrics is built from."""
    assert store.active_on_ports() == []
    store.apply(
        [
            finding("a", t=0, severity="critical", port="gpu001/mlx5_0", link="gpu001/mlx5_0<->leaf01/p1"),
            finding("b", t=0, severity="warning", port="gpu002/mlx5_1", link=None),
            finding("c", t=0, severity="warning", port=None, link=None, node="gpu003"),
            finding("d", t=0, severity="critical", port="gpu004/mlx5_0"),
        ]
    )
    store.apply([finding("d", status="cleared", t=1)])
    assert sorted(store.active_on_ports()) == [
        ("gpu001/mlx5_0", "gpu001/mlx5_0<->leaf01/p1", "critical"),
        ("gpu002/mlx5_1", None, "warning"),
    ]


def test_concurrent_writers_lose_no_updates(store: IncidentStore) -> None:
    """Writers racing on one incident queue up (row locks / SQLite write lock) instead of
    overwriting each other's counts or failing with 'database is locked'."""
    store.apply([finding(t=0)])
    threads, batches = 4, 10

    def writer(w: int) -> None:
        for b in range(batches):
            store.apply([finding(t=1 + w * batches + b)])

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(writer, w) for w in range(threads)]:
            future.result()
    inc = only_incident(store)
    assert inc["finding_count"] == 1 + threads * batches
    assert inc["last_seen_at"] == (T0 + timedelta(seconds=threads * batches)).isoformat()


def test_an_episode_stored_after_it_ended_is_recorded_as_late(store: IncidentStore, engine: Engine) -> None:
    """Findings held while the database was away: one episode fired and cleared, one still fires."""
    held_since = T0 - timedelta(seconds=30)
    batch = [
        finding("p1", t=0, evidence={"speed": 400}),
        finding("p1", status="cleared", t=20),
        finding("p1", t=40),  # reopened, and still open when stored
        finding("p2", t=10),
    ]
    result = store.apply(batch, stored_late_since=held_since)
    assert (result.opened, result.resolved, result.reopened, result.late_episodes) == (2, 1, 1, 1)
    with engine.connect() as conn:
        (row,) = conn.execute(sa.text("SELECT * FROM late_episodes")).mappings()
        records = [
            json_value(e)
            for e in conn.execute(sa.text("SELECT evidence FROM findings ORDER BY id")).scalars()
        ]
    p1 = store.list_incidents(kind="link_speed_degraded", limit=10)[-1]
    assert p1["entity"] == "p1" and p1["status"] == "open" and p1["reopen_count"] == 1
    assert row["incident_id"] == p1["id"] and row["episode"] == 0
    snapshot = json_value(row["incident"])
    assert (snapshot["id"], snapshot["status"], snapshot["resolved_at"]) == (
        p1["id"],
        "resolved",
        (T0 + timedelta(seconds=20)).isoformat(),
    )
    late = snapshot["evidence"]["stored_late"]
    assert (
        late["fired_at"] == T0.isoformat() and late["cleared_at"] == (T0 + timedelta(seconds=20)).isoformat()
    )
    assert late["unstored_since"] == held_since.isoformat()
    assert datetime.fromisoformat(late["stored_at"]) > held_since
    assert snapshot["evidence"]["speed"] == 400  # the detector's own evidence stays
    # Every finding stored late says so, and so does what the incidents show now.
    assert all(r["stored_late"]["unstored_since"] == held_since.isoformat() for r in records)
    assert "stored_late" in p1["evidence"] and "cleared_at" not in p1["evidence"]["stored_late"]


def test_findings_stored_on_time_record_no_late_episode(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0), finding(status="cleared", t=20)])
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM late_episodes")).scalar_one() == 0
    assert "stored_late" not in store.list_incidents()[0]["evidence"]


def json_value(value: Any) -> Any:
    """A JSON column read through plain SQL: text on SQLite, already decoded on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value
