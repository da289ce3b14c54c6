"""Time the NCCL Inspector and profiler-trace parsers against pyarrow's JSON reader on the same bytes.

Synthesizes one large Inspector file and one large example-plugin trace, shaped like the real
ones and holding every layout and spelling the parsers accept:

* Inspector: v4.0 self-contained records, v4.2 ``dump_stats`` markers followed by
  self-contained records, v4.3/v4.4 markers carrying ``header``/``metadata`` followed by bare
  ``coll_perf``/``p2p_perf``/``proxy_trace`` lines; verbose records (``event_trace_sn`` /
  ``event_trace_ts`` with 2-16 ``kernel_events``, a kernel stop that never came, a stop
  callback with sequence number 0) and plain ones; ``"nan"`` bandwidths, ``\\/``-escaped names;
  a cut-off last line, as in a file being written.
* Profiler: API v5 (``GROUP_API`` > ``KERNEL_LAUNCH``, ``COLL_API`` > ``COLL``, IB ``Qp``
  events) and v4 (``GROUP`` > ``COLL``, socket ``Sock`` events) collectives, each with per
  channel ``KernelCh``, ``Schedule*``/``Progress*`` ProxyOps and their steps' wait states; a
  share of the API lines in the old unquoted spelling (``"Stream": 0x5020000567d0``,
  ``"datatype": ncclFloat32``), some typographic quotes, ``[`` first and ``{}]`` last.

It then times, on each payload:

* graywire: the file's bytes, as the file collector hands them over, through
  ``InspectorParser.feed_data`` into one ``nccl_timing`` batch; the trace's bytes through
  ``ProfilerParser.feed_data`` into its ``nccl_timing`` and ``nccl_proxy`` batches;
* the reference, measured in the same run: ``pyarrow.json.read_json`` (default options: 1 MB
  blocks on every core) of the same bytes (for the trace, with the array punctuation and the
  unquoted values it cannot read made JSON lines first) with an explicit schema, and the nested
  fields flattened to the same columns (kernel events exploded to one row per channel, beside
  the whole-collective rows), with no checks and no association.

The two take turns, ``--repeat`` times, and the best time of each is shown. Lines/s are input
lines (records, events) per second; the ratio is graywire's rate over the reference's.
Run: ``python bench/bench_nccl_parse.py [--records 100000] [--colls 4000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import io
import random
import resource
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.inspector import InspectorParser
from graywire.collectors.nccl.profiler import ProfilerParser
from graywire.collectors.nccl.proxy import ProxyRows

COLLS = ("AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce", "AllToAll")
SOURCES = ("kernel_gpu", "kernel_cpu", "collective_cpu")


def _gbs(x: float) -> str:
    return f"{x:f}"


def inspector_payload(n_records: int, seed: int = 0) -> bytes:
    """About ``n_records`` Inspector lines of every layout, one dump per communicator and rank."""
    rng = random.Random(seed)
    out: list[str] = []
    t_us = 1_752_867_229_276_385
    n_comms = 64
    comms = [f"0x{rng.getrandbits(56):x}" for _ in range(n_comms)]
    names = [f"DP Group {i}" for i in range(n_comms)]
    seq = [0] * n_comms
    while len(out) < n_records:
        c = rng.randrange(n_comms)
        version = rng.choice(("v4.0", "v4.2", "v4.3", "v4.4"))
        rank, nranks, nnodes = rng.randrange(64), 64, 8
        host = f"gpu-{rank // 8:04d}.cluster"
        header = f'{{"id":"{comms[c]}","rank":{rank},"n_ranks":{nranks},"nnodes":{nnodes}}}'
        if version in ("v4.3", "v4.4"):
            header = (
                f'{{"id":"{comms[c]}","comm_name":"{names[c]}\\/tp","rank":{rank},"n_ranks":{nranks},'
                f'"nnodes":{nnodes}}}'
            )
        meta = (
            f'{{"inspector_output_format_version":"{version}","git_rev":"9019a1912-dirty",'
            f'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":{t_us},'
            f'"hostname":"{host}","pid":{40000 + rank}}}'
        )
        per_dump = rng.randrange(8, 40)
        if version != "v4.0":
            dropped = rng.choice((0, 0, 0, 3))
            out.append(
                f'{{"header":{header},"metadata":{meta},"dump_stats":{{"coll_records":{per_dump},'
                f'"coll_dropped_total":{dropped},"coll_dropped_since_last_dump":{dropped},'
                '"p2p_records":0,"p2p_dropped_total":0,"p2p_dropped_since_last_dump":0}}'
            )
        verbose = rng.random() < 0.5
        for _ in range(per_dump):
            seq[c] += 1
            if version in ("v4.3", "v4.4") and rng.random() < 0.05:
                kind = rng.choice(("p2p_perf", "proxy_trace"))
                out.append(f'{{"{kind}":{{"p2p":"Send","p2p_sn":{seq[c]},"p2p_msg_size_bytes":1048576}}}}')
                continue
            coll = rng.choice(COLLS)
            size = 1 << rng.randrange(10, 34)
            exec_us = rng.randrange(20, 60_000)
            nan = rng.random() < 0.01
            if nan:
                exec_us = 0
            algbw = '"nan"' if nan else _gbs(size / exec_us / 1e3)
            busbw = '"nan"' if nan else _gbs(size / exec_us / 1e3 * 1.75)
            body = (
                f'{{"coll":"{coll}","coll_sn":{seq[c]},"coll_msg_size_bytes":{size},'
                f'"coll_exec_time_us":{exec_us},"coll_timing_source":"{rng.choice(SOURCES)}",'
                f'"coll_algobw_gbs":{algbw},"coll_busbw_gbs":{busbw}'
            )
            if verbose:
                n_ch = rng.choice((2, 4, 8, 8, 16))
                end = t_us - 1000
                start0 = end - exec_us
                sn_ev, ts_ev = [], []
                for j in range(n_ch):
                    s = start0 + j
                    stop = s + max(1, exec_us - rng.randrange(0, 5))
                    stop_sn = 4 + n_ch + 2 * j
                    if rng.random() < 0.01:
                        stop = 0  # the stop never came
                    elif rng.random() < 0.01:
                        stop_sn = 0  # its callback never fired
                    sn_ev.append(
                        f'{{"channel_id":{j},"kernel_start_sn":{3 + j},"kernel_stop_sn":{stop_sn},'
                        f'"kernel_record_sn":{3 + n_ch + 2 * j}}}'
                    )
                    ts_ev.append(
                        f'{{"channel_id":{j},"kernel_start_ts":{s},"kernel_stop_ts":{stop},"kernel_record_ts":{stop}}}'
                    )
                cs = start0 - 120
                body += (
                    f',"event_trace_sn":{{"coll_start_sn":1,"coll_stop_sn":2,"kernel_events":[{",".join(sn_ev)}]}}'
                    f',"event_trace_ts":{{"coll_start_ts":{cs},"coll_stop_ts":{cs + 5},'
                    f'"kernel_events":[{",".join(ts_ev)}]}}'
                )
            body += "}"
            if version in ("v4.3", "v4.4"):
                out.append(f'{{"coll_perf":{body}}}')
            else:
                out.append(f'{{"header":{header},"metadata":{meta},"coll_perf":{body}}}')
        t_us += rng.randrange(1000, 100_000)
    text = "\n".join(out[:n_records]) + "\n"
    return (text + '{"header":{"id":"0x1","rank":0').encode()  # a line still being written


def _args(**values: object) -> str:
    """``"key": value`` pairs as print_event.cc prints them (strings arrive already quoted)."""
    return ", ".join(f'"{k}": {v}' for k, v in values.items())


class _Trace:
    """Event lines of one example-plugin trace, with the plugin's running ids."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.lines, self.op_id, self.step_id, self.net_id = rng, ["["], 0, 0, 0

    def ev(self, name: str, cat: str, ph: str, id_: int, ts: float, args: str | None = None) -> None:
        s = f'{{"name": "{name}", "cat": "{cat}", "ph": "{ph}", "id": {id_}, "pid": 48211, "tid": 1, '
        s += f'"ts": {ts:f}'
        self.lines.append(s + (f', "args": {{{args}}}}},' if args is not None else "},"))

    def collective(self, c: int, t: float) -> float:
        """One collective at CPU time ``t`` (v5 layout for even ``c``, v4 for odd); its end time."""
        rng, v5 = self.rng, c % 2 == 0
        old = rng.random() < 0.1  # an older release: pointers and data types unquoted
        stream, dtype = ("0x5020000567d0", "ncclFloat32") if old else ('"0x5020000567d0"', '"ncclFloat32"')
        if v5:
            self.ev("Group API", "GROUP_API", "b", c, t, _args(groupApiId=c, groupDepth=1))
            self.ev("KernelLaunch", "KERNEL_LAUNCH", "b", c, t, _args(groupId=c, Stream=stream))
            self.ev("KernelLaunch", "KERNEL_LAUNCH", "e", c, t + 1)
            api = _args(count=262144, datatype=dtype, root=0, GraphCaptured=0, Stream=stream)
            self.ev("AllReduce", "COLL_API", "b", c, t, api)
        else:
            self.ev("Group", "GROUP", "b", c, t, _args(groupId=c))
        coll, n_ch = rng.choice(COLLS), rng.choice((1, 2, 2, 4))
        info = _args(SeqNum=c, CommHash=1493613951195738943, Rank=3, Count=262144, Datatype='"ncclFloat32"',
                     Algorithm='"RING"', Protocol='"SIMPLE"', nChannels=n_ch)  # fmt: skip
        self.ev(coll, "COLL", "b", c, t + 2, info)
        end = t + 2
        for ch in range(n_ch):
            clk = 1_756_135_989_724_672_000 + int(t * 1000)
            gpu = _args(Channel=ch, StartGpuClk=clk, StopGpuClk=clk + rng.randrange(1000, 9_000_000))
            self.ev("KernelCh", "GPU", "b", ch, t + 3, gpu)
            for send in (False, True):
                end = max(end, self.proxy_op(ch, send, t + 4, v5))
            self.ev("KernelCh", "GPU", "e", ch, end + 1)
        self.ev(coll, "COLL", "e", c, end + 2)
        if v5:
            self.ev("AllReduce", "COLL_API", "e", c, end + 2)
            self.ev("Group API", "GROUP_API", "e", c, end + 3)
        else:
            self.ev("Group", "GROUP", "e", c, end + 3)
        return end

    def proxy_op(self, ch: int, send: bool, s: float, v5: bool) -> float:
        """A Schedule/Progress op pair with 4 steps of 3 states, QP (v5) or socket (v4) events."""
        rng = self.rng
        a = _args(
            Channel=ch, Peer=(3 + (1 if send else -1)) % 8, Steps=4, ChunkSize=4194304, transSize=524288
        )
        sched, prog = ("ScheduleSend", "ProgressSend") if send else ("ScheduleRecv", "ProgressRecv")
        states = (
            ("SendGpuWait", "SendPeerWait", "SendWait")
            if send
            else ("RecvWait", "RecvFlushWait", "RecvGpuWait")
        )
        self.ev(sched, "PROXY", "b", self.op_id, s, a)
        self.ev(sched, "PROXY", "e", self.op_id, s + 30)
        self.ev(prog, "PROXY", "b", self.op_id, s + 30, a)
        end = s + 30
        for k in range(4):
            u = s + 31 + k
            for state in states:
                d = rng.uniform(1, 120)
                self.ev(state, "NET", "b", self.step_id, u, _args(Step=k))
                if rng.random() < 0.002:  # the README's typographic quote
                    self.lines[-1] = self.lines[-1].replace('"name"', '\u201cname"', 1)
                if state in ("SendWait", "RecvWait"):
                    if v5:
                        qp = _args(
                            device=0,
                            qp_num=4711 + ch,
                            opcode=int(k == 3),
                            wr_id=k,
                            size=131072 if send else 0,
                        )
                        self.ev("Qp", "NET_IB", "b", self.net_id, u + 0.1, qp)
                        self.ev("Qp", "NET_IB", "e", self.net_id, u + d - 0.1)
                    else:
                        sock = _args(sock=37 + ch, op=int(send), size=131072)
                        self.ev("Sock", "NET_SOCK", "b", self.net_id, u + 0.1, sock)
                        self.ev("Sock", "NET_SOCK", "e", self.net_id, u + d - 0.1)
                    self.net_id += 1
                self.ev(state, "NET", "e", self.step_id, u + d)
                u += d
            end = max(end, u)
            self.step_id += 1
        self.ev(prog, "PROXY", "e", self.op_id, end + 0.5)
        self.op_id += 1
        return end


def profiler_payload(n_colls: int, seed: int = 0) -> bytes:
    """``n_colls`` collectives of an example-plugin trace, v5 and v4 layouts mixed."""
    trace, t = _Trace(random.Random(seed)), 1000.0
    for c in range(n_colls):
        t = trace.collective(c, t) + 1000.0
    trace.lines.append("{}]")
    return ("\n".join(trace.lines) + "\n").encode()


# -- the reference: pyarrow's reader plus flattening, no checks ---------------------------------------

_F = pa.float64()
_KTS = pa.struct([("channel_id", _F), ("kernel_start_ts", _F), ("kernel_stop_ts", _F)])
_KSN = pa.struct([("channel_id", _F), ("kernel_stop_sn", _F)])
_HEADER = pa.struct([("id", pa.string()), ("rank", _F), ("n_ranks", _F), ("nnodes", _F)])
_META = pa.struct([("dump_timestamp_us", _F), ("hostname", pa.string()), ("pid", _F)])
_BODY = pa.struct(
    [
        ("coll", pa.string()),
        ("coll_sn", _F),
        ("coll_msg_size_bytes", _F),
        ("coll_exec_time_us", _F),
        ("coll_busbw_gbs", _F),
        ("event_trace_sn", pa.struct([("coll_start_sn", _F), ("kernel_events", pa.list_(_KSN))])),
        ("event_trace_ts", pa.struct([("coll_start_ts", _F), ("kernel_events", pa.list_(_KTS))])),
    ]
)
INSPECTOR_SCHEMA = pa.schema(
    [
        ("header", _HEADER),
        ("metadata", _META),
        ("coll_perf", _BODY),
        ("dump_stats", pa.struct([("coll_dropped_since_last_dump", _F)])),
        ("p2p_perf", pa.struct([])),
        ("proxy_trace", pa.struct([])),
    ]
)
_ARGS = pa.struct(
    [(k, pa.uint64()) for k in ("CommHash", "StartGpuClk", "StopGpuClk", "wr_id")]
    + [
        (k, _F)
        for k in (
            "SeqNum",
            "Rank",
            "Peer",
            "Count",
            "nChannels",
            "Channel",
            "Steps",
            "ChunkSize",
            "transSize",
            "Step",
            "device",
            "qp_num",
            "opcode",
            "sock",
            "size",
        )
    ]
    + [(k, pa.string()) for k in ("Datatype", "Algorithm", "Protocol")]
)
PROFILER_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("cat", pa.string()),
        ("ph", pa.string()),
        ("id", _F),
        ("pid", _F),
        ("ts", _F),
        ("args", _ARGS),
    ]
)


def _read(data: bytes, schema: pa.Schema) -> pa.Table:
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pj.read_json(io.BytesIO(data), parse_options=opts)


def _flat(table: pa.Table) -> dict[str, pa.Array]:
    """Every struct field as its own column, recursively (``a.b.c``)."""
    out: dict[str, pa.Array] = {}
    todo: list[tuple[str, Any]] = [(f.name, table.column(f.name).combine_chunks()) for f in table.schema]
    while todo:
        name, arr = todo.pop()
        if pa.types.is_struct(arr.type):
            todo += [(f"{name}.{f.name}", arr.field(i)) for i, f in enumerate(arr.type)]
        else:
            out[name] = arr
    return out


def reference_inspector(data: bytes) -> int:
    """Inspector bytes -> flat whole-collective and per-channel columns; returns the rows."""
    end = data.rfind(b"\n") + 1  # the line being written is not JSON yet
    body = (
        data[:end]
        .replace(b'"coll_busbw_gbs":"nan"', b'"coll_busbw_gbs":NaN')
        .replace(b'"coll_algobw_gbs":"nan"', b'"coll_algobw_gbs":NaN')
    )
    cols = _flat(_read(body, INSPECTOR_SCHEMA))
    events = cols["coll_perf.event_trace_ts.kernel_events"]
    parent = pc.list_parent_indices(events)
    ch = pc.list_flatten(events)
    record = {k: v for k, v in cols.items() if "kernel_events" not in k}
    whole = pa.table(record)
    per_channel = pa.table(
        {
            **{k: v.take(parent) for k, v in record.items()},
            **{f"ch.{f.name}": ch.field(i) for i, f in enumerate(ch.type)},
        }
    )
    return whole.num_rows + per_channel.num_rows


def reference_profiler(data: bytes) -> int:
    """Trace bytes -> JSON lines -> flat event columns; returns the rows."""
    body = data.replace(b"},\n", b"}\n").replace(b"\n{}]\n", b"\n").replace(b"[\n", b"", 1)
    body = body.replace("\u201c".encode(), b'"')
    for bare in (b"0x5020000567d0", b"ncclFloat32"):
        body = body.replace(b": " + bare, b': "' + bare + b'"')
    cols = _flat(_read(body, PROFILER_SCHEMA))
    return len(cols["name"])


# -- graywire --------------------------------------------------------------------------------------------


def graywire_inspector(data: bytes) -> int:
    parser = InspectorParser("bench-job")
    rows = TimingRows()
    parser.feed_data(data, rows)  # what the file collector hands it: the bytes read
    return rows.to_batch().num_rows


def graywire_profiler(data: bytes) -> int:
    parser = ProfilerParser()
    parser.feed_data(data)  # what the file collector hands it: the bytes read
    rows, proxy = TimingRows(), ProxyRows()
    parser.timing_rows(rows, job="bench-job", host="gpu-0001", observed_us=1_700_000_000_000_000)
    parser.proxy_rows(proxy, job="bench-job", host="gpu-0001", observed_us=1_700_000_000_000_000)
    return rows.to_batch().num_rows + proxy.to_batch().num_rows


def best_of(fns: list[Callable[[bytes], int]], data: bytes, repeat: int) -> list[tuple[float, int]]:
    """Each function's best time over ``repeat`` runs, the functions taking turns (a machine
    whose load changes slows them alike)."""
    best = [(float("inf"), 0)] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            out = fn(data)
            best[i] = min(best[i], (time.perf_counter() - t0, out))
    return best


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def compare(
    label: str, data: bytes, ours: Callable[[bytes], int], ref: Callable[[bytes], int], repeat: int
) -> None:
    lines = data.count(b"\n")
    (t_gw, rows_gw), (t_ref, rows_ref) = best_of([ours, ref], data, repeat)
    print(f"{label}: {lines:,} lines, {len(data) / 1e6:.0f} MB")
    print(f"  graywire   {t_gw:7.3f} s  {lines / t_gw / 1e3:8.0f} k lines/s  ({rows_gw:,} rows out)")
    print(f"  reference  {t_ref:7.3f} s  {lines / t_ref / 1e3:8.0f} k lines/s  ({rows_ref:,} rows out)")
    print(f"  ratio graywire / reference: {t_ref / t_gw:.2f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000, help="Inspector lines")
    ap.add_argument("--colls", type=int, default=4_000, help="collectives in the profiler trace")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each parser; the best is shown")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    ins = inspector_payload(args.records)
    prof = profiler_payload(args.colls)
    print(f"payloads synthesized in {time.perf_counter() - t0:.1f} s")
    compare("Inspector JSON lines", ins, graywire_inspector, reference_inspector, args.repeat)
    compare("profiler trace", prof, graywire_profiler, reference_profiler, args.repeat)
    print(f"peak RSS {rss_gb():.1f} GB")


if __name__ == "__main__":
    main()
