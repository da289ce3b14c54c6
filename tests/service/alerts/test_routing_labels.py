"""Labels to route, group and inhibit by: static labels, instance, switch, rail, node, port, job."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.detectors.findings import Kind, job_of
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.alert_settings import AlertsSettings
from graywire.service.alerts import pagerduty, slack, webhook
from graywire.service.alerts.dispatcher import Dispatcher, alert_context, default_instance
from graywire.service.alerts.events import AlertContext, AlertEvent
from graywire.service.alerts.places import FabricPlaces
from graywire.service.alerts.sync import SyncTarget, sync_alerts
from graywire.service.config import load_settings
from graywire.service.models import OutboxMessage
from graywire.service.store import IncidentStore
from tests.service.alerts.conftest import T0, finding
from tests.service.alerts.test_payloads import EXTERNAL, FIRING

FABRIC = build_fabric(TopologySpec(hosts=64, gpus=8))  # 32 hosts a leaf, leaf-r<rail>-<group>


def link_of(port: str) -> str:
    return FABRIC.link_label(FABRIC.keys.index(port))


def peer_of(port: str) -> str:
    return FABRIC.keys[int(FABRIC.peer[FABRIC.keys.index(port)])]


@pytest.fixture(scope="module")
def places() -> FabricPlaces:
    return FabricPlaces(FABRIC)


# -- where an incident sits -------------------------------------------------------------------


def test_a_host_link_names_the_switch_at_its_far_end_and_its_rail(places: FabricPlaces) -> None:
    nic = "gpu-0001/mlx5_2"
    assert peer_of(nic).startswith("leaf-r2-000/")
    for kind in ("speed_downgrade", "ber_degradation", "link_flap", "counter_saturated"):
        p = places.place(kind, link_of(nic), "gpu-0001", nic, link_of(nic))
        assert (p.switch, p.rail) == ("leaf-r2-000", "2")
    # An NCCL channel on that NIC has no link label: the cable in the model says the same.
    assert places.place("nccl_channel_slow", "c|rank 1", "gpu-0001", nic, None).switch == "leaf-r2-000"


def test_a_switch_port_names_its_own_switch(places: FabricPlaces) -> None:
    down = peer_of("gpu-0001/mlx5_2")  # the leaf's port facing the host
    assert places.place("pfc_storm", down, "leaf-r2-000", down, None).switch == "leaf-r2-000"
    up = next(k for k in FABRIC.keys if k.startswith("leaf-r2-000/") and peer_of(k).startswith("spine-"))
    spine_port = peer_of(up)
    # A leaf-spine cable without a port: the lower tier, as the leaf's hosts sit behind it.
    p = places.place("link_flap", f"{up}<->{spine_port}", None, None, f"{up}<->{spine_port}")
    assert (p.switch, p.rail) == ("leaf-r2-000", "2")
    # The spine's end: the spine, on its peer leaf's rail (spine ports have none of their own).
    p = places.place("xmit_wait_hotspot", spine_port, spine_port.split("/")[0], spine_port, None)
    assert (p.switch, p.rail) == (spine_port.split("/")[0], "2")


def test_switch_failure_names_the_switch_and_the_rail_of_a_rail_leaf(places: FabricPlaces) -> None:
    p = places.place("switch_failure", "leaf-r5-001", "leaf-r5-001", None, None)
    assert (p.switch, p.rail) == ("leaf-r5-001", "5")
    spine = next(n for n in FABRIC.node_names if n.startswith("spine-"))
    assert places.place("switch_failure", spine, spine, None, None).rail is None  # serves every rail


def test_nccl_places(places: FabricPlaces) -> None:
    hop = places.place(
        "nccl_hop_slow", "c|hop 1->9", None, "gpu-0001/mlx5_2", "gpu-0001/mlx5_2<->gpu-0040/mlx5_2"
    )
    assert (hop.switch, hop.rail) == ("leaf-r2-000", "2")  # a NIC pair: the sender's leaf
    assert places.place("nccl_path_slow", "c|path leaf-r3-001", "leaf-r3-001", None, None).switch == (
        "leaf-r3-001"
    )
    straggler = places.place("nccl_straggler", "c|rank 1", "gpu-0001", None, None)
    assert (straggler.switch, straggler.rail) == (None, None)  # a host's own problem


def test_a_moved_cable_names_the_switch_it_is_on_now(places: FabricPlaces) -> None:
    nic = "gpu-0001/mlx5_2"
    wrong = "leaf-r3-000/p1"  # cabled there instead of leaf-r2-000
    p = places.place("cabling_changed", f"{nic}<->{wrong}", "gpu-0001", nic, f"{nic}<->{wrong}")
    assert (p.switch, p.rail) == ("leaf-r3-000", "2")


def test_ports_and_nodes_the_model_does_not_know_name_no_switch(places: FabricPlaces) -> None:
    p = places.place("speed_downgrade", "gpu-9999/mlx5_2", "gpu-9999", "gpu-9999/mlx5_2", None)
    assert (p.switch, p.rail) == (None, None)


def test_the_job_of_job_scoped_kinds() -> None:
    assert job_of("nccl_channel_slow", "comm|rank 3", {"job": "1234"}) == "1234"
    assert job_of("nccl_straggler", "comm|rank 3", {"job": 99}) == "99"
    assert job_of("nccl_job_slowdown", "train-7", {"job": None}) == "train-7"  # the entity is the job
    assert job_of("nccl_hop_slow", "comm|hop 1->2", {}) is None  # profiler dumps name no job
    assert job_of("speed_downgrade", "a<->b", {"job": "1234"}) is None  # not job-scoped
    assert job_of("uplink_imbalance", "leaf-r2-000", {"job": "train-7"}) == "train-7"  # a phase kind


# -- the labels and annotations an event carries --------------------------------------------

PLACED = dataclasses.replace(
    FIRING,
    switch="leaf-r2-000",
    rail="2",
    instance="graywire-eu1:8000",
    static_labels={"cluster": "eu-1", "team": "fabric"},
    runbook_url="https://git.example.com/graywire/docs/runbooks/speed_downgrade.md",
)


def test_labels_carry_static_labels_instance_switch_rail_node_and_port() -> None:
    assert PLACED.labels() == {
        "cluster": "eu-1",
        "team": "fabric",
        "alertname": "GraywireSpeedDowngrade",
        "severity": "critical",
        "kind": "speed_downgrade",
        "entity": "gpu-0002/mlx5_5",
        "incident_id": "42",
        "node": "gpu-0002",
        "port": "gpu-0002/mlx5_5",
        "switch": "leaf-r2-000",
        "rail": "2",
        "instance": "graywire-eu1:8000",
    }
    assert PLACED.annotations()["runbook_url"] == PLACED.runbook_url
    job = dataclasses.replace(PLACED, kind="nccl_channel_slow", job="1234")
    assert job.labels()["job"] == "1234"


def test_an_event_enqueued_before_these_fields_existed_still_loads() -> None:
    old = FIRING.to_dict()
    for name in ("switch", "rail", "job", "instance", "static_labels", "runbook_url", "acknowledged"):
        del old[name]
    loaded = AlertEvent.from_dict(old)
    assert loaded == FIRING and loaded.static_labels == {} and not loaded.acknowledged
    assert set(loaded.labels()) == {"alertname", "severity", "kind", "entity", "incident_id", "node", "port"}


def test_every_receiver_shows_the_runbook_and_the_place() -> None:
    assert webhook.payload(PLACED, "noc", EXTERNAL)["commonLabels"]["switch"] == "leaf-r2-000"
    pd = pagerduty.event(PLACED, "k", EXTERNAL)
    assert {"href": PLACED.runbook_url, "text": "runbook: speed_downgrade"} in pd["links"]
    assert pd["payload"]["custom_details"]["labels"]["cluster"] == "eu-1"
    text = str(slack.message(PLACED, EXTERNAL)["blocks"])
    assert f"<{PLACED.runbook_url}|speed_downgrade>" in text and "switch `leaf-r2-000`" in text
    # A runbook base that is a repository path is not a link: PagerDuty wants absolute hrefs.
    relative = dataclasses.replace(PLACED, runbook_url="docs/runbooks/speed_downgrade.md")
    assert len(pagerduty.event(relative, "k", EXTERNAL)["links"]) == 1
    assert "`docs/runbooks/speed_downgrade.md`" in str(slack.message(relative, EXTERNAL)["blocks"])


# -- configuration ---------------------------------------------------------------------------


def write(tmp_path: Path, alerts: dict) -> Path:
    path = tmp_path / "graywire.yaml"
    path.write_text(yaml.safe_dump({"alerts": alerts}))
    return path


def test_static_labels_instance_and_runbook_base_from_the_config(tmp_path: Path) -> None:
    alerts = load_settings(
        write(
            tmp_path,
            {
                "labels": {"cluster": "eu-1", "rack_row": 12},
                "instance": "graywire.eu-1:8000",
                "runbook_base_url": "https://git.example.com/graywire/-/blob/main/docs/runbooks/",
            },
        )
    ).alerts
    assert alerts.labels == {"cluster": "eu-1", "rack_row": "12"}
    context = alert_context(alerts, default_instance(alerts))
    assert context.instance == "graywire.eu-1:8000"
    assert context.runbook_url("ber_degradation") == (
        "https://git.example.com/graywire/-/blob/main/docs/runbooks/ber_degradation.md"
    )


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"cluster-name": "eu-1"}, "label 'cluster-name' is not a valid label name"),
        ({"1st": "x"}, "label '1st' is not a valid label name"),
        ({"__meta": "x"}, "not starting with __"),
        ({"severity": "page"}, "label severity is set by graywire on every alert and cannot be overridden"),
        ({"switch": "leaf-1"}, "label switch is set by graywire"),
        ({"instance": "x"}, "set alerts.instance instead"),
        ({"cluster": ""}, "label cluster: an empty value means no label"),
        ({"cluster": ["eu-1"]}, "label cluster: the value must be a string or a number"),
    ],
)
def test_bad_static_labels_are_named_in_the_error(tmp_path: Path, labels: dict, message: str) -> None:
    with pytest.raises(ValueError, match="invalid configuration") as err:
        load_settings(write(tmp_path, {"labels": labels}))
    assert "alerts.labels" in str(err.value) and message in str(err.value)


def test_bad_runbook_base_and_instance_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"alerts\.runbook_base_url"):
        load_settings(write(tmp_path, {"runbook_base_url": "ftp://docs.example.com"}))
    with pytest.raises(ValueError, match=r"alerts\.instance"):
        load_settings(write(tmp_path, {"instance": "two words"}))


def test_the_default_instance_is_the_external_host_else_hostname_and_port() -> None:
    assert default_instance(AlertsSettings(external_url="https://u:p@graywire.example.com:8443/x")) == (
        "graywire.example.com:8443"
    )
    # Not the listen address (often 0.0.0.0): this machine's name, with the service's port.
    assert default_instance(AlertsSettings(), "http://0.0.0.0:8000") == f"{socket.gethostname()}:8000"
    assert default_instance(AlertsSettings(instance="gw-1"), "http://0.0.0.0:8000") == "gw-1"


# -- through the sync: one label set from trigger to resolve --------------------------------


def test_the_sync_enqueues_placed_events_whose_labels_stay_until_the_resolve(
    store: IncidentStore, engine: Engine
) -> None:
    nic = "gpu-0001/mlx5_2"
    context = AlertContext(labels={"cluster": "eu-1"}, instance="gw:8000", places=FabricPlaces(FABRIC))
    am = SyncTarget("am", "warning", refresh_s=60, context=context)
    link = {"node": "gpu-0001", "port": nic, "link": link_of(nic)}
    store.apply([finding(link_of(nic), t=0, kind="ber_degradation", severity="warning", **link)])
    sync_alerts(engine, [am], T0.replace(second=1))
    # Later findings escalate and carry different evidence; the place does not move.
    store.apply([finding(link_of(nic), t=30, kind="ber_degradation", **link)])
    sync_alerts(engine, [am], T0.replace(second=31))
    store.apply([finding(link_of(nic), "cleared", t=60, kind="ber_degradation", **link)])
    sync_alerts(engine, [am], T0.replace(minute=1, second=1))
    with Session(engine) as session:
        sent = [
            (m.action, AlertEvent.from_dict(m.event).labels())
            for m in session.scalars(sa.select(OutboxMessage).order_by(OutboxMessage.id))
        ]
    assert [a for a, _ in sent] == ["trigger", "resolve", "trigger", "resolve"]  # severity rose
    first = sent[0][1]
    assert {k: first[k] for k in ("cluster", "instance", "switch", "rail", "node", "port")} == {
        "cluster": "eu-1",
        "instance": "gw:8000",
        "switch": "leaf-r2-000",
        "rail": "2",
        "node": "gpu-0001",
        "port": nic,
    }
    assert sent[1][1] == first  # the resolve retires exactly what was posted
    assert sent[3][1] == sent[2][1] == {**first, "severity": "critical"}


def test_the_dispatcher_places_incidents_on_the_fabric_it_is_given(engine: Engine) -> None:
    settings = AlertsSettings(
        labels={"cluster": "eu-1"}, alertmanager={"urls": ["http://am:9093"]}, receivers=[]
    )
    dispatcher = Dispatcher(engine, settings, fabric=FABRIC, default_external_url="http://0.0.0.0:8000")
    (dest,) = dispatcher.destinations.values()
    context = dest.sync.context
    assert context.instance == f"{socket.gethostname()}:8000"
    assert context.labels == {"cluster": "eu-1"}
    assert context.places is not None
    assert context.places.place("switch_failure", "leaf-r1-000", "leaf-r1-000", None, None).switch == (
        "leaf-r1-000"
    )


def test_every_kind_is_either_job_scoped_or_not_on_purpose() -> None:
    nccl = {k.value for k in Kind if k.value.startswith("nccl_")}
    assert {k for k in nccl if job_of(k, "job-entity", {"job": "7"})} == nccl
