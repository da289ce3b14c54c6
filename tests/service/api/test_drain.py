"""The drain and operator API on the full app, on SQLite and PostgreSQL.

Includes two walks over the OpenAPI document: no route that changes state answers without an
operator token, and no route answers bad input with anything but a 4xx JSON error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from graywire.service.app import create_app
from graywire.service.config import load_settings

OPERATOR = "operator-token-0123456789"
READER = "reader-token-0123456789"
INGEST = "ingest-token-0123456789"
TOKENS = [
    {"name": "alice", "role": "operator", "token": OPERATOR},
    {"name": "grafana", "role": "reader", "token": READER},
    {"name": "trainer", "role": "ingest", "token": INGEST},
]
# gpu-0001's NIC on rail 3 drops to 400G at 15 s: a link verdict, a drain.
FAULTS = "speed_downgrade@15s+1h:gpu-0001/mlx5_3"
MUTATING = {"post", "put", "patch", "delete"}
DRAIN_KEYS = {"node", "action", "reason", "since", "incident_ids", "evidence_url", "shadow"}


def make_client(tmp_path: Path, db_url: str, read_open: bool = True, **drain: Any) -> TestClient:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=db_url,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 16, "seed": 3, "faults": FAULTS}],
        auth={"read_open": read_open, "tokens": TOKENS},
        drain={"shadow": False, **drain},  # enforcing: what these tests are about
    )
    return TestClient(create_app(settings, run_loop=False))


def op(token: str = OPERATOR) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def client(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    with make_client(tmp_path, db_url) as c:
        for _ in range(4):
            c.app.state.runner.tick()  # type: ignore[attr-defined]
        yield c


def test_drain_list_is_flat_json_with_the_contract_fields(client: TestClient) -> None:
    items = client.get("/api/v1/drain").json()
    assert isinstance(items, list) and len(items) == 1
    item = items[0]
    assert set(item) == DRAIN_KEYS
    assert (item["node"], item["action"], item["shadow"]) == ("gpu-0001", "drain", False)
    assert "gpu-0001/mlx5_3 negotiated 400G, expected 800G" in item["reason"] and "agrees" in item["reason"]
    assert datetime.fromisoformat(item["since"]).utcoffset().total_seconds() == 0
    assert item["evidence_url"] == "/api/v1/nodes/gpu-0001"
    node = client.get(item["evidence_url"]).json()
    assert node["drain"]["action"] == "drain" and node["verdict"]["side"] == "link"
    assert node["drain"]["since"] == item["since"]  # one spelling of a time across the API
    assert set(item["incident_ids"]) <= {i["id"] for i in node["incidents"]}
    assert client.get("/api/v1/drain", params={"action": "watch"}).json() == []
    state = client.get("/api/v1/drain/state").json()
    assert state["shadow"] is False
    cb = state["circuit_breaker"]
    assert (cb["tripped"], cb["max_fraction"], cb["window_seconds"], cb["recent_drains"], cb["cap"]) == (
        False,
        0.1,
        600,
        1,
        2,
    )  # fmt: skip  (16 hosts x 10% is 1, but the cap is never under drain.min_nodes, 2)
    assert cb["since"] is None and "1 of at most 2" in cb["message"]
    text = client.get("/metrics").text
    assert 'graywire_drain_nodes{action="drain"} 1.0' in text
    assert "graywire_drain_circuit_breaker_tripped 0.0" in text
    (listed,) = [f for f in text_string_to_metric_families(text) if f.name.startswith("graywire_drain_node_")]
    assert [(s.labels, s.value) for s in listed.samples] == [
        (
            {"node": "gpu-0001", "action": "drain", "shadow": "false"},
            datetime.fromisoformat(item["since"]).timestamp(),
        )
    ]


def test_operator_actions_over_http_are_audited_under_the_token_name(client: TestClient) -> None:
    incident_id = client.get("/api/v1/drain").json()[0]["incident_ids"][0]
    r = client.post(f"/api/v1/incidents/{incident_id}/ack", headers=op(), json={"comment": "looking"})
    assert r.status_code == 200 and r.json()["status"] == "acknowledged"
    r = client.post(
        "/api/v1/nodes/gpu-0001/exclude", headers=op(), json={"reason": "burn-in", "duration": "2h"}
    )
    assert r.status_code == 201 and r.json()["created_by"] == "alice"
    client.app.state.runner.tick()  # type: ignore[attr-defined]
    assert [(i["node"], i["action"]) for i in client.get("/api/v1/drain").json()] == [("gpu-0001", "watch")]
    assert [e["node"] for e in client.get("/api/v1/excludes").json()] == ["gpu-0001"]
    assert client.delete("/api/v1/nodes/gpu-0001/exclude", headers=op()).status_code == 204
    r = client.post("/api/v1/nodes/gpu-0001/undrain", headers=op(), json={"reason": "reseated"})
    assert r.status_code == 200 and r.json()["previous_action"] == "watch"
    r = client.post("/api/v1/nodes/gpu-0002/undrain", headers=op(), json={"reason": "x"})
    assert r.status_code == 409 and "not on the drain list" in r.json()["detail"]
    r = client.post(
        f"/api/v1/incidents/{incident_id}/silence", headers=op(), json={"reason": "RMA", "duration": "1h"}
    )
    assert r.status_code == 201
    assert client.get("/api/v1/silences").json()[0]["entity"] == r.json()["entity"]
    r = client.post(f"/api/v1/incidents/{incident_id}/resolve", headers=op())
    assert r.status_code == 200 and r.json()["status"] == "resolved"
    assert client.post(f"/api/v1/incidents/{incident_id}/resolve", headers=op()).status_code == 409
    assert client.post("/api/v1/drain/breaker/reset", headers=op(), json={"reason": "x"}).status_code == 409
    audit = client.get("/api/v1/audit", params={"actor": "alice"}).json()
    assert [a["action"] for a in audit["items"]] == [
        "resolve", "silence", "undrain", "unexclude", "exclude", "acknowledge"
    ]  # fmt: skip
    assert client.get("/api/v1/audit", params={"action": "drain"}).json()["items"][0]["actor"] == "policy"
    page = client.get("/api/v1/audit", params={"limit": 2, "offset": 1}).json()
    assert (page["count"], page["limit"], page["offset"]) == (2, 2, 1)
    assert client.get("/api/v1/nodes", params={"side": "link", "limit": 1}).json()["total"] >= 0


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "1"), path)


def _routes(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, opdoc) for path, ops in spec["paths"].items() for method, opdoc in ops.items()]


def test_no_mutating_route_is_reachable_without_an_operator_token(tmp_path: Path, db_url: str) -> None:
    with make_client(tmp_path, db_url, read_open=False) as c:
        spec = c.get("/openapi.json").json()
        routes = _routes(spec)
        mutating = [(p, m, d) for p, m, d in routes if m in MUTATING]
        assert len(mutating) >= 8  # ack, resolve, silence, exclude, unexclude, undrain, reset, ingest
        assert "HTTPBearer" in spec["components"]["securitySchemes"]
        for path, method, doc in mutating:
            assert doc.get("security"), f"{method.upper()} {path} does not declare the bearer scheme"
            url = _fill(path, {"name": "gpu-0001"})
            needed = "ingest" if path.startswith("/api/v1/ingest") else "operator"
            for headers, status in (
                ({}, 401),
                (op("wrong-token-0123456789"), 401),
                (op(READER), 403),
                *([] if needed == "ingest" else [(op(INGEST), 403)]),
            ):
                r = c.request(method, url, headers=headers, json={"reason": "x", "duration": "1h"})
                assert r.status_code == status, (method, path, headers, r.text)
                assert r.json()["detail"], (method, path)
            r = c.request(method, url, headers=op(OPERATOR), json={"reason": "x", "duration": "1h"})
            assert r.status_code not in (401, 403), (method, path, r.text)
        # Reads are protected too when read_open is false; probes and scrapes stay open.
        for path, method, _ in routes:
            if method == "get" and path.startswith("/api/"):
                url = _fill(path, {"name": "gpu-0001"})
                assert c.get(url).status_code == 401, path
                assert c.get(url, headers=op(READER)).status_code in (200, 404), path
        assert c.get("/healthz").status_code == 200
        assert c.get("/metrics").status_code == 200
        # The status page's files hold no data and load; its API calls need a token like any client.
        assert c.get("/").status_code == 200 and c.get("/static/status.js").status_code == 200
        assert c.get("/api/v1/capabilities").status_code == 401


BAD_QUERY = {"integer": ["x", "1e400", str(2**70), "-5"], "boolean": ["maybe"], "string": ["\x00"]}
BAD_BODIES: list[Any] = [
    "not json",
    [],
    {"unexpected": 1},
    {"reason": "", "duration": "forever"},
    {"reason": "a\x00b", "duration": "1h"},
    {"reason": "x", "duration": "-3h"},
]


def _bad_query_values(schema: dict[str, Any]) -> list[str]:
    options = schema.get("anyOf", [schema])
    out: list[str] = []
    for s in options:
        if "enum" in s:
            out.append("bogus-value")
        elif s.get("format") == "date-time":
            # The second one is valid ISO 8601 but past datetime's range once turned into UTC.
            out += ["yesterday", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"]
        else:
            out.extend(BAD_QUERY.get(s.get("type", ""), []))
    return out


def test_bad_input_to_every_route_is_a_4xx_json_error(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    incident_id = str(client.get("/api/v1/incidents").json()["items"][0]["id"])
    good = {"incident_id": incident_id, "name": "gpu-0001"}
    checked = 0
    for path, method, doc in _routes(spec):
        params = doc.get("parameters", [])
        cases: list[tuple[str, dict[str, str], Any]] = []
        for p in params:
            if p["in"] == "path":
                bad = (
                    ["abc", "0", str(2**70)]
                    if p["schema"].get("type") == "integer"
                    else ["no-such-node", "a%00b"]
                )
                cases += [(_fill(path, {**good, p["name"]: b}), {}, None) for b in bad]
            elif p["in"] == "query":
                cases += [(_fill(path, good), {p["name"]: b}, None) for b in _bad_query_values(p["schema"])]
        if "requestBody" in doc:
            cases += [(_fill(path, good), {}, body) for body in BAD_BODIES]
        if path == "/api/v1/ingest/nccl":
            cases = [(path, {}, None), (path, {"job": "j"}, "not json")]
        for url, query, body in cases:
            kwargs: dict[str, Any] = {"params": query, "headers": op()}
            if isinstance(body, str):
                kwargs["content"] = body
                kwargs["headers"] = {**op(), "content-type": "application/json"}
            elif body is not None:
                kwargs["json"] = body
            r = client.request(method, url, **kwargs)
            assert 400 <= r.status_code < 500, (method, url, query, body, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/json"), (method, url)
            assert r.json()["detail"], (method, url)
            checked += 1
    assert checked > 60
