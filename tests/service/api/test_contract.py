"""The OpenAPI contract is what the server does: schemathesis against a real ``graywire serve``,
once per token role (and with none), seeded and bounded, every check on. Any contract failure
or 5xx fails the test, with schemathesis's report of it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.service.test_drain_durability import Service, free_port

pytestmark = pytest.mark.slow

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
CONFIG = Path(__file__).with_name("schemathesis.toml")
TOKENS = {role: f"{role}-token-0123456789" for role in ("reader", "operator", "ingest")}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("contract")
    port = free_port()
    config = tmp / "graywire.yaml"
    config.write_text(yaml.safe_dump({
        "port": port, "data_dir": str(tmp / "data"), "archive": {"enabled": False},
        "sources": [{"type": "fabricsim", "hosts": 8}],
        # Reads need a token, so each role's view of the API is its own; no rate limit on pushes.
        "auth": {"read_open": False,
                 "tokens": [{"name": role, "role": role, "token": t} for role, t in TOKENS.items()]},
        "ingest": {"rate_limit": None},
    }))  # fmt: skip
    svc = Service(config, port, tmp / "serve.log")
    try:
        svc.start()
        yield svc
    finally:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.kill9()


@pytest.mark.parametrize("role", [*TOKENS, "none"])
def test_the_api_does_what_its_schema_says(service: Service, role: str) -> None:
    if not SCHEMATHESIS.exists():
        pytest.fail(f"schemathesis is not installed beside {sys.executable}: pip install -e '.[dev]'")
    auth = ["-H", f"Authorization: Bearer {TOKENS[role]}"] if role in TOKENS else []
    run = subprocess.run(
        [str(SCHEMATHESIS), "--config-file", str(CONFIG), "--no-color", "run", f"{service.base}/openapi.json",
         *auth, "--checks", "all", "--seed", "20261206", "--max-examples", "15", "--workers", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:]
    assert "passed" in report and "Failures:" not in report, report[-6000:]


@pytest.mark.parametrize("read_open", [True, False])
def test_reads_declare_the_bearer_scheme_exactly_when_they_need_a_token(
    tmp_path: Path, read_open: bool
) -> None:
    from fastapi.testclient import TestClient

    from graywire.service.app import create_app
    from graywire.service.config import load_settings

    settings = load_settings(
        None, data_dir=tmp_path, archive={"enabled": False}, sources=[{"type": "fabricsim", "hosts": 8}],
        auth={"read_open": read_open, "tokens": [{"name": "r", "role": "reader", "token": TOKENS["reader"]}]},
    )  # fmt: skip
    with TestClient(create_app(settings, run_loop=False)) as client:
        doc = client.get("/openapi.json").json()
        assert ("security" in doc["paths"]["/api/v1/drain"]["get"]) is not read_open
        assert "security" in doc["paths"]["/api/v1/incidents/{incident_id}/ack"]["post"]
        assert "security" not in doc["paths"]["/healthz"]["get"]
        node = next(p for p in doc["paths"]["/api/v1/ports"]["get"]["parameters"] if p["name"] == "node")
        assert {"type": "string", "minLength": 1, "pattern": "^[^\\x00]*$"}.items() <= node["schema"][
            "anyOf"
        ][0].items()
        r = client.options("/api/v1/nodes/gpu-0001/exclude")
        assert (r.status_code, r.headers["allow"]) == (405, "POST, DELETE")
