"""The leader's book of poll slots: when a slot may be judged, what goes in it, and what is
dropped (pure; the loop around it runs in the replica tests), and what the leader
acknowledges while its findings wait for the store."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from graywire.collectors.base import ScrapeResult
from graywire.service.cluster.leader import Leader, SlotBook, runner_key
from graywire.service.cluster.wire import Outgoing, Report, encode_scrape

POLL = 10.0


def report(target: str, slot: int, seq: int = 1, member: str = "gw-0") -> Report:
    result = ScrapeResult("snmp", target, True)
    return Report(f"{member}/x/{seq}", member, slot * POLL, slot * POLL + 1, True, result, seq)


def test_a_slot_is_complete_once_every_target_reported_for_it() -> None:
    book = SlotBook(["a", "b"], POLL)
    assert book.add("a", report("a", 100)) is None
    assert not book.complete(100)
    assert book.add("b", report("b", 100)) is None
    assert book.complete(100) and book.oldest() == 100 and book.newest == 100
    rounds, missing = book.take(100)
    assert missing == [] and [[k for k, _ in r] for r in rounds] == [["a", "b"]]
    assert book.oldest() is None


def test_a_target_without_a_report_is_missing_and_its_late_report_goes_with_the_next_slot() -> None:
    book = SlotBook(["a", "b"], POLL)
    book.add("a", report("a", 100))
    rounds, missing = book.take(100)
    assert missing == ["b"] and [[k for k, _ in r] for r in rounds] == [["a"]]
    # b's report of slot 100 arrives after the slot was judged: still news, judged next,
    # before b's own report of slot 101 (a round each, in slot order).
    assert book.add("b", report("b", 100, seq=2)) is None
    book.add("b", report("b", 101, seq=3))
    book.add("a", report("a", 101, seq=4))
    rounds, missing = book.take(101)
    assert missing == []
    assert [[(k, book.slot_of(r)) for k, r in rnd] for rnd in rounds] == [
        [("a", 101), ("b", 100)],
        [("b", 101)],
    ]


def test_a_report_older_than_what_was_judged_or_a_second_of_one_slot_is_dropped() -> None:
    book = SlotBook(["a"], POLL)
    book.add("a", report("a", 100))
    assert book.add("a", report("a", 100, seq=2, member="gw-1")) == "duplicate"
    book.take(100)
    assert book.add("a", report("a", 100, seq=3)) == "late"
    assert book.add("a", report("a", 99, seq=4)) == "late"
    assert book.add("zzz", report("zzz", 101)) == "unknown_target"


def test_slots_are_matched_by_their_number_whatever_the_float_arithmetic() -> None:
    book = SlotBook(["a"], 0.1)
    r = report("a", 0)
    r.slot = 3 * 0.1  # 0.30000000000000004
    book.add("a", r)
    assert book.complete(3) and not book.complete(2)


class _Msg:
    """A JetStream message as the leader reads it: subject, headers, data, stream sequence."""

    def __init__(self, out: Outgoing, seq: int) -> None:
        self.subject, self.headers, self.data = out.subject, out.headers, out.data
        self.metadata = SimpleNamespace(sequence=SimpleNamespace(stream=seq))


class _Bus:
    """Hands the leader one fetch of messages, then nothing; records what it acknowledges."""

    def __init__(self, msgs: list[_Msg]) -> None:
        self.msgs, self.acked = msgs, []

    async def fetch(self, sub: object, timeout_s: float) -> list[_Msg]:
        msgs, self.msgs = self.msgs, []
        if not msgs:
            await asyncio.sleep(timeout_s)
        return msgs

    async def ack(self, handles: list[_Msg]) -> None:
        self.acked += handles


def test_a_redelivered_report_waits_for_the_store_before_it_is_acknowledged() -> None:
    """Judged slots whose findings the store has not taken yet are redelivered after ack_wait
    and read as late: acknowledging them then would lose the findings with the leader."""
    target = SimpleNamespace(collector=SimpleNamespace(source="snmp", target="leaf-1"))
    runner = SimpleNamespace(
        settings=SimpleNamespace(poll_seconds=POLL, scrape_timeout_seconds=1.0),
        targets=[target],
        has_unstored=True,
    )
    out = encode_scrape(
        ScrapeResult("snmp", "leaf-1", False, error="no answer"), prefix="gw", scrape_id="gw-0/x/1",
        slot=100 * POLL, member="gw-0", finished_at=100 * POLL + 1, max_payload=1 << 20,
    )  # fmt: skip
    redelivered = [_Msg(o, seq=7) for o in out]
    bus = _Bus(redelivered)
    leader = Leader(runner, bus, lambda: None, 1, 1800.0, 1800.0, lambda: None)  # type: ignore[arg-type]
    leader.book.last_judged[runner_key("snmp", "leaf-1")] = 100  # slot 100 was judged; its findings unstored

    async def fetch_a_while() -> None:
        task = asyncio.create_task(leader._fetch(object()))
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(fetch_a_while())
    assert leader.stats.dropped["late"] == 1
    assert bus.acked == [] and leader._held == redelivered  # held with the judged ones
    assert all(m.data == b"" for m in redelivered)  # a handle only: no payload kept meanwhile

    runner.has_unstored = False  # the store took them: a late redelivery now is just late
    again = [_Msg(o, seq=8) for o in out]
    bus.msgs = again
    asyncio.run(fetch_a_while())
    assert bus.acked == again
