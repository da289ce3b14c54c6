"""The incidents HTTP API, mounted on a bare FastAPI app with only the store behind it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from graywire.detectors.findings import Finding
from graywire.service.api.deps import Services
from graywire.service.api.main import install_api
from graywire.service.state.read_cache import ReadCache
from graywire.service.store import IncidentStore

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def firing(entity: str, t: int, kind: str = "ber_high", node: str | None = "gpu001") -> Finding:
    return Finding(
        kind=kind,
        entity=entity,
        status="firing",
        time=T0 + timedelta(seconds=t),
        severity="warning",
        summary=f"{kind} on {entity}",
        detector="ber/1.0",
        node=node,
        port=entity,
        score=2.5,
        confidence=0.8,
        evidence={"pre_fec_ber": 1e-5},
    )


@pytest.fixture
def client(store: IncidentStore) -> Iterator[TestClient]:
    app = FastAPI()
    install_api(app, Services(store, ReadCache(store.engine)))
    with TestClient(app) as client:
        yield client


def test_list_incidents(client: TestClient, store: IncidentStore) -> None:
    store.apply([firing("p1", 0), firing("p2", 1, node="gpu002"), firing("p3", 2, kind="link_down")])
    store.apply([Finding("ber_high", "p1", "cleared", T0 + timedelta(seconds=5), "warning", "ok", "ber/1.0")])

    response = client.get("/api/v1/incidents")
    assert response.status_code == 200
    body = response.json()
    assert (body["count"], body["limit"], body["offset"]) == (3, 100, 0)
    assert [i["entity"] for i in body["items"]] == ["p3", "p2", "p1"]
    item = body["items"][1]
    assert set(item) == {
        "id", "kind", "entity", "status", "severity", "node", "port", "link", "summary", "detector",
        "score", "confidence", "opened_at", "last_seen_at", "resolved_at", "finding_count",
        "reopen_count", "evidence", "caused_by", "cause_reason", "effects",
    }  # fmt: skip
    assert item["evidence"] == {"pre_fec_ber": 1e-5}
    assert datetime.fromisoformat(item["opened_at"]) == T0 + timedelta(seconds=1)
    assert (item["caused_by"], item["cause_reason"], item["effects"]) == (None, None, [])
    assert datetime.fromisoformat(item["opened_at"]).tzinfo is not None

    def entities(**params: object) -> list[str]:
        response = client.get("/api/v1/incidents", params=params)
        assert response.status_code == 200, response.text
        return [i["entity"] for i in response.json()["items"]]

    assert entities(status="open") == ["p3", "p2"]
    assert entities(status="resolved") == ["p1"]
    assert entities(kind="ber_high") == ["p2", "p1"]
    assert entities(node="gpu002") == ["p2"]
    assert entities(limit=2) == ["p3", "p2"]
    assert entities(limit=2, offset=2) == ["p1"]

    page = client.get("/api/v1/incidents", params={"limit": 2, "offset": 2}).json()
    assert (page["count"], page["limit"], page["offset"]) == (1, 2, 2)


@pytest.mark.parametrize(
    "params",
    [
        {"status": "closed"},
        {"limit": 0},
        {"limit": 1001},
        {"limit": "many"},
        {"offset": -1},
    ],
)
def test_list_rejects_bad_parameters(client: TestClient, params: dict[str, object]) -> None:
    response = client.get("/api/v1/incidents", params=params)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["detail"][0]["loc"][0] == "query"


def test_get_incident(client: TestClient, store: IncidentStore) -> None:
    store.apply([firing("p1", 0), firing("p1", 10)])
    incident_id = store.list_incidents()[0]["id"]

    response = client.get(f"/api/v1/incidents/{incident_id}")
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["status"], body["finding_count"]) == (incident_id, "open", 2)
    assert [datetime.fromisoformat(f["time"]) for f in body["findings"]] == [
        T0 + timedelta(seconds=10),
        T0,
    ]
    assert all(f["incident_id"] == incident_id for f in body["findings"])


def test_get_missing_incident_is_404(client: TestClient) -> None:
    response = client.get("/api/v1/incidents/42")
    assert response.status_code == 404
    assert response.json() == {"detail": "incident 42 not found"}
    assert client.get("/api/v1/incidents/forty-two").status_code == 422


def test_openapi_documents_the_models(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert {"IncidentOut", "IncidentDetailOut", "FindingOut", "IncidentPage"} <= set(schemas)
    list_op = spec["paths"]["/api/v1/incidents"]["get"]
    assert list_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/IncidentPage"
    )
    assert "404" in spec["paths"]["/api/v1/incidents/{incident_id}"]["get"]["responses"]
