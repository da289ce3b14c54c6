"""NCCL transport regressions: a rank on NET/Socket, without GPUDirect RDMA, or with fewer channels.

NCCL picks its transports once, at communicator init, and prints them (NCCL_DEBUG=INFO). A host
whose IB stack or GPUDirect module failed to load silently falls back to TCP sockets or to
bounce buffers in host memory; the job runs, only slower, from its first step. The choice is
deterministic state, so it is judged at once, against what the rest of the communicator got:
the peers define the norm unless ``expected_net`` / ``expect_gdr`` pin it. Findings roll up
per (communicator, host): one bad host is one incident, listing its ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.nccl.debug_log import net_name
from graywire.collectors.schemas import RecordKind
from graywire.detectors.findings import Finding, Kind, Severity

KINDS = (Kind.NCCL_TRANSPORT_FALLBACK, Kind.NCCL_GDRDMA_MISSING, Kind.NCCL_CHANNELS_REDUCED)


@dataclass(frozen=True, slots=True)
class NcclTransportConfig:
    #: The network transport every inter-node connection should use (``NET/IB``); None: the
    #: most common one in each communicator (a job on sockets everywhere is not a regression).
    expected_net: str | None = None
    #: True: every NET/IB connection must use GPUDirect RDMA; None: only where at least
    #: ``gdr_peer_share`` of the communicator's IB ranks do (one host missing its GDR module).
    expect_gdr: bool | None = None
    gdr_peer_share: float = 0.5
    #: Fewer channels than the communicator's median, judged only with this many ranks.
    min_peers: int = 4
    #: A communicator not described again for this long (its job ended) has its findings cleared.
    expire_s: float = 3600.0


def _strings(arr: pa.Array) -> list[str | None]:
    return arr.cast(pa.string()).to_pylist() if pa.types.is_dictionary(arr.type) else arr.to_pylist()


class NcclTransportDetector:
    """Per-rank transport choices against the communicator's peers, localized to the host.

    It scores (:meth:`_judge`) and decides (:meth:`_diff`) apart, but not through the shared
    hysteresis: a transport is chosen once, at communicator init, so one view is the verdict
    with nothing to debounce, and an open finding fires again when its ranks change.
    """

    name = "nccl_transport"
    version = "1"
    consumes = RecordKind.NCCL_TRANSPORT
    kinds = KINDS

    def __init__(self, cfg: NcclTransportConfig | None = None) -> None:
        self.cfg = cfg or NcclTransportConfig()
        self.open: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, comm, host) -> evidence
        self.last_seen: dict[str, datetime] = {}  # communicator -> time of its last view

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        now = batch.column("time")[0].as_py()
        comm = np.asarray(_strings(batch.column("communicator")), dtype=object)
        cols = {
            "rank": batch.column("rank").to_numpy(zero_copy_only=False).astype(np.int64),
            "host": np.asarray(_strings(batch.column("host")), dtype=object),
            "port": np.asarray(batch.column("port").to_pylist(), dtype=object),
            "net": np.asarray(_strings(batch.column("net_transport")), dtype=object),
            "network": np.asarray(_strings(batch.column("network")), dtype=object),
            "conns": batch.column("net_connections").fill_null(0).to_numpy(zero_copy_only=False),
            "gdr": batch.column("gdrdma_connections").fill_null(0).to_numpy(zero_copy_only=False),
            "channels": batch.column("channels").cast(pa.float64()).to_numpy(zero_copy_only=False),
            "job": np.asarray(_strings(batch.column("job")), dtype=object),
        }
        out: list[Finding] = []
        for c in sorted(set(comm.tolist())):
            rows = np.flatnonzero(comm == c)
            self.last_seen[c] = now
            judged = self._judge(c, {k: v[rows] for k, v in cols.items()})
            out += self._diff(c, judged, now)
        for c, seen in list(self.last_seen.items()):
            if (now - seen).total_seconds() > self.cfg.expire_s:
                del self.last_seen[c]
                out += self._diff(c, {}, now, expired=True)
        return out

    def _judge(self, comm: str, v: dict[str, np.ndarray]) -> dict[tuple[str, str, str], dict[str, Any]]:
        """(kind, comm, host) -> evidence, for every regression this view of ``comm`` shows."""
        cfg = self.cfg
        bad: dict[tuple[str, str, str], dict[str, Any]] = {}
        n = v["rank"].size
        has_net = np.array([x is not None for x in v["net"]], dtype=bool)
        if has_net.any():
            nets, counts = np.unique(v["net"][has_net].astype(str), return_counts=True)
            share = dict(zip(nets.tolist(), (counts / counts.sum()).tolist(), strict=True))
            want = cfg.expected_net or max(share, key=lambda t: (share[t], t == "NET/IB"))
            fall = has_net & (v["net"] != want)
            if cfg.expected_net:
                plugin = net_name(cfg.expected_net.removeprefix("NET/"))
                fall |= np.array([x is not None and net_name(x) != plugin for x in v["network"]], dtype=bool)
            self._add(bad, Kind.NCCL_TRANSPORT_FALLBACK, comm, v, fall, want, {"peer_share": share})
            ib = has_net & (v["net"] == "NET/IB") & (v["conns"] > 0)
            full = ib & (v["gdr"] >= v["conns"])
            gdr_share = float(full.sum() / ib.sum()) if ib.any() else 0.0
            if cfg.expect_gdr or (cfg.expect_gdr is None and gdr_share >= cfg.gdr_peer_share):
                self._add(bad, Kind.NCCL_GDRDMA_MISSING, comm, v, ib & ~full, "NET/IB/<nic>/GDRDMA",
                          {"peer_share_with_gdrdma": gdr_share})  # fmt: skip
        ch = v["channels"]
        known = np.isfinite(ch)
        if known.sum() >= cfg.min_peers and n:
            # The count most of the communicator's ranks have (their configuration), not a median
            # between two counts: "7.5 channels" is nobody's.
            values, counts = np.unique(ch[known], return_counts=True)
            med = float(values[counts == counts.max()].max())
            self._add(bad, Kind.NCCL_CHANNELS_REDUCED, comm, v, known & (ch < med), f"{med:g} channels",
                      {"peer_median_channels": med, "ranks_judged": int(known.sum())})  # fmt: skip
        return bad

    @staticmethod
    def _add(
        bad: dict[tuple[str, str, str], dict[str, Any]],
        kind: str,
        comm: str,
        v: dict[str, np.ndarray],
        mask: np.ndarray,
        expected: str,
        baseline: dict[str, Any],
    ) -> None:
        for i in np.flatnonzero(mask).tolist():
            host = v["host"][i] or "?"
            ev = bad.setdefault(
                (kind, comm, host),
                {"job": v["job"][i], "communicator": comm, "host": v["host"][i], "expected": expected,
                 "ranks": [], "actual": [], "ports": [], **baseline},
            )  # fmt: skip
            ev["ranks"].append(int(v["rank"][i]))
            actual = {
                Kind.NCCL_TRANSPORT_FALLBACK: v["net"][i] or f"network {v['network'][i]}",
                Kind.NCCL_GDRDMA_MISSING: (
                    f"{int(v['gdr'][i])} of {int(v['conns'][i])} connections with GDRDMA"
                ),
                Kind.NCCL_CHANNELS_REDUCED: f"{v['channels'][i]:g} channels",
            }[kind]
            ev["actual"].append(actual)
            if v["port"][i]:
                ev["ports"].append(v["port"][i])

    def _diff(
        self,
        comm: str,
        judged: dict[tuple[str, str, str], dict[str, Any]],
        now: datetime,
        expired: bool = False,
    ) -> list[Finding]:
        out = []
        mine = {k for k in self.open if k[1] == comm}
        for key in sorted(mine - judged.keys()):
            ev = self.open.pop(key)
            why = "no longer described (job ended?)" if expired else "now matches its peers"
            out.append(self._finding(key, "cleared", now, ev, f"{key[2]} in {comm}: {why}"))
        for key in sorted(judged):
            ev = judged[key]
            prev = self.open.get(key)
            if prev is not None and prev["ranks"] == ev["ranks"] and prev["actual"] == ev["actual"]:
                continue
            self.open[key] = ev
            out.append(self._finding(key, "firing", now, ev, self._summary(key, ev)))
        return out

    @staticmethod
    def _summary(key: tuple[str, str, str], ev: dict[str, Any]) -> str:
        kind, comm, host = key
        ranks = ev["ranks"]
        who = (
            f"rank {ranks[0]}"
            if len(ranks) == 1
            else f"{len(ranks)} ranks ({', '.join(map(str, ranks[:8]))})"
        )
        what = {
            Kind.NCCL_TRANSPORT_FALLBACK: f"uses {ev['actual'][0]} where its peers use {ev['expected']}",
            Kind.NCCL_GDRDMA_MISSING: f"runs NET/IB without GPUDirect RDMA ({ev['actual'][0]})",
            Kind.NCCL_CHANNELS_REDUCED: f"has {ev['actual'][0]} where its peers have {ev['expected']}",
        }[kind]
        return f"{host}, {who} of {comm}: {what}"

    def _finding(
        self, key: tuple[str, str, str], status: str, now: datetime, ev: dict[str, Any], summary: str
    ) -> Finding:
        kind, _, host = key
        ports = sorted(set(ev.get("ports", [])))
        return Finding(
            kind=kind,
            entity=f"{key[1]}|{host}",
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=None if host == "?" else host,
            port=ports[0] if len(ports) == 1 else None,
            score=float(len(ev.get("ranks", []))),
            confidence=1.0,  # the debug lines say it outright
            evidence={**ev, "ports": ports, "side": "host"},
        )
