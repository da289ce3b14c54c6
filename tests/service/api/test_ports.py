"""``/api/v1/ports``, ``/api/v1/links`` and ``/api/v1/fabric/grid`` over a live service.

fabricsim (8 hosts: 64 NICs, 8 leaves of 16 ports, one spine of 64) with a silent 800G→400G
downgrade on gpu-0002/mlx5_3 from t+15 s to t+55 s; polls every 10 s of simulated time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.base import ScrapeResult, failed
from graywire.collectors.schemas import record_kind
from graywire.detectors.findings import Finding
from graywire.service.app import create_app
from graywire.service.config import load_settings
from graywire.service.simulated import FabricSimCollector, FabricSimSource

PORT = "gpu-0002/mlx5_3"
LEAF_PORT = "leaf-r3-000/p3"
LINK = f"{PORT}<->{LEAF_PORT}"


def make_client(tmp_path: Path, db_url: str, faults: str, **kw: Any) -> TestClient:
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        database_url=db_url,
        poll_interval="10s",
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 2, "faults": faults}],
        **kw,
    )
    return TestClient(create_app(settings, run_loop=False))


def tick(client: TestClient, n: int) -> None:
    for _ in range(n):
        client.app.state.runner.tick()  # type: ignore[attr-defined]


@pytest.fixture
def client(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    with make_client(tmp_path, db_url, f"speed_downgrade@15s+40s:{PORT}") as c:
        tick(c, 4)  # polls at 0..30 s: the downgrade is open
        yield c


def test_a_downgraded_port_reads_below_expected_and_is_critical(client: TestClient) -> None:
    body = client.get("/api/v1/ports", params={"health": "critical"}).json()
    assert (body["total"], body["count"]) == (2, 2)
    by_key = {p["key"]: p for p in body["items"]}
    assert set(by_key) == {PORT, LEAF_PORT}  # a failing cable quarantines both ends
    p = by_key[PORT]
    assert (p["node"], p["role"], p["switch"], p["peer"], p["link"], p["rail"]) == (
        "gpu-0002", "host", "leaf-r3-000", LEAF_PORT, LINK, 3,
    )  # fmt: skip
    assert (p["speed_bps"], p["expected_speed_bps"]) == (400 * 10**9, 800 * 10**9)
    assert (p["width"], p["expected_width"], p["degraded"]) == (4, 4, True)
    assert (p["state"], p["phys_state"], p["logical_state"], p["stale"]) == ("up", 5, 4, False)
    assert p["last_update"] is not None
    (incident,) = client.get("/api/v1/incidents", params={"kind": "speed_downgrade"}).json()["items"]
    assert p["incident_ids"] == [incident["id"]] == by_key[LEAF_PORT]["incident_ids"]

    detail = client.get(f"/api/v1/ports/{PORT}").json()
    assert detail["key"] == PORT and detail["health"] == "critical"
    (inc,) = [i for i in detail["incidents"] if i["kind"] == "speed_downgrade"]
    assert inc["evidence"]["actual"][PORT]["speed_bps"] == 400 * 10**9
    healthy = client.get("/api/v1/ports/gpu-0001/mlx5_3").json()
    assert (healthy["health"], healthy["incident_ids"], healthy["incidents"], healthy["degraded"]) == (
        "ok", [], [], False,
    )  # fmt: skip
    assert healthy["speed_bps"] == 800 * 10**9


PORT_FILTERS: list[tuple[dict[str, Any], int]] = [
    ({}, 256),
    ({"node": "gpu-0002"}, 8),
    ({"switch": "leaf-r3-000"}, 16 + 8 + 8),  # its ports, and the NICs and spine ports cabled to them
    ({"switch": "spine-0000"}, 64 + 64),
    ({"role": "leaf"}, 128),
    ({"role": "spine"}, 64),
    ({"rail": 3, "role": "host"}, 8),
    ({"health": ["warning", "critical"]}, 2),
    ({"health": "ok"}, 254),
    ({"kind": "speed_downgrade"}, 2),
    ({"kind": "no_such_kind"}, 0),
    ({"degraded": True}, 2),
    ({"state": "up"}, 256),
    ({"state": "down"}, 0),
    ({"stale": True}, 0),
    ({"node": "gpu-0002", "health": "critical"}, 1),
]


def test_port_filters(client: TestClient) -> None:
    for params, total in PORT_FILTERS:
        body = client.get("/api/v1/ports", params=params).json()
        assert (body["total"], body["count"]) == (total, min(total, 500)), params


def test_ports_page_in_a_stable_order(client: TestClient) -> None:
    first = client.get("/api/v1/ports", params={"limit": 100}).json()
    last = client.get("/api/v1/ports", params={"limit": 100, "offset": 200}).json()
    assert (first["count"], last["count"], last["total"], last["offset"]) == (100, 56, 256, 200)
    keys = [p["key"] for p in first["items"]] + [p["key"] for p in last["items"]]
    assert len(set(keys)) == 156
    assert first["items"][0]["key"] == "gpu-0000/mlx5_0"
    past = client.get("/api/v1/ports", params={"offset": 1000}).json()
    assert (past["count"], past["total"], past["items"]) == (0, 256, [])


def test_a_page_is_computed_once_per_published_state_and_database_change(client: TestClient) -> None:
    """Clients polling one page share one computation until a poll publishes or a write
    commits; then the next answer is the new state's, never an older one."""
    cache = client.app.state.services.cache  # type: ignore[attr-defined]
    params = {"health": "critical"}
    first = client.get("/api/v1/ports", params=params).json()
    hits = cache.hits
    assert [client.get("/api/v1/ports", params=params).json() for _ in range(3)] == [first] * 3
    assert cache.hits == hits + 3
    tick(client, 5)  # the downgrade ends, its incident closes: a new state and a database write
    after = client.get("/api/v1/ports", params=params).json()
    assert {p["key"] for p in first["items"]} >= {PORT, LEAF_PORT}
    assert PORT not in {p["key"] for p in after["items"]}
    items = client.get("/api/v1/ports", params={"node": "gpu-0002"}).json()["items"]
    p = next(p for p in items if p["key"] == PORT)
    assert (p["speed_bps"], p["degraded"]) == (800 * 10**9, False)


BAD_FILTERS: list[tuple[str, dict[str, Any], str]] = [
    ("/api/v1/ports", {"health": "sick"}, "health"),
    ("/api/v1/ports", {"role": "router"}, "role"),
    ("/api/v1/ports", {"state": "flapping"}, "state"),
    ("/api/v1/ports", {"rail": -1}, "rail"),
    ("/api/v1/ports", {"limit": 0}, "limit"),
    ("/api/v1/ports", {"limit": 5001}, "limit"),
    ("/api/v1/ports", {"offset": -1}, "offset"),
    ("/api/v1/ports", {"stale": "perhaps"}, "stale"),
    ("/api/v1/ports", {"node": ""}, "node"),
    ("/api/v1/links", {"health": "sick"}, "health"),
    ("/api/v1/links", {"limit": "ten"}, "limit"),
    ("/api/v1/links", {"switch": ""}, "switch"),
]

#: Filters naming what the model does not have: no such node, so a 404 that says so.
ABSENT_FILTERS: list[tuple[str, dict[str, Any], str]] = [
    ("/api/v1/ports", {"node": "gpu-9999"}, "gpu-9999"),
    ("/api/v1/ports", {"switch": "gpu-0001"}, "it is a host"),
    ("/api/v1/ports", {"switch": "nope"}, "not in the fabric model"),
    ("/api/v1/links", {"node": "gpu-9999"}, "gpu-9999"),
    ("/api/v1/links", {"switch": "gpu-0001"}, "it is a host"),
]


def test_bad_filters_are_422_naming_the_problem(client: TestClient) -> None:
    for path, params, needle in BAD_FILTERS:
        r = client.get(path, params=params)
        assert r.status_code == 422, (path, params)
        assert needle in str(r.json()["detail"]), (path, params)


def test_filters_naming_what_the_model_lacks_are_404(client: TestClient) -> None:
    for path, params, needle in ABSENT_FILTERS:
        r = client.get(path, params=params)
        assert r.status_code == 404, (path, params)
        assert needle in str(r.json()["detail"]), (path, params)


UNKNOWN = [
    "/api/v1/ports/gpu-9999/mlx5_0",
    "/api/v1/ports/gpu-0002",
    "/api/v1/links/gpu-9999/mlx5_0",
    f"/api/v1/links/{PORT}<->leaf-r4-000/p3",  # both ports exist, but not on one cable
    "/api/v1/links/no-such-link",
]


def test_unknown_names_are_404(client: TestClient) -> None:
    for path in UNKNOWN:
        r = client.get(path)
        assert r.status_code == 404, path
        assert "fabric model" in r.json()["detail"], path


def test_links_with_both_ends_and_their_health(client: TestClient) -> None:
    body = client.get("/api/v1/links", params={"kind": "speed_downgrade"}).json()
    assert body["total"] == 1
    (link,) = body["items"]
    assert (link["link"], link["health"], link["kinds"]) == (LINK, "critical", ["speed_downgrade"])
    assert (link["a"]["key"], link["b"]["key"]) == (PORT, LEAF_PORT)
    assert link["a"]["speed_bps"] == link["b"]["speed_bps"] == 400 * 10**9
    assert client.get("/api/v1/links", params={"health": "ok"}).json()["total"] == 127
    assert client.get("/api/v1/links", params={"node": "gpu-0002"}).json()["total"] == 8
    assert client.get("/api/v1/links", params={"switch": "leaf-r3-000"}).json()["total"] == 16
    page = client.get("/api/v1/links", params={"limit": 50, "offset": 100}).json()
    assert (page["count"], page["total"]) == (28, 128)

    by_label = client.get(f"/api/v1/links/{LINK}").json()
    by_port = client.get(f"/api/v1/links/{LEAF_PORT}").json()
    assert by_label["link"] == by_port["link"] == LINK
    assert [i["kind"] for i in by_label["incidents"]] == ["speed_downgrade"]
    assert by_label["incident_ids"] == [by_label["incidents"][0]["id"]]


def test_grid_has_a_cell_per_switch_port_coloured_by_its_cable(client: TestClient) -> None:
    grid = client.get("/api/v1/fabric/grid").json()
    assert [r["node"] for r in grid["rows"]] == [f"leaf-r{r}-000" for r in range(8)] + ["spine-0000"]
    assert sum(len(r["cells"]) for r in grid["rows"]) == 128 + 64
    assert (grid["ports"], grid["links"], grid["polls"], grid["degraded"]) == (256, 128, 4, 2)
    assert grid["health"] == {"ok": 254, "warning": 0, "critical": 2, "no_data": 0}
    cells = {c[0]: c for r in grid["rows"] for c in r["cells"]}
    _, peer, health, flags = cells[LEAF_PORT]
    assert (peer, health, flags) == (PORT, 2, grid["flags"]["degraded"])
    assert cells["leaf-r3-000/p9"][1].startswith("spine-0000/")  # an uplink names its spine port
    assert {c[2] for k, c in cells.items() if k != LEAF_PORT} == {0}


def test_health_clears_when_the_incident_resolves(client: TestClient) -> None:
    tick(client, 5)  # the fault ends at 55 s; the detector closes after 2 good polls
    assert (
        client.get("/api/v1/incidents", params={"status": "open", "kind": "speed_downgrade"}).json()["items"]
        == []
    )
    p = client.get(f"/api/v1/ports/{PORT}").json()
    assert (p["speed_bps"], p["degraded"]) == (800 * 10**9, False)
    assert "speed_downgrade" not in {i["kind"] for i in p["incidents"]}
    assert client.get("/api/v1/links", params={"kind": "speed_downgrade"}).json()["total"] == 0


def test_before_the_first_poll_every_port_is_unknown(tmp_path: Path, db_url: str) -> None:
    with make_client(tmp_path, db_url, "none") as c:
        p = c.get(f"/api/v1/ports/{PORT}").json()
        assert (p["state"], p["speed_bps"], p["width"], p["last_update"], p["health"]) == (
            "unknown",
            None,
            None,
            None,
            "no_data",
        )  # fmt: skip; unknown is not ok
        assert p["expected_speed_bps"] == 800 * 10**9
        grid = c.get("/api/v1/fabric/grid").json()
        assert grid["polls"] == 0 and grid["last_poll"] is None
        no_data = grid["flags"]["no_data"]
        assert all(cell[3] & no_data for r in grid["rows"] for cell in r["cells"])
        assert grid["health"]["ok"] == 0 and grid["health"]["no_data"] == grid["ports"]
        assert c.get("/api/v1/ports", params={"health": "ok"}).json()["total"] == 0


def test_per_port_metrics_off_still_serves_the_latest_readings(tmp_path: Path, db_url: str) -> None:
    with make_client(tmp_path, db_url, "none", metrics={"per_port": False}) as c:
        tick(c, 1)
        assert c.get(f"/api/v1/ports/{PORT}").json()["speed_bps"] == 800 * 10**9
        assert "graywire_port_speed_bytes_per_second" not in c.get("/metrics").text


class FailsAfterFirst:
    """fabricsim answering once, then failing like a broken source does."""

    def __init__(self, inner: FabricSimCollector) -> None:
        self.inner, self.n = inner, 0
        self.source, self.target = inner.source, inner.target

    async def aclose(self) -> None:
        pass

    async def scrape(self) -> ScrapeResult:
        self.n += 1
        res = await self.inner.scrape()
        return res if self.n == 1 else failed(self.source, self.target, "connection refused")


def test_ports_of_a_failing_source_are_stale(tmp_path: Path, db_url: str) -> None:
    settings = load_settings(
        None, data_dir=tmp_path / "data", database_url=db_url, archive={"enabled": False}
    )
    sim = FabricSimCollector(FabricSimSource(hosts=8, seed=2), 10.0)
    with TestClient(create_app(settings, (sim.fabric, [FailsAfterFirst(sim)]), run_loop=False)) as c:
        tick(c, 2)
        body = c.get("/api/v1/ports", params={"stale": True, "limit": 1}).json()
        assert body["total"] == 256
        p = body["items"][0]
        assert (p["stale"], p["state"], p["health"]) == (True, "up", "ok")  # old reading kept, no alarm
        grid = c.get("/api/v1/fabric/grid").json()
        assert grid["stale"] == 256 and grid["health"]["ok"] == 256


class SplitByNode:
    """fabricsim's scrape as many sources send it: one big batch (the switches', as UFM's) and a
    small batch a host, each with a dictionary of its own ports (as host agents do)."""

    def __init__(self, inner: FabricSimCollector) -> None:
        self.inner = inner
        self.source, self.target = inner.source, inner.target

    async def aclose(self) -> None:
        pass

    async def scrape(self) -> ScrapeResult:
        res = await self.inner.scrape()
        (batch,) = [b for b in res.batches if record_kind(b.schema) == "port_sample"]
        keys = batch.column("port").cast(pa.string()).to_pylist()
        nodes: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            nodes.setdefault(k.split("/")[0] if k.startswith("gpu-") else "", []).append(i)
        parts = []
        for _, rows in sorted(nodes.items(), reverse=True):  # hosts first, switches last
            part = batch.take(rows)
            i = part.schema.get_field_index("port")
            own = pc.dictionary_encode(part.column(i).cast(pa.string())).cast(part.schema.field(i).type)
            columns = [own if j == i else c for j, c in enumerate(part.columns)]
            parts.append(pa.RecordBatch.from_arrays(columns, schema=part.schema))
        others = [b for b in res.batches if record_kind(b.schema) != "port_sample"]
        return replace(res, batches=(*parts, *others))


def test_a_source_of_many_small_batches_reads_as_one_big_one(tmp_path: Path, db_url: str) -> None:
    """The ports API's readings do not depend on how a poll's samples are cut into batches
    (one batch, or a big one and the hosts' small ones, each with a dictionary of its own)."""
    faults = "speed_downgrade@15s+1h:gpu-0002/mlx5_3"
    read = []
    for name, wrap in (("whole", lambda c: c), ("split", SplitByNode)):
        settings = load_settings(
            None,
            data_dir=tmp_path / name,
            database_url=db_url,
            archive={"enabled": False},
            poll_interval="10s",
        )
        sim = FabricSimCollector(FabricSimSource(hosts=8, seed=2, faults=faults), 10.0)
        with TestClient(create_app(settings, (sim.fabric, [wrap(sim)]), run_loop=False)) as c:
            tick(c, 3)
            items = c.get("/api/v1/ports", params={"limit": 1000}).json()["items"]
        read.append({p["key"]: p for p in items})
    whole, split = read
    diff = {  # each run's fabric starts at its own wall time: when a port was read differs
        (k, f): (v, split[k].get(f))
        for k in whole
        for f, v in whole[k].items()
        if v != split[k].get(f) and f != "last_update"
    }
    assert len(whole) == 256 and not diff, list(diff.items())[:2]
    assert whole[PORT]["speed_bps"] == 400 * 10**9 and whole[LEAF_PORT]["speed_bps"] == 400 * 10**9


def test_metrics_and_the_ports_api_agree_on_every_ports_health(client: TestClient) -> None:
    """One rule (detectors.findings.PORT_HEALTH): an info incident marks its port as a warning in
    both, a critical one as critical, and every other port is ok in both."""
    info_port = "gpu-0005/mlx5_1"
    client.app.state.store.apply(  # type: ignore[attr-defined]
        [Finding("ber_high", info_port, "firing", datetime.now(UTC), "info", "BER above the info level",
                 "ber/1", node="gpu-0005", port=info_port)]
    )  # fmt: skip
    tick(client, 1)
    metric = {
        s.labels["port"]: int(s.value)
        for fam in text_string_to_metric_families(client.get("/metrics").text)
        if fam.name == "graywire_port_health"
        for s in fam.samples
    }
    api = {p["key"]: p["health"] for p in client.get("/api/v1/ports", params={"limit": 1000}).json()["items"]}
    assert api[info_port] == "warning" and metric[info_port] == 1
    assert api[PORT] == "critical" and metric[PORT] == 2
    code = {"ok": 0, "warning": 1, "critical": 2}
    assert {k: code[h] for k, h in api.items()} == {k: metric[k] for k in api}
