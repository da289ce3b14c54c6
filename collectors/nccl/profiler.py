"""The NCCL example profiler plugin's trace dump -> per-channel kernel timings and per-peer proxy steps.

The example plugin (NVIDIA/nccl ``plugins/profiler/example``, ``print_event.cc``) writes
``${NCCL_PROFILE_DUMP_FILE}-<hostname>-<tid>.txt``: a Chrome-trace JSON array, one event per
line (``{...},``), closed by ``{}]``. Events open (``"ph": "b"``, with ``args``) and close
(``"ph": "e"``) and nest in file order: a ``COLL`` event (args ``SeqNum``, ``CommHash``,
``Rank``, ``Count``, ``Datatype``, ``Algorithm``, ``Protocol``, ``nChannels``) encloses its
``KernelCh`` events (args ``Channel``, ``StartGpuClk``, ``StopGpuClk``: GPU globaltimer, ns)
and its ProxyOps (``ScheduleSend``/``ProgressSend``/``ScheduleRecv``/``ProgressRecv`` with
``Channel``, ``Peer``, ``Steps``, ``ChunkSize``, ``transSize``), and a ``Progress*`` op
encloses its network steps (``cat`` ``NET``: ``SendGpuWait``, ``SendPeerWait``,
``SendWait``, ``RecvWait``, ``RecvFlushWait``, ``RecvGpuWait`` with ``Step``). ``ts`` is
CPU microseconds since the plugin started.

The parser is lenient because dumps are not always valid JSON: older releases printed
pointers and data types unquoted (``"Stream": 0x5020000567d0``, ``"datatype": ncclFloat32``),
the README sample has a typographic quote, and a trace cut short by a crash has no closing
``]``. Each line is repaired on its own and a line that still does not parse is skipped and
counted. Association is by nesting in file order (a step belongs to the innermost open
``Progress`` op of its direction), which is how the plugin prints them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from collectors.nccl.common import DTYPE_BYTES, TimingRows, as_float, as_int

_BARE_VALUE = re.compile(r"(:\s*)(0x[0-9a-fA-F]+|\(nil\)|-?nan|-?inf|[A-Za-z_][A-Za-z0-9_.]*)(\s*[,}\]])")
_KEEP = {"true", "false", "null"}
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"'})
_PROXY_OPS = {"ScheduleSend", "ProgressSend", "ScheduleRecv", "ProgressRecv"}


def lenient_event(line: str) -> dict[str, Any] | None:
    """One trace line as a dict; None for array brackets, ``{}`` and lines beyond repair."""
    text = line.strip().rstrip(",").strip()
    if text.startswith("["):
        text = text[1:].strip()
    if text.endswith("]"):
        text = text[:-1].strip().rstrip(",").strip()
    if not text.startswith("{"):
        return None
    text = text.translate(_QUOTES)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        fixed = _BARE_VALUE.sub(lambda m: _quote_bare(m), text)
        try:
            value = json.loads(fixed)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def _quote_bare(m: re.Match[str]) -> str:
    token = m.group(2)
    if token in _KEEP:
        return m.group(0)
    return f'{m.group(1)}"{token}"{m.group(3)}'


@dataclass(slots=True)
class _Open:
    name: str
    cat: str
    id: Any
    ts: float | None
    args: dict[str, Any]
    parent: int | None  # index into ProfilerParser.colls


@dataclass
class ProfilerParser:
    """Stateful, line-by-line parser of one trace file (events may arrive across many reads)."""

    colls: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    proxy_ops: list[dict[str, Any]] = field(default_factory=list)
    proxy_steps: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # lines that look like events but do not parse
    problems: list[str] = field(default_factory=list)
    _open_colls: list[int] = field(default_factory=list)  # stack of indices into colls
    _open: dict[tuple[str, str, Any], _Open] = field(default_factory=dict)
    _progress: dict[str, list[int]] = field(default_factory=lambda: {"send": [], "recv": []})
    _lines: int = 0

    def feed(self, lines: Iterable[str | bytes]) -> None:
        for raw in lines:
            self._lines += 1
            line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            stripped = line.strip()
            if not stripped or stripped in ("[", "]", "{}]", "{}", "{},"):
                continue
            ev = lenient_event(stripped)
            if ev is None:
                if "{" in stripped:
                    self.skipped += 1
                    if len(self.problems) < 5:
                        self.problems.append(f"line {self._lines}: cannot repair {stripped[:60]!r}")
                continue
            self._event(ev)

    def _event(self, ev: dict[str, Any]) -> None:
        name, cat, ph = ev.get("name"), ev.get("cat"), ev.get("ph")
        if not isinstance(name, str) or not isinstance(cat, str) or ph not in ("b", "e"):
            return
        ts = as_float(ev.get("ts"))
        key = (cat, name, ev.get("id"))
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        parent = self._open_colls[-1] if self._open_colls else None
        if ph == "b":
            if cat in ("COLL", "P2P"):
                self.colls.append(
                    {
                        "kind": cat.lower(),
                        "collective": name,
                        "seq": as_int(args.get("SeqNum")),
                        "comm_hash": as_int(args.get("CommHash")),
                        "rank": as_int(args.get("Rank")),
                        "peer": as_int(args.get("Peer")),
                        "count": as_int(args.get("Count")),
                        "datatype": args.get("Datatype"),
                        "algorithm": args.get("Algorithm"),
                        "protocol": args.get("Protocol"),
                        "nchannels": as_int(args.get("nChannels")),
                        "pid": as_int(ev.get("pid")),
                        "start_us": ts,
                        "stop_us": None,
                    }
                )
                self._open_colls.append(len(self.colls) - 1)
            elif cat == "GPU" and name == "KernelCh":
                start, stop = as_int(args.get("StartGpuClk")), as_int(args.get("StopGpuClk"))
                self.kernels.append(
                    {
                        "coll": parent,
                        "channel": as_int(args.get("Channel")),
                        "start_gpu_ns": start,
                        "stop_gpu_ns": stop,
                        "start_us": ts,
                        "duration_seconds": (stop - start) / 1e9 if start and stop and stop > start else None,
                    }
                )
            elif cat == "PROXY" and name in _PROXY_OPS:
                direction = "send" if name.endswith("Send") else "recv"
                self.proxy_ops.append(
                    {
                        "coll": parent,
                        "phase": "schedule" if name.startswith("Schedule") else "progress",
                        "direction": direction,
                        "channel": as_int(args.get("Channel")),
                        "peer": as_int(args.get("Peer")),
                        "steps": as_int(args.get("Steps")),
                        "chunk_size": as_int(args.get("ChunkSize")),
                        "trans_size": as_int(args.get("transSize")),
                        "start_us": ts,
                        "stop_us": None,
                    }
                )
                if name.startswith("Progress"):
                    self._progress[direction].append(len(self.proxy_ops) - 1)
                self._open[key] = _Open(name, cat, ev.get("id"), ts, args, len(self.proxy_ops) - 1)
                return
            elif cat == "NET":
                direction = "send" if name.startswith("Send") else "recv"
                stack = self._progress[direction]
                op = self.proxy_ops[stack[-1]] if stack else None
                self.proxy_steps.append(
                    {
                        "coll": op["coll"] if op else parent,
                        "op": stack[-1] if stack else None,
                        "direction": direction,
                        "state": name,
                        "step": as_int(args.get("Step")),
                        "channel": op["channel"] if op else None,
                        "peer": op["peer"] if op else None,
                        "start_us": ts,
                        "stop_us": None,
                    }
                )
                self._open[key] = _Open(name, cat, ev.get("id"), ts, args, len(self.proxy_steps) - 1)
                return
            return
        # ph == "e": close what it ends.
        if cat in ("COLL", "P2P") and self._open_colls:
            idx = next((i for i in reversed(self._open_colls) if self.colls[i]["collective"] == name), None)
            if idx is not None:
                self.colls[idx]["stop_us"] = ts
                self._open_colls.remove(idx)
            return
        opened = self._open.pop(key, None)
        if opened is None or opened.parent is None:
            return
        if cat == "PROXY":
            self.proxy_ops[opened.parent]["stop_us"] = ts
            if name.startswith("Progress"):
                stack = self._progress["send" if name.endswith("Send") else "recv"]
                if opened.parent in stack:
                    stack.remove(opened.parent)
        elif cat == "NET":
            self.proxy_steps[opened.parent]["stop_us"] = ts

    # -- output -----------------------------------------------------------------------------------
    def _coll_field(self, idx: int | None, name: str) -> Any:
        return self.colls[idx][name] if idx is not None else None

    def kernel_table(self) -> pa.Table:
        """One row per KernelCh: the channel's GPU time and the collective it belongs to."""
        k = self.kernels
        c = lambda name: [self._coll_field(r["coll"], name) for r in k]  # noqa: E731
        return pa.table(
            {
                "collective": pa.array(c("collective"), pa.string()),
                "seq": pa.array(c("seq"), pa.int64()),
                "comm_hash": pa.array(c("comm_hash"), pa.uint64()),
                "rank": pa.array(c("rank"), pa.int32()),
                "channel": pa.array([r["channel"] for r in k], pa.int16()),
                "start_gpu_ns": pa.array([r["start_gpu_ns"] for r in k], pa.uint64()),
                "stop_gpu_ns": pa.array([r["stop_gpu_ns"] for r in k], pa.uint64()),
                "duration_seconds": pa.array([r["duration_seconds"] for r in k], pa.float64()),
            }
        )

    def proxy_op_table(self) -> pa.Table:
        """One row per ProxyOp phase: channel, peer, direction and its CPU time."""
        ops = self.proxy_ops
        return pa.table(
            {
                "collective": pa.array([self._coll_field(r["coll"], "collective") for r in ops], pa.string()),
                "seq": pa.array([self._coll_field(r["coll"], "seq") for r in ops], pa.int64()),
                "rank": pa.array([self._coll_field(r["coll"], "rank") for r in ops], pa.int32()),
                "phase": pa.array([r["phase"] for r in ops], pa.string()),
                "direction": pa.array([r["direction"] for r in ops], pa.string()),
                "channel": pa.array([r["channel"] for r in ops], pa.int16()),
                "peer": pa.array([r["peer"] for r in ops], pa.int32()),
                "steps": pa.array([r["steps"] for r in ops], pa.int32()),
                "chunk_size": pa.array([r["chunk_size"] for r in ops], pa.int64()),
                "trans_size": pa.array([r["trans_size"] for r in ops], pa.int64()),
                "duration_seconds": pa.array([_dur(r) for r in ops], pa.float64()),
            }
        )

    def proxy_step_table(self) -> pa.Table:
        """One row per network step state: which peer and channel waited, and how long."""
        st = self.proxy_steps
        return pa.table(
            {
                "collective": pa.array([self._coll_field(r["coll"], "collective") for r in st], pa.string()),
                "seq": pa.array([self._coll_field(r["coll"], "seq") for r in st], pa.int64()),
                "rank": pa.array([self._coll_field(r["coll"], "rank") for r in st], pa.int32()),
                "direction": pa.array([r["direction"] for r in st], pa.string()),
                "state": pa.array([r["state"] for r in st], pa.string()),
                "step": pa.array([r["step"] for r in st], pa.int32()),
                "channel": pa.array([r["channel"] for r in st], pa.int16()),
                "peer": pa.array([r["peer"] for r in st], pa.int32()),
                "duration_seconds": pa.array([_dur(r) for r in st], pa.float64()),
            }
        )

    def timing_rows(
        self,
        rows: TimingRows,
        *,
        job: str,
        host: str | None = None,
        device: int | None = None,
        observed_us: int | None = None,
        start: int = 0,
    ) -> int:
        """Add one nccl_timing row per complete KernelCh from ``kernels[start:]``; returns the
        new start. The communicator is the CommHash as ``0x%x`` (how the Inspector names it)."""
        for r in self.kernels[start:]:
            if r["duration_seconds"] is None or r["coll"] is None or r["channel"] is None:
                continue
            c = self.colls[r["coll"]]
            if c["comm_hash"] is None or c["rank"] is None:
                continue
            size = DTYPE_BYTES.get(str(c["datatype"]))
            rows.add(
                job=job,
                communicator=f"0x{c['comm_hash']:x}",
                rank=c["rank"],
                host=host,
                device=device,
                collective=c["collective"],
                seq=c["seq"],
                message_bytes=c["count"] * size if size and c["count"] is not None else None,
                channel=r["channel"],
                duration_seconds=r["duration_seconds"],
                observed_us=observed_us,
            )
        return len(self.kernels)


def _dur(r: dict[str, Any]) -> float | None:
    if r["start_us"] is None or r["stop_us"] is None or r["stop_us"] < r["start_us"]:
        return None
    return (r["stop_us"] - r["start_us"]) / 1e6


def host_from_dump_name(name: str) -> str | None:
    """``nccl_profile-gpu-0003-4242.txt`` -> ``gpu-0003``? Ambiguous with dashes in the prefix, so
    only the part after the first dash is taken as the host (``<prefix>-<hostname>-<tid>.txt``)."""
    m = re.match(r"^[^-]+-(?P<host>.+)-(?P<tid>\d+)\.txt$", name)
    return m.group("host") if m else None


def parse_profiler_trace(text: str) -> ProfilerParser:
    parser = ProfilerParser()
    parser.feed(text.splitlines())
    return parser
