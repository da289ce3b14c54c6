"""Per-token push rate limits: over a token's bucket a push is a 429 with ``Retry-After``,
counted, and other tokens go on; the OpenAPI document lists the answers pushes may get."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import RateLimit, load_settings
from graywire.service.ingest.limits import RateLimiter, TokenBucket, retry_after
from tests.service.api.test_ingest import inspector_record

SLOW = "slow-ingest-token-012345"
OTHER = "other-ingest-token-01234"


def make_client(tmp_path: Path, slow_limit: dict[str, Any] | None, **overrides: Any) -> TestClient:
    slow: dict[str, Any] = {"name": "slow", "role": "ingest", "token": SLOW}
    if slow_limit is not None:
        slow["rate_limit"] = slow_limit
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 1}],
        auth={"tokens": [slow, {"name": "other", "role": "ingest", "token": OTHER}]},
        **overrides,
    )
    return TestClient(create_app(settings, run_loop=False))


def push(c: TestClient, token: str, rows: int = 1, body: bytes | None = None) -> Any:
    if body is None:
        body = "".join(inspector_record(f"gpu-000{i % 8}", time.time()) for i in range(rows)).encode()
    return c.post(
        "/api/v1/ingest/nccl",
        params={"job": "j"},
        content=body,
        headers={"content-type": "application/x-ndjson", "authorization": f"Bearer {token}"},
    )


def test_over_its_request_rate_a_token_gets_429_with_retry_after(tmp_path: Path) -> None:
    # 0.01 requests a second: the bucket does not refill within the test, whatever the machine's pace.
    with make_client(tmp_path, {"requests_per_second": 0.01, "burst": 2}) as c:
        assert [push(c, SLOW).status_code for _ in range(2)] == [202, 202]
        r = push(c, SLOW, body=b"not json\n")  # refused before its body is read: no 422
        assert r.status_code == 429
        wait = int(r.headers["retry-after"])
        assert 1 <= wait <= 100
        assert r.json()["detail"] == f"token 'slow' is over its push rate limit; retry in {wait} s"
        assert push(c, OTHER).status_code == 202  # a bucket per token
        text = c.get("/metrics").text
    assert 'graywire_ingest_refused_pushes_total{reason="rate_limited",token="slow"} 1.0' in text
    assert 'token="other"' not in text


def test_the_ingest_default_applies_to_every_token_and_null_lifts_it(tmp_path: Path) -> None:
    with make_client(tmp_path, None, ingest={"rate_limit": {"requests_per_second": 0.01, "burst": 1}}) as c:
        assert [push(c, t).status_code for t in (SLOW, SLOW, OTHER, OTHER)] == [202, 429, 202, 429]
    with make_client(tmp_path / "off", None, ingest={"rate_limit": None}) as c:
        assert {push(c, SLOW).status_code for _ in range(25)} == {202}  # past the default burst of 20


def test_over_its_row_rate_a_push_is_429_and_its_rows_are_counted(tmp_path: Path) -> None:
    limit = {"requests_per_second": 100, "burst": 100, "rows_per_second": 0.01, "rows_burst": 3}
    with make_client(tmp_path, limit) as c:
        assert push(c, SLOW, rows=2).status_code == 202
        r = push(c, SLOW, rows=2)  # one row left in the bucket
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 200
        assert "over its row rate limit" in r.json()["detail"]
        r = push(c, SLOW, rows=4)  # more than the bucket ever holds: waiting would not help
        assert r.status_code == 413
        assert "split it" in r.json()["detail"] and "retry-after" not in r.headers
        assert push(c, SLOW, rows=1).status_code == 202
        text = c.get("/metrics").text
    assert 'graywire_rejected_rows_total{reason="rate_limited",record="nccl_timing"} 6.0' in text
    assert 'graywire_ingest_refused_pushes_total{reason="rate_limited",token="slow"} 2.0' in text


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    """On a clock the test moves: the numbers behind Retry-After."""
    now = [0.0]
    limiter = RateLimiter(RateLimit(requests_per_second=2, burst=3), clock=lambda: now[0])
    assert [limiter.request("t", None) for _ in range(4)] == [0, 0, 0, 0.5]
    now[0] = 0.5  # one token back
    assert limiter.request("t", None) == 0 and limiter.request("t", None) == 0.5
    now[0] = 100.0  # refilled, but never past the burst
    assert [limiter.request("t", None) for _ in range(4)] == [0, 0, 0, 0.5]
    assert limiter.rows("t", None, 10**9) == 0  # no row limit configured
    bucket = TokenBucket(rate=1, capacity=5, tokens=0, updated=0)
    assert bucket.take(2, now=1.0) == 1.0 and bucket.take(2, now=2.0) == 0
    assert [retry_after(x) for x in (0.01, 1.0, 1.2)] == ["1", "1", "2"]
    assert RateLimiter(RateLimit(rows_per_second=1, rows_burst=2)).rows("t", None, 3) == math.inf


def test_openapi_documents_what_a_push_may_be_answered(tmp_path: Path) -> None:
    """403 (role or scope), 429 and 503 with Retry-After, beside the answers every route may give."""
    with make_client(tmp_path, None) as c:
        spec = c.get("/openapi.json").json()
    responses = spec["paths"]["/api/v1/ingest/nccl"]["post"]["responses"]
    assert {"202", "400", "401", "403", "413", "422", "429", "431", "503"} <= set(responses)
    assert "scope" in responses["403"]["description"]
    for code in ("429", "503"):
        assert responses[code]["headers"]["Retry-After"]["schema"] == {"type": "integer"}
        assert responses[code]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    assert "scheduler" in responses["503"]["description"] and "database" in responses["503"]["description"]
