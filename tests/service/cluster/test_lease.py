"""The leader's lease, the fence on deciding tables, and membership, on the real PostgreSQL."""

from __future__ import annotations

import importlib
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from graywire.detectors.findings import Finding
from graywire.service.cluster.fence import FENCED_TABLES, Fence
from graywire.service.cluster.lease import TAKEOVER_ACTION, Lease
from graywire.service.cluster.membership import MemberIdInUse, MemberInfo, Members
from graywire.service.models.engine import is_fence_refusal, make_engine
from graywire.service.store import IncidentStore
from tests.service.cluster.conftest import rows

pytestmark = [pytest.mark.postgres, pytest.mark.alone]


def lease(engine: Engine, member: str, ttl: float = 30.0) -> Lease:
    return Lease(engine, member, f"http://{member}:8000", ttl, lock_timeout_s=0.5)


def finding(entity: str = "gpu-0001/mlx5_0") -> Finding:
    return Finding(
        kind="speed_downgrade",
        entity=entity,
        status="firing",
        time=datetime.now(UTC),
        severity="critical",
        summary="slow",
        detector="t",
        node="gpu-0001",
    )


def fenced_engine(url: str, fence: Fence) -> Engine:
    engine = make_engine(url)
    fence.install(engine)
    return engine


def test_the_first_member_takes_the_lease_and_the_audit_log_says_so(pg: Engine) -> None:
    a = lease(pg, "a")
    assert a.read().holder is None
    taken = a.acquire()
    assert taken is not None and taken.token == 1 and taken.previous_holder is None
    assert taken.valid_until > time.monotonic() + 25
    view = a.read()
    assert (view.holder, view.token, view.live) == ("a", 1, True)
    (audit,) = rows(pg, f"SELECT actor, action, evidence FROM audit_log WHERE action = '{TAKEOVER_ACTION}'")
    assert audit.actor == "cluster" and audit.evidence["member"] == "a" and audit.evidence["token"] == 1


def test_a_live_lease_is_not_taken_and_an_expired_one_is_taken_with_the_next_token(pg: Engine) -> None:
    a, b = lease(pg, "a", ttl=0.5), lease(pg, "b", ttl=0.5)
    assert a.acquire() is not None
    assert b.acquire() is None  # a holds it
    time.sleep(0.7)
    assert not b.read().live
    taken = b.acquire()
    assert taken is not None and taken.token == 2
    assert (taken.previous_holder, taken.previous_token) == ("a", 1)
    # a's renewal names its old token: refused, and it must step down.
    assert a.renew(1) is None
    assert b.renew(2) is not None
    handovers = rows(pg, "SELECT evidence FROM audit_log WHERE action = 'leader_takeover' ORDER BY id")
    assert [(r.evidence["member"], r.evidence["previous_holder"]) for r in handovers] == [
        ("a", None),
        ("b", "a"),
    ]
    assert handovers[1].evidence["expired_for_seconds"] >= 0


def test_release_lets_another_member_take_over_at_once(pg: Engine) -> None:
    a, b = lease(pg, "a"), lease(pg, "b")
    taken = a.acquire()
    assert taken is not None
    assert a.release(taken.token)
    assert b.acquire() is not None


def test_the_fence_refuses_a_stale_token_and_counts_it(pg_url: str, pg: Engine) -> None:
    fence = Fence()
    refused: list[str] = []
    fence.on_refused(refused.append)
    engine = fenced_engine(pg_url, fence)
    try:
        store = IncidentStore(engine)
        a, b = lease(pg, "a", ttl=0.3), lease(pg, "b")
        first = a.acquire()
        assert first is not None
        fence.hold(first.token, first.valid_until)
        store.apply([finding("gpu-0001/mlx5_0")])  # the current token: written
        time.sleep(0.4)
        assert b.acquire() is not None  # b takes over while a still believes it leads
        with pytest.raises(sa.exc.DatabaseError) as caught:
            store.apply([finding("gpu-0001/mlx5_1")])
        assert is_fence_refusal(caught.value)
        assert "stale fencing token 1 (the lease is at 2, held by b)" in str(caught.value)
        assert fence.refusals == 1 and refused and "stale fencing token" in refused[0]
        assert [r.entity for r in rows(pg, "SELECT entity FROM incidents")] == ["gpu-0001/mlx5_0"]
        assert rows(pg, "SELECT count(*) AS n FROM findings")[0].n == 1
    finally:
        engine.dispose()


def test_a_writer_without_a_token_is_refused_while_a_lease_is_live(pg_url: str, pg: Engine) -> None:
    store = IncidentStore(pg)  # no fence installed: a process that does not lead
    store.apply([finding("gpu-0001/mlx5_0")])  # no lease at all: the single-replica case
    a = lease(pg, "a", ttl=0.3)
    assert a.acquire() is not None
    with pytest.raises(sa.exc.DatabaseError, match="member a leads this database") as caught:
        store.apply([finding("gpu-0001/mlx5_1")])
    assert is_fence_refusal(caught.value)
    time.sleep(0.4)  # expired, and nobody took over: no decision can conflict with this one
    store.apply([finding("gpu-0001/mlx5_2")])
    assert rows(pg, "SELECT count(*) AS n FROM incidents")[0].n == 2


def test_every_deciding_table_is_fenced(pg: Engine) -> None:
    migration = importlib.import_module("graywire.migrations.versions.0006_cluster")
    assert set(FENCED_TABLES) == set(migration.FENCED)
    fenced = {
        r.table
        for r in rows(
            pg,
            "SELECT c.relname AS table FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE t.tgname LIKE '%_fence' AND NOT t.tgisinternal",
        )
    }
    assert fenced == set(FENCED_TABLES)
    a = lease(pg, "a")
    assert a.acquire() is not None
    for table in FENCED_TABLES:
        with pytest.raises(sa.exc.DatabaseError) as caught, pg.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {table}"))
        assert is_fence_refusal(caught.value), table


def test_renewal_passes_an_open_write_and_a_takeover_waits_for_it(pg_url: str, pg: Engine) -> None:
    """The write's fence check holds FOR KEY SHARE on the lease row: a renewal (expiry only) is
    not held up by it, a takeover (a new token) commits only after the write does."""
    fence = Fence()
    engine = fenced_engine(pg_url, fence)
    a, b = lease(pg, "a", ttl=0.5), lease(pg, "b")
    first = a.acquire()
    assert first is not None
    fence.hold(first.token, first.valid_until)
    try:
        with engine.connect() as conn:
            tx = conn.begin()
            conn.execute(
                sa.text(
                    "INSERT INTO silences (kind, entity, reason, created_by, created_at, expires_at)"
                    " VALUES ('k', 'e', 'r', 'op', now(), now() + interval '1 hour')"
                )
            )
            t0 = time.monotonic()
            assert a.renew(first.token) is not None
            assert time.monotonic() - t0 < 0.3
            time.sleep(0.6)  # a's lease runs out while its write is open
            assert b.acquire() is None  # lock_timeout: the write is still in flight
            done: list[object] = []
            taker = threading.Thread(target=lambda: done.append(lease(pg, "b").acquire()))
            taker.start()
            time.sleep(0.1)
            tx.commit()  # the old leader's last write lands first...
            taker.join(timeout=5)
        assert done and done[0] is not None  # ...then the takeover
        assert rows(pg, "SELECT count(*) AS n FROM silences")[0].n == 1
    finally:
        engine.dispose()


def test_members_heartbeat_and_a_second_process_cannot_take_a_live_member_id(pg: Engine) -> None:
    me = MemberInfo("gw-0", "http://gw-0:8000")
    first = Members(pg, me, "inc-1", ttl_s=0.5, version="t")
    first.heartbeat()
    Members(pg, MemberInfo("gw-1", "http://gw-1:8000", lead=False), "inc-9", 0.5, "t").heartbeat()
    assert [m.member_id for m in first.live()] == ["gw-0", "gw-1"]
    assert first.live()[1].lead is False
    second = Members(pg, me, "inc-2", ttl_s=0.5, version="t")
    with pytest.raises(MemberIdInUse, match="gw-0"):
        second.heartbeat()
    time.sleep(0.6)  # the first process is gone: its row may be taken
    second.heartbeat()
    assert [m.member_id for m in second.live()] == ["gw-0"]
    second.leave()
    assert second.live() == []
    with pg.begin() as conn:
        conn.execute(sa.text("UPDATE cluster_members SET heartbeat_at = now() - interval '2 days'"))
    assert second.forget_dead() == 1


def test_heartbeats_are_judged_by_the_database_clock(pg: Engine) -> None:
    members = Members(pg, MemberInfo("gw-0", "http://gw-0:8000"), "inc", ttl_s=5, version="t")
    members.heartbeat()
    (row,) = rows(pg, "SELECT heartbeat_at, clock_timestamp() AS now FROM cluster_members")
    assert abs(row.now - row.heartbeat_at) < timedelta(seconds=2)
