"""A scrape as NATS messages and back: every batch whole, chunked under the payload limit,
in any arrival order; broken or partial scrapes never reach the detectors."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from graywire.collectors.base import ScrapeResult, failed
from graywire.collectors.schemas import record_kind
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.service.cluster.wire import (
    HEADROOM,
    PART_HEADER,
    SCRAPE_HEADER,
    Assembler,
    Outgoing,
    WireError,
    encode_scrape,
)


@pytest.fixture(scope="module")
def scrape() -> ScrapeResult:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16), duration_s=60.0, seed=3, faults="none"))
    step = next(s for s in sim.run() if s.nccl_timing is not None)
    batches = tuple(b for b in (step.port_sample, step.nccl_timing) if b is not None)
    return ScrapeResult("ufm", "https://ufm.example/metrics", True, batches, None, 0.25, {"bad_port": 2})


def encode(result: ScrapeResult, max_payload: int = 1 << 20, seq: int = 7) -> list[Outgoing]:
    return encode_scrape(
        result,
        prefix="gw",
        scrape_id=f"gw-1/abc/{seq}",
        slot=1000.0,
        member="gw-1",
        finished_at=1000.4,
        max_payload=max_payload,
    )


def feed(assembler: Assembler, messages: list[Outgoing]) -> list:
    done = []
    for i, m in enumerate(messages):
        r = assembler.add(m.subject, m.headers, m.data, seq=i + 1, handle=i, now=0.0)
        if r is not None:
            done.append(r)
    return done


def test_a_scrape_crosses_whole_chunked_under_the_payload_limit(scrape: ScrapeResult) -> None:
    max_payload = HEADROOM + 2048
    messages = encode(scrape, max_payload)
    chunks = [m for m in messages if PART_HEADER in m.headers]
    assert len(chunks) > len(scrape.batches)  # the port batch needed several messages
    assert all(len(m.data) <= max_payload - HEADROOM for m in messages)
    assert {m.subject.split(".")[2] for m in chunks} == {"port_sample", "nccl_timing"}
    assert messages[-1].subject.startswith("gw.status.ufm.") and PART_HEADER not in messages[-1].headers
    assert len({m.headers["Nats-Msg-Id"] for m in messages}) == len(messages)
    stamps = {(m.headers["Graywire-Poll-Time"], m.headers["Graywire-Sequence"]) for m in messages}
    assert stamps == {("1000.000", "7")}
    shuffled = messages[:]
    random.Random(1).shuffle(shuffled)
    (report,) = feed(Assembler(), shuffled)
    r = report.result
    assert (r.source, r.target, r.ok, r.duration_s, dict(r.skipped)) == (
        "ufm", "https://ufm.example/metrics", True, 0.25, {"bad_port": 2}
    )  # fmt: skip
    assert [record_kind(b.schema) for b in r.batches] == [record_kind(b.schema) for b in scrape.batches]
    for got, sent in zip(r.batches, scrape.batches, strict=True):
        assert got.equals(sent) and got.schema.metadata == sent.schema.metadata
    port = r.batches[0].column("port")
    assert pa.types.is_dictionary(port.type)  # the dictionary arrives whole
    assert (report.slot, report.member, report.finished_at, report.attempted) == (
        1000.0,
        "gw-1",
        1000.4,
        True,
    )
    assert sorted(report.handles) == list(range(len(messages))) and report.first_seq == 1


def test_a_failed_scrape_is_its_status_alone(scrape: ScrapeResult) -> None:
    messages = encode(failed("snmp", "leaf-1@10.0.0.1:161", TimeoutError("no answer"), 2.0))
    assert len(messages) == 1
    (report,) = feed(Assembler(), messages)
    assert not report.result.ok and report.result.batches == ()
    assert report.result.error == "TimeoutError: no answer"


def test_a_scrape_missing_a_chunk_never_completes_and_expires(scrape: ScrapeResult) -> None:
    messages = encode(scrape, HEADROOM + 2048)
    assembler = Assembler()
    assert feed(assembler, messages[:2] + messages[3:]) == []
    assert len(assembler) == 1
    assert assembler.expire(before=-1.0) == []  # not old enough yet
    assert sorted(assembler.expire(before=1.0)) == list(range(len(messages) - 1))
    assert len(assembler) == 0


def test_two_scrapes_interleaved_complete_apart(scrape: ScrapeResult) -> None:
    a = encode(scrape, HEADROOM + 2048, seq=1)
    b = encode(failed("agent", "http://gpu-1:9470", "HTTP 500"), seq=2)
    mixed = [x for pair in zip(a, b + [None] * len(a), strict=False) for x in pair if x is not None]
    reports = feed(Assembler(), mixed)
    assert [r.scrape_id for r in reports] == ["gw-1/abc/2", "gw-1/abc/1"]


@pytest.mark.parametrize(
    ("headers", "data", "match"),
    [
        ({}, b"x", "no Graywire-Scrape header"),
        ({SCRAPE_HEADER: "s"}, b"{not json", "bad status message"),
        ({SCRAPE_HEADER: "s"}, b"[1, 2]", "not a status object"),
        ({SCRAPE_HEADER: "s", PART_HEADER: "zero"}, b"x", "bad Graywire-Part header"),
    ],
)
def test_a_message_of_another_format_is_refused_with_its_handles(
    headers: dict, data: bytes, match: str
) -> None:
    with pytest.raises(WireError, match=match) as caught:
        Assembler().add("gw.status.x.y", headers, data, seq=1, handle="h", now=0.0)
    assert caught.value.handles == ["h"]


def test_a_chunk_that_is_not_arrow_spoils_its_scrape_and_hands_back_every_message(
    scrape: ScrapeResult,
) -> None:
    messages = encode(scrape, HEADROOM + 2048)
    messages[0] = Outgoing(messages[0].subject, b"garbage", messages[0].headers)
    assembler = Assembler()
    with pytest.raises(WireError, match="cannot be read") as caught:
        feed(assembler, messages)
    assert sorted(caught.value.handles) == list(range(len(messages)))
    assert len(assembler) == 0


def test_a_payload_limit_too_small_for_any_scrape_is_refused(scrape: ScrapeResult) -> None:
    with pytest.raises(ValueError, match="max_payload"):
        encode(scrape, max_payload=HEADROOM + 10)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"encoding": "brotli"}, "unknown encoding"),
        ({"bytes": 2**40}, "over the"),
        ({"bytes": 10}, "cannot be read"),
    ],
)
def test_a_status_that_misstates_its_batches_spoils_the_scrape(
    scrape: ScrapeResult, change: dict, match: str
) -> None:
    """A batch's encoding and size come from its status: one it cannot hold to is refused,
    never decompressed into an allocation the status chose."""
    messages = encode(scrape)
    status = json.loads(messages[-1].data)
    status["batches"][0] |= change
    messages[-1] = Outgoing(messages[-1].subject, json.dumps(status).encode(), messages[-1].headers)
    with pytest.raises(WireError, match=match):
        feed(Assembler(), messages)


@pytest.mark.parametrize("layout", [[{}], ["one"], [{"chunks": "x"}], [None]])
def test_a_status_with_a_bad_batch_layout_spoils_its_scrape_with_every_message(
    scrape: ScrapeResult, layout: list
) -> None:
    """Refused as the wire's error, handing back every message of the scrape: anything else
    would escape the leader's filing and leave the rest of its fetch unacknowledged."""
    messages = encode(scrape)
    status = json.loads(messages[-1].data)
    status["batches"] = layout
    messages[-1] = Outgoing(messages[-1].subject, json.dumps(status).encode(), messages[-1].headers)
    assembler = Assembler()
    with pytest.raises(WireError, match="bad batch layout") as caught:
        feed(assembler, messages)
    assert sorted(caught.value.handles) == list(range(len(messages)))
    assert len(assembler) == 0
