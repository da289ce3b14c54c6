"""PyTorch's Flight Recorder dumps and ProcessGroupNCCL watchdog lines -> ``nccl_rank_state``.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE=N`` (N > 0) each rank keeps its last N collectives; with
``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` it writes them on a watchdog timeout to
``${TORCH_NCCL_DEBUG_INFO_TEMP_FILE}<rank>`` (default ``/tmp/nccl_trace_rank_<rank>``), one file per
rank. The file is a pickle of a dict (PyTorch's FlightRecorder.hpp; the JSON variant has the
same keys): ``version``, ``pg_config`` (per process group ``name``, ``desc``, ``ranks``),
``pg_status`` (``last_enqueued_collective``, ``last_started_collective``,
``last_completed_collective``) and ``entries`` (``collective_seq_id``, ``profiling_name`` such as
``nccl:all_reduce``, ``state`` scheduled/started/completed, ``time_created_ns``, ``timeout_ms``,
``pg_id``, ``process_group``, ``is_p2p``).

A dump becomes one row per process group: ``timeout`` with the first collective that did not
complete (its ``seq`` and name) when one is older than its own ``timeout_ms`` at the time of the
dump, else ``running`` with ``seq`` = the last collective it enqueued. A rank whose
``last_enqueued`` is below the timed-out collective of its peers never joined it: the rank to
look at (what ``torchfrtrace`` calls "missing ranks").

The watchdog's own line (``[Rank 3] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=64214, OpType=ALLGATHER, ...) ran for 600081 milliseconds before timing out.``,
also behind a ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` prefix in newer releases) becomes a
``timeout`` row too.

Dumps are unpickled with no class allowed: PyTorch writes only dicts, lists, tuples, strings and
numbers; anything else is refused (a pickle can run code).
"""

from __future__ import annotations

import io
import json
import pickle
import re
from typing import Any

from graywire.collectors.nccl.ras import RankStateRows
from graywire.collectors.text import plain_text

#: A rank's dump file: ``<prefix><rank>`` (the prefix is TORCH_NCCL_DEBUG_INFO_TEMP_FILE's).
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.json)?$")
#: ``[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64214, OpType=ALLGATHER,
#: NumelIn=…, NumelOut=…, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.``
#: (whitespace may be a line break: a terminal wraps it after ``timeout:``).
_WATCHDOG = re.compile(
    r"\[(?:PG (?:ID )?(?P<pgid>\d+)(?: PG GUID [^\s(\]]+)?\s*(?:\((?P<desc>[^)]*)\))? )?Rank (?P<rank>\d+)\]"
    r"\s*Watchdog caught collective operation timeout:\s*"
    r"WorkNCCL\(SeqNum=(?P<seq>\d+),\s*OpType=(?P<op>\w+)"
    r"(?:[^\n]*?\)\s+ran for (?P<ms>\d+) milliseconds|[^\n]*?\))"
)
#: ``[PG ID 11 PG GUID 119 Rank 1]`` (2.4+), ``[PG ID 0 PG GUID 0(default_pg) Rank 0]``, ``[PG 0
#: (default_pg) Rank 12]`` (2.3): the process group a line speaks for, and the rank in it.
_PG = re.compile(
    r"\[PG (?:ID )?(?P<pgid>\d+)(?: PG GUID (?P<guid>[^\s(\]]+))?\s*(?:\((?P<desc>[^)]*)\))?"
    r" Rank (?P<rank>\d+)\]"
)
#: What a process group's line says of the work that failed: its sequence number.
_PG_WORK = re.compile(
    r"\s*(?:Exception \(either an error or timeout\) detected\s+by watchdog at work:"
    r"|failure detected by watchdog at work sequence id:"
    r"|Process group watchdog thread terminated with exception:\s*\[Rank \d+\]\s*Watchdog caught collective "
    r"operation timeout:\s*WorkNCCL\(SeqNum=)\s*(?P<seq>\d+)"
)
#: The global rank PyTorch puts in front of a process's log lines: ``[rank13]:[E218 …]``.
_GLOBAL_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:")


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise ValueError(f"a Flight Recorder dump holds only plain values, not {module}.{name}")


def load_dump(data: bytes) -> dict[str, Any]:
    """A dump's dict, from its pickle or its JSON form; ``ValueError`` when it is neither."""
    if data[:1] in (b"{", b" ", b"\n"):
        try:
            doc = json.loads(data)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a Flight Recorder JSON dump ({e.msg})") from None
    else:
        try:
            doc = _PlainUnpickler(io.BytesIO(data)).load()
        except ValueError:
            raise
        except Exception as e:
            raise ValueError(f"not a Flight Recorder pickle ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list) or "version" not in doc:
        raise ValueError("not a Flight Recorder dump: no 'version' and 'entries'")
    return doc


def rank_of_file(name: str) -> int | None:
    """The rank a dump file is for: the digits its name ends with (``nccl_trace_rank_3``)."""
    m = _RANK_SUFFIX.search(name)
    return int(m.group(1)) if m else None


def _pg_key(pg: Any) -> str:
    return str(pg[0]) if isinstance(pg, list | tuple) and pg else str(pg)


def _pg_id(entry: dict[str, Any]) -> str | None:
    """An entry's process group id (what ``pg_status`` is keyed by), as a string."""
    pg = entry.get("pg_id")
    return str(pg) if isinstance(pg, int) and not isinstance(pg, bool) else None


def parse_dump(
    data: bytes, job: str, rows: RankStateRows, *, rank: int | None, host: str | None, dumped_at_ns: int
) -> None:
    """One rank's dump -> a row per process group (see the module docstring)."""
    doc = load_dump(data)
    rank = doc.get("rank", rank) if isinstance(doc.get("rank"), int) else rank
    status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
    config = doc.get("pg_config") if isinstance(doc.get("pg_config"), dict) else {}
    stuck: dict[str, dict[str, Any]] = {}
    # ``pg_status`` is keyed by process group id, ``pg_config`` by group name (a split's name is
    # a hash): the entries name both, and tie them.
    name_of: dict[str, str] = {}
    desc_of: dict[str, str] = {}
    for e in doc["entries"]:
        if not isinstance(e, dict):
            continue
        pg = _pg_id(e)
        group = e.get("process_group")
        if pg is not None and isinstance(group, list | tuple) and group:
            name_of.setdefault(pg, str(group[0]))
            if len(group) > 1 and group[1]:
                desc_of.setdefault(pg, str(group[1]))
        if e.get("is_p2p") is True or e.get("state") == "completed":
            continue
        seq, created, timeout = e.get("collective_seq_id"), e.get("time_created_ns"), e.get("timeout_ms")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (seq, created, timeout)):
            rows.skip(f"rank {rank}: an entry without collective_seq_id, time_created_ns or timeout_ms")
            continue
        if pg is None:
            pg = _pg_key(e.get("process_group"))
        if dumped_at_ns - created >= timeout * 1_000_000 and (
            pg not in stuck or seq < stuck[pg]["collective_seq_id"]
        ):
            stuck[pg] = e
    for pg in sorted(set(status) | set(stuck), key=str):
        cfg = config.get(pg) if isinstance(config.get(pg), dict) else None
        if cfg is None:
            by_name = config.get(name_of.get(pg, ""))
            cfg = by_name if isinstance(by_name, dict) else {}
        nranks = (
            len(json.loads(cfg["ranks"]))
            if isinstance(cfg.get("ranks"), str) and cfg["ranks"].startswith("[")
            else None
        )
        desc = cfg.get("desc") or desc_of.get(pg)
        comm = f"pg:{pg}" + (f"({desc})" if desc else "")
        if pg in stuck:
            e = stuck[pg]
            name = str(e.get("profiling_name") or "")
            rows.add(
                job=job,
                communicator=comm,
                rank=rank,
                nranks=nranks,
                host=host,
                state="timeout",
                collective=name.removeprefix("nccl:") or None,
                seq=e["collective_seq_id"],
                source="flight_recorder",
                detail=f"{name} {e.get('state')} for over {e['timeout_ms']} ms",
            )
            continue
        st = status.get(pg)
        last = st.get("last_enqueued_collective") if isinstance(st, dict) else None
        if isinstance(last, int) and not isinstance(last, bool):
            rows.add(
                job=job,
                communicator=comm,
                rank=rank,
                nranks=nranks,
                host=host,
                state="running",
                seq=last,
                source="flight_recorder",
            )


def parse_watchdog_lines(lines: list[str], job: str, rows: RankStateRows, *, host: str | None) -> None:
    """ProcessGroupNCCL watchdog timeout lines (anywhere in a job's log) -> ``timeout`` rows.

    One row per rank and timed-out work, however many lines repeat it (the watchdog's line, the
    exception that ends its thread, the ``what():`` of the abort). The rank is the global one of
    the ``[rankN]:`` prefix where the log has it, else the ``[Rank N]`` of the line (a rank in its
    process group); the process group is the one a ``[PG ID …]`` line names for the same work.
    """
    text = plain_text("\n".join(lines))
    found: dict[tuple[int, int, str], dict[str, Any]] = {}
    groups: dict[tuple[int, int], tuple[str, str | None, int]] = {}
    for m in _PG.finditer(text):
        if w := _PG_WORK.match(text, m.end()):
            who = _global_rank(text, m.start(), int(m.group("rank")))
            groups[(who, int(w.group("seq")))] = (m.group("pgid"), m.group("desc"), int(m.group("rank")))
    for m in _WATCHDOG.finditer(text):
        rank, seq, op = int(m.group("rank")), int(m.group("seq")), m.group("op").lower()
        who = _global_rank(text, m.start(), rank)
        hit = found.setdefault((who, seq, op), {"rank": rank, "ms": None})
        if m.group("ms"):
            hit["ms"] = m.group("ms")
        if m.group("pgid") is not None:
            groups.setdefault((who, seq), (m.group("pgid"), m.group("desc"), rank))
    for (who, seq, op), hit in found.items():
        pg = groups.get((who, seq))
        comm = None
        detail = f"ran for {hit['ms']} ms before timing out" if hit["ms"] else None
        if pg is not None:
            comm = f"pg:{pg[0]}" + (f"({pg[1]})" if pg[1] else "")
            if pg[2] != who:
                detail = ", ".join(x for x in (detail, f"rank {pg[2]} of process group {pg[0]}") if x)
        rows.add(
            job=job,
            communicator=comm,
            rank=who,
            host=host,
            state="timeout",
            collective=op,
            seq=seq,
            source="watchdog",
            detail=detail,
        )


def _global_rank(text: str, at: int, rank: int) -> int:
    """The ``[rankN]:`` prefix of the line holding ``text[at]`` (the line a terminal may have
    wrapped from), else ``rank``."""
    start = text.rfind("\n", 0, at) + 1
    prefixes = list(_GLOBAL_RANK.finditer(text, start, at))
    return int(prefixes[-1].group("rank")) if prefixes else rank
