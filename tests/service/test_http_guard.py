"""Input refused before any handler (or token check) sees it: oversized request bodies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings
from graywire.service.http_guard import DEFAULT_MAX_BODY

OPERATOR = "operator-token-0123456789"
INGEST = "ingest-token-0123456789"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        archive={"enabled": False},
        max_push_bytes=2 * 2**20,
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 3}],
        auth={
            "tokens": [
                {"name": "alice", "role": "operator", "token": OPERATOR},
                {"name": "jobs", "role": "ingest", "token": INGEST},
            ]
        },
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        yield c


def _chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    for _ in range(total // size):
        yield b" " * size


@pytest.mark.parametrize("token", [None, OPERATOR])
def test_an_oversized_body_is_a_413_before_the_token_is_even_checked(
    client: TestClient, token: str | None
) -> None:
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    huge = b'{"reason": "' + b"x" * (4 * DEFAULT_MAX_BODY) + b'"}'
    r = client.post("/api/v1/drain/breaker/reset", content=huge, headers=headers)
    assert r.status_code == 413, r.text
    assert "limit" in r.json()["detail"]
    # Chunked, with no Content-Length to judge by: refused as it grows past the limit.
    r = client.post("/api/v1/nodes/gpu-0001/undrain", content=_chunks(8 * 2**20), headers=headers)
    assert r.status_code == 413, r.text
    assert "limit" in r.json()["detail"]


def test_small_bodies_and_the_nccl_push_up_to_its_own_limit_still_pass(client: TestClient) -> None:
    r = client.post(
        "/api/v1/drain/breaker/reset",
        json={"reason": "é" * 2000},
        headers={"authorization": f"Bearer {OPERATOR}"},
    )
    assert r.status_code == 409, r.text  # the body was read: the breaker is simply not tripped
    push = {"authorization": f"Bearer {INGEST}", "content-type": "application/x-ndjson"}
    r = client.post("/api/v1/ingest/nccl", params={"job": "j"}, content=b"\n" * 2**20, headers=push)
    assert r.status_code == 422, r.text  # over the default limit, under max_push_bytes: parsed
    r = client.post("/api/v1/ingest/nccl", params={"job": "j"}, content=_chunks(4 * 2**20), headers=push)
    assert r.status_code == 413, r.text
    # Served under a path prefix the push keeps its own limit.
    with TestClient(client.app, root_path="/graywire") as prefixed:
        r = prefixed.post(
            "/graywire/api/v1/ingest/nccl", params={"job": "j"}, content=b"\n" * 2**20, headers=push
        )
        assert r.status_code == 422, r.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/drain/breaker/reset", rb'{"reason": "\ud800"}'),
        ("/api/v1/incidents/1/ack", rb'{"comment": "a\udfffb"}'),
        ("/api/v1/incidents/1/silence", rb'{"reason": "x", "duration": "\ud800"}'),
        ("/api/v1/nodes/gpu-0001/exclude", rb'{"reason": "x", "surplus": "\ud800"}'),
    ],
)
def test_a_lone_surrogate_in_a_json_body_is_a_422_not_a_500(
    client: TestClient, path: str, body: bytes
) -> None:
    # Valid JSON, but no UTF-8 text: the validation error echoes the input back, and
    # rendering that echo as UTF-8 used to fail inside the error handler itself.
    headers = {"authorization": f"Bearer {OPERATOR}", "content-type": "application/json"}
    r = client.post(path, content=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]


def test_every_answer_carries_the_security_headers(tmp_path: Path) -> None:
    """The page and the API: CSP of self, no framing, no sniffing, no referrer; not the CSP on
    the interactive API docs, which load Swagger UI from its CDN."""
    settings = load_settings(None, data_dir=tmp_path, archive={"enabled": False},
                             sources=[{"type": "fabricsim", "hosts": 8}])  # fmt: skip
    with TestClient(create_app(settings, run_loop=False)) as c:
        for path in ("/", "/api/v1/incidents", "/metrics", "/api/v1/nope"):
            h = c.get(path).headers
            assert h["content-security-policy"].startswith("default-src 'self'"), path
            assert "frame-ancestors 'none'" in h["content-security-policy"]
            assert (h["x-content-type-options"], h["x-frame-options"], h["referrer-policy"]) == (
                "nosniff", "DENY", "no-referrer"
            )  # fmt: skip
        docs = c.get("/docs").headers
        assert "content-security-policy" not in docs and docs["x-content-type-options"] == "nosniff"
