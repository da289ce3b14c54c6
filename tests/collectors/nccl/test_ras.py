"""NCCL RAS output, as NCCL's guide prints it (ras_reports/, see SOURCES.md), read into rank states."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graywire.collectors.nccl.ras import NcclRasCollector, RankStateRows, parse_monitor, parse_status

HERE = Path(__file__).parent / "ras_reports"
NAMES = {"172.16.64.213": "gpu-0042"}


def rows_of(name: str) -> list[dict]:
    rows = RankStateRows()
    fn = parse_monitor if name.startswith("monitor") else parse_status
    fn((HERE / name).read_text(), "job-1", rows, NAMES)
    assert rows.skipped == 0, rows.problems
    return rows.to_batch(datetime(2026, 1, 5, tzinfo=UTC)).to_pylist()


def test_json_status_gives_every_rank_and_the_missing_one_unresponsive() -> None:
    got = {(r["rank"], r["state"], r["device"], r["pid"]) for r in rows_of("status_doc.json")}
    assert got == {(0, "running", 0, 1524344), (1, "unresponsive", 1, 1524345)}
    assert {r["communicator"] for r in rows_of("status_doc.json")} == {"0xae94423cfbb2ef4a"}


def test_text_dead_process_is_named_by_host_and_gpu_and_the_missing_rank_by_number() -> None:
    got = rows_of("status_dead.txt")
    assert [(r["host"], r["device"], r["pid"], r["state"]) for r in got if r["rank"] is None] == [
        ("gpu-0042", 5, 3487984, "dead")
    ]
    assert [(r["communicator"], r["rank"], r["state"]) for r in got if r["rank"] is not None] == [
        ("0xcf264af53edbe986", 21, "unresponsive")
    ]


def test_text_incomplete_process_is_unresponsive_not_dead() -> None:
    assert {r["state"] for r in rows_of("status_incomplete.txt")} == {"unresponsive"}


def test_text_mismatch_keeps_the_majority_count_and_lists_the_ranks_behind() -> None:
    got = rows_of("status_mismatch.txt")
    majority = [r for r in got if r["rank"] is None]
    assert [(r["seq"], r["detail"]) for r in majority] == [(6650, "26 ranks"), (6649, "6 ranks")]
    assert sorted(r["rank"] for r in got if r["rank"] is not None) == [0, 2, 3, 4, 5, 7]
    assert {r["seq"] for r in got if r["rank"] is not None} == {6649}
    assert {r["collective"] for r in got} == {None}


def test_text_teardown_is_running_and_finalizing_ranks_never_a_fault() -> None:
    got = rows_of("status_teardown.txt")
    assert {r["state"] for r in got} == {"running", "finalize"}
    assert sorted(r["rank"] for r in got if r["state"] == "finalize") == [4, 20]


@pytest.mark.parametrize("name", ["monitor_doc.txt", "monitor_doc.json"])
def test_monitor_peer_dead_in_text_and_json(name: str) -> None:
    assert [(r["host"], r["pid"], r["device"], r["state"], r["source"]) for r in rows_of(name)] == [
        ("172.16.64.245", 1524345, 1, "dead", "ras_monitor")
    ]


def test_monitor_ignores_events_that_are_not_a_rank_state() -> None:
    rows = RankStateRows()
    parse_monitor("[2025-12-19 13:07:01] PEER_NEW: Process 1 on node 10.0.0.1 managing GPU 0\n", "j", rows)
    assert len(rows) == 0 and rows.skipped == 0


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[1, 2]", "one JSON object"),
        ('{"nccl_version": "2.29.1"}', "communicators"),
        ("hello", "not a RAS text"),
    ],
)
def test_what_is_not_ras_output_is_refused_by_name(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_status(text, "j", RankStateRows())


def test_a_rank_entry_without_status_is_skipped_and_counted() -> None:
    rows = RankStateRows()
    parse_status('{"communicators": [{"hash": "0x1", "size": 2, "ranks": [{"rank": 0}]}]}', "j", rows)
    assert len(rows) == 0 and rows.skipped == 1 and "rank" in rows.problems[0]


async def _fake_ras(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The server side of src/ras/client_support.cc: handshake, TIMEOUT, SET FORMAT, STATUS."""
    while line := (await reader.readline()).decode().strip():
        if line.upper().startswith("CLIENT PROTOCOL"):
            writer.write(b"SERVER PROTOCOL 2\n")
        elif line.upper().startswith(("TIMEOUT", "SET FORMAT")):
            writer.write(b"OK\n")
        elif line.upper() == "STATUS":
            writer.write((HERE / "status_doc.json").read_bytes())
            await writer.drain()
            writer.close()
            return
        await writer.drain()


def test_the_collector_speaks_the_client_protocol_and_a_closed_socket_is_a_failed_scrape() -> None:
    async def go() -> tuple:
        server = await asyncio.start_server(_fake_ras, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            ok = await NcclRasCollector("job-1", "127.0.0.1", port, timeout_s=5).scrape()
        gone = await NcclRasCollector("job-1", "127.0.0.1", port, timeout_s=5).scrape()
        return ok, gone

    ok, gone = asyncio.run(go())
    assert ok.ok and ok.batches[0].num_rows == 2
    assert not gone.ok and gone.batches == () and gone.error


CORPUS_RAS = HERE.parents[2] / "fixtures" / "corpus" / "nccl_ras"


def _ras_server(json_report: bytes, text_report: bytes):
    """A RAS server answering STATUS with ``json_report`` after ``SET FORMAT json``, else text."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fmt = "text"
        while line := (await reader.readline()).decode().strip():
            if line.upper().startswith("CLIENT PROTOCOL"):
                writer.write(b"SERVER PROTOCOL 2\n")
            elif line.upper().startswith("SET FORMAT"):
                fmt = "json"
                writer.write(b"OK\n")
            elif line.upper().startswith("TIMEOUT"):
                writer.write(b"OK\n")
            elif line.upper() == "STATUS":
                writer.write(json_report if fmt == "json" else text_report)
                await writer.drain()
                writer.close()
                return
            await writer.drain()

    return serve


def _scrape(serve) -> object:
    async def go() -> object:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await NcclRasCollector("job-1", "127.0.0.1", port, timeout_s=5).scrape()

    return asyncio.run(go())


def test_the_2_28_9_missing_comma_is_repaired_and_the_missing_rank_read_at_once() -> None:
    """NCCL 2.28.7-2.28.9 print a missing rank without the comma after its nvml_dev: the report
    is read (never a failed scrape, never a backoff of a healthy source), and the scrape says so."""
    report = (CORPUS_RAS / "nccl_2.28.9_source_built_guide_sample_missing_rank.json").read_bytes()
    res = _scrape(_ras_server(report, b""))
    assert res.ok and res.error is not None and "comma" in res.error
    rows = res.batches[0].to_pylist()
    assert sorted((r["rank"], r["state"]) for r in rows) == [(0, "running"), (1, "unresponsive")]


def test_json_no_repair_reads_falls_back_to_the_text_report() -> None:
    text = (HERE / "status_dead.txt").read_bytes()
    res = _scrape(_ras_server(b'{"nccl_version": "2.28.8", "communicators": [ {"hash": }', text))
    assert res.ok and "read the text report" in (res.error or "")
    assert "dead" in {r["state"] for r in res.batches[0].to_pylist()}
