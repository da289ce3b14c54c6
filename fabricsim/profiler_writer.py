"""fabricsim's proxy steps written as the NCCL example profiler plugin dumps them.

Each rank is one process with one dump per communicator, ``<dir>/<host>_<commHash>_<rank>.json``
(``plugin.cc`` names it ``${NCCL_PROFILE_DUMP_FILE}_<commHash>_<rank>.json``; the dump file is
set per host). Events are printed in ``print_event.cc``'s formats and nesting (profiler API v5):
``COLL`` > per channel ``KernelCh`` > ``ScheduleRecv``/``ProgressRecv`` and
``ScheduleSend``/``ProgressSend`` > each step's wait states, with the IB plugin's ``Qp`` event
inside ``SendWait``/``RecvWait``. The plugin writes a dump once, at finalize; this writer appends
each poll's collective (and :meth:`ProfilerWriter.close` writes the closing ``{}]``) so a
collector can follow it. Each process also gets ``nccl.<host>.<pid>`` with the NCCL_DEBUG=INFO
lines that name its GPU and each channel's NIC (``Channel 02/0 : 26[2] -> 34[2] [send] via
NET/IB/2/GDRDMA``), which is how the collector learns the NIC of every hop.

A row's totals are split evenly over ``steps_written`` steps (a real op prints every step);
the bytes (``transSize``) and step count (``Steps``) are the row's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import record_kind
from graywire.fabricsim.nccl_writer import comm_hash


@dataclass
class _Proc:
    pid: int
    path: Path
    clock_us: float = 1000.0  # CPU µs since the plugin started
    op_id: int = 0
    step_id: int = 0
    qp_id: int = 0
    coll_id: int = 0


@dataclass
class ProfilerWriter:
    """Appends example-plugin dump events (and NCCL_DEBUG lines) for fabricsim ``nccl_proxy`` batches."""

    root: Path
    steps_written: int = 2
    nic_names: tuple[str, ...] = tuple(f"mlx5_{i}" for i in range(8))
    pid_base: int = 50_000
    _procs: dict[tuple[str, str, int], _Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def _proc(self, job: str, comm: str, host: str, rank: int, device: int, ring: dict[int, tuple]) -> _Proc:
        key = (job, comm, rank)
        p = self._procs.get(key)
        if p is None:
            d = self.root / job
            d.mkdir(parents=True, exist_ok=True)
            pid = self.pid_base + len(self._procs)
            p = self._procs[key] = _Proc(pid, d / f"{host}_{comm_hash(comm)}_{rank}.json")
            p.path.write_text("[\n")
            self._debug(d / f"nccl.{host}.{pid}", host, pid, comm, rank, device, ring)
        return p

    def _debug(
        self, path: Path, host: str, pid: int, comm: str, rank: int, dev: int, ring: dict[int, tuple]
    ) -> None:
        pre = f"{host}:{pid}:{pid} [{dev}] NCCL INFO"
        devs = " ".join(f"[{i}]{n}:1/IB" for i, n in enumerate(self.nic_names))
        comm_id = f"0x{comm_hash('commId:' + comm):x}"
        head = f"comm 0x55d0{rank:08x} rank {rank} nranks {ring['nranks']} cudaDev {dev} nvmlDev {dev}"
        lines = [
            f"{pre} NET/IB : Using {devs} [RO]; OOB eth0:10.0.0.1<0>",
            f"{pre} {head} busId {0x1B000 + 0x10000 * dev:x} commId {comm_id} - Init START",
        ]
        for ch, (prv, nxt) in sorted(ring["channels"].items()):
            lines += [
                f"{pre} Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{dev}] [send] via NET/IB/{dev}/GDRDMA",
                f"{pre} Channel {ch:02d}/0 : {prv}[{dev}] -> {rank}[{dev}] [receive] via NET/IB/{dev}/GDRDMA",
            ]
        lines.append(f"{pre} {head} busId {0x1B000 + 0x10000 * dev:x} - Init COMPLETE")
        path.write_text("\n".join(lines) + "\n")

    def write(self, batch: pa.RecordBatch) -> int:
        """Append one collective per (communicator, rank) of this poll; returns the ops written."""
        if record_kind(batch.schema) != "nccl_proxy":
            raise ValueError(f"ProfilerWriter takes nccl_proxy batches, not {record_kind(batch.schema)}")
        if batch.num_rows == 0:
            return 0
        rows = batch.to_pylist()
        by_rank: dict[tuple[str, str, int], list[dict]] = {}
        ring: dict[tuple[str, int], dict] = {}
        for r in rows:
            by_rank.setdefault((r["job"], r["communicator"], r["rank"]), []).append(r)
        for (_job, comm, rank), rs in by_rank.items():
            chans: dict[int, list] = {}
            for r in rs:
                chans.setdefault(r["channel"], [None, None])[0 if r["direction"] == "recv" else 1] = r["peer"]
            ring[(comm, rank)] = {"nranks": len({k[2] for k in by_rank if k[1] == comm}), "channels": chans}
        written = 0
        for (job, comm, rank), rs in by_rank.items():
            r0 = rs[0]
            p = self._proc(job, comm, r0["host"], rank, r0["device"] or 0, ring[(comm, rank)])
            lines = self._collective(p, comm, rank, r0["seq"] or 0, rs)
            with p.path.open("a") as fh:
                fh.write("\n".join(lines) + "\n")
            written += len(rs)
        return written

    def close(self) -> None:
        """End every dump as the plugin does at finalize."""
        for p in self._procs.values():
            with p.path.open("a") as fh:
                fh.write("{}]\n")

    # -- print_event.cc formats ----------------------------------------------------------------------
    def _ev(
        self, p: _Proc, name: str, cat: str, ph: str, id_: int, ts: float, args: str | None = None
    ) -> str:
        s = f'{{"name": "{name}", "cat": "{cat}", "ph": "{ph}", "id": {id_}, "pid": {p.pid}, "tid": 1, '
        s += f'"ts": {ts:f}'
        return s + (f', "args": {{{args}}}}},' if args is not None else "},")

    def _collective(self, p: _Proc, comm: str, rank: int, seq: int, rs: list[dict]) -> list[str]:
        chans = sorted({r["channel"] for r in rs})
        t = p.clock_us
        out = [
            self._ev(p, "AllReduce", "COLL", "b", p.coll_id, t,
                     f'"SeqNum": {seq}, "CommHash": {comm_hash(comm)}, "Rank": {rank}, "Count": 1048576, '
                     '"Datatype": "ncclBfloat16", "Algorithm": "RING", "Protocol": "SIMPLE", '
                     f'"nChannels": {len(chans)}'),
        ]  # fmt: skip
        end = t
        for ch in chans:
            clk = int(t * 1000)
            gpu = f'"Channel": {ch}, "StartGpuClk": {clk}, "StopGpuClk": {clk + 1000}'
            out.append(self._ev(p, "KernelCh", "GPU", "b", 0, t, gpu))
            for r in sorted((r for r in rs if r["channel"] == ch), key=lambda r: r["direction"] != "recv"):
                lines, stop = self._op(p, r, t + 1.0)
                out += lines
                end = max(end, stop)
            out.append(self._ev(p, "KernelCh", "GPU", "e", 0, end + 1.0))
        out.append(self._ev(p, "AllReduce", "COLL", "e", p.coll_id, end + 2.0))
        p.coll_id += 1
        p.clock_us = end + 1000.0
        return out

    def _op(self, p: _Proc, r: dict, t: float) -> tuple[list[str], float]:
        send = r["direction"] == "send"
        n = max(1, min(self.steps_written, r["steps"] or 1))
        nbytes, nsteps = r["bytes"] or 0, r["steps"] or n
        a = (f'"Channel": {r["channel"]}, "Peer": {r["peer"]}, "Steps": {nsteps}, '
             f'"ChunkSize": {nbytes // max(nsteps, 1)}, "transSize": {nbytes}')  # fmt: skip
        sched, prog = ("ScheduleSend", "ProgressSend") if send else ("ScheduleRecv", "ProgressRecv")
        out = [
            self._ev(p, sched, "PROXY", "b", p.op_id, t, a),
            self._ev(p, sched, "PROXY", "e", p.op_id, t + 2.0),
        ]
        t += 2.0
        out.append(self._ev(p, prog, "PROXY", "b", p.op_id, t, a))
        us = lambda name: float(np.nan_to_num(r[name] or 0.0)) * 1e6 / n  # noqa: E731
        qp = r["qp_num"] if r["qp_num"] is not None else 0
        dev = r["net_device"] if r["net_device"] is not None else 0
        stop = t
        for k in range(n):
            i, s0 = p.step_id, t + 0.5 * k
            if send:
                s1 = s0 + us("send_gpu_wait_seconds")
                s2 = s1 + us("send_peer_wait_seconds")
                s3 = s2 + us("send_wait_seconds")
                out += [
                    self._ev(p, "SendGpuWait", "NET", "b", i, s0, f'"Step": {k}'),
                    self._ev(p, "SendGpuWait", "NET", "e", i, s1),
                    self._ev(p, "SendPeerWait", "NET", "b", i, s1, f'"Step": {k}'),
                    self._ev(p, "SendPeerWait", "NET", "e", i, s2),
                    self._ev(p, "SendWait", "NET", "b", i, s2, f'"Step": {k}'),
                    self._ev(p, "Qp", "NET_IB", "b", p.qp_id, s2 + 0.1, f'"device": {dev}, "qp_num": {qp}, '
                             f'"opcode": {1 if k == n - 1 else 0}, "wr_id": {k}, "size": {nbytes // n}'),
                    self._ev(p, "Qp", "NET_IB", "e", p.qp_id, max(s2 + 0.1, s3 - 0.1)),
                    self._ev(p, "SendWait", "NET", "e", i, s3),
                ]  # fmt: skip
                stop = max(stop, s3)
            else:
                s1 = s0 + us("recv_wait_seconds")
                s2 = s1 + us("recv_flush_wait_seconds")
                s3 = s2 + us("recv_gpu_wait_seconds")
                out += [
                    self._ev(p, "RecvWait", "NET", "b", i, s0, f'"Step": {k}'),
                    self._ev(p, "Qp", "NET_IB", "b", p.qp_id, s0 + 0.1,
                             f'"device": {dev}, "qp_num": {qp}, "opcode": 0, "wr_id": {k}, "size": 0'),
                    self._ev(p, "Qp", "NET_IB", "e", p.qp_id, max(s0 + 0.1, s1 - 0.1)),
                    self._ev(p, "RecvWait", "NET", "e", i, s1),
                    self._ev(p, "RecvFlushWait", "NET", "b", i, s1, f'"Step": {k}'),
                    self._ev(p, "RecvFlushWait", "NET", "e", i, s2),
                    self._ev(p, "RecvGpuWait", "NET", "b", i, s2, f'"Step": {k}'),
                    self._ev(p, "RecvGpuWait", "NET", "e", i, s3),
                ]  # fmt: skip
                stop = max(stop, s3)
            p.step_id += 1
            p.qp_id += 1
        out.append(self._ev(p, prog, "PROXY", "e", p.op_id, stop + 0.5))
        p.op_id += 1
        return out, stop + 0.5
