"""The leader's book of poll slots: when a slot may be judged, what goes in it, and what is
dropped (pure; the loop around it runs in the replica tests)."""

from __future__ import annotations

from graywire.collectors.base import ScrapeResult
from graywire.service.cluster.leader import SlotBook
from graywire.service.cluster.wire import Report

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
