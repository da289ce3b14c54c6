"""fabricsim's NCCL timings written as the NCCL Inspector writes them (and, optionally, NCCL_DEBUG logs).

Each rank is one process. Its Inspector file is ``<dir>/<hostname>-pid<pid>.log``, appended
with one dump per :meth:`InspectorWriter.write`, byte for byte in the plugin's layout
(``inspector_json.cc``/``json.cc``): compact JSON, one object per line, doubles as ``%lf``
(six decimals, ``"nan"`` for NaN), ``/`` escaped as ``\\/``. The default ``v4.3`` layout writes a
``dump_stats`` marker carrying ``header``/``metadata`` and then bare ``{"coll_perf":...}``
lines; ``v4.0`` writes self-contained records. Verbose records list every channel's kernel
start/stop (gettimeofday µs): a channel row of the batch becomes one ``kernel_events`` entry
starting at the row's ``start_time``, so the per-channel slowness and the late arrivals
fabricsim injects are what the collector reads back.

With ``debug_log``, each process also gets ``<dir>/nccl.<hostname>.<pid>`` (what
``NCCL_DEBUG=INFO NCCL_DEBUG_FILE=nccl.%h.%p`` produces): the ``NET/IB : Using`` NIC list, the
communicator's Init lines (with the CUDA device) and, per channel, the ring hop on the rank's
rail (``Channel 02/0 : 26[2] -> 34[2] [send] via NET/IB/2/GDRDMA``). That is how the
collector learns each rank's GPU, hence its NIC port.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from graywire.collectors.nccl.common import busbw_factor
from graywire.collectors.schemas import record_kind

Version = Literal["v4.3", "v4.0"]


def comm_hash(name: str) -> int:
    """A stable 64-bit stand-in for NCCL's commHash of a fabricsim communicator name."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def _num(x: float) -> str:
    """A double as ``jsonDouble`` prints it: ``%lf`` or the string ``"nan"``."""
    return '"nan"' if math.isnan(x) else f"{x:f}"


def _str(s: str) -> str:
    return json.dumps(s).replace("/", "\\/")


@dataclass
class _Proc:
    host: str
    pid: int
    device: int | None
    path: Path
    debug_path: Path | None
    comms: set[str] = field(default_factory=set)


@dataclass
class InspectorWriter:
    """Appends Inspector dumps (and NCCL_DEBUG init lines) for fabricsim ``nccl_timing`` batches.

    Files go to ``root/<job>/`` (one directory per job, as ``NCCL_INSPECTOR_DUMP_DIR`` per job
    would) or straight into ``root`` with ``per_job_dirs=False``.
    """

    root: Path
    version: Version = "v4.3"
    verbose: bool = True
    debug_log: bool = False
    per_job_dirs: bool = True
    gdrdma: bool = True
    nic_names: Sequence[str] = tuple(f"mlx5_{i}" for i in range(8))
    pid_base: int = 40_000
    git_rev: str = ""
    _procs: dict[tuple[str, str, int], _Proc] = field(default_factory=dict)
    records: int = 0

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def _dir(self, job: str) -> Path:
        d = self.root / job if self.per_job_dirs else self.root
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _proc(self, job: str, host: str, device: int | None, rank: int) -> _Proc:
        key = (job, host, device if device is not None else -1 - rank)
        p = self._procs.get(key)
        if p is None:
            pid = self.pid_base + len(self._procs)
            d = self._dir(job)
            p = _Proc(
                host,
                pid,
                device,
                d / f"{host}-pid{pid}.log",
                d / f"nccl.{host}.{pid}" if self.debug_log else None,
            )
            self._procs[key] = p
        return p

    def write(self, batch: pa.RecordBatch) -> int:
        """Append one dump per process for this poll's rows; returns the records written."""
        if record_kind(batch.schema) != "nccl_timing":
            raise ValueError(f"InspectorWriter takes nccl_timing batches, not {record_kind(batch.schema)}")
        n = batch.num_rows
        if n == 0:
            return 0
        t_us = int(batch.column("time")[0].value)
        col = {name: batch.column(name) for name in batch.schema.names}
        codes = {k: _codes(col[k]) for k in ("job", "communicator", "collective")}
        values = {k: _values(col[k]) for k in ("job", "communicator", "collective", "host", "transport")}
        rank = col["rank"].to_numpy(zero_copy_only=False).astype(np.int64)
        seq = col["seq"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        chan = col["channel"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        dur = col["duration_seconds"].to_numpy(zero_copy_only=False)
        start_us = np.full(n, -1, dtype=np.int64)
        if "start_time" in col:
            start_us = col["start_time"].cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)
        # One record per (job, communicator, rank, collective, seq); channels inside it.
        order = np.lexsort((chan, seq, codes["collective"], rank, codes["communicator"], codes["job"]))
        key = np.stack([codes["job"], codes["communicator"], rank, codes["collective"], seq])[:, order]
        cut = np.flatnonzero(np.any(key[:, 1:] != key[:, :-1], axis=0)) + 1
        groups = np.split(order, cut)
        nranks = col["nranks"].to_pylist()
        hosts, devices = col["host"].to_pylist(), col["device"].to_pylist()
        sizes = col["message_bytes"].to_pylist()
        # nnodes per communicator: distinct hosts among its rows.
        comm_hosts: dict[str, set[str]] = {}
        local: dict[tuple[str, str | None], set[int]] = {}  # ranks of a communicator on one host
        for c, h, r in zip(values["communicator"], hosts, rank.tolist(), strict=True):
            comm_hosts.setdefault(c, set()).add(h or "")
            local.setdefault((c, h), set()).add(r)
        # Ring neighbours on each rail: ranks of a communicator sharing a GPU index, in order.
        rails: dict[tuple[str, int | None], list[int]] = {}
        for c, r, d in zip(values["communicator"], rank.tolist(), devices, strict=True):
            rails.setdefault((c, d), []).append(r)
        rails = {k: sorted(set(v)) for k, v in rails.items()}
        dumps: dict[tuple[Path, str], list[str]] = {}
        written = 0
        for g in groups:
            i = int(g[0])
            job, comm, coll = values["job"][i], values["communicator"][i], values["collective"][i]
            host, device, r = hosts[i] or "unknown", devices[i], int(rank[i])
            proc = self._proc(job, host, device, r)
            if self.debug_log and comm not in proc.comms:
                self._debug_init(
                    proc,
                    comm,
                    r,
                    nranks[i],
                    len(comm_hosts[comm]),
                    len(local[(comm, hosts[i])]),
                    values["transport"][i],
                    sorted(set(chan[g].tolist()) - {-1}),
                    rails.get((comm, device), [r]),
                )
            proc.comms.add(comm)
            header = (
                f'{{"id":{_str(f"0x{comm_hash(comm):x}")},'
                + (f'"comm_name":{_str(comm)},' if self.version != "v4.0" else "")
                + f'"rank":{r},"n_ranks":{nranks[i] if nranks[i] is not None else 0},'
                f'"nnodes":{len(comm_hosts[comm])}}}'
            )
            meta = (
                f'{{"inspector_output_format_version":"{self.version}","git_rev":{_str(self.git_rev)},'
                f'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":{t_us},'
                f'"hostname":{_str(host)},"pid":{proc.pid}}}'
            )
            body = self._coll(
                coll, int(seq[i]), sizes[i] or 0, nranks[i] or 1, chan[g], dur[g], start_us[g], t_us
            )
            if self.version == "v4.0":
                line = f'{{"header":{header},"metadata":{meta},"coll_perf":{body}}}'
            else:
                line = f'{{"coll_perf":{body}}}'
            dumps.setdefault((proc.path, header + "\x00" + meta), []).append(line)
            written += 1
        for (path, hm), lines in dumps.items():
            header, meta = hm.split("\x00")
            out = []
            if self.version != "v4.0":
                out.append(
                    f'{{"header":{header},"metadata":{meta},"dump_stats":{{"coll_records":{len(lines)},'
                    '"coll_dropped_total":0,"coll_dropped_since_last_dump":0,"p2p_records":0,'
                    '"p2p_dropped_total":0,"p2p_dropped_since_last_dump":0}}'
                )
            out.extend(lines)
            with path.open("a") as fh:
                fh.write("\n".join(out) + "\n")
        self.records += written
        return written

    def _coll(
        self,
        coll: str,
        seq: int,
        size: int,
        nranks: int,
        chans: np.ndarray,
        durs: np.ndarray,
        starts: np.ndarray,
        t_us: int,
    ) -> str:
        per_channel = chans >= 0
        ch = chans[per_channel].tolist()
        d_us = np.rint(durs[per_channel] * 1e6).astype(np.int64).tolist()
        # Channels launch 1 µs apart and the slowest one ends the collective.
        exec_us = max(d_us) + len(ch) if ch else round(float(np.max(durs)) * 1e6)
        algbw = size / exec_us / 1e3 if exec_us > 0 else math.nan  # decimal GB/s
        busbw = algbw * busbw_factor(coll, nranks)
        out = (
            f'{{"coll":{_str(coll)},"coll_algo":"RING","coll_proto":"SIMPLE","coll_sn":{max(seq, 0)},'
            f'"coll_msg_size_bytes":{size},"coll_exec_time_us":{exec_us},'
            f'"coll_timing_source":"kernel_gpu","coll_algobw_gbs":{_num(algbw)},"coll_busbw_gbs":{_num(busbw)}'
        )
        if self.verbose and ch:
            end = t_us - 1000  # the last kernel ends 1 ms before the dump
            start0 = end - exec_us
            # Kernels start when the rank arrives (the row's start time, where it has one) and
            # launch 1 µs apart; the collective's CPU start event comes 120 µs before them.
            given = starts[per_channel]
            kstart = [int(g) if g >= 0 else start0 + j for j, g in enumerate(given.tolist())]
            coll_start = min(kstart) - 120
            sn_ev, ts_ev = [], []
            for j, (c, d) in enumerate(zip(ch, d_us, strict=True)):
                s = kstart[j]
                sn_ev.append(
                    f'{{"channel_id":{c},"kernel_start_sn":{3 + j},"kernel_stop_sn":{4 + len(ch) + 2 * j},'
                    f'"kernel_record_sn":{3 + len(ch) + 2 * j}}}'
                )
                ts_ev.append(
                    f'{{"channel_id":{c},"kernel_start_ts":{s},"kernel_stop_ts":{s + d},'
                    f'"kernel_record_ts":{s + d}}}'
                )
            out += (
                f',"event_trace_sn":{{"coll_start_sn":1,"coll_stop_sn":2,"kernel_events":[{",".join(sn_ev)}]}}'
                f',"event_trace_ts":{{"coll_start_ts":{coll_start},"coll_stop_ts":{coll_start + 5},'
                f'"kernel_events":[{",".join(ts_ev)}]}}'
            )
        return out + "}"

    def _debug_init(
        self,
        proc: _Proc,
        comm: str,
        rank: int,
        nranks: int | None,
        nnodes: int,
        local_ranks: int,
        transport: str | None,
        channels: list[int],
        rail: list[int],
    ) -> None:
        assert proc.debug_path is not None
        dev = proc.device if proc.device is not None else 0
        pre = f"{proc.host}:{proc.pid}:{proc.pid}"
        tid = f"{proc.host}:{proc.pid}:{proc.pid + 17}"
        n = nranks or len(rail)
        ptr = 0x55D0_0000_0000 + (comm_hash(comm + proc.host) & 0xFFFF_FFF0)
        comm_id = comm_hash("commId:" + comm)
        lines = []
        if not proc.comms:
            devs = " ".join(f"[{i}]{name}:1/IB" for i, name in enumerate(self.nic_names))
            lines += [
                f"{pre} [{dev}] NCCL INFO NET/IB : Using {devs} [RO]; OOB eth0:10.0.0.1<0>",
                f"{pre} [{dev}] NCCL INFO Using network IB",
            ]
        head = f"ncclCommInitRankConfig comm 0x{ptr:x} rank {rank} nranks {n} cudaDev {dev} nvmlDev {dev}"
        bus = f"busId {0x1B000 + 0x10000 * dev:x} commId 0x{comm_id:x}"
        lines += [
            f"{tid} [{dev}] NCCL INFO {head} {bus} - Init START",
            f"{tid} [{dev}] NCCL INFO comm 0x{ptr:x} rank {rank} nRanks {n} nNodes {nnodes} "
            f"localRanks {local_ranks} localRank {dev} MNNVL 0",
        ]
        pos = rail.index(rank) if rank in rail else 0
        nxt, prv = rail[(pos + 1) % len(rail)], rail[(pos - 1) % len(rail)]
        if transport == "NET/Socket":
            via = "NET/Socket/0"
        else:
            via = f"NET/IB/{dev}" + ("/GDRDMA" if self.gdrdma else "")
        for c in channels:
            info = f"{tid} [{dev}] NCCL INFO"
            lines += [
                f"{info} Ring {c:02d} : {prv} -> {rank} -> {nxt}",
                f"{info} Channel {c:02d}/0 : {rank}[{dev}] -> {nxt}[{dev}] [send] via {via}",
                f"{info} Channel {c:02d}/0 : {prv}[{dev}] -> {rank}[{dev}] [receive] via {via}",
            ]
        lines.append(f"{tid} [{dev}] NCCL INFO {head} {bus} - Init COMPLETE")
        with proc.debug_path.open("a") as fh:
            fh.write("\n".join(lines) + "\n")


def _codes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    return arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _values(arr: pa.Array | pa.ChunkedArray) -> list[str | None]:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.cast(pa.string()).to_pylist()


@dataclass
class InitLogWriter:
    """NCCL_DEBUG=INFO init lines of fabricsim's start-up launches (fabricsim/startup.py).

    One file per rank's process, ``root/nccl.<job>.<host>.<pid>``: every job's files in one
    shared directory, as sites set ``NCCL_DEBUG_FILE=/shared/nccl.${SLURM_JOB_ID}.%h.%p`` (a
    restart's processes have new pids). In the formats of NCCL 2.28 ``src/init.cc`` and
    ``src/bootstrap.cc``, as the real captures show them (tests/fixtures/corpus/nccl_debug):
    ``ncclCommInitRankConfig comm 0x… … commId 0x… - Init START`` (no ``[Rank N]``: 2.29 adds
    it), ``Bootstrap timings total %f (...)``, the topology probe's lines
    (``NVLS multicast support``, the ring graph's ``Pattern``, the agreed ``coll channels``) after
    the ``nRanks ... nNodes`` line, ``Channel`` lines, ``... - Init COMPLETE`` and ``Init timings -
    ...: ... total %.2f (...)``. Once its world communicator is up, every rank splits it, as
    PyTorch's ``new_group`` does (``ncclCommSplit … parent 0x<the world's comm pointer>
    splitCount 1 color 0 key R- Init START``, no ``commId``; ``key R - Init COMPLETE``).
    """

    root: Path
    lines: int = 0

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def path(self, launch: Any, rank: int) -> Path:
        host = launch.hosts[rank // launch.gpus]
        return self.root / f"nccl.{launch.job}.{host}.{launch.pid_base + rank}"

    def write(self, events: Sequence[Any]) -> int:
        """Append the events' lines (in order) to their processes' files; returns lines written."""
        out: dict[Path, list[str]] = {}
        for ev in events:
            out.setdefault(self.path(ev.launch, ev.rank), []).extend(self._lines(ev))
        for path, lines in out.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as fh:
                fh.write("\n".join(lines) + "\n")
            self.lines += len(lines)
        return sum(len(v) for v in out.values())

    def _lines(self, ev: Any) -> list[str]:
        la, r = ev.launch, ev.rank
        n, g = la.nranks, la.gpus
        dev, host, pid = r % g, la.hosts[r // g], la.pid_base + r
        info = f"{host}:{pid}:{pid + 17} [{dev}] NCCL INFO"
        ptr = 0x55D0_0000_0000 + (comm_hash(f"{la.name}/{r}") & 0xFFFF_FFF0)
        ident = (
            f"ncclCommInitRankConfig comm 0x{ptr:x} rank {r} nranks {n} cudaDev {dev} nvmlDev {dev} "
            f"busId {0x1B000 + 0x10000 * dev:x} commId 0x{la.comm_id:x}"
        )
        step = ev.step
        ip = f"10.0.{r // g // 256}.{r // g % 256}"
        if step == 0:
            return [
                f"{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap: Using eth0:{ip}<0>",
                f"{info} {ident} - Init START",
            ]
        if step == 1:
            b = 0.001 * (1 + n / 512)  # the ring alone; the wait for late ranks is in Init timings
            return [
                f"{info} Bootstrap timings total {b:f} (create {b * 0.05:f}, send {b * 0.2:f}, "
                f"recv {b * 0.3:f}, ring {b * 0.4:f}, delay 0.000000)"
            ]
        if step == 2:
            # Topology detected, peer info exchanged (src/init.cc). 2.28 prints no "Rank N: K Net
            # devices" line: that came with 2.30.
            return [
                f"{info} comm 0x{ptr:x} rank {r} nRanks {n} nNodes {len(la.hosts)} localRanks {g} "
                f"localRank {dev} MNNVL 0"
            ]
        if step == 3:
            nxt, prv = (r + g) % n, (r - g) % n
            bad = la.layout.get(host)  # what this host's probe got wrong (fabricsim/startup.py)
            gdr = "" if bad == 1 else "/GDRDMA"
            via = f"NET/IB/{dev}{gdr}" if len(la.hosts) > 1 else "P2P/CUMEM"
            nch, intra, inter = (4, "SYS", "PIX") if bad == 0 else (16, "NVL", "SYS" if bad == 1 else "PIX")
            agreed = min(4 if b == 0 else 16 for b in [la.layout.get(h, -1) for h in la.hosts])
            local_next = r - dev + (dev + 1) % g
            lines = [
                f"{info} NVLS multicast support is {'not ' if bad == 0 else ''}available on dev {dev}",
                f"{info} Pattern 4, crossNic 0, nChannels {nch}, bw {160 / nch:f}/{160 / nch:f}, "
                f"type {intra}/{inter}, sameChannels 1",
                f"{info} Channel 00/0 : {r}[{dev}] -> {nxt}[{dev}] [send] via {via}",
                f"{info} Channel 00/0 : {prv}[{dev}] -> {r}[{dev}] [receive] via {via}",
            ]
            if g > 1:
                lines.append(
                    f"{info} Channel 00 : {r}[{dev}] -> {local_next}[{(dev + 1) % g}] via SHM/direct"
                    if bad == 0
                    else f"{info} Channel 00/0 : {r}[{dev}] -> {local_next}[{(dev + 1) % g}] via P2P/CUMEM"
                )
            nvls = 0 if any(la.layout.get(h) == 0 for h in la.hosts) else 16
            return [
                *lines,
                f"{info} {agreed} coll channels, {agreed} collnet channels, {nvls} nvls channels, "
                f"{2 * agreed} p2p channels, 2 p2p channels per peer",
            ]
        t = ev.timings or {}
        phases = ("kernels", "alloc", "bootstrap", "allgathers", "topo", "graphs", "connections", "rest")
        detail = ", ".join(f"{p} {t.get(p, 0.0):.2f}" for p in phases)
        split = (
            f"ncclCommSplit comm 0x{ptr + 0x1000:x} rank {r} nranks {n} cudaDev {dev} nvmlDev {dev} "
            f"busId {0x1B000 + 0x10000 * dev:x} parent 0x{ptr:x} splitCount 1 color 0 key {r}"
        )
        quick = ", ".join(f"{p} {0.01 if p == 'connections' else 0.0:.2f}" for p in phases)
        world = [
            f"{info} {ident} - Init COMPLETE",
            f"{info} Init timings - ncclCommInitRankConfig: rank {r} nranks {n} "
            f"total {t.get('total', 0.0):.2f} ({detail})",
            f"{info} {split}- Init START",
        ]
        if getattr(ev, "split_hangs", False):
            return world  # its host hangs in the split's intra-node barrier (a stall, fabricsim/startup.py)
        return [
            *world,
            f"{info} {split} - Init COMPLETE",
            f"{info} Init timings - ncclCommSplit: rank {r} nranks {n} total 0.01 ({quick})",
        ]
