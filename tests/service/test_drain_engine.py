"""The drain engine and operator actions over a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from graywire.detectors.findings import Finding
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.drain_engine import BREAKER_KIND, NETWORK_KIND, DrainEngine
from graywire.service.drain_policy import DrainPolicy
from graywire.service.operations import Conflict, NotFound, Operations
from graywire.service.store import IncidentStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FABRIC = build_fabric(TopologySpec(hosts=64, gpus=8))  # 32 hosts per leaf, 2 groups x 8 rails


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def downgrade(host: int, rail: int, t: datetime = T0, status: str = "firing") -> Finding:
    port = f"gpu-{host:04d}/mlx5_{rail}"
    return Finding(
        kind="speed_downgrade",
        entity=port,
        status=status,  # type: ignore[arg-type]
        time=t,
        severity="critical",
        summary=f"{port} negotiated 400G, expected 800G since 12:00:00",
        detector="link_state/1",
        node=f"gpu-{host:04d}",
        port=port,
        evidence={"expected": {"speed_bps": 800e9}},
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def drain(engine: Engine, store: IncidentStore, clock: Clock) -> DrainEngine:
    d = DrainEngine(engine, store, FABRIC, DrainPolicy(), clock=clock)
    d.sync_inventory()
    return d


def audit_actions(ops: Operations, **filters) -> list[tuple[str, str | None]]:
    return [(a["action"], a["node"]) for a in ops.audit(limit=1000, **filters)]


def test_drain_is_decided_once_audited_and_survives_a_new_engine(
    drain: DrainEngine, store: IncidentStore, engine: Engine, clock: Clock
) -> None:
    store.apply([downgrade(1, 3)])
    drain.evaluate()
    items = drain.list_drain()
    assert [(i["node"], i["action"], i["shadow"]) for i in items] == [("gpu-0001", "drain", False)]
    assert items[0]["since"] == T0.isoformat() and items[0]["evidence_url"] == "/api/v1/nodes/gpu-0001"
    assert "negotiated 400G, expected 800G" in items[0]["reason"]
    ops = Operations(drain)
    assert audit_actions(ops) == [("drain", "gpu-0001")]
    entry = ops.audit()[0]
    assert entry["actor"] == "policy" and entry["evidence"]["verdict"]["side"] == "link"
    # Polls go on, the service restarts: the node is not drained a second time.
    clock.now += timedelta(seconds=30)
    drain.evaluate()
    again = DrainEngine(engine, store, FABRIC, DrainPolicy(), clock=clock)
    again.evaluate()
    assert audit_actions(ops) == [("drain", "gpu-0001")]
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM inventory_nodes")).scalar_one() == len(
            FABRIC.node_names
        )
        assert (
            conn.execute(sa.text("SELECT side FROM node_verdicts WHERE node = 'gpu-0001'")).scalar_one()
            == "link"
        )
    # The fault clears; after a clean window the node returns to service.
    store.apply([downgrade(1, 3, clock.now, status="cleared")])
    drain.evaluate()
    assert drain.list_drain()[0]["action"] == "drain"
    clock.now += timedelta(minutes=10)
    drain.evaluate()
    assert drain.list_drain() == []
    assert audit_actions(ops)[0] == ("return_to_service", "gpu-0001")


def test_three_hosts_on_one_leaf_are_one_network_incident_and_no_drain(
    drain: DrainEngine, store: IncidentStore
) -> None:
    store.apply([downgrade(h, 2) for h in (1, 2, 3)])
    drain.evaluate()
    assert drain.list_drain() == []
    network = store.list_incidents(kind=NETWORK_KIND)
    assert [(i["entity"], i["status"], i["severity"]) for i in network] == [
        ("leaf-r2-000", "open", "critical")
    ]
    assert network[0]["evidence"]["hosts"] == ["gpu-0001", "gpu-0002", "gpu-0003"]
    drain.evaluate()  # unchanged: no second finding on it
    assert store.list_incidents(kind=NETWORK_KIND)[0]["finding_count"] == 1
    store.apply([downgrade(h, 2, T0 + timedelta(minutes=1), "cleared") for h in (1, 2, 3)])
    drain.evaluate()
    assert store.list_incidents(kind=NETWORK_KIND)[0]["status"] == "resolved"


def test_in_shadow_mode_a_tripped_breaker_is_recorded_but_pages_nobody(
    engine: Engine, store: IncidentStore, clock: Clock
) -> None:
    shadow = DrainEngine(engine, store, FABRIC, DrainPolicy(shadow=True), clock=clock)
    shadow.sync_inventory()
    store.apply([downgrade(h, h % 8) for h in (0, 1, 2, 3, 4, 5, 6, 7, 32, 33)])
    shadow.evaluate()
    assert shadow.breaker().tripped
    (alert,) = store.list_incidents(kind=BREAKER_KIND)
    # Below the default paging floor (warning): nothing was acted on, nobody is woken up.
    assert (alert["status"], alert["severity"]) == ("open", "info")
    assert "shadow mode" in alert["summary"]


def test_breaker_trips_at_the_cap_raises_an_incident_and_an_operator_resets_it(
    drain: DrainEngine, store: IncidentStore
) -> None:
    # 10 hosts on distinct leaves (no switch blamed); cap = 10% of 64 = 6.
    store.apply([downgrade(h, h % 8) for h in (0, 1, 2, 3, 4, 5, 6, 7, 32, 33)])
    drain.evaluate()
    assert len(drain.list_drain(action="drain")) == 6
    assert len(drain.list_drain(action="watch")) == 4
    b = drain.breaker()
    assert (b.tripped, b.recent_drains, b.cap) == (True, 6, 6) and "cap of 6" in b.message
    alert = store.list_incidents(kind=BREAKER_KIND)
    assert [(i["entity"], i["status"], i["severity"]) for i in alert] == [("fabric", "open", "critical")]
    ops = Operations(drain)
    assert [a for a, _ in audit_actions(ops)].count("breaker_trip") == 1
    drain.evaluate()
    assert store.list_incidents(kind=BREAKER_KIND)[0]["finding_count"] == 1
    ops.reset_breaker("alice", "leaf replaced")
    assert not drain.breaker().tripped
    assert store.list_incidents(kind=BREAKER_KIND)[0]["status"] == "resolved"
    with pytest.raises(Conflict):
        ops.reset_breaker("alice", "again")


def test_operator_actions_change_state_and_are_audited(
    drain: DrainEngine, store: IncidentStore, clock: Clock
) -> None:
    store.apply([downgrade(1, 3), downgrade(40, 5)])
    ops = Operations(drain)
    ids = {i["node"]: i["id"] for i in store.list_incidents()}
    # Silence: the silenced incident counts toward no drain.
    ops.silence(ids["gpu-0040"], timedelta(hours=1), "alice", "known, RMA open")
    # Exclude: never drained, watched with the reason.
    ops.exclude("gpu-0001", timedelta(hours=2), "alice", "burn-in test")
    drain.evaluate()
    assert [(i["node"], i["action"]) for i in drain.list_drain()] == [("gpu-0001", "watch")]
    assert "burn-in test" in drain.list_drain()[0]["reason"]
    assert [s["entity"] for s in ops.list_silences()] == ["gpu-0040/mlx5_5"]
    ops.unexclude("gpu-0001", "bob")
    drain.evaluate()
    assert drain.list_drain(action="drain")[0]["node"] == "gpu-0001"
    out = ops.undrain("gpu-0001", "bob", "cable reseated")
    assert out["previous_action"] == "drain"
    drain.evaluate()  # still failing, but in cooldown: watched
    item = drain.list_drain()[0]
    assert (item["action"], "cooldown" in item["reason"]) == ("watch", True)
    with pytest.raises(Conflict):
        ops.undrain("gpu-0002", "bob", "not drained")
    with pytest.raises(NotFound):
        ops.unexclude("gpu-0002", "bob")
    # Incident lifecycle by hand.
    acked = ops.acknowledge(ids["gpu-0001"], "carol")
    assert acked["status"] == "acknowledged"
    assert ops.resolve(ids["gpu-0001"], "carol", "fixed")["status"] == "resolved"
    with pytest.raises(Conflict):
        ops.resolve(ids["gpu-0001"], "carol")
    with pytest.raises(Conflict):
        ops.acknowledge(ids["gpu-0001"], "carol")
    with pytest.raises(NotFound):
        ops.acknowledge(999_999, "carol")
    actions = audit_actions(ops)
    for expected in ("silence", "exclude", "unexclude", "undrain", "acknowledge", "resolve", "drain"):
        assert expected in [a for a, _ in actions]
    assert [a["actor"] for a in ops.audit(action="undrain")] == ["bob"]
    assert audit_actions(ops, node="gpu-0040") == [("silence", "gpu-0040")]
    # The exclusion expires by itself.
    ops.exclude("gpu-0002", timedelta(minutes=1), "alice", "short")
    assert [e["node"] for e in ops.list_excludes()] == ["gpu-0002"]
    clock.now += timedelta(minutes=2)
    assert ops.list_excludes() == []


def test_two_replicas_deciding_at_once_share_one_cap(
    engine: Engine, store: IncidentStore, clock: Clock
) -> None:
    """Replicas sharing the database serialize on the drain_state row: the cap holds fleet-wide."""
    import threading

    store.apply([downgrade(h, h % 8) for h in (0, 1, 2, 3, 4, 5, 6, 7, 32, 33)])
    replicas = [DrainEngine(engine, store, FABRIC, DrainPolicy(), clock=clock) for _ in range(4)]
    barrier = threading.Barrier(len(replicas))
    errors: list[BaseException] = []

    def run(r: DrainEngine) -> None:
        barrier.wait()
        try:
            r.evaluate()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ops = Operations(replicas[0])
    assert [a for a, _ in audit_actions(ops)].count("drain") == 6
    assert [a for a, _ in audit_actions(ops)].count("breaker_trip") == 1
    assert len(replicas[0].list_drain(action="drain")) == 6


def test_ending_shadow_mode_does_not_turn_every_shadow_drain_live_at_once(
    store: IncidentStore, engine: Engine, clock: Clock
) -> None:
    # Weeks of shadow mode pile up recommendations, each window under the cap (6 of 64)...
    shadow = DrainEngine(engine, store, FABRIC, DrainPolicy(shadow=True), clock=clock)
    shadow.sync_inventory()
    hosts = (0, 1, 2, 3, 4, 5, 6, 7, 32, 33)
    for batch in (hosts[:5], hosts[5:]):
        store.apply([downgrade(h, h % 8, clock.now) for h in batch])
        shadow.evaluate()
        clock.now += timedelta(minutes=11)
    assert [(i["action"], i["shadow"]) for i in shadow.list_drain()] == [("drain", True)] * 10
    assert not shadow.breaker().tripped
    # ...then shadow mode is switched off: a live drain storm of 10 must go through the breaker.
    live = DrainEngine(engine, store, FABRIC, DrainPolicy(), clock=clock)
    assert {i["shadow"] for i in live.list_drain()} == {True}  # not acted on before the first run
    live.evaluate()
    drained = live.list_drain(action="drain")
    assert len(drained) == 6 and {i["shadow"] for i in drained} == {False}
    assert len(live.list_drain(action="watch")) == 4
    assert live.breaker().tripped
    since = {"since": clock.now}
    assert [a for a, _ in audit_actions(Operations(live), **since)].count("drain") == 6
    live.evaluate()  # the next poll changes nothing
    assert len(live.list_drain(action="drain")) == 6


def test_a_reset_breaker_lets_held_nodes_drain_instead_of_tripping_again_at_once(
    drain: DrainEngine, store: IncidentStore, clock: Clock
) -> None:
    hosts = (0, 1, 2, 3, 4, 5, 6, 7, 32, 33)  # 10 bad hosts, cap 6: 4 held, breaker tripped
    store.apply([downgrade(h, h % 8) for h in hosts])
    drain.evaluate()
    assert drain.breaker().tripped and len(drain.list_drain(action="watch")) == 4
    ops = Operations(drain)
    clock.now += timedelta(minutes=2)  # well inside the window that filled the cap
    ops.reset_breaker("alice", "checked: ten real link faults")
    clock.now += timedelta(seconds=10)
    drain.evaluate()
    # Drains resume at the next poll: the held nodes drain and the breaker stays closed.
    assert len(drain.list_drain(action="drain")) == 10
    assert not drain.breaker().tripped
    alert = store.list_incidents(kind=BREAKER_KIND)
    assert [(i["status"], i["reopen_count"]) for i in alert] == [("resolved", 0)]  # no second page
    # The count starts again from the reset: a new storm past the cap trips it again.
    store.apply([downgrade(h, h % 8, clock.now) for h in (8, 9, 10, 11, 12, 13, 14, 15)])
    drain.evaluate()
    assert len(drain.list_drain(action="drain")) == 12  # 4 after the reset + 2 more reach the cap
    assert drain.breaker().tripped
