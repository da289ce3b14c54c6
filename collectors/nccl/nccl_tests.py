"""nccl-tests output (``all_reduce_perf`` & co.) -> the result table, its summary, and nccl_timing rows.

The table is read by its header, not by fixed positions, because the layout moved:

- columns ``size count type redop [root] time algbw busbw <check> time algbw busbw <check>``,
  first group out-of-place, second in-place; ``root`` exists from nccl-tests 2.x on (``-1``
  where it does not apply); the check column was ``error`` (max abs error, ``N/A`` without
  validation) and is now ``#wrong`` (count of wrong elements);
- ``redop`` is blank for collectives without a reduction in older releases (alltoall), so a
  row has one field fewer than the header: the missing field is put back where the token after
  ``type`` is a number; newer releases print ``none``;
- NCCL INFO lines, MPI warnings and other noise can sit inside the table; a data row is one
  that starts with an integer size and has the header's field count;
- the footer is ``# Out of bounds values : 0 OK`` and ``# Avg bus bandwidth : 68.4048``
  (GB/s; some builds append the unit).

What a timing row means here: nccl-tests runs one communicator per test and reports, per size,
the time per iteration averaged over the ranks (its ``-a`` default), so a row is the whole test:
``rank`` 0 stands for the reporting rank, ``nranks`` is the number of ``# Rank`` lines, ``host``
and ``device`` are rank 0's, ``communicator`` is the test binary (``all_reduce_perf``) or the
file stem, ``seq`` is the row's index in the sweep and ``channel`` is null. One placement
(out-of-place by default) becomes rows; the table keeps both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from graywire.collectors.nccl.common import GBPS_TO_BPS, TimingRows, as_float, as_int, fitted_array
from graywire.collectors.text import plain_text, without_launcher_prefix

Placement = Literal["out_of_place", "in_place"]

#: nccl-tests binary -> NCCL collective name.
TEST_COLLECTIVE = {
    "all_reduce_perf": "AllReduce",
    "all_gather_perf": "AllGather",
    "alltoall_perf": "AllToAll",
    "broadcast_perf": "Broadcast",
    "reduce_perf": "Reduce",
    "reduce_scatter_perf": "ReduceScatter",
    "sendrecv_perf": "SendRecv",
    "gather_perf": "Gather",
    "scatter_perf": "Scatter",
    "hypercube_perf": "HyperCube",
}
_NAME_HINTS = (
    ("reduce_scatter", "ReduceScatter"),
    ("reducescatter", "ReduceScatter"),
    ("all_reduce", "AllReduce"),
    ("allreduce", "AllReduce"),
    ("all_gather", "AllGather"),
    ("allgather", "AllGather"),
    ("alltoall", "AllToAll"),
    ("broadcast", "Broadcast"),
    ("sendrecv", "SendRecv"),
    ("gather", "Gather"),
    ("scatter", "Scatter"),
    ("reduce", "Reduce"),
)
_REDOPS = {"sum", "prod", "min", "max", "avg", "none", "mulsum", "premulsum"}
_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$"
)
_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>[-+0-9.eE]+|N/A)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<verdict>\S*)")
_PARAMS = re.compile(r"^#\s*nThread\s")
_PARAM = re.compile(
    r"(nThread|nGpus|minBytes|maxBytes|step|warmup iters|agg iters|iters|validation|graph):?\s+(\S+)"
)
_NUM = re.compile(r"^-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?$")


def collective_from_name(name: str) -> str | None:
    """``superbench_nccl_tests_alltoall.log`` -> ``AllToAll`` (first hint that matches)."""
    low = name.lower()
    for hint, coll in _NAME_HINTS:
        if hint in low:
            return coll
    return None


@dataclass
class NccltestsSummary:
    test: str | None = None
    collective: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    avg_bus_bandwidth_gbs: float | None = None
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    check_column: str | None = None  # "error" (old) or "#wrong" (new)


@dataclass
class NccltestsParser:
    """Line-by-line parser for one nccl-tests output (a file being written, or the whole text)."""

    collective: str | None = None
    summary: NccltestsSummary = field(default_factory=NccltestsSummary)
    columns: list[str] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # lines inside the table that look like data but do not fit the header
    problems: list[str] = field(default_factory=list)
    _line: int = 0

    def feed(self, lines: Iterable[str | bytes]) -> None:
        for raw in lines:
            self._line += 1
            line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).rstrip("\r\n")
            s = without_launcher_prefix(plain_text(line) if "\x1b" in line else line).strip()
            if not s:
                continue
            if s.startswith("#"):
                self._comment(s)
                continue
            if self.columns is None:
                continue
            tokens = s.split()
            if not tokens or not tokens[0].isdigit():
                continue  # NCCL INFO lines, MPI chatter
            row = self._row(tokens)
            if row is None:
                self.skipped += 1
                if len(self.problems) < 5:
                    self.problems.append(f"line {self._line}: {len(tokens)} fields do not fit the header")
                continue
            self.rows.append(row)

    def _comment(self, s: str) -> None:
        body = s.lstrip("#").split()
        if "size" in body and "count" in body and "time" in body:
            self.columns = body
            self.summary.check_column = "#wrong" if "#wrong" in body else "error" if "error" in body else None
            return
        m = _RANK.match(s)
        if m:
            self.summary.ranks.append(
                {
                    "rank": int(m["rank"]),
                    "pid": int(m["pid"]),
                    "host": m["host"],
                    "device": int(m["dev"]),
                    "bus_id": m["bus"],
                    "gpu": m["name"].strip(),
                }
            )
            return
        m = _START.match(s)
        if m:
            self.summary.test = m.group(1)
            return
        m = _AVG.match(s)
        if m:
            self.summary.avg_bus_bandwidth_gbs = as_float(m["v"])
            return
        m = _OOB.match(s)
        if m:
            self.summary.out_of_bounds = int(m["n"])
            self.summary.out_of_bounds_ok = m["verdict"].upper() == "OK" if m["verdict"] else None
            return
        if _PARAMS.match(s):
            self.summary.params = dict(_PARAM.findall(s))

    def _row(self, tokens: list[str]) -> dict[str, Any] | None:
        cols = self.columns or []
        if len(tokens) == len(cols) - 1 and "redop" in cols:
            at = cols.index("redop")
            if at < len(tokens) and (_NUM.match(tokens[at]) or tokens[at] == "N/A"):
                tokens = [*tokens[:at], "", *tokens[at:]]  # blank redop column (old alltoall)
        if len(tokens) != len(cols):
            return None
        try:
            second = cols.index("time", cols.index("time") + 1)
        except ValueError:
            return None
        first = cols.index("time")
        row: dict[str, Any] = {
            "size": as_int(tokens[cols.index("size")]),
            "count": as_int(tokens[cols.index("count")]),
            "type": tokens[cols.index("type")] if "type" in cols else None,
            "redop": (tokens[cols.index("redop")] or None) if "redop" in cols else None,
            "root": as_int(tokens[cols.index("root")]) if "root" in cols else None,
        }
        if row["size"] is None or row["redop"] not in (None, *_REDOPS):
            return None
        for prefix, start in (("oop", first), ("ip", second)):
            group = tokens[start : start + 4]
            t, alg, bus = (as_float(v) for v in group[:3])
            if t is None:
                return None
            row[f"{prefix}_time_us"], row[f"{prefix}_algbw_gbs"], row[f"{prefix}_busbw_gbs"] = t, alg, bus
            row[f"{prefix}_check"] = as_float(group[3]) if len(group) > 3 else None
        return row

    # -- output -------------------------------------------------------------------------------
    def table(self) -> pa.Table:
        """Every result row, both placements, base units in the column names where they apply."""
        r = self.rows
        col = lambda k, t: fitted_array([x[k] for x in r], t)  # noqa: E731
        out = {
            "size_bytes": col("size", pa.int64()),
            "count": col("count", pa.int64()),
            "type": col("type", pa.string()),
            "redop": col("redop", pa.string()),
            "root": col("root", pa.int32()),
        }
        for p in ("oop", "ip"):
            out[f"{p}_duration_seconds"] = fitted_array(
                [_seconds(x[f"{p}_time_us"]) for x in r], pa.float64()
            )
            out[f"{p}_algbw_bps"] = fitted_array([_bps(x[f"{p}_algbw_gbs"]) for x in r], pa.float64())
            out[f"{p}_busbw_bps"] = fitted_array([_bps(x[f"{p}_busbw_gbs"]) for x in r], pa.float64())
            out[f"{p}_check"] = col(f"{p}_check", pa.float64())
        return pa.table(out)

    def timing_rows(
        self,
        rows: TimingRows,
        *,
        job: str,
        communicator: str | None = None,
        placement: Placement = "out_of_place",
        observed_us: int | None = None,
        start: int = 0,
    ) -> int:
        """Add rows for ``self.rows[start:]``; returns the new start (for incremental reads)."""
        coll = self.collective or TEST_COLLECTIVE.get(self.summary.test or "") or "unknown"
        comm = self.summary.test or communicator or "nccl-tests"
        r0 = next((r for r in self.summary.ranks if r["rank"] == 0), None)
        nranks = len(self.summary.ranks) or None
        p = "oop" if placement == "out_of_place" else "ip"
        for i in range(start, len(self.rows)):
            x = self.rows[i]
            rows.add(
                job=job,
                communicator=comm,
                rank=0,
                nranks=nranks,
                host=r0["host"] if r0 else None,
                device=r0["device"] if r0 else None,
                collective=coll,
                seq=i,
                message_bytes=x["size"],
                channel=None,
                duration_seconds=_seconds(x[f"{p}_time_us"]),
                bus_bandwidth_bps=_bps(x[f"{p}_busbw_gbs"]),
                observed_us=observed_us,
            )
        return len(self.rows)


def _seconds(us: float | None) -> float | None:
    v = as_float(us)
    return v / 1e6 if v is not None else None


def _bps(gbs: float | None) -> float | None:
    return gbs * GBPS_TO_BPS if gbs is not None else None


def parse_nccl_tests(text: str, collective: str | None = None) -> NccltestsParser:
    """Parse a whole nccl-tests output; ``collective`` when the output does not name its test."""
    parser = NccltestsParser(collective=collective)
    parser.feed(text.splitlines())
    if parser.collective is None and parser.summary.test:
        parser.collective = TEST_COLLECTIVE.get(parser.summary.test)
    parser.summary.collective = parser.collective
    return parser
