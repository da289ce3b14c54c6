"""The stream on the real NATS JetStream: scrapes larger than a message cross whole, each term
reads from where the last stopped, a warm-up replays only what was judged."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.base import ScrapeResult, failed
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.service.cluster.bus import Bus
from graywire.service.cluster.wire import PART_HEADER, Assembler, encode_scrape
from graywire.service.config import ClusterSettings


@pytest.fixture(scope="module")
def big_batch() -> pa.RecordBatch:
    """A port_sample batch of 200k rows whose counters do not compress: over 1 MiB on the wire."""
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16), duration_s=30.0, seed=2, faults="none"))
    step = next(iter(sim.run()))
    table = pa.Table.from_batches([step.port_sample] * 400).combine_chunks()
    rng = np.random.default_rng(0)
    i = table.schema.get_field_index("rx_bytes")
    noise = pa.array(rng.integers(0, 2**63, table.num_rows, dtype=np.uint64), type=table.schema.field(i).type)
    return table.set_column(i, table.schema.field(i), noise).to_batches()[0]


def bus_for(url: str, stream: str) -> Bus:
    return Bus(ClusterSettings(nats_url=url, stream=stream, subject_prefix=stream.lower()), "gw-test")


def test_a_scrape_larger_than_a_message_crosses_the_stream_whole(
    nats_server: str, stream_name: str, big_batch: pa.RecordBatch
) -> None:
    async def go() -> None:
        bus = bus_for(nats_server, stream_name)
        await bus.connect()
        try:
            result = ScrapeResult("ufm", "http://ufm:9001/metrics", True, (big_batch,))
            messages = encode_scrape(
                result, prefix=bus.cfg.subject_prefix, scrape_id="gw-test/i/1", slot=990.0, member="gw-test",
                finished_at=991.0, max_payload=bus.max_payload,
            )  # fmt: skip
            chunks = [m for m in messages if PART_HEADER in m.headers]
            assert len(chunks) >= 2 and all(len(m.data) < bus.max_payload for m in messages)
            await bus.publish(messages)
            await bus.publish(messages)  # re-sent: JetStream keeps one copy (Nats-Msg-Id)
            last = await bus.last_sequence()
            assert last == len(messages)
            sub = await bus.term_consumer(1, 1, ack_wait_s=60)
            assembler, reports = Assembler(), []
            while not reports:
                for m in await bus.fetch(sub, 2.0):
                    r = assembler.add(
                        m.subject, m.headers, m.data, m.metadata.sequence.stream, m, time.monotonic()
                    )
                    if r is not None:
                        reports.append(r)
            (report,) = reports
            assert report.result.batches[0].equals(big_batch)
            assert (report.slot, report.result.target) == (990.0, "http://ufm:9001/metrics")
        finally:
            await bus.close()

    asyncio.run(go())


def test_each_term_reads_from_where_the_last_acknowledged_and_the_replay_stops_there(
    nats_server: str, stream_name: str
) -> None:
    async def go() -> None:
        bus = bus_for(nats_server, stream_name)
        await bus.connect()
        try:
            before = time.time()
            for n in range(1, 6):
                messages = encode_scrape(
                    failed("snmp", f"leaf-{n}@10.0.0.{n}:161", "no answer"), prefix=bus.cfg.subject_prefix,
                    scrape_id=f"gw-test/i/{n}", slot=1000.0 + n, member="gw-test", finished_at=1000.0 + n,
                    max_payload=bus.max_payload,
                )  # fmt: skip
                await bus.publish(messages)
            assert await bus.judged_up_to(1) is None  # no term yet
            assert await bus.first_sequence_since(before - 60) == 1
            assert await bus.first_sequence_since(time.time() + 60) == 6
            assert await bus.reported_before("snmp", "leaf-3@10.0.0.3:161")
            assert not await bus.reported_before("snmp", "leaf-9@10.0.0.9:161")

            first = await bus.term_consumer(1, 1, ack_wait_s=60)
            got = await bus.fetch(first, 2.0)
            assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4, 5]
            await bus.ack(got[:3])  # term 1 judged three, then died
            floor = None
            for _ in range(50):
                floor = await bus.judged_up_to(2)
                if floor == 3:
                    break
                await asyncio.sleep(0.05)
            assert floor == 3

            since = datetime.now(UTC) - timedelta(minutes=5)
            replayed = [
                m.metadata.sequence.stream async for batch in bus.history(since, floor) for m in batch
            ]
            assert replayed == [1, 2, 3]

            second = await bus.term_consumer(2, floor + 1, ack_wait_s=60)
            assert [m.metadata.sequence.stream for m in await bus.fetch(second, 2.0)] == [4, 5]
            names = {c.name for c in await bus._js.consumers_info(stream_name)}
            assert names == {"leader-2"}  # term 1's is gone: a paused former leader takes nothing
            assert await bus.fetch(first, 0.5) == []
            assert await bus.consumer_gone(1) and not await bus.consumer_gone(2)

            # Term 2 dies before acknowledging anything: term 3 starts where term 2 started,
            # not from the stream's beginning (an unacknowledging consumer's floor reads 0).
            assert await bus.judged_up_to(3) == 3
            third = await bus.term_consumer(3, 4, ack_wait_s=60)
            # Term 2's leader, paused past its lease, wakes and makes its consumer again: it
            # must not take term 3's away.
            await bus.term_consumer(2, 4, ack_wait_s=60)
            names = {c.name for c in await bus._js.consumers_info(stream_name)}
            assert names == {"leader-2", "leader-3"}
            assert [m.metadata.sequence.stream for m in await bus.fetch(third, 2.0)] == [4, 5]
        finally:
            await bus.close()

    asyncio.run(go())


class _SpentPull:
    """A pull subscription whose fetch ends as nats-py's does when its deadline is spent
    between its two pull requests: the builtin TimeoutError, not nats.errors.TimeoutError."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def fetch(self, batch: int, timeout: float) -> list[object]:
        raise self.error


def test_a_fetch_that_runs_out_of_time_is_empty_not_a_failure() -> None:
    import nats.errors

    assert asyncio.run(Bus.fetch(_SpentPull(TimeoutError()), 0.1)) == []
    assert asyncio.run(Bus.fetch(_SpentPull(nats.errors.TimeoutError()), 0.1)) == []
    with pytest.raises(nats.errors.ConnectionClosedError):  # a real failure still is one
        asyncio.run(Bus.fetch(_SpentPull(nats.errors.ConnectionClosedError()), 0.1))
