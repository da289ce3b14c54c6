"""Three ``graywire serve`` replicas against ``graywire fakes``, sharing the real PostgreSQL and
NATS JetStream: targets spread over them, one leader decides, and the cluster survives its
leader killed, its leader paused past the lease, and a collector killed, deciding everything
exactly once."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from graywire.service.cluster.leader import runner_key
from graywire.service.cluster.shard import Shards
from tests.service.cluster.conftest import rows
from tests.service.cluster.replicas import OPERATOR_TOKEN, Replica, fakes_and_replicas, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.alone]

POLL = 3.0
FAULT_A = ("gpu-0003", "gpu-0003/mlx5_2", 15)
#: Injected one second after the leader is killed: it starts while nobody leads.
FAULT_B = ("gpu-0005", "gpu-0005/mlx5_1", 42)


def cluster_view(r: Replica) -> dict[str, Any]:
    return r.get("/api/v1/cluster")


def leader_of(r: Replica) -> str | None:
    return cluster_view(r)["leader"]


def open_incidents(r: Replica) -> list[dict[str, Any]]:
    return r.get("/api/v1/incidents", status="open", limit=500)["items"]


def downgrade_of(r: Replica, port: str) -> list[dict[str, Any]]:
    return [i for i in open_incidents(r) if i["kind"] == "speed_downgrade" and i["port"] == port]


def drained(r: Replica) -> dict[str, str]:
    return {d["node"]: d["action"] for d in r.get("/api/v1/drain")}


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str, nats_server: str, stream_name: str):
    with fakes_and_replicas(
        tmp_path,
        database_url=pg_url,
        nats_url=nats_server,
        stream=stream_name,
        poll=POLL,
        faults=[(FAULT_A[1], FAULT_A[2]), (FAULT_B[1], FAULT_B[2])],
        lead=[True, True, False],  # gw-2 only collects
    ) as running:
        yield running


def missing_slot(error: str | None) -> int | None:
    """The poll slot (seconds of the day) a leader's "no member reported" error names."""
    m = re.match(r"no member reported a scrape for the poll at (\d\d):(\d\d):(\d\d)", error or "")
    return int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]) if m else None


def test_three_replicas_decide_once_through_leader_loss_pause_and_collector_loss(cluster, pg) -> None:
    fakes, (r0, r1, r2), pager = cluster

    # -- three replicas, one leader, targets spread over all of them -------------------------
    r0.start()
    wait_until("gw-0 to lead", lambda: r0.up() and leader_of(r0) == "gw-0", 60)
    r1.start()
    r2.start()
    view = wait_until(
        "three members with a share each",
        lambda: (
            (v := cluster_view(r0))
            and len(v["members"]) == 3
            and all(m["targets"] for m in v["members"])
            and v
        ),
        60,
    )
    total = view["targets"]
    assert sum(m["targets"] for m in view["members"]) == total >= 20
    assert [m["member_id"] for m in view["members"] if m["leader"]] == ["gw-0"]
    assert {m["member_id"]: m["lead"] for m in view["members"]} == {"gw-0": True, "gw-1": True, "gw-2": False}

    # -- fault A: found once, drained once, paged once ----------------------------------------
    node_a, port_a, _ = FAULT_A
    wait_until("fault A's incident", lambda: downgrade_of(r2, port_a), 60)
    wait_until("fault A's drain", lambda: drained(r1).get(node_a) == "drain", 30)

    # -- kill -9 the leader; fault B starts while nobody leads -------------------------------
    node_b, port_b, at_b = FAULT_B
    kill_at = fakes.started + at_b - 1
    assert time.time() < kill_at, (
        "the cluster took too long to set up: fault B would not fall in the takeover"
    )
    time.sleep(kill_at - time.time())
    killed = time.time()
    r0.kill()
    wait_until("gw-1 to take over", lambda: leader_of(r1) == "gw-1", 4 * POLL)
    (takeover,) = rows(
        pg,
        "SELECT time, evidence FROM audit_log WHERE action = 'leader_takeover' AND evidence->>'token' = '2'",
    )
    assert takeover.evidence["member"] == "gw-1" and takeover.evidence["previous_holder"] == "gw-0"
    assert takeover.time.timestamp() - killed <= 2 * POLL, "a follower takes over within two poll intervals"
    wait_until("fault B's incident, injected during the takeover", lambda: downgrade_of(r2, port_b), 60)
    wait_until("fault B's drain", lambda: drained(r2).get(node_b) == "drain", 30)

    # -- a follower relays a change, and a read of the leader's state, to the leader ---------
    (incident_a,) = downgrade_of(r2, port_a)
    acked = httpx.post(
        f"{r2.url}/api/v1/incidents/{incident_a['id']}/ack",
        json={"comment": "on it"},
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        timeout=30,
    )
    assert acked.status_code == 200, acked.text
    assert acked.json()["status"] == "acknowledged"
    (ack,) = rows(pg, "SELECT actor, incident_id FROM audit_log WHERE action = 'acknowledge'")
    assert (ack.actor, ack.incident_id) == ("oncall", incident_a["id"])
    unauthorized = httpx.post(
        f"{r2.url}/api/v1/incidents/{incident_a['id']}/resolve", json={"comment": "x"}, timeout=30
    )
    assert unauthorized.status_code == 401  # the leader checked the (missing) token
    relayed = r2.get("/api/v1/sources")
    assert len(relayed["items"]) == total  # every target: the leader's view, not gw-2's share

    # -- pause the new leader past its lease: fenced, and it steps down -----------------------
    wait_until(
        "gw-0's old heartbeat to expire",
        lambda: "gw-0" not in {m["member_id"] for m in cluster_view(r1)["members"]},
        20,
    )
    r0.start()
    wait_until("gw-0 back as a follower", lambda: r0.up() and cluster_view(r0)["role"] == "follower", 60)
    r1.signal(19)  # SIGSTOP
    try:
        wait_until("gw-0 to take over from the paused gw-1", lambda: leader_of(r2) == "gw-0", 8 * POLL)
    finally:
        r1.signal(18)  # SIGCONT
    resumed = wait_until(
        "gw-1 to find its lease gone and step down",
        lambda: (v := cluster_view(r1)) and v["role"] == "follower" and v["leader"] == "gw-0" and v,
        6 * POLL,
    )
    assert resumed["fence_refusals"] >= 1, "the paused leader's write under its old token was refused"
    assert resumed["fencing_token"] == 3

    # -- kill a collector-only member: its targets move, stale at most two polls -------------
    # The leader's list (every target, in the order every member hashes them), once the new
    # leader has judged a poll.
    leader_sources = wait_until(
        "the new leader's first poll",
        lambda: (t := r0.get("/api/v1/sources")["items"]) and len(t) == total and t,
        30,
    )
    keys = [runner_key(t["source"], t["target"]) for t in leader_sources]
    shards = Shards(keys)
    names, owner = shards.owners(["gw-0", "gw-1", "gw-2"])
    moving = {keys[i] for i in range(len(keys)) if names[owner[i]] == "gw-2"}
    assert moving
    r2.kill()
    killed = time.monotonic()
    # A target's stale window: from the first poll slot nobody reported it to the last, read
    # from the slot each "no member reported" names (a failure of the target's own, such as an
    # SNMP walk timing out on a busy machine, is not the move's).
    missing: dict[str, tuple[int, int]] = {}
    back: set[str] = set()
    while time.monotonic() - killed < 10 * POLL and (
        len(back) < len(moving) or time.monotonic() - killed < 2 * POLL
    ):
        for t in r0.get("/api/v1/sources")["items"]:
            key = runner_key(t["source"], t["target"])
            if key not in moving:
                continue
            slot = missing_slot(t["error"])
            if slot is not None:
                first, last = missing.get(key, (slot, slot))
                missing[key] = (min(first, slot), max(last, slot))
            elif key in missing:
                back.add(key)  # missing a while, then reported by its new owner
        time.sleep(0.3)
    worst = {key: round(((last - first) % 86400) / POLL) + 1 for key, (first, last) in missing.items()}
    assert worst, "the killed collector's targets went missing for a while"
    assert max(worst.values()) <= 2, f"stale longer than two polls: {worst}"
    assert back == moving, f"not every target of the killed collector came back: {moving - back}"
    view = cluster_view(r0)
    assert sum(m["targets"] for m in view["members"]) == total and len(view["members"]) == 2

    # -- every decision exactly once ----------------------------------------------------------
    incidents = r0.get("/api/v1/incidents", limit=500)["items"]
    roots = [i for i in incidents if i["caused_by"] is None]
    assert sorted((i["kind"], i["port"], i["status"]) for i in roots) == [
        ("speed_downgrade", port_a, "acknowledged"),
        ("speed_downgrade", port_b, "open"),
    ], roots
    drains = rows(
        pg, "SELECT node, count(*) AS n FROM audit_log WHERE action = 'drain' GROUP BY node ORDER BY node"
    )
    assert [(d.node, d.n) for d in drains] == [(node_a, 1), (node_b, 1)]
    assert drained(r0) == {node_a: "drain", node_b: "drain"}
    handovers = rows(pg, "SELECT evidence FROM audit_log WHERE action = 'leader_takeover' ORDER BY id")
    assert [
        (h.evidence["member"], h.evidence["token"], h.evidence["previous_holder"]) for h in handovers
    ] == [
        ("gw-0", 1, None),
        ("gw-1", 2, "gw-0"),
        ("gw-0", 3, "gw-1"),
    ]
    wait_until("both pages", lambda: len({p.json()["dedup_key"] for p in pager.delivered("/pd")}) >= 2, 30)
    pages = [p.json() for p in pager.delivered("/pd") if p.json()["event_action"] == "trigger"]
    by_key = {p["dedup_key"]: p["payload"]["summary"] for p in pages}
    root_keys = {f"graywire-incident-{i['id']}" for i in roots}
    assert set(by_key) == root_keys, f"a page under a key of its own beside the incidents': {by_key}"
