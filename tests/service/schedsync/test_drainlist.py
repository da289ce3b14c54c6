"""The drain API client: a complete, well-formed answer or an error, never a guessed empty list."""

from __future__ import annotations

from typing import Any

import pytest

from graywire.service.schedsync.drainlist import DrainListClient, DrainListUnavailable, parse_drain_list
from tests.service.schedsync.conftest import DrainApi, drain_entry

STATE = {"shadow": False, "circuit_breaker": {"tripped": False}}


def test_fetch_reads_both_documents(drain_api: DrainApi) -> None:
    drain_api.entries = [
        drain_entry("gpu-0001", since="2026-11-29T20:00:00Z", incident_ids=[3, 4]),
        drain_entry("gpu-0002", action="watch"),
        drain_entry("gpu-0003", shadow=True),
    ]
    drain_api.shadow = True
    with DrainListClient(drain_api.url + "/") as client:
        dl = client.fetch()
    assert [e.node for e in dl.entries] == ["gpu-0001", "gpu-0002", "gpu-0003"]
    assert dl.entries[0].incident_ids == (3, 4) and dl.entries[0].since.tzinfo is not None
    assert set(dl.drain()) == {"gpu-0001"}, "watch and shadow entries are not drains"
    assert dl.held() == {"gpu-0003"}
    assert dl.state.shadow and not dl.state.breaker_tripped
    assert dl.state.breaker["max_fraction"] == 0.05
    assert [p for p, _ in drain_api.requests] == ["/api/v1/drain/state", "/api/v1/drain"]


@pytest.mark.parametrize(
    ("entries", "state", "message"),
    [
        ({"items": []}, STATE, "not a JSON array"),
        (["gpu-0001"], STATE, "item 0 is not an object"),
        ([{**drain_entry("a"), "action": "reboot"}], STATE, "unknown action 'reboot'"),
        ([{**drain_entry("a"), "since": "yesterday"}], STATE, "not ISO-8601"),
        ([{k: v for k, v in drain_entry("a").items() if k != "node"}], STATE, "missing 'node'"),
        ([{**drain_entry("a"), "node": " "}], STATE, "empty node name"),
        ([{**drain_entry("a"), "shadow": "no"}], STATE, "'shadow' must be a boolean"),
        ([{**drain_entry("a"), "incident_ids": ["7"]}], STATE, "list of integers"),
        ([], {"shadow": False}, "missing 'circuit_breaker'"),
        ([], {"shadow": 0, "circuit_breaker": {"tripped": False}}, "'shadow' has the wrong type"),
        ([], {"shadow": False, "circuit_breaker": {}}, "missing 'tripped'"),
    ],
)
def test_malformed_answers_are_refused(entries: Any, state: Any, message: str) -> None:
    with pytest.raises(DrainListUnavailable, match=message):
        parse_drain_list(entries, state)


def test_http_errors_and_non_json_are_refused(drain_api: DrainApi) -> None:
    drain_api.status = 500
    with DrainListClient(drain_api.url) as client, pytest.raises(DrainListUnavailable, match="HTTP 500"):
        client.fetch()
    with DrainListClient(drain_api.url + "/nowhere") as client, pytest.raises(DrainListUnavailable):
        client.fetch()
    unreachable = pytest.raises(DrainListUnavailable, match="unreachable")
    with DrainListClient("http://127.0.0.1:9", timeout=2) as client, unreachable:
        client.fetch()
