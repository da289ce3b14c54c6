"""The fault path: dead and unresponsive NCCL ranks, and collectives that stopped moving.

A single rank's network fault times out its channel, aborts the communicator and kills the
job, so what matters is naming the rank, its host and its NIC within seconds. This reads
``nccl_rank_state`` rows (NCCL RAS, PyTorch's Flight Recorder, the watchdog) and decides:

- ``nccl_rank_dead`` (critical, at once): RAS declared the process dead (``considered_dead``,
  ``DEAD``, ``PEER_DEAD``): it waited 60 s without contact before saying so, so no second
  confirmation is needed. It supersedes an open ``nccl_rank_unresponsive`` of the same rank.
- ``nccl_rank_unresponsive`` (warning): RAS could not reach the rank in ``unresponsive_views``
  views in a row. One view is not enough: a process busy in a long CUDA call or a tear-down can
  miss one collection (NCCL's guide: "as long as the situation is resolved when the query is
  repeated, it can be ignored").
- ``nccl_collective_stuck`` (warning): the watchdog or a Flight Recorder dump timed out a
  collective (PyTorch already waited its ``Timeout(ms)``), or RAS shows a communicator's ranks
  at different collective counts that did not move for ``stuck_seconds`` over at least
  ``stuck_views`` views (counts that differ but advance are ranks racing, not a hang). It names
  the ranks behind (the ones that never launched the collective the others wait in) and their
  host when they are on one.

A job ending normally is none of these: its ranks finalize (``finalize``), leave their
communicators (``nocomm``: a missing rank RAS can still reach), then RAS is gone with the job
and its socket refuses (a failed scrape, no rows). A rank or communicator no view mentions is
unknown: nothing opens or closes on it. A rank finding closes when a later view of its job
shows the same GPU running again (the job restarted there); a stuck one when the counts move.

The entity is the job and GPU (``job:host:gpuN``), because a dead *process* is what RAS reports
and one rank number is per communicator; the finding names the rank of the largest
communicator the GPU was seen in. Rows are filtered with pyarrow; Python runs only over the
rows in a fault state and over communicators with ranks behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind
from graywire.detectors.findings import Finding, Kind, Severity


@dataclass(frozen=True, slots=True)
class NcclFaultConfig:
    unresponsive_views: int = 2
    stuck_seconds: float = 60.0
    stuck_views: int = 3


@dataclass(slots=True)
class _Rank:
    """What was last seen of one GPU of one job."""

    job: str
    host: str | None
    device: int | None
    rank: int | None = None
    nranks: int = -1
    communicator: str | None = None
    pid: int | None = None
    unresponsive: int = 0
    first_bad: datetime | None = None


@dataclass(slots=True)
class _Counts:
    signature: tuple[Any, ...]
    since: datetime
    views: int = 1


@dataclass
class NcclFaultDetector:
    fabric: Fabric | None = None
    cfg: NcclFaultConfig = field(default_factory=NcclFaultConfig)
    name = "nccl_fault"
    version = "1"
    consumes = RecordKind.NCCL_RANK_STATE
    kinds = (Kind.NCCL_RANK_DEAD, Kind.NCCL_RANK_UNRESPONSIVE, Kind.NCCL_COLLECTIVE_STUCK)
    _ranks: dict[str, _Rank] = field(default_factory=dict, init=False, repr=False)
    _open: dict[tuple[str, str], Finding] = field(default_factory=dict, init=False, repr=False)
    _counts: dict[tuple[str, str], _Counts] = field(default_factory=dict, init=False, repr=False)

    # -- helpers -----------------------------------------------------------------------------------
    @staticmethod
    def entity(job: str, host: str | None, device: int | None, comm: str | None, rank: int | None) -> str:
        if host is not None and device is not None:
            return f"{job}:{host}:gpu{device}"
        return f"{job}:{comm}:rank{rank}"

    def _port(self, host: str | None, device: int | None) -> str | None:
        """The rank's NIC: the host's port on the GPU's rail, as the inventory says (GPU g is not
        ``mlx5_g`` on every host model). None without a fabric model or a rail: not a guess."""
        if host is None or device is None or self.fabric is None:
            return None
        return self._rail_ports.get((host, int(device)))

    @cached_property
    def _rail_ports(self) -> dict[tuple[str, int], str]:
        """(host, rail) -> its one host port on that rail (hosts with two on a rail: neither)."""
        f = self.fabric
        assert f is not None
        idx = np.flatnonzero(f.host_port & (f.rail >= 0))
        out: dict[tuple[str, int], str] = {}
        twice: set[tuple[str, int]] = set()
        for i in idx.tolist():  # once per model, not per poll
            k = (f.node_of(i), int(f.rail[i]))
            if k in out:
                twice.add(k)
            out[k] = f.keys[i]
        return {k: v for k, v in out.items() if k not in twice}

    def _emit(
        self, kind: str, ent: str, status: str, now: datetime, sev: Severity, summary: str, **kw: Any
    ) -> Finding:
        f = Finding(
            kind=kind,
            entity=ent,
            status=status,
            time=now,
            severity=sev,
            summary=summary,  # type: ignore[arg-type]
            detector=f"{self.name}/{self.version}",
            score=1.0,
            **kw,
        )
        if status == "firing":
            self._open[(kind, ent)] = f
        else:
            self._open.pop((kind, ent), None)
        return f

    # -- one view ----------------------------------------------------------------------------------
    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        now = batch.column("time")[0].as_py()
        out: list[Finding] = []
        state = batch.column("state").cast(pa.string())
        bad_mask = pc.is_in(state, pa.array(["dead", "unresponsive", "timeout", "error"]))
        bad = batch.filter(bad_mask).to_pylist()
        # Ranks seen healthy this view, for the open ones and the counters only.
        watched = {k for k, r in self._ranks.items() if r.unresponsive} | {e for _, e in self._open}
        if watched:
            out += self._healthy(batch, state, watched, now)
        timed_out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # One judgement per rank per view: a rank listed in several communicators of one report
        # is one view of it (its worst row), not several.
        judged: set[str] = set()
        for row in sorted(bad, key=lambda r: r["state"] != "dead"):
            if row["state"] == "timeout":
                timed_out.setdefault((row["job"], str(row["communicator"])), []).append(row)
                continue
            ent = self.entity(row["job"], row["host"], row["device"], row["communicator"], row["rank"])
            if ent in judged:
                continue
            judged.add(ent)
            out += self._rank_fault(row, now)
        out += self._stuck_from_timeouts(batch, timed_out, now)
        out += self._stuck_from_counts(batch, state, now)
        return out

    def _healthy(
        self, batch: pa.RecordBatch, state: pa.Array, watched: set[str], now: datetime
    ) -> list[Finding]:
        ok = pc.is_in(state, pa.array(["running", "init"]))
        # The same key as ``entity``: by host and GPU where both are known, else by communicator
        # and rank (a row without them must be able to clear what such a row opened).
        job = batch.column("job").cast(pa.string())
        host = batch.column("host").cast(pa.string())
        dev = batch.column("device").cast(pa.string())
        by_gpu = pc.binary_join_element_wise(
            job, host, pc.binary_join_element_wise(pa.scalar("gpu"), dev, ""), ":"
        )
        by_rank = pc.binary_join_element_wise(
            job,
            pc.fill_null(batch.column("communicator").cast(pa.string()), "None"),
            pc.binary_join_element_wise(
                pa.scalar("rank"), pc.fill_null(batch.column("rank").cast(pa.string()), "None"), ""
            ),
            ":",
        )
        keys = pc.if_else(pc.and_(pc.is_valid(host), pc.is_valid(dev)), by_gpu, by_rank)
        seen = pc.and_(ok, pc.is_in(keys, pa.array(sorted(watched))))
        out = []
        for ent in set(keys.filter(pc.fill_null(seen, False)).to_pylist()):
            r = self._ranks.get(ent)
            if r is not None:
                r.unresponsive, r.first_bad = 0, None
            for kind in (Kind.NCCL_RANK_DEAD, Kind.NCCL_RANK_UNRESPONSIVE):
                if (kind, ent) in self._open:
                    prev = self._open[(kind, ent)]
                    out.append(
                        self._emit(
                            kind,
                            ent,
                            "cleared",
                            now,
                            prev.severity,
                            f"{ent}: running again",
                            node=prev.node,
                            port=prev.port,
                            evidence=dict(prev.evidence),
                        )
                    )
        return out

    def _rank_fault(self, row: dict[str, Any], now: datetime) -> list[Finding]:
        job, host, device = row["job"], row["host"], row["device"]
        ent = self.entity(job, host, device, row["communicator"], row["rank"])
        r = self._ranks.setdefault(ent, _Rank(job, host, device))
        nranks = row["nranks"] if row["nranks"] is not None else -1
        if row["rank"] is not None and nranks >= r.nranks:
            r.rank, r.nranks, r.communicator = row["rank"], nranks, row["communicator"]
        r.pid = row["pid"] if row["pid"] is not None else r.pid
        r.first_bad = r.first_bad or now
        where = f"{host}" + (f" GPU {device}" if device is not None else "")
        who = f"rank {r.rank}" if r.rank is not None else "the process"
        port = self._port(host, device)
        evidence = {
            "job": job,
            "rank": r.rank,
            "communicator": r.communicator,
            "nranks": r.nranks if r.nranks >= 0 else None,
            "host": host,
            "device": device,
            "pid": r.pid,
            "state": row["state"],
            "source": row["source"],
            "detail": row["detail"],
            "first_seen_bad": r.first_bad.isoformat(),
        }
        out: list[Finding] = []
        if row["state"] == "dead":
            if (Kind.NCCL_RANK_DEAD, ent) in self._open:
                return []
            if (Kind.NCCL_RANK_UNRESPONSIVE, ent) in self._open:
                out.append(
                    self._emit(
                        Kind.NCCL_RANK_UNRESPONSIVE,
                        ent,
                        "cleared",
                        now,
                        Severity.WARNING,
                        f"{ent}: declared dead",
                        node=host,
                        port=port,
                        evidence=evidence,
                    )
                )
            summary = f"{who} of job {job} on {where} dead (NCCL RAS: unreachable, declared dead)"
            out.append(
                self._emit(
                    Kind.NCCL_RANK_DEAD,
                    ent,
                    "firing",
                    now,
                    Severity.CRITICAL,
                    summary,
                    node=host,
                    port=port,
                    evidence=evidence,
                )
            )
            return out
        # unresponsive or an init/async error: needs a second view
        r.unresponsive += 1
        if r.unresponsive < self.cfg.unresponsive_views or any((k, ent) in self._open for k in self.kinds):
            return []
        what = "unresponsive to NCCL RAS" if row["state"] == "unresponsive" else f"in error ({row['detail']})"
        summary = f"{who} of job {job} on {where} {what} for {r.unresponsive} views"
        return [
            self._emit(
                Kind.NCCL_RANK_UNRESPONSIVE,
                ent,
                "firing",
                now,
                Severity.WARNING,
                summary,
                node=host,
                port=port,
                evidence=evidence,
            )
        ]

    def _stuck_from_timeouts(
        self, batch: pa.RecordBatch, timed_out: dict[tuple[str, str], list[dict[str, Any]]], now: datetime
    ) -> list[Finding]:
        out = []
        for (job, comm), rows in timed_out.items():
            ent = f"{job}:{comm}:stuck"
            if (Kind.NCCL_COLLECTIVE_STUCK, ent) in self._open:
                continue
            seq = (
                min(int(r["seq"]) for r in rows if r["seq"] is not None)
                if any(r["seq"] is not None for r in rows)
                else None
            )
            behind = self._behind(batch, job, comm, seq)
            hosts = sorted({h for _, h in behind if h})
            node = hosts[0] if len(hosts) == 1 else None
            coll = rows[0]["collective"]
            names = ", ".join(f"rank {r}" for r, _ in behind[:8]) or "not known"
            summary = (
                f"job {job}: {coll} #{seq} on {comm} timed out on {len(rows)} rank(s) "
                f"({rows[0]['source']}); ranks that never joined it: {names}"
            )
            evidence = {
                "job": job,
                "communicator": comm,
                "collective": coll,
                "seq": seq,
                "timed_out_ranks": sorted({r["rank"] for r in rows if r["rank"] is not None}),
                "behind": [{"rank": r, "host": h} for r, h in behind],
                "source": rows[0]["source"],
                "detail": rows[0]["detail"],
            }
            out.append(
                self._emit(
                    Kind.NCCL_COLLECTIVE_STUCK,
                    ent,
                    "firing",
                    now,
                    Severity.WARNING,
                    summary,
                    node=node,
                    evidence=evidence,
                )
            )
        return out

    @staticmethod
    def _behind(batch: pa.RecordBatch, job: str, comm: str, seq: int | None) -> list[tuple[int, str | None]]:
        """Ranks of the communicator whose last launched collective is before ``seq``."""
        if seq is None:
            return []
        m = pc.and_(
            pc.and_(
                pc.equal(batch.column("job").cast(pa.string()), job),
                pc.equal(batch.column("communicator").cast(pa.string()), comm),
            ),
            pc.and_(
                pc.equal(batch.column("state").cast(pa.string()), "running"),
                pc.less(batch.column("seq"), seq),
            ),
        )
        rows = batch.filter(pc.fill_null(m, False)).select(["rank", "host"]).to_pylist()
        return sorted({(r["rank"], r["host"]) for r in rows if r["rank"] is not None}, key=lambda x: x[0])

    def _stuck_from_counts(self, batch: pa.RecordBatch, state: pa.Array, now: datetime) -> list[Finding]:
        """RAS collective counts per communicator: laggards whose counts stay put."""
        src = batch.column("source").cast(pa.string())
        m = pc.fill_null(
            pc.and_(
                pc.and_(pc.equal(src, "ras"), pc.equal(state, "running")), pc.is_valid(batch.column("seq"))
            ),
            False,
        )
        view = batch.filter(m)
        out: list[Finding] = []
        seen_comms: set[tuple[str, str]] = set()
        if view.num_rows:
            key = pc.binary_join_element_wise(
                view.column("job").cast(pa.string()), view.column("communicator").cast(pa.string()), "|"
            ).dictionary_encode()
            codes = key.indices.to_numpy(zero_copy_only=False)
            seq = view.column("seq").to_numpy(zero_copy_only=False).astype(np.int64)
            top = np.full(len(key.dictionary), np.iinfo(np.int64).min)
            np.maximum.at(top, codes, seq)
            lag = np.flatnonzero((seq < top[codes]) & ~np.asarray(pc.is_null(view.column("rank"))))
            by_comm: dict[int, list[int]] = {}
            for i in lag.tolist():
                by_comm.setdefault(int(codes[i]), []).append(i)
            names = key.dictionary.to_pylist()
            ranks = view.column("rank").to_pylist() if by_comm else []
            hosts = view.column("host").cast(pa.string()).to_pylist() if by_comm else []
            for c in range(len(names)):
                job, comm = names[c].split("|", 1)
                seen_comms.add((job, comm))
                rows = sorted(by_comm.get(c, []), key=lambda i: (ranks[i], int(seq[i])))
                sig = (int(top[c]), tuple((ranks[i], int(seq[i])) for i in rows))
                out += self._judge_counts(job, comm, sig, [(ranks[i], hosts[i]) for i in rows], now)
        return out

    def _moving_again(self, ent: str, job: str, comm: str, now: datetime) -> list[Finding]:
        """Clear a stuck collective RAS opened once its counts move (or agree) again."""
        prev = self._open.get((Kind.NCCL_COLLECTIVE_STUCK, ent))
        if prev is None or prev.evidence.get("source") != "ras":
            return []
        return [
            self._emit(
                Kind.NCCL_COLLECTIVE_STUCK,
                ent,
                "cleared",
                now,
                prev.severity,
                f"job {job}: {comm} moving again",
                node=prev.node,
                evidence=dict(prev.evidence),
            )
        ]

    def _judge_counts(
        self, job: str, comm: str, sig: tuple[Any, ...], behind: list[tuple[int, str | None]], now: datetime
    ) -> list[Finding]:
        ent = f"{job}:{comm}:stuck"
        c = self._counts.get((job, comm))
        is_open = (Kind.NCCL_COLLECTIVE_STUCK, ent) in self._open
        if not sig[1]:  # every rank at the same count
            self._counts.pop((job, comm), None)
            return self._moving_again(ent, job, comm, now)
        if c is None or c.signature != sig:
            self._counts[(job, comm)] = _Counts(sig, now)
            return self._moving_again(ent, job, comm, now)
        c.views += 1
        held = (now - c.since).total_seconds()
        if is_open or c.views < self.cfg.stuck_views or held < self.cfg.stuck_seconds:
            return []
        hosts = sorted({h for _, h in behind if h})
        node = hosts[0] if len(hosts) == 1 else None
        shown = ", ".join(f"rank {r} ({h})" for r, h in behind[:8])
        summary = (
            f"job {job}: communicator {comm} stuck for {held:.0f} s: {len(behind)} rank(s) "
            f"behind at collective {min(s for _, s in sig[1])} while the others launched up to "
            f"{sig[0]}: {shown}"
        )
        evidence = {
            "job": job,
            "communicator": comm,
            "launched_up_to": sig[0],
            "behind": [
                {"rank": r, "host": h, "launched": s} for (r, h), (_, s) in zip(behind, sig[1], strict=False)
            ],
            "stuck_seconds": held,
            "views": c.views,
            "source": "ras",
        }
        return [
            self._emit(
                Kind.NCCL_COLLECTIVE_STUCK,
                ent,
                "firing",
                now,
                Severity.WARNING,
                summary,
                node=node,
                port=self._port(node, None),
                evidence=evidence,
            )
        ]
