"""The shipped Alertmanager configuration, run for real: a switch failure inhibits that switch's
link alerts by the ``switch`` label, and nothing else.

graywire's drain engine raises the ``switch_failure`` incident from real link incidents on a
fabricsim fabric; the dispatcher posts everything through its Alertmanager client with the
fabric model behind the labels; Alertmanager's API v2 says which alerts it inhibits
(``status.inhibitedBy``). The configuration is ``deploy/alertmanager/alertmanager.yml`` as it
ships, so a change there that breaks the inhibition fails here.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.detectors.findings import Finding, Kind
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.alert_settings import AlertsSettings
from graywire.service.alerts.alertmanager import ALERTS_PATH, fingerprint, postable_alerts
from graywire.service.alerts.dispatcher import Dispatcher
from graywire.service.alerts.events import AlertEvent
from graywire.service.drain_engine import NETWORK_KIND, DrainEngine
from graywire.service.drain_policy import DrainPolicy
from graywire.service.models import AlertState
from graywire.service.store import IncidentStore
from tests.service.alerts.conftest import finding, running_alertmanager
from tests.service.alerts.test_dispatcher import cycle_until

SHIPPED = Path(__file__).resolve().parents[3] / "deploy" / "alertmanager" / "alertmanager.yml"
FABRIC = build_fabric(TopologySpec(hosts=64, gpus=8))  # 32 hosts a leaf; NIC mlx5_2 on rail 2's leaves


def downgrade(host: int) -> Finding:
    """A speed downgrade on host ``host``'s rail-2 NIC, as the link detector raises it."""
    nic = f"gpu-{host:04d}/mlx5_2"
    link = FABRIC.link_label(FABRIC.keys.index(nic))
    return finding(link, node=f"gpu-{host:04d}", port=nic, link=link)


def graywire_alerts(am: str, cluster: str = "eu-1") -> dict[str, dict[str, Any]]:
    """The cluster's graywire alerts in Alertmanager, by entity."""
    alerts = httpx.get(f"{am}/api/v2/alerts", timeout=5).json()
    return {a["labels"]["entity"]: a for a in alerts if a["labels"].get("cluster") == cluster}


def wait_until(done: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "Alertmanager did not get there in time"
        time.sleep(0.1)


def test_a_switch_failure_inhibits_that_switchs_link_alerts_by_the_switch_label(
    tmp_path: Path, sqlite_engine: Engine
) -> None:
    store = IncidentStore(sqlite_engine)
    drain = DrainEngine(sqlite_engine, store, FABRIC, DrainPolicy(), clock=lambda: datetime.now(UTC))
    drain.sync_inventory()
    # Four hosts' links on leaf-r2-000 at once, one on leaf-r2-001, and a compute straggler on
    # one of the four hosts (its own problem, not the switch's).
    on_switch = [downgrade(h) for h in (1, 2, 3, 4)]
    elsewhere = downgrade(40)
    straggler = finding("comm|rank 1", kind="nccl_straggler", severity="warning", node="gpu-0001", port=None,
                        evidence={"job": "train-42"})  # fmt: skip
    store.apply([*on_switch, elsewhere, straggler])
    drain.evaluate()
    (switch,) = store.list_incidents(kind=NETWORK_KIND)
    assert switch["entity"] == "leaf-r2-000"

    with running_alertmanager(tmp_path, SHIPPED.read_text()) as am:
        settings = AlertsSettings(
            external_url="https://graywire.example.com",
            labels={"cluster": "eu-1"},
            instance="graywire-eu-1:8000",
            alertmanager={"urls": [am], "refresh_interval": "1m"},
            retry={"initial_backoff": "0.1s", "max_backoff": "1s"},
        )
        dispatcher = Dispatcher(sqlite_engine, settings, fabric=FABRIC)
        cycle_until(dispatcher, lambda: len(graywire_alerts(am)) == 7)

        alerts = graywire_alerts(am)
        failure = alerts["leaf-r2-000"]
        assert failure["labels"]["alertname"] == "GraywireSwitchFailure"
        assert {k: failure["labels"][k] for k in ("switch", "rail", "cluster", "instance")} == {
            "switch": "leaf-r2-000",
            "rail": "2",
            "cluster": "eu-1",
            "instance": "graywire-eu-1:8000",
        }
        links = {f.entity for f in on_switch}
        assert {alerts[e]["labels"]["switch"] for e in links} == {"leaf-r2-000"}
        assert alerts[elsewhere.entity]["labels"]["switch"] == "leaf-r2-001"
        assert alerts["comm|rank 1"]["labels"]["job"] == "train-42"
        assert "switch" not in alerts["comm|rank 1"]["labels"]

        # Alertmanager inhibits the four links behind the failing switch, by that alert.
        def inhibited() -> dict[str, list[str]]:
            return {e: a["status"]["inhibitedBy"] for e, a in graywire_alerts(am).items()}

        wait_until(lambda: {e for e, by in inhibited().items() if by} == links)
        for entity, by in inhibited().items():
            state = graywire_alerts(am)[entity]["status"]["state"]
            if entity in links:
                assert by == [fingerprint(failure["labels"])] and state == "suppressed"
            else:  # the switch itself, the other switch's link, the straggler
                assert by == [] and state == "active"

        # equal: [cluster, switch]: the same switch name in another cluster is another switch.
        with Session(sqlite_engine) as session:
            sent = AlertEvent.from_dict(
                session.get(AlertState, (1, next(iter(dispatcher.destinations)))).event
            )
        twin = dataclasses.replace(sent, incident_id=9001, static_labels={"cluster": "eu-2"})
        body = postable_alerts([twin], settings.external_url, datetime.now(UTC), refresh_s=60)
        assert httpx.post(f"{am}{ALERTS_PATH}", json=body, timeout=5).status_code == 200
        wait_until(lambda: sent.entity in graywire_alerts(am, cluster="eu-2"))
        other = graywire_alerts(am, cluster="eu-2")[sent.entity]
        assert other["labels"]["switch"] == "leaf-r2-000" and other["status"]["inhibitedBy"] == []

        # Two of its hosts' links recover: the switch no longer fails as a whole (the drain
        # engine resolves its incident), and the two links still open are no longer inhibited.
        store.apply(
            [
                dataclasses.replace(f, status="cleared", time=f.time + timedelta(minutes=1))
                for f in on_switch[2:]
            ]
        )
        drain.evaluate()
        assert store.list_incidents(kind=NETWORK_KIND)[0]["status"] == "resolved"
        cycle_until(dispatcher, lambda: "leaf-r2-000" not in graywire_alerts(am))
        wait_until(lambda: not any(inhibited().values()))
        alerts = graywire_alerts(am)
        still = {f.entity for f in on_switch[:2]}
        assert still <= set(alerts) and all(alerts[e]["status"]["state"] == "active" for e in still)


def test_the_shipped_inhibit_rule_targets_exactly_the_port_link_and_path_kinds() -> None:
    """Which kinds a switch failure explains, written out, so a new kind is a decision."""
    config = yaml.safe_load(SHIPPED.read_text())
    (rule,) = [
        r for r in config["inhibit_rules"] if r["source_matchers"] == ['alertname="GraywireSwitchFailure"']
    ]
    assert rule["equal"] == ["cluster", "switch"]
    (matcher,) = rule["target_matchers"]
    pattern = re.fullmatch(r'alertname=~"(.+)"', matcher).group(1)
    targeted = {k.value for k in Kind if re.fullmatch(pattern, _alertname(k.value))}
    assert targeted == {
        "speed_downgrade", "width_downgrade", "link_flap", "ber_degradation", "pfc_storm", "ecn_hotspot",
        "xmit_wait_hotspot", "counter_saturated", "port_anomaly", "link_missing", "nccl_channel_slow",
        "nccl_path_slow", "nccl_hop_slow",
    }  # fmt: skip
    assert not re.fullmatch(pattern, "GraywireSwitchFailure")


def _alertname(kind: str) -> str:
    return "Graywire" + "".join(part.capitalize() for part in kind.split("_"))


def test_a_bad_link_inhibits_the_slow_nccl_rank_on_its_nic_by_the_port_label(
    tmp_path: Path, sqlite_engine: Engine
) -> None:
    """The cause pages, its effect is suppressed: what graywire's ``caused_by`` says, in
    Alertmanager's own terms."""
    store = IncidentStore(sqlite_engine)
    drain = DrainEngine(sqlite_engine, store, FABRIC, DrainPolicy(), clock=lambda: datetime.now(UTC))
    drain.sync_inventory()
    link = downgrade(3)
    nic = "gpu-0003/mlx5_2"
    on_nic = finding("world|AllReduce|29|rank 26", kind="nccl_channel_slow", severity="warning",
                     node="gpu-0003", port=nic, evidence={"job": "train-42"})  # fmt: skip
    other_nic = finding("world|AllReduce|29|rank 29", kind="nccl_channel_slow", severity="warning",
                        node="gpu-0003", port="gpu-0003/mlx5_5", evidence={"job": "train-42"})  # fmt: skip
    store.apply([link, on_nic, other_nic])
    drain.evaluate()  # records the root causes too
    caused = {i["entity"]: i["caused_by"] for i in store.list_incidents()}
    assert caused[on_nic.entity] is not None and caused[other_nic.entity] is None

    with running_alertmanager(tmp_path, SHIPPED.read_text()) as am:
        settings = AlertsSettings(
            labels={"cluster": "eu-1"},
            alertmanager={"urls": [am], "refresh_interval": "1m"},
            retry={"initial_backoff": "0.1s", "max_backoff": "1s"},
        )
        dispatcher = Dispatcher(sqlite_engine, settings, fabric=FABRIC)
        cycle_until(dispatcher, lambda: len(graywire_alerts(am)) == 3)

        def state() -> dict[str, str]:
            return {e: a["status"]["state"] for e, a in graywire_alerts(am).items()}

        wait_until(lambda: state()[on_nic.entity] == "suppressed")
        alerts = graywire_alerts(am)
        assert alerts[on_nic.entity]["status"]["inhibitedBy"] == [fingerprint(alerts[link.entity]["labels"])]
        assert state()[link.entity] == "active" and state()[other_nic.entity] == "active"
