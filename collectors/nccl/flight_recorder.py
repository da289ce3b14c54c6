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

#: A rank's dump file: ``<prefix><rank>`` (the prefix is TORCH_NCCL_DEBUG_INFO_TEMP_FILE's).
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.json)?$")
_WATCHDOG = re.compile(
    r"\[(?:PG ID (?P<pgid>\d+) PG GUID (?P<guid>[^\s(]+)(?:\((?P<desc>[^)]*)\))? )?Rank (?P<rank>\d+)\]\s*"
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"[^)]*\)(?: ran for (?P<ms>\d+) milliseconds before timing out)?"
)


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


def parse_dump(
    data: bytes, job: str, rows: RankStateRows, *, rank: int | None, host: str | None, dumped_at_ns: int
) -> None:
    """One rank's dump -> a row per process group (see the module docstring)."""
    doc = load_dump(data)
    rank = doc.get("rank", rank) if isinstance(doc.get("rank"), int) else rank
    status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
    config = doc.get("pg_config") if isinstance(doc.get("pg_config"), dict) else {}
    stuck: dict[str, dict[str, Any]] = {}
    for e in doc["entries"]:
        if not isinstance(e, dict) or e.get("is_p2p") is True or e.get("state") == "completed":
            continue
        seq, created, timeout = e.get("collective_seq_id"), e.get("time_created_ns"), e.get("timeout_ms")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (seq, created, timeout)):
            rows.skip(f"rank {rank}: an entry without collective_seq_id, time_created_ns or timeout_ms")
            continue
        pg = _pg_key(e.get("process_group", e.get("pg_id")))
        if dumped_at_ns - created >= timeout * 1_000_000 and (
            pg not in stuck or seq < stuck[pg]["collective_seq_id"]
        ):
            stuck[pg] = e
    for pg in sorted(set(status) | set(stuck), key=str):
        cfg = config.get(pg) if isinstance(config.get(pg), dict) else {}
        nranks = (
            len(json.loads(cfg["ranks"]))
            if isinstance(cfg.get("ranks"), str) and cfg["ranks"].startswith("[")
            else None
        )
        comm = f"pg:{pg}" + (f"({cfg['desc']})" if cfg.get("desc") else "")
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
    """ProcessGroupNCCL watchdog timeout lines (anywhere in a job's log) -> ``timeout`` rows."""
    for line in lines:
        m = _WATCHDOG.search(line)
        if m is None:
            continue
        pg = m.group("pgid")
        comm = f"pg:{pg}" + (f"({m.group('desc')})" if m.group("desc") else "") if pg is not None else None
        ms = m.group("ms")
        rows.add(
            job=job,
            communicator=comm,
            rank=int(m.group("rank")),
            host=host,
            state="timeout",
            collective=m.group("op").lower(),
            seq=int(m.group("seq")),
            source="watchdog",
            detail=f"ran for {ms} ms before timing out" if ms else None,
        )
