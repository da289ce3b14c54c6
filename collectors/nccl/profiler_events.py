"""The example profiler plugin's trace, event by event: the per-event parser.

:class:`EventParser` reads a trace line by line, repairs each line on its own
(:func:`lenient_event`) and associates events by nesting in file order (see
:mod:`graywire.collectors.nccl.profiler` for the format). It is what
:class:`~graywire.collectors.nccl.profiler.ProfilerParser` falls back to for a trace its column
pass cannot follow (nesting it does not model, values a column cannot hold exactly), and the
reference the column pass is tested against.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from graywire.collectors.nccl.common import DTYPE_BYTES, TimingRows, as_float, as_int, fitted_array
from graywire.collectors.nccl.proxy import ProxyRows

_BARE_VALUE = re.compile(r"(:\s*)(0x[0-9a-fA-F]+|\(nil\)|-?nan|-?inf|[A-Za-z_][A-Za-z0-9_.]*)(\s*[,}\]])")
_KEEP = {"true", "false", "null"}
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"'})
_PROXY_OPS = {"ScheduleSend", "ProgressSend", "ScheduleRecv", "ProgressRecv"}
#: ProxyStep state names as printed (``SendGpuWait``) or as the API enum spells them
#: (``SendGPUWait``), lower-cased -> the nccl_proxy column that sums them.
WAIT_COLUMN = {
    "sendgpuwait": "send_gpu_wait_seconds",
    "sendpeerwait": "send_peer_wait_seconds",
    "sendwait": "send_wait_seconds",
    "recvwait": "recv_wait_seconds",
    "recvflushwait": "recv_flush_wait_seconds",
    "recvgpuwait": "recv_gpu_wait_seconds",
}
_NET_PLUGIN = {"NET_IB", "NET_SOCK"}

#: (host, pid, rank) -> CUDA device; (host, pid, rank, channel, peer, direction) -> NIC port key.
DeviceOf = Callable[[str, int, int], int | None]
PortOf = Callable[[str, int, int, int, int, str], str | None]


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
    parent: int | None  # index into EventParser.colls


@dataclass
class EventParser:
    """Stateful, line-by-line parser of one trace file (events may arrive across many reads):
    each event a dict, associated by nesting in file order as it is read."""

    colls: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    proxy_ops: list[dict[str, Any]] = field(default_factory=list)
    proxy_steps: list[dict[str, Any]] = field(default_factory=list)
    net_events: list[dict[str, Any]] = field(default_factory=list)  # QP / socket events of the steps
    skipped: int = 0  # lines that look like events but do not parse
    problems: list[str] = field(default_factory=list)
    _open_colls: list[int] = field(default_factory=list)  # stack of indices into colls
    _open: dict[tuple[str, str, Any], _Open] = field(default_factory=dict)
    _progress: dict[str, list[int]] = field(default_factory=lambda: {"send": [], "recv": []})
    _steps_open: list[int] = field(default_factory=list)  # NET steps begun and not ended, file order
    _lines: int = 0
    _next_op: int = 0  # first ProxyOp not yet turned into an nccl_proxy row

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
                        "pid": as_int(ev.get("pid")),
                        "start_us": ts,
                        "stop_us": None,
                        "waits": {},
                        "step_ids": set(),
                        "qps": [],
                        "net_device": None,
                        "emitted": False,
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
                self._steps_open.append(len(self.proxy_steps) - 1)
                return
            elif cat in _NET_PLUGIN:
                step = self._steps_open[-1] if self._steps_open else None
                self.net_events.append(
                    {
                        "step": step,
                        "kind": "qp" if cat == "NET_IB" else "socket",
                        "device": as_int(args.get("device")),
                        "qp_num": as_int(args.get("qp_num")),
                        "opcode": as_int(args.get("opcode")),
                        "wr_id": as_int(args.get("wr_id")),
                        "sock": as_int(args.get("sock")),
                        "size": as_int(args.get("size")),
                        "start_us": ts,
                        "stop_us": None,
                    }
                )
                op_idx = self.proxy_steps[step]["op"] if step is not None else None
                if op_idx is not None and cat == "NET_IB":
                    op = self.proxy_ops[op_idx]
                    qp, dev = self.net_events[-1]["qp_num"], self.net_events[-1]["device"]
                    if qp is not None and qp not in op["qps"]:
                        op["qps"].append(qp)
                    if dev is not None and op["net_device"] is None:
                        op["net_device"] = dev
                self._open[key] = _Open(name, cat, ev.get("id"), ts, args, len(self.net_events) - 1)
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
            st = self.proxy_steps[opened.parent]
            st["stop_us"] = ts
            if opened.parent in self._steps_open:
                self._steps_open.remove(opened.parent)
            col = WAIT_COLUMN.get(name.lower())
            d = _dur(st)
            if st["op"] is not None and col is not None and d is not None:
                op = self.proxy_ops[st["op"]]
                op["waits"][col] = op["waits"].get(col, 0.0) + d
                op["step_ids"].add(st["step"])
        elif cat in _NET_PLUGIN:
            self.net_events[opened.parent]["stop_us"] = ts

    # -- output -----------------------------------------------------------------------------------
    def _coll_field(self, idx: int | None, name: str) -> Any:
        return self.colls[idx][name] if idx is not None else None

    def kernel_table(self) -> pa.Table:
        """One row per KernelCh: the channel's GPU time and the collective it belongs to."""
        k = self.kernels
        c = lambda name: [self._coll_field(r["coll"], name) for r in k]  # noqa: E731
        return pa.table(
            {
                "collective": fitted_array(c("collective"), pa.string()),
                "seq": fitted_array(c("seq"), pa.int64()),
                "comm_hash": fitted_array(c("comm_hash"), pa.uint64()),
                "rank": fitted_array(c("rank"), pa.int32()),
                "channel": fitted_array([r["channel"] for r in k], pa.int16()),
                "start_gpu_ns": fitted_array([r["start_gpu_ns"] for r in k], pa.uint64()),
                "stop_gpu_ns": fitted_array([r["stop_gpu_ns"] for r in k], pa.uint64()),
                "duration_seconds": fitted_array([r["duration_seconds"] for r in k], pa.float64()),
            }
        )

    def proxy_op_table(self) -> pa.Table:
        """One row per ProxyOp phase: channel, peer, direction and its CPU time."""
        ops = self.proxy_ops
        return pa.table(
            {
                "collective": fitted_array(
                    [self._coll_field(r["coll"], "collective") for r in ops], pa.string()
                ),
                "seq": fitted_array([self._coll_field(r["coll"], "seq") for r in ops], pa.int64()),
                "rank": fitted_array([self._coll_field(r["coll"], "rank") for r in ops], pa.int32()),
                "phase": fitted_array([r["phase"] for r in ops], pa.string()),
                "direction": fitted_array([r["direction"] for r in ops], pa.string()),
                "channel": fitted_array([r["channel"] for r in ops], pa.int16()),
                "peer": fitted_array([r["peer"] for r in ops], pa.int32()),
                "steps": fitted_array([r["steps"] for r in ops], pa.int32()),
                "chunk_size": fitted_array([r["chunk_size"] for r in ops], pa.int64()),
                "trans_size": fitted_array([r["trans_size"] for r in ops], pa.int64()),
                "duration_seconds": fitted_array([_dur(r) for r in ops], pa.float64()),
            }
        )

    def proxy_step_table(self) -> pa.Table:
        """One row per network step state: which peer and channel waited, and how long."""
        st = self.proxy_steps
        return pa.table(
            {
                "collective": fitted_array(
                    [self._coll_field(r["coll"], "collective") for r in st], pa.string()
                ),
                "seq": fitted_array([self._coll_field(r["coll"], "seq") for r in st], pa.int64()),
                "rank": fitted_array([self._coll_field(r["coll"], "rank") for r in st], pa.int32()),
                "direction": fitted_array([r["direction"] for r in st], pa.string()),
                "state": fitted_array([r["state"] for r in st], pa.string()),
                "step": fitted_array([r["step"] for r in st], pa.int32()),
                "channel": fitted_array([r["channel"] for r in st], pa.int16()),
                "peer": fitted_array([r["peer"] for r in st], pa.int32()),
                "duration_seconds": fitted_array([_dur(r) for r in st], pa.float64()),
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

    def net_table(self) -> pa.Table:
        """One row per network-plugin event: the QP (IB) or socket that carried a step."""
        ev = self.net_events
        step = lambda name: [self.proxy_steps[r["step"]][name] if r["step"] is not None else None for r in ev]  # noqa: E731
        return pa.table(
            {
                "kind": fitted_array([r["kind"] for r in ev], pa.string()),
                "direction": fitted_array(step("direction"), pa.string()),
                "state": fitted_array(step("state"), pa.string()),
                "step": fitted_array(step("step"), pa.int32()),
                "channel": fitted_array(step("channel"), pa.int16()),
                "peer": fitted_array(step("peer"), pa.int32()),
                "device": fitted_array([r["device"] for r in ev], pa.int16()),
                "qp_num": fitted_array([r["qp_num"] for r in ev], pa.int64()),
                "opcode": fitted_array([r["opcode"] for r in ev], pa.int32()),
                "wr_id": fitted_array([r["wr_id"] for r in ev], pa.uint64()),
                "sock": fitted_array([r["sock"] for r in ev], pa.int32()),
                "size": fitted_array([r["size"] for r in ev], pa.int64()),
                "duration_seconds": fitted_array([_dur(r) for r in ev], pa.float64()),
            }
        )

    def proxy_rows(
        self,
        rows: ProxyRows,
        *,
        job: str,
        host: str | None = None,
        device_of: DeviceOf | None = None,
        port_of: PortOf | None = None,
        observed_us: int | None = None,
    ) -> int:
        """Add one nccl_proxy row per finished ``Progress`` op not added before; returns how many.

        An op is finished when its end was printed or its collective closed (a dump cut inside
        an op still gives the steps it has). ``device_of(host, pid, rank)`` and ``port_of(host,
        pid, rank, channel, peer, direction)`` resolve the GPU and NIC from NCCL_DEBUG lines.
        """
        added = 0
        ops = self.proxy_ops
        i = self._next_op
        while i < len(ops) and (ops[i]["emitted"] or ops[i]["phase"] == "schedule"):
            i += 1
        self._next_op = i
        for op in ops[i:]:
            if op["emitted"] or op["phase"] != "progress":
                continue
            c = self.colls[op["coll"]] if op["coll"] is not None else None
            if op["stop_us"] is None and (c is None or c["stop_us"] is None):
                continue
            op["emitted"] = True
            if c is None or c["comm_hash"] is None or c["rank"] is None:
                continue
            if op["channel"] is None or op["peer"] is None:
                continue
            pid = op["pid"] if op["pid"] is not None else c["pid"]
            rank, direction = c["rank"], op["direction"]
            dev = device_of(host, pid, rank) if device_of is not None and host and pid is not None else None
            port = (
                port_of(host, pid, rank, op["channel"], op["peer"], direction)
                if port_of is not None and host and pid is not None
                else None
            )
            waits = op["waits"]
            prefix = direction + "_"
            rows.add(
                job=job,
                communicator=f"0x{c['comm_hash']:x}",
                rank=rank,
                host=host,
                device=dev,
                pid=pid,
                collective=c["collective"],
                seq=c["seq"],
                channel=op["channel"],
                peer=op["peer"],
                direction=direction,
                steps=op["steps"] if op["steps"] is not None else (len(op["step_ids"]) or None),
                bytes=op["trans_size"] if op["trans_size"] else None,
                duration_seconds=_dur(op),
                # A state no step of the op printed is unknown (a cut dump), not 0.
                waits={k: v for k, v in waits.items() if k.startswith(prefix)},
                port=port,
                net_device=op["net_device"],
                qp_num=op["qps"][0] if op["qps"] else None,
                qps=len(op["qps"]) or None,
                observed_us=observed_us,
            )
            added += 1
        return added


def _dur(r: dict[str, Any]) -> float | None:
    if r["start_us"] is None or r["stop_us"] is None or r["stop_us"] < r["start_us"]:
        return None
    return (r["stop_us"] - r["start_us"]) / 1e6
