"""NATS restarted under two replicas: no committed decision is lost or repeated, the gap shows
as stale targets (not as incidents), and judging goes on once NATS is back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.service.cluster.conftest import PrivateNats, rows
from tests.service.cluster.replicas import Replica, fakes_and_replicas, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

POLL = 2.0
BEFORE = ("gpu-0002", "gpu-0002/mlx5_4", 8)
#: Injected after NATS is back: judging must have resumed to find it.
AFTER = ("gpu-0006", "gpu-0006/mlx5_0", 32)
OUTAGE = 3 * POLL


def incidents(r: Replica) -> dict[int, tuple[str, str | None, str]]:
    return {
        i["id"]: (i["kind"], i["port"], i["status"]) for i in r.get("/api/v1/incidents", limit=500)["items"]
    }


def test_a_nats_restart_loses_no_decision_and_shows_as_stale_targets(
    tmp_path: Path, pg_url: str, private_nats: PrivateNats, stream_name: str, pg
) -> None:
    with fakes_and_replicas(
        tmp_path,
        database_url=pg_url,
        nats_url=private_nats.url,
        stream=stream_name,
        poll=POLL,
        faults=[(BEFORE[1], BEFORE[2]), (AFTER[1], AFTER[2])],
        lead=[True, True],
    ) as (fakes, (r0, r1), _pager):
        r0.start()
        wait_until("gw-0 to lead", lambda: r0.up() and r0.get("/api/v1/cluster")["leader"] == "gw-0", 60)
        r1.start()
        wait_until("gw-1 to join", lambda: r1.up() and len(r0.get("/api/v1/cluster")["members"]) == 2, 60)
        wait_until(
            "the first fault's drain", lambda: BEFORE[0] in {d["node"] for d in r1.get("/api/v1/drain")}, 90
        )
        # Its effects (the slow NCCL channels of that host) settle too: no change for two polls.
        decided, since = incidents(r1), time.monotonic()
        give_up = since + 30
        while time.monotonic() - since < 2 * POLL:
            assert time.monotonic() < give_up, "the incidents never settled before the outage"
            time.sleep(0.5)
            now = incidents(r1)
            if now != decided:
                decided, since = now, time.monotonic()
        drains_before = rows(pg, "SELECT id, node FROM audit_log WHERE action = 'drain' ORDER BY id")
        assert [d.node for d in drains_before] == [BEFORE[0]]

        private_nats.stop()
        stopped = time.monotonic()

        def all_missing() -> dict | None:
            s = r0.get("/api/v1/sources")
            gone = [t for t in s["items"] if (t["error"] or "").startswith("no member reported")]
            return s if s["stale_ports"] > 0 and len(gone) == len(s["items"]) else None

        stale = wait_until("every target to show as missing on the leader", all_missing, 4 * POLL)
        assert stale["stale_ports"] == r0.get("/api/v1/ports", limit=1)["total"]
        assert r0.get("/api/v1/cluster")["nats_connected"] is False
        metrics = r1.get("/metrics")
        assert "graywire_cluster_nats_connected 0.0" in metrics
        while time.monotonic() - stopped < OUTAGE:
            assert incidents(r1) == decided, "the outage opened or closed an incident"
            time.sleep(1.0)
        private_nats.start()

        wait_until("fresh targets again", lambda: r0.get("/api/v1/sources")["stale_ports"] == 0, 10 * POLL)
        assert incidents(r1) == decided, "NATS coming back opened or closed an incident"
        assert r0.get("/api/v1/cluster")["leader"] == "gw-0", "the lead never depended on NATS"
        wait_until(
            "the fault injected after the restart to be found and drained",
            lambda: AFTER[0] in {d["node"] for d in r1.get("/api/v1/drain")},
            max(30.0, fakes.started + AFTER[2] - time.time() + 30),
        )
        now = incidents(r1)
        assert {k: v for k, v in now.items() if k in decided} == decided, "a committed incident changed"
        drains = rows(pg, "SELECT node FROM audit_log WHERE action = 'drain' ORDER BY id")
        assert [d.node for d in drains] == [BEFORE[0], AFTER[0]]
        roots = [i for i in r1.get("/api/v1/incidents", limit=500)["items"] if i["caused_by"] is None]
        assert sorted(i["port"] for i in roots) == sorted([BEFORE[1], AFTER[1]])
        takeovers = rows(pg, "SELECT evidence FROM audit_log WHERE action = 'leader_takeover'")
        assert [t.evidence["member"] for t in takeovers] == ["gw-0"]
