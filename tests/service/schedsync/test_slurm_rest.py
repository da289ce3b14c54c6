"""``slurm-sync --slurmrestd``: the REST transport, against slurmrestd's documented v0.0.41 JSON.

Debian's slurmrestd (22.05) serves only up to v0.0.38, so v0.0.41 is answered here by a small
HTTP server: ``GET /slurm/v0.0.41/nodes`` and ``/node/{name}`` (``state`` an array of flags,
``reason`` without a stamp), ``POST /slurm/v0.0.41/node/{name}`` with ``state`` an array, JWT
headers required, failures as an ``errors`` array. The planning it feeds is the one the real
slurmctld tests exercise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from graywire.service.cli import main
from graywire.service.schedsync.slurm_rest import SlurmRestBackend, node_from_json
from tests.service.schedsync.conftest import DrainApi, drain_entry

PREFIX = "/slurm/v0.0.41"


@dataclass
class FakeSlurmRestd:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    url: str = ""
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def add(self, name: str, *state: str, reason: str = "") -> None:
        self.nodes[name] = {"name": name, "state": list(state) or ["IDLE"], "reason": reason, "cpus": 1}

    def reply(self, method: str, path: str, headers: Any, body: Any) -> tuple[int, dict[str, Any]]:
        if headers.get("X-SLURM-USER-NAME") != "graywire" or headers.get("X-SLURM-USER-TOKEN") != "jwt":
            return 401, self._error("Authentication failure")
        if method == "GET" and path == f"{PREFIX}/nodes":
            return 200, self._ok(nodes=list(self.nodes.values()))
        if method == "GET" and path.startswith(f"{PREFIX}/job/"):
            job = path.removeprefix(f"{PREFIX}/job/")
            if job not in self.jobs:
                return 404, self._error(f"Unable to find JobId={job}", number=2017)
            return 200, self._ok(jobs=self.jobs[job])
        if not path.startswith(f"{PREFIX}/node/"):
            return 404, self._error(f"Unable to find path {path}")
        name = path.removeprefix(f"{PREFIX}/node/")
        node = self.nodes.get(name)
        if node is None:
            return 404, self._error(f"Node {name} not found")
        if method == "GET":
            return 200, self._ok(nodes=[node])
        self.posts.append((name, body))
        state = body.get("state")
        if not isinstance(state, list):
            return 400, self._error("state must be an array of node state flags")
        if state == ["DRAIN"]:
            if not body.get("reason"):
                return 400, self._error("You must specify a reason when DOWNING or DRAINING a node")
            node["state"] = [s for s in node["state"] if s != "DRAIN"] + ["DRAIN"]
            node["reason"] = body["reason"]
        elif state == ["RESUME"]:
            node["state"] = [s for s in node["state"] if s not in ("DRAIN", "DOWN")] or ["IDLE"]
            node["reason"] = ""
        else:
            return 400, self._error(f"unsupported state {state}")
        return 200, self._ok()

    def _ok(self, **data: Any) -> dict[str, Any]:
        return {
            **data,
            "meta": {"plugin": {"data_parser": "data_parser/v0.0.41"}},
            "errors": [],
            "warnings": [],
        }

    def _error(self, msg: str, number: int = 2017) -> dict[str, Any]:
        return {
            "errors": [{"description": msg, "error_number": number, "error": msg, "source": "slurmrestd"}]
        }


@pytest.fixture
def restd() -> Iterator[FakeSlurmRestd]:
    fake = FakeSlurmRestd()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _do(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            code, out = fake.reply(self.command, self.path, self.headers, body)
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _do

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def sync(api: DrainApi, restd: FakeSlurmRestd, *extra: str) -> int:
    args = ["--slurmrestd", restd.url, "--slurm-user", "graywire", "--slurm-token", "jwt", *extra]
    return main(["slurm-sync", "--url", api.url, "--once", *args])


def test_drains_and_resumes_through_slurmrestd(restd: FakeSlurmRestd, drain_api: DrainApi) -> None:
    restd.add("gpu-0001")
    restd.add("gpu-0002", "IDLE", "DRAIN", reason="bad DIMM")
    drain_api.entries = [drain_entry("gpu-0001"), drain_entry("gpu-0002")]
    assert sync(drain_api, restd) == 0
    assert restd.posts == [("gpu-0001", {"state": ["DRAIN"], "reason": "graywire: link downgraded to 400G"})]
    assert restd.nodes["gpu-0002"]["reason"] == "bad DIMM"

    drain_api.entries = []
    assert sync(drain_api, restd) == 0
    assert restd.posts[1:] == [("gpu-0001", {"state": ["RESUME"]})]
    assert restd.nodes["gpu-0001"]["state"] == ["IDLE"]
    assert restd.nodes["gpu-0002"]["state"] == ["IDLE", "DRAIN"], "a person's drain stays"


def test_slurmrestd_errors_fail_the_pass(
    restd: FakeSlurmRestd, drain_api: DrainApi, caplog: pytest.LogCaptureFixture
) -> None:
    restd.add("gpu-0001")
    assert sync(drain_api, restd, "--slurm-token", "expired") == 3
    assert "Authentication failure" in caplog.text
    assert restd.posts == []


def test_node_json_of_older_plugins() -> None:
    node = node_from_json({"name": "n1", "state": "idle", "state_flags": ["DRAIN"], "reason": "graywire: x"})
    assert node.drained and node.ours


def test_where_a_job_runs_from_v0_0_41_json(restd: FakeSlurmRestd) -> None:
    """``job_state`` is an array since v0.0.40; an array job's tasks each name their nodes. The
    v0.0.38 form (a string) is read against the real slurmrestd in tests/service/api/test_ingest_scope.py."""
    restd.jobs["17"] = [
        {"job_id": 17, "job_state": ["RUNNING"], "nodes": "gpu-[0001-0002]"},
        {"job_id": 18, "job_state": ["COMPLETING"], "nodes": "gpu-0009"},
        {"job_id": 19, "job_state": ["PENDING"], "nodes": ""},
        {"job_id": 20, "job_state": ["COMPLETED"], "nodes": "gpu-0005"},
    ]  # fmt: skip
    restd.jobs["21"] = [{"job_id": 21, "job_state": ["PENDING"], "nodes": ""}]
    rest = SlurmRestBackend(restd.url, user="graywire", token="jwt")
    try:
        assert sorted(rest.job_hosts("17") or []) == ["gpu-0001", "gpu-0002", "gpu-0009"]
        assert rest.job_hosts("21") is not None and not rest.job_hosts("21")  # known, not running
        assert rest.job_hosts("22") is None  # unknown
        assert rest.job_hosts("../nodes") is None  # never a path of its own
    finally:
        rest.close()
