"""One cause, one page: fabricsim -> detectors -> store -> drain engine -> alert sync -> API.

A host link that renegotiates 800G -> 400G slows the NCCL rank whose NIC is on it. The link
is the cause: it is paged; the slow rank folds under it (``caused_by`` / ``effects``) and is
not paged on its own by a direct receiver. Alertmanager is told of both and inhibits the rank
by ``port``, as the shipped example configures it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from graywire.service.alerts.events import AlertEvent
from graywire.service.alerts.outbox import OutboxMessage
from graywire.service.alerts.sync import SyncTarget, sync_alerts
from graywire.service.app import create_app
from graywire.service.config import load_settings

DOWNGRADE = "speed_downgrade@15s+1h:gpu-0003/mlx5_2"
DIRECT = SyncTarget("pd", "warning", inhibit=True, group_wait_s=30)
ALERTMANAGER = SyncTarget("am", "info", refresh_s=60)


def run(tmp_path: Path, db_url: str, faults: str, polls: int = 8) -> TestClient:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=db_url,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 16, "seed": 7, "faults": faults}],
        drain={"shadow": False},
    )
    client = TestClient(create_app(settings, run_loop=False))
    client.__enter__()
    for _ in range(polls):
        client.app.state.runner.tick()  # type: ignore[attr-defined]
    return client


@pytest.fixture
def downgrade(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    client = run(tmp_path, db_url, DOWNGRADE)
    yield client
    client.__exit__(None, None, None)


def triggers(client: TestClient) -> dict[str, list[int]]:
    engine = client.app.state.services.store.engine  # type: ignore[attr-defined]
    with Session(engine) as session:
        rows = session.execute(
            sa.select(OutboxMessage.receiver, OutboxMessage.incident_id)
            .where(OutboxMessage.action == "trigger")
            .order_by(OutboxMessage.id)
        )
        out: dict[str, list[int]] = {}
        for receiver, incident_id in rows:
            out.setdefault(receiver, []).append(incident_id)
        return out


def test_a_link_fault_that_slows_nccl_is_one_page_with_its_effects(downgrade: TestClient) -> None:
    c = downgrade
    items = c.get("/api/v1/incidents", params={"status": "open", "limit": 100}).json()["items"]
    (link,) = [i for i in items if i["kind"] == "speed_downgrade"]
    slow = [i for i in items if i["kind"] == "nccl_channel_slow"]
    assert slow, "the downgraded NIC's rank runs slow"
    assert all(i["node"] == "gpu-0003" and i["caused_by"] == link["id"] for i in slow)
    assert all("bad link" in i["cause_reason"] for i in slow)
    assert link["caused_by"] is None and link["effects"] == sorted(i["id"] for i in slow)
    assert [i["id"] for i in items if i["caused_by"] is None] == [link["id"]]  # one root
    assert c.get(f"/api/v1/incidents/{slow[0]['id']}").json()["caused_by"] == link["id"]

    engine = c.app.state.services.store.engine  # type: ignore[attr-defined]
    later = datetime.now(UTC) + timedelta(minutes=5)  # past group_wait
    result = sync_alerts(engine, [DIRECT, ALERTMANAGER], later)
    assert triggers(c) == {"pd": [link["id"]], "am": sorted([link["id"], *link["effects"]])}
    assert result.inhibited == len(slow)
    # The cause's page lists its effects; Alertmanager's copy of an effect names its cause.
    with Session(engine) as session:
        events = {
            (m.receiver, m.incident_id): m.event
            for m in session.scalars(sa.select(OutboxMessage).where(OutboxMessage.action == "trigger"))
        }
    assert events[("pd", link["id"])]["effects"] == [
        f"#{i['id']} nccl_channel_slow {i['entity']}" for i in sorted(slow, key=lambda i: i["id"])
    ]
    effect = AlertEvent.from_dict(events[("am", slow[0]["id"])])
    why = effect.annotations()["caused_by"]
    assert why.startswith(f"incident {link['id']}: its rank's NIC is on a bad link")
    # The drain is the host's, for the link, with the NCCL evidence beside it.
    (drain,) = c.get("/api/v1/drain").json()
    assert drain["node"] == "gpu-0003" and link["id"] in drain["incident_ids"]


def test_an_alert_sync_between_storing_and_judging_never_pages_an_effect_alone(
    tmp_path: Path, db_url: str
) -> None:
    """The dispatcher syncs on its own clock: with no group_wait, a sync that runs after a poll
    stored its findings and before the drain engine judged them sees only what is committed.
    Each effect is committed with its cause, so it never pages under a key of its own."""
    c = run(tmp_path, db_url, DOWNGRADE, polls=0)
    try:
        runner = c.app.state.runner  # type: ignore[attr-defined]
        engine = c.app.state.services.store.engine  # type: ignore[attr-defined]
        at_once = SyncTarget("pd", "warning", inhibit=True, group_wait_s=0)
        evaluate = runner.drain.evaluate

        def sync_then_evaluate():  # the dispatcher's thread, at the worst moment
            # The simulated fabric's clock runs ahead of the wall clock: sync past its polls.
            sync_alerts(engine, [at_once], datetime.now(UTC) + timedelta(minutes=5))
            return evaluate()

        runner.drain.evaluate = sync_then_evaluate
        for _ in range(8):
            runner.tick()
        items = c.get("/api/v1/incidents", params={"status": "open", "limit": 100}).json()["items"]
        (link,) = [i for i in items if i["kind"] == "speed_downgrade"]
        assert link["effects"], "the downgraded NIC's rank runs slow"
        assert triggers(c) == {"pd": [link["id"]]}
    finally:
        c.__exit__(None, None, None)


def test_an_ecn_hotspot_victim_is_watched_not_drained(tmp_path: Path, db_url: str) -> None:
    c = run(tmp_path, db_url, "ecn_hotspot@15s+1h:gpu-0003/mlx5_2")
    try:
        (hot,) = c.get("/api/v1/incidents", params={"kind": "ecn_hotspot"}).json()["items"]
        assert hot["port"] == "gpu-0003/mlx5_2"
        drains = c.get("/api/v1/drain").json()
        assert [(d["node"], d["action"]) for d in drains] == [("gpu-0003", "watch")]
        assert "congestion victim" in drains[0]["reason"]
        assert c.get("/api/v1/audit", params={"action": "drain"}).json()["items"] == []
    finally:
        c.__exit__(None, None, None)


def test_a_pfc_storm_drains_its_nic_and_no_host_its_leaf_pauses(tmp_path: Path, db_url: str) -> None:
    """The storm spreads over the leaf (fabricsim, after Guo et al. 2016): the storming NIC's
    host is drained; every host the leaf pauses is a watched victim, folded under the storm."""
    c = run(tmp_path, db_url, "pfc_storm@15s+1h:gpu-0003/mlx5_2")
    try:
        storms = c.get("/api/v1/incidents", params={"kind": "pfc_storm", "limit": 100}).json()["items"]
        (culprit,) = [i for i in storms if i["port"] == "gpu-0003/mlx5_2"]
        victims = [i for i in storms if i is not culprit]
        assert len(victims) >= 10 and all(i["port"].startswith("leaf-r2-000/") for i in victims)
        assert all(i["caused_by"] == culprit["id"] for i in victims)
        assert culprit["effects"] == sorted(i["id"] for i in victims)
        drains = {d["node"]: d for d in c.get("/api/v1/drain").json()}
        assert [n for n, d in drains.items() if d["action"] == "drain"] == ["gpu-0003"]
        watched = [d for d in drains.values() if d["action"] == "watch"]
        assert watched and all("the PFC storm from gpu-0003/mlx5_2" in d["reason"] for d in watched)
        assert c.get("/api/v1/incidents", params={"kind": "switch_failure"}).json()["items"] == []
    finally:
        c.__exit__(None, None, None)
