"""NCCL's RAS subsystem (2.24+) -> ``nccl_rank_state``: which ranks are dead, unresponsive or behind.

Every NCCL process runs a RAS thread; together they watch each other over TCP on the bootstrap
network, and the one on each host answers clients on ``localhost:28028`` (``NCCL_RAS_ADDR``).
The protocol is text (src/ras/client_support.cc): the client sends ``CLIENT PROTOCOL 2`` and
gets ``SERVER PROTOCOL <n>``; ``TIMEOUT <s>`` and, since 2.28.7, ``SET FORMAT json`` answer
``OK`` (an older NCCL answers ``ERROR: Unknown command ...``, and the text output is used);
``STATUS`` sends the report and closes the connection; ``MONITOR`` (2.29+) keeps it open and
sends one event per peer change.

What each form says, as NCCL writes it (NCCL user guide "RAS", src/ras/client_support.cc):

- JSON ``STATUS`` (``SET FORMAT json``, NCCL 2.28.7+): NCCL 2.28.7 and 2.28.9 print it malformed
  when a rank is missing (``jsonWriteMissingRank`` in src/ras/client_support.cc writes
  ``"nvml_dev": %d`` with no comma before ``"status"``; fixed in 2.29.2). The one comma is put
  back and the report read, with a note saying so: a known upstream bug is not a broken source.
  Per communicator (``hash``, ``size``) its ``ranks`` (``status``:
  ``init_state`` 0 running / 7 initializing / else an error, ``finalize_called``,
  ``destroy_flag``, ``abort_flag``; ``collective_counts`` per collective type) and its
  ``missing_ranks`` (``status``: ``unresponsive``, ``considered_dead``; a missing rank that is
  neither is reachable but no longer a member: a tear-down, NCCL's ``NOCOMM``).
- text ``STATUS``: an ``Errors`` section with ``DEAD`` (processes RAS declared dead after 60 s
  without contact), ``INCOMPLETE`` (processes that gave no data) and per communicator
  ``#g-c (hash) INCOMPLETE`` (its missing ranks); a ``Warnings`` section with
  ``#g-c (hash) MISMATCH`` (ranks that launched different numbers of collectives, or have
  different status). Outlier ranks are listed as ``Rank R -- GPU G managed by process P on node
  H``; the majority as ``N ranks have launched up to operation M`` (kept as a row with no rank,
  so a reader knows how far the others got).
- ``MONITOR`` events: ``[time] PEER_DEAD: Process P on node H managing GPU G`` or the JSON
  object with ``event`` and ``peer``. ``PEER_DEAD``/``PEER_TIMEOUT_DEAD`` mean dead,
  ``PEER_UNRESPONSIVE`` unresponsive; the other events (``PEER_NEW``, ``PEER_RETRY``, ...) are
  not a rank's state and are left out.

RAS names nodes by their bootstrap address (``172.16.64.213``); ``host_names`` maps an address
to the inventory's host name (an unmapped address is kept as printed). Rows are stamped with
the poll's time, not RAS's local-time ``timestamp`` (the service's clock judges times).
A report that is not RAS output is refused with a ``ValueError`` naming the problem; a rank
entry that cannot be read is skipped and counted, never guessed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa

from graywire.collectors.base import MALFORMED_LINE, ScrapeResult, failed
from graywire.collectors.nccl.inspector import iter_json_values
from graywire.collectors.schemas import NCCL_RANK_STATE, TS, fitted_array

RAS_PORT = 28028
CLIENT_PROTOCOL = 2
#: Rank states that are a fault, and the ones that are a job living or ending normally.
FAULT_STATES = frozenset({"dead", "unresponsive", "timeout", "error"})
MONITOR_STATES = {"PEER_DEAD": "dead", "PEER_TIMEOUT_DEAD": "dead", "PEER_UNRESPONSIVE": "unresponsive"}
_STATUS_NAMES = {
    "NOCOMM": "nocomm",
    "UNKNOWN": "nocomm",
    "INIT": "init",
    "RUNNING": "running",
    "FINALIZE": "finalize",
    "ABORT": "abort",
}
_NCCL_IN_PROGRESS = 7


@dataclass
class RankStateRows:
    """``nccl_rank_state`` rows gathered by a parser, built into one batch at the end."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    skipped: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(
        self,
        *,
        job: str,
        state: str,
        source: str,
        communicator: str | None = None,
        rank: int | None = None,
        nranks: int | None = None,
        host: str | None = None,
        pid: int | None = None,
        device: int | None = None,
        collective: str | None = None,
        seq: int | None = None,
        detail: str | None = None,
    ) -> None:
        self.rows.append(
            (job, communicator, rank, nranks, host, pid, device, state, collective, seq, source, detail)
        )

    def skip(self, why: str) -> None:
        self.skipped += 1
        if len(self.problems) < 5:
            self.problems.append(why)

    def note(self, what: str) -> None:
        """Something read that its source got wrong and graywire read anyway (not a skip)."""
        if what not in self.notes:
            self.notes.append(what)

    def __len__(self) -> int:
        return len(self.rows)

    def to_batch(self, when: datetime) -> pa.RecordBatch:
        cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * 12
        names = (
            "job",
            "communicator",
            "rank",
            "nranks",
            "host",
            "pid",
            "device",
            "state",
            "collective",
            "seq",
            "source",
            "detail",
        )
        arrays = [pa.array([when.astimezone(UTC)] * len(self.rows), TS)]
        for name, values in zip(names, cols, strict=True):
            typ = NCCL_RANK_STATE.field(name).type
            base = typ.value_type if pa.types.is_dictionary(typ) else typ
            arr = fitted_array(list(values), base)
            arrays.append(arr.dictionary_encode().cast(typ) if pa.types.is_dictionary(typ) else arr)
        return pa.RecordBatch.from_arrays(arrays, schema=NCCL_RANK_STATE)


def comm_id(value: object) -> str | None:
    """A communicator hash as ``0x`` + 16 hex digits: JSON prints ``0xae94...``, text ``ae94...``."""
    if isinstance(value, str) and re.fullmatch(r"(?:0x)?[0-9a-fA-F]{1,16}", value.strip()):
        return f"0x{int(value.strip(), 16):016x}"
    return None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _host(addr: object, names: Mapping[str, str] | None) -> str | None:
    if not isinstance(addr, str) or not addr.strip():
        return None
    a = addr.strip()
    return (names or {}).get(a, a)


# -- STATUS, JSON ------------------------------------------------------------------------------------


#: NCCL 2.28.7-2.28.9's missing comma: a missing rank's ``"nvml_dev": N`` line, then ``"status"``.
_MISSING_COMMA = re.compile(r'("nvml_dev": -?\d+)(\s*\n\s*"status": \{)')
MISSING_COMMA_NOTE = "RAS JSON of NCCL 2.28.7-2.28.9: the comma missing after nvml_dev put back"


def repair_json(text: str) -> tuple[str, bool]:
    """``text`` with NCCL 2.28.7-2.28.9's known missing comma put back, and whether it was.

    Only text that is not JSON is touched, and only at that one place: the key pair is next to
    each other nowhere else in a report.
    """
    try:
        json.loads(text)
    except ValueError:
        fixed, count = _MISSING_COMMA.subn(r"\1,\2", text)
        return fixed, count > 0
    return text, False


def parse_status_json(
    text: str, job: str, rows: RankStateRows, host_names: Mapping[str, str] | None = None
) -> None:
    """One ``SET FORMAT json`` + ``STATUS`` report -> a row per rank and per missing rank."""
    text, repaired = repair_json(text)
    if repaired:
        rows.note(MISSING_COMMA_NOTE)
    values = [v for _, v in iter_json_values(text)]
    if len(values) != 1 or not isinstance(values[0], dict):
        raise ValueError("not a RAS JSON status: expected one JSON object")
    doc = values[0]
    comms = doc.get("communicators")
    if not isinstance(comms, list):
        raise ValueError("not a RAS JSON status: no 'communicators' list")
    for ci, comm in enumerate(comms):
        cid = comm_id(comm.get("hash")) if isinstance(comm, dict) else None
        if cid is None:
            rows.skip(f"communicator {ci}: no hash")
            continue
        size = _int(comm.get("size"))
        for r in comm.get("ranks") or []:
            st = r.get("status") if isinstance(r, dict) else None
            rank = _int(r.get("rank")) if isinstance(r, dict) else None
            if not isinstance(st, dict) or rank is None:
                rows.skip(f"communicator {cid}: a rank without rank number or status")
                continue
            init, err = _int(st.get("init_state")), _int(st.get("async_error"))
            if st.get("abort_flag") is True:
                state = "abort"
            elif st.get("finalize_called") is True or st.get("destroy_flag") is True:
                state = "finalize"
            elif init not in (0, _NCCL_IN_PROGRESS) or err not in (0, _NCCL_IN_PROGRESS, None):
                state = "error"
            else:
                state = "running" if init == 0 else "init"
            counts = r.get("collective_counts")
            seq = None
            if isinstance(counts, dict) and all(_int(v) is not None and v >= 0 for v in counts.values()):
                seq = sum(counts.values())
            detail = None if state != "error" else f"init_state {init}, async_error {err}"
            rows.add(
                job=job,
                communicator=cid,
                rank=rank,
                nranks=size,
                host=_host(r.get("host"), host_names),
                pid=_int(r.get("pid")),
                device=_int(r.get("nvml_dev")),
                state=state,
                seq=seq,
                source="ras",
                detail=detail,
            )
        for r in comm.get("missing_ranks") or []:
            st = r.get("status") if isinstance(r, dict) else None
            rank = _int(r.get("rank")) if isinstance(r, dict) else None
            if not isinstance(st, dict) or rank is None:
                rows.skip(f"communicator {cid}: a missing rank without rank number or status")
                continue
            if st.get("considered_dead") is True:
                state = "dead"
            elif st.get("unresponsive") is True:
                state = "unresponsive"
            else:
                state = "nocomm"  # reachable, but no longer a member: a tear-down
            rows.add(
                job=job,
                communicator=cid,
                rank=rank,
                nranks=size,
                host=_host(r.get("host"), host_names),
                pid=_int(r.get("pid")),
                device=_int(r.get("nvml_dev")),
                state=state,
                source="ras",
            )


# -- STATUS, text ------------------------------------------------------------------------------------

_SECTION = re.compile(r"^(Errors|Warnings|Job summary|Communicators.*)$")
_BLOCK = re.compile(r"^(?:#(?P<g>\d+)-(?P<c>\d+) \((?P<hash>[0-9a-fA-F]{1,16})\) )?(?P<what>[A-Z]+)$")
_PROCESS = re.compile(
    r"^Process (?P<pid>\d+) on node (?P<node>\S+) managing GPUs? (?P<gpus>\d+(?:,\d+)*)"
    r"(?: \(NVML (?P<nvml>[\d,]+)\))?"
)
_RANK = re.compile(
    r"^Rank (?P<rank>\d+)(?: has (?:status (?P<status>[A-Z]+)|launched up to operation (?P<op>\d+)"
    r"|not launched any operations))?"
    r"(?: -- (?:GPU (?P<gpu>\d+)(?: \(NVML (?P<nvml>\d+)\))? managed by process (?P<pid>\d+)"
    r" on node (?P<node>\S+)"
    r"|\[process information not found\]))?$"
)
_GROUP = re.compile(
    r"^(?P<n>\d+) ranks have (?:status (?P<status>[A-Z]+)|launched up to operation (?P<op>\d+)"
    r"|not launched any operations)$"
)
_MISSING_RANK = re.compile(r"^The missing ranks?: (?P<ranks>\d+(?:[, ]+\d+)*)$")
_DIFF_COUNTS = re.compile(
    r"^Communicator ranks have different (?:(?P<coll>(?!collective )\w+) )?(?:collective )?operation counts$"
)


def parse_status_text(
    text: str, job: str, rows: RankStateRows, host_names: Mapping[str, str] | None = None
) -> None:
    """A text ``STATUS`` report -> rows for the dead, missing and mismatched ranks it lists.

    A healthy report lists no rank (its summary table says RUNNING/OK), so it gives no rows:
    that is "nothing wrong was said", which the detector treats as no news, not as each rank
    confirmed healthy.
    """
    if "Job summary" not in text and "Communicators" not in text and "Errors" not in text:
        raise ValueError("not a RAS text status: no 'Job summary', 'Communicators' or 'Errors' section")
    block: str | None = None
    cid: str | None = None
    group_state: str | None = None
    group_op: int | None = None
    collective: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or set(line) == {"="}:
            continue
        if _SECTION.match(line):
            block = None
            continue
        if not raw.startswith(" ") and (m := _BLOCK.match(line)):
            block, cid = m.group("what"), comm_id(m.group("hash")) if m.group("hash") else None
            group_state, group_op, collective = None, None, None
            continue
        if block is None:
            continue  # the summary tables
        if block in ("DEAD", "INCOMPLETE") and cid is None and (m := _PROCESS.match(line)):
            state = "dead" if block == "DEAD" else "unresponsive"
            nvml = (m.group("nvml") or m.group("gpus")).split(",")
            for gpu in nvml:
                rows.add(
                    job=job,
                    host=_host(m.group("node"), host_names),
                    pid=int(m.group("pid")),
                    device=int(gpu),
                    state=state,
                    source="ras",
                )
            continue
        if cid is None:
            continue
        if m := _DIFF_COUNTS.match(line):
            collective, group_state = m.group("coll"), "running"
            continue
        if line == "Communicator ranks have different status":
            group_state, collective = None, None
            continue
        if m := _GROUP.match(line):
            group_op = int(m.group("op")) if m.group("op") else (0 if "not launched" in line else None)
            group_state = _STATUS_NAMES.get(m.group("status") or "", "running")
            if group_op is not None:  # how far the majority got: a row with no rank
                rows.add(
                    job=job,
                    communicator=cid,
                    state="running",
                    collective=collective,
                    seq=group_op,
                    source="ras",
                    detail=f"{m.group('n')} ranks",
                )
            continue
        if m := _MISSING_RANK.match(line):
            for r in re.findall(r"\d+", m.group("ranks")):
                rows.add(job=job, communicator=cid, rank=int(r), state="unresponsive", source="ras")
            continue
        if m := _RANK.match(line):
            if block == "INCOMPLETE":
                state: str | None = "unresponsive"
                op = None
            elif m.group("status"):
                state, op = _STATUS_NAMES.get(m.group("status")), None
            elif m.group("op") or "not launched" in line:
                state, op = "running", int(m.group("op") or 0)
            else:
                state, op = group_state, group_op
            if state is None:
                rows.skip(f"{line!r}: unknown status")
                continue
            gpu = m.group("nvml") or m.group("gpu")
            rows.add(
                job=job,
                communicator=cid,
                rank=int(m.group("rank")),
                host=_host(m.group("node"), host_names),
                pid=int(m.group("pid")) if m.group("pid") else None,
                device=int(gpu) if gpu else None,
                state=state,
                collective=collective,
                seq=op,
                source="ras",
            )
            continue
        if block in ("INCOMPLETE", "MISMATCH") and not line.startswith(("Missing", "[could not")):
            rows.skip(f"{line[:80]!r}: not a RAS line graywire reads")


def parse_status(
    text: str, job: str, rows: RankStateRows, host_names: Mapping[str, str] | None = None
) -> None:
    """A ``STATUS`` report in either format (JSON starts with ``{``; ``[`` is refused as JSON)."""
    if text.lstrip().startswith(("{", "[")):
        parse_status_json(text, job, rows, host_names)
    else:
        parse_status_text(text, job, rows, host_names)


# -- MONITOR -----------------------------------------------------------------------------------------

_EVENT = re.compile(r"^\[(?P<ts>[^\]]+)\] (?P<event>[A-Z_]+): (?P<rest>.*)$")


def parse_monitor(
    text: str, job: str, rows: RankStateRows, host_names: Mapping[str, str] | None = None
) -> None:
    """``MONITOR`` output (text lines or JSON objects, after its banner) -> dead and unresponsive rows."""
    body = text.lstrip()
    if body.startswith("{"):
        for line, ev in iter_json_values(body):
            if not isinstance(ev, dict) or not isinstance(ev.get("event"), str):
                rows.skip(f"line {line}: not a RAS event")
                continue
            state = MONITOR_STATES.get(ev["event"])
            peer = ev.get("peer")
            if state is None:
                continue
            if not isinstance(peer, dict) or "host" not in peer:
                rows.skip(f"line {line}: {ev['event']} names no process")
                continue
            devs = peer.get("nvml_devs") if isinstance(peer.get("nvml_devs"), list) else [None]
            for d in devs or [None]:
                rows.add(
                    job=job,
                    host=_host(peer.get("host"), host_names),
                    pid=_int(peer.get("pid")),
                    device=_int(d),
                    state=state,
                    source="ras_monitor",
                    detail=str(ev.get("details") or "") or None,
                )
        return
    for raw in text.splitlines():
        m = _EVENT.match(raw.strip())
        if m is None:
            continue  # the banner and its underline
        state = MONITOR_STATES.get(m.group("event"))
        if state is None:
            continue
        p = _PROCESS.match(m.group("rest"))
        if p is None:
            rows.skip(f"{m.group('event')}: {m.group('rest')[:60]!r} names no process")
            continue
        for gpu in (p.group("nvml") or p.group("gpus")).split(","):
            rows.add(
                job=job,
                host=_host(p.group("node"), host_names),
                pid=int(p.group("pid")),
                device=int(gpu),
                state=state,
                source="ras_monitor",
                detail=m.group("rest")[p.end() :].strip() or None,
            )


# -- the client --------------------------------------------------------------------------------------


async def query_status(host: str, port: int, timeout_s: float, fmt: Literal["json", "text"] = "json") -> str:
    """One ``STATUS`` report over RAS's client protocol; JSON when the NCCL is new enough."""
    reader, writer = await asyncio.open_connection(host, port)
    try:

        async def ask(cmd: str) -> str:
            writer.write(cmd.encode() + b"\n")
            await writer.drain()
            return (await reader.readline()).decode("utf-8", "replace").strip()

        hello = await ask(f"CLIENT PROTOCOL {CLIENT_PROTOCOL}")
        if not hello.upper().startswith("SERVER PROTOCOL"):
            raise ValueError(f"not a NCCL RAS server: it answered {hello[:60]!r}")
        # RAS waits this long for the other processes: less than our own deadline.
        if (await ask(f"TIMEOUT {max(1, int(timeout_s) - 1)}")).upper() != "OK":
            raise ValueError("the RAS server refused TIMEOUT")
        if fmt == "json" and (await ask("SET FORMAT json")).upper() != "OK":
            fmt = "text"  # NCCL before 2.28.7: text only
        writer.write(b"STATUS\n")
        await writer.drain()
        return (await reader.read()).decode("utf-8", "replace")  # the server closes after the report
    finally:
        writer.close()


class NcclRasCollector:
    """``STATUS`` of the NCCL job whose RAS listens at ``host:port``, every scrape.

    No job running there is a failed scrape (connection refused), never "all ranks healthy".
    """

    source = "nccl_ras"

    def __init__(
        self,
        job: str,
        host: str = "localhost",
        port: int = RAS_PORT,
        *,
        host_names: Mapping[str, str] | None = None,
        timeout_s: float = 6.0,
        format: Literal["json", "text"] = "json",
    ) -> None:
        self.job, self.host, self.port = job, host, port
        self.host_names = dict(host_names or {})
        self.timeout_s, self.format = timeout_s, format
        self.target = f"{host}:{port}"

    async def aclose(self) -> None:
        """Nothing held open between scrapes: one connection per report."""

    async def scrape(self) -> ScrapeResult:
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                text = await query_status(self.host, self.port, self.timeout_s, self.format)
                rows = RankStateRows()
                try:
                    parse_status(text, self.job, rows, self.host_names)
                except ValueError as e:
                    if not text.lstrip().startswith("{"):
                        raise
                    # JSON no repair reads (a release's bug not yet known): the same report as
                    # text, on a connection of its own (STATUS closes the first).
                    rows = RankStateRows()
                    text = await query_status(self.host, self.port, self.timeout_s, "text")
                    parse_status(text, self.job, rows, self.host_names)
                    rows.note(f"RAS JSON unreadable ({e}): read the text report")
        except TimeoutError:
            return failed(
                self.source, self.target, f"timed out after {self.timeout_s:g} s", time.perf_counter() - t0
            )
        except Exception as e:  # the contract: never raise out of a scrape
            return failed(self.source, self.target, e, time.perf_counter() - t0)
        batch = rows.to_batch(datetime.now(UTC))
        return ScrapeResult(
            self.source,
            self.target,
            ok=True,
            batches=(batch,),
            error="; ".join(rows.problems + rows.notes) or None,
            duration_s=time.perf_counter() - t0,
            skipped={MALFORMED_LINE: rows.skipped} if rows.skipped else {},
        )
