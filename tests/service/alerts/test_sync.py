"""The sync step: incidents in the database become trigger, refresh and resolve messages."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.detectors.findings import Finding
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.alerts.inhibit import IncidentPlace, inhibited_ids
from graywire.service.alerts.sync import SyncTarget, sync_alerts
from graywire.service.drain_engine import NETWORK_KIND, DrainEngine
from graywire.service.drain_policy import DrainPolicy
from graywire.service.models import AlertState, LateEpisode, OutboxMessage, Silence
from graywire.service.store import IncidentStore
from tests.service.alerts.conftest import T0, finding

PD = SyncTarget("pd", "warning")
AM = SyncTarget("am", "warning", refresh_s=60)


def messages(engine: Engine, receiver: str | None = None) -> list[tuple[str, int, str, str]]:
    """(receiver, incident id, action, event status) in outbox order."""
    query = sa.select(OutboxMessage).order_by(OutboxMessage.id)
    if receiver is not None:
        query = query.where(OutboxMessage.receiver == receiver)
    with Session(engine) as session:
        return [(m.receiver, m.incident_id, m.action, m.event["status"]) for m in session.scalars(query)]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_open_then_resolve_enqueues_one_trigger_and_one_resolve(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    assert sync_alerts(engine, [PD], at(1)).triggered == 1
    assert sync_alerts(engine, [PD], at(2)).triggered == 0  # nothing new: nothing enqueued
    store.apply([finding(t=10), finding(status="cleared", t=20)])
    assert sync_alerts(engine, [PD], at(21)).resolved == 1
    sync_alerts(engine, [PD], at(22))
    assert messages(engine) == [("pd", 1, "trigger", "firing"), ("pd", 1, "resolve", "resolved")]


def test_each_receiver_gets_its_own_messages_and_severity_floor(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(entity="a", severity="info"), finding(entity="b", severity="critical")])
    sync_alerts(engine, [PD, SyncTarget("all", "info")], at(1))
    assert messages(engine, "pd") == [("pd", 2, "trigger", "firing")]
    assert [m[1] for m in messages(engine, "all")] == [1, 2]


def test_resolve_that_happened_before_the_first_sync_is_not_paged(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0), finding(status="cleared", t=5)])
    sync_alerts(engine, [PD], at(6))
    assert messages(engine) == []


def test_an_episode_stored_after_it_ended_is_paged_late_once_per_receiver(
    store: IncidentStore, engine: Engine
) -> None:
    """The database was away while it fired and cleared: both findings are stored in one batch."""
    store.apply([finding(t=0), finding(status="cleared", t=5)], stored_late_since=at(-1))
    result = sync_alerts(engine, [PD, AM], at(30))
    assert result.late == 2
    # PagerDuty and the webhooks: the trigger, then its resolve. Alertmanager: a firing alert
    # that expires by itself (it would drop one first posted already resolved).
    assert messages(engine, "pd") == [("pd", 1, "trigger", "firing"), ("pd", 1, "resolve", "resolved")]
    assert messages(engine, "am") == [("am", 1, "trigger", "firing")]
    assert sync_alerts(engine, [PD, AM], at(40)).triggered == 0  # told once
    assert sync_alerts(engine, [PD, AM], at(40 + 2 * AM.refresh_s)).refreshed == 0  # nor refreshed
    with Session(engine) as session:
        trigger, resolve = session.scalars(
            sa.select(OutboxMessage).where(OutboxMessage.receiver == "pd").order_by(OutboxMessage.id)
        )
    assert trigger.event["started_at"] == at(0).isoformat() and trigger.event["resolved_at"] is None
    assert resolve.event["resolved_at"] == at(5).isoformat()
    assert trigger.event["stored_late"]["cleared_at"] == at(5).isoformat()
    assert trigger.event["stored_late"]["unstored_since"] == at(-1).isoformat()


def test_late_episodes_come_in_order_between_the_episodes_around_them(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    # While the database is away: cleared, fired and cleared again, and fired once more.
    held = [finding(status="cleared", t=5), finding(t=8), finding(status="cleared", t=12), finding(t=15)]
    store.apply(held, stored_late_since=at(4))
    sync_alerts(engine, [PD], at(20))
    assert [(m[2], m[3]) for m in messages(engine)] == [
        ("trigger", "firing"),  # episode 0, before the outage
        ("resolve", "resolved"),
        ("trigger", "firing"),  # episode 1, over while the database was away
        ("resolve", "resolved"),
        ("trigger", "firing"),  # episode 2, open now
    ]
    with Session(engine) as session:
        episodes = [m.event["reopen_count"] for m in session.scalars(sa.select(OutboxMessage))]
        state = session.get(AlertState, (1, "pd"))
    assert episodes == [0, 0, 1, 1, 2]
    assert state is not None and (state.state, state.episode) == ("firing", 2)


def test_a_late_episode_below_a_receivers_floor_is_not_paged_there(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(severity="info"), finding(status="cleared", t=5)], stored_late_since=at(-1))
    assert sync_alerts(engine, [PD, SyncTarget("all", "info")], at(10)).late == 1
    assert messages(engine, "pd") == []
    assert [m[2] for m in messages(engine, "all")] == ["trigger", "resolve"]


def test_late_episodes_are_forgotten_after_the_retention(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(), finding(status="cleared", t=5)], stored_late_since=at(-1))
    with Session(engine) as session:
        stored_at = session.scalars(sa.select(LateEpisode.stored_at)).one()
    sync_alerts(engine, [PD], stored_at + timedelta(hours=2), retention_s=3600)
    # A receiver configured after that is not paged for it.
    assert sync_alerts(engine, [SyncTarget("new", "warning")], stored_at + timedelta(hours=3)).late == 0


def test_reopen_between_syncs_resolves_then_triggers_under_the_same_incident(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    store.apply([finding(status="cleared", t=5), finding(t=8)])  # both before the next sync
    sync_alerts(engine, [PD], at(9))
    assert messages(engine) == [
        ("pd", 1, "trigger", "firing"),
        ("pd", 1, "resolve", "resolved"),
        ("pd", 1, "trigger", "firing"),
    ]
    with Session(engine) as session:
        state = session.get(AlertState, (1, "pd"))
        assert state is not None and state.state == "firing" and state.episode == 1


def test_alertmanager_refreshes_firing_alerts_without_piling_up(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [AM], at(0))
    assert sync_alerts(engine, [AM], at(59)).refreshed == 0
    # The trigger is still pending (Alertmanager down): no refresh is stacked behind it.
    assert sync_alerts(engine, [AM], at(60)).refreshed == 0
    with Session(engine) as session, session.begin():
        session.execute(sa.update(OutboxMessage).values(status="delivered", delivered_at=at(61)))
    assert sync_alerts(engine, [AM], at(61)).refreshed == 1
    assert sync_alerts(engine, [AM], at(62)).refreshed == 0
    assert [m[2] for m in messages(engine)] == ["trigger", "refresh"]


def test_escalation_relabels_for_alertmanager_and_repages_others(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(t=0, severity="warning")])
    sync_alerts(engine, [AM, PD], at(1))
    store.apply([finding(t=10, severity="critical")])
    sync_alerts(engine, [AM, PD], at(11))
    with Session(engine) as session:
        rows = list(session.scalars(sa.select(OutboxMessage).order_by(OutboxMessage.id)))
    am = [(m.action, m.event["severity"]) for m in rows if m.receiver == "am"]
    pd = [(m.action, m.event["severity"]) for m in rows if m.receiver == "pd"]
    # Alertmanager knows alerts by label set: the warning one is ended, the critical one posted.
    assert am == [("trigger", "warning"), ("resolve", "warning"), ("trigger", "critical")]
    assert pd == [("trigger", "warning"), ("trigger", "critical")]


def test_acknowledged_incident_keeps_firing(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    with Session(engine) as session, session.begin():
        session.execute(sa.text("UPDATE incidents SET status = 'acknowledged'"))
    assert sync_alerts(engine, [PD], at(2)).resolved == 0


def test_delivered_messages_are_pruned_after_retention(store: IncidentStore, engine: Engine) -> None:
    store.apply([finding(t=0)])
    sync_alerts(engine, [PD], at(1))
    with Session(engine) as session, session.begin():
        session.execute(sa.update(OutboxMessage).values(status="delivered", delivered_at=at(1)))
    assert sync_alerts(engine, [PD], at(100), retention_s=3600).pruned == 0
    assert sync_alerts(engine, [PD], at(3602), retention_s=3600).pruned == 1


def test_a_silenced_incident_pages_nobody_until_the_silence_expires(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([finding(entity="muted", severity="warning"), finding(entity="loud")])
    with Session(engine) as session, session.begin():
        session.add(
            Silence(
                kind="speed_downgrade",
                entity="muted",
                reason="cable swap tonight",
                created_by="alice",
                created_at=at(0),
                expires_at=at(100),
            )
        )
    sync_alerts(engine, [PD], at(1))
    assert [m[1] for m in messages(engine)] == [2]
    # Escalating a silenced incident pages nobody either.
    store.apply([finding(entity="muted", severity="critical", t=10)])
    assert sync_alerts(engine, [PD], at(11)).triggered == 0
    # Once the silence expires the incident, still open, is paged.
    assert sync_alerts(engine, [PD], at(101)).triggered == 1
    assert [m[1] for m in messages(engine)] == [2, 1]


# -- inhibition for direct receivers --------------------------------------------------------

DIRECT = SyncTarget("pd", "warning", inhibit=True, group_wait_s=30)
CHAT = dataclasses.replace(DIRECT, name="chat")
HOSTS = [f"gpu-{i:04d}" for i in range(1, 5)]


def host_link(host: str, switch: str = "leaf-03", t: float = 0, **kwargs: Any) -> Finding:
    """A link incident as the link detectors raise it: port key ``node/port``, link ``a<->b``."""
    port = f"{host}/mlx5_3"
    values: dict[str, Any] = {"node": host, "port": port, "link": f"{port}<->{switch}/p{host[-1]}"}
    return finding(port, t=t, **{**values, **kwargs})


def switch_failure(switch: str = "leaf-03", status: str = "firing", t: float = 10) -> Finding:
    """The drain engine's one network incident for a switch failing as a whole."""
    return finding(
        switch,
        status,
        t,
        kind=NETWORK_KIND,
        node=switch,
        port=None,
        detector="drain_policy/1",
        evidence={"hosts": HOSTS, "incident_ids": []},
    )


def triggered(engine: Engine, receiver: str) -> list[int]:
    return [m[1] for m in messages(engine, receiver) if m[2] == "trigger"]


def test_a_failing_switch_pages_direct_receivers_once_and_alertmanager_gets_everything(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([host_link(h) for h in HOSTS])  # incidents 1-4, behind leaf-03
    # An NCCL channel on a host port carries no link label: its far end is known from the link incident.
    store.apply([finding("gpu-0001/ch3", kind="nccl_channel_slow", node="gpu-0001", port="gpu-0001/mlx5_3")])
    store.apply([host_link("gpu-0009", switch="leaf-07")])  # 6: another switch
    sync_alerts(engine, [AM, DIRECT, CHAT], at(5))
    assert triggered(engine, "am") == [1, 2, 3, 4, 5, 6]
    assert triggered(engine, "pd") == triggered(engine, "chat") == []  # all within group_wait
    store.apply([switch_failure(t=10)])  # 7
    sync_alerts(engine, [AM, DIRECT, CHAT], at(15))
    assert triggered(engine, "am") == [1, 2, 3, 4, 5, 6, 7]
    assert triggered(engine, "pd") == []
    result = sync_alerts(engine, [AM, DIRECT, CHAT], at(41))
    # The other switch's link, and the switch once; its five host incidents are inhibited.
    assert triggered(engine, "pd") == triggered(engine, "chat") == [6, 7]
    assert result.inhibited == 2 * 5
    sync_alerts(engine, [AM, DIRECT, CHAT], at(100))
    assert triggered(engine, "pd") == triggered(engine, "chat") == [6, 7]  # exactly once
    assert triggered(engine, "am") == [1, 2, 3, 4, 5, 6, 7]
    with Session(engine) as session:
        assert session.get(AlertState, (1, "pd")) is None  # nothing was written for inhibited ones


def test_incidents_still_open_when_the_switch_recovers_are_paged(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([host_link(h) for h in HOSTS])  # 1-4
    store.apply([switch_failure(t=10)])  # 5
    sync_alerts(engine, [DIRECT], at(41))
    assert triggered(engine, "pd") == [5]
    store.apply([host_link("gpu-0001", status="cleared", t=50)])  # recovered under the switch incident
    store.apply([switch_failure(status="cleared", t=60)])
    sync_alerts(engine, [DIRECT], at(61))
    assert messages(engine, "pd")[1:] == [  # in incident order, as every sync enqueues
        ("pd", 2, "trigger", "firing"),
        ("pd", 3, "trigger", "firing"),
        ("pd", 4, "trigger", "firing"),
        ("pd", 5, "resolve", "resolved"),
    ]


def test_a_link_paged_before_the_switch_incident_is_left_to_resolve_normally(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([host_link("gpu-0001")])
    sync_alerts(engine, [DIRECT], at(31))
    store.apply(
        [host_link(h, t=40) for h in HOSTS],
    )
    store.apply([switch_failure(t=45)])  # 5
    sync_alerts(engine, [DIRECT], at(80))
    store.apply([host_link("gpu-0001", status="cleared", t=90)])
    sync_alerts(engine, [DIRECT], at(91))
    assert messages(engine, "pd") == [
        ("pd", 1, "trigger", "firing"),
        ("pd", 5, "trigger", "firing"),
        ("pd", 1, "resolve", "resolved"),
    ]


def test_group_wait_zero_sends_at_once_and_an_old_incident_pages_without_a_switch(
    store: IncidentStore, engine: Engine
) -> None:
    store.apply([host_link("gpu-0001")])
    assert sync_alerts(engine, [DIRECT], at(29)).held == 1
    assert (
        sync_alerts(engine, [dataclasses.replace(DIRECT, name="now", group_wait_s=0)], at(1)).triggered == 1
    )
    assert sync_alerts(engine, [DIRECT], at(30)).triggered == 1  # group_wait old: paged, no switch needed
    assert triggered(engine, "pd") == [1] and triggered(engine, "now") == [1]


def test_inhibition_reads_the_switch_evidence_link_ends_and_ports() -> None:
    places = [
        IncidentPlace(
            1, "speed_downgrade", "gpu-1/mlx5_0", "gpu-1", "gpu-1/mlx5_0", "gpu-1/mlx5_0<->leaf-1/p1"
        ),
        IncidentPlace(2, "nccl_channel_slow", "gpu-1/ch0", "gpu-1", "gpu-1/mlx5_0", None),
        IncidentPlace(3, "congestion", "leaf-1/p9", "leaf-1", "leaf-1/p9", None),  # on the switch itself
        IncidentPlace(4, "link_flap", "gpu-2/mlx5_0", "gpu-2", "gpu-2/mlx5_0", None),  # counted by the policy
        IncidentPlace(5, "link_flap", "gpu-2/mlx5_1", "gpu-2", "gpu-2/mlx5_1", "gpu-2/mlx5_1<->leaf-2/p1"),
        IncidentPlace(6, NETWORK_KIND, "leaf-1", "leaf-1", None, None),
    ]
    assert inhibited_ids(places, {"leaf-1": {"hosts": ["gpu-1", "gpu-2"], "incident_ids": [4]}}) == {
        1,
        2,
        3,
        4,
    }
    assert inhibited_ids(places, {}) == set()


def test_the_drain_engines_switch_incident_inhibits_the_links_it_counted(
    store: IncidentStore, engine: Engine
) -> None:
    """End to end with the real drain engine: its evidence names the host incidents it blamed."""
    fabric = build_fabric(TopologySpec(hosts=64, gpus=8))  # 32 hosts per leaf, 8 rails
    drain = DrainEngine(engine, store, fabric, DrainPolicy(), clock=lambda: at(10))
    drain.sync_inventory()

    def downgrade(host: int) -> Finding:
        return finding(f"gpu-{host:04d}/mlx5_2", node=f"gpu-{host:04d}", port=f"gpu-{host:04d}/mlx5_2")

    store.apply([downgrade(h) for h in (1, 2, 3, 4)] + [downgrade(40)])  # 1-4 on leaf-r2-000, 5 not
    drain.evaluate()
    (switch,) = store.list_incidents(kind=NETWORK_KIND)
    assert switch["entity"] == "leaf-r2-000"
    sync_alerts(engine, [AM, DIRECT], at(41))
    assert triggered(engine, "am") == [1, 2, 3, 4, 5, switch["id"]]
    assert triggered(engine, "pd") == [5, switch["id"]]
