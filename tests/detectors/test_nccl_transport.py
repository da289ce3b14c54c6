"""Transport regressions from NCCL_DEBUG wiring: Socket fallback, GDRDMA missing, fewer channels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.transport import transport_batch
from graywire.detectors.findings import Finding
from graywire.detectors.nccl_transport import NcclTransportConfig, NcclTransportDetector
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def ring_log(hosts: int = 8, socket: tuple[int, ...] = (), no_gdr: tuple[int, ...] = (),
             short: dict[int, int] | None = None, channels: int = 4) -> list[str]:  # fmt: skip
    """NCCL_DEBUG=INFO lines of a one-GPU-per-host ring: host i is rank i, GPU 0, NIC mlx5_0."""
    lines = []
    for r in range(hosts):
        pre = f"node-{r}:{100 + r}:{100 + r} [0] NCCL INFO"
        tid = f"node-{r}:{100 + r}:{200 + r} [0] NCCL INFO"
        lines += [f"{pre} NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.{r}<0>"]
        lines += [f"{pre} Using network {'Socket' if r in socket else 'IB'}"]
        init = f"comm 0xc{r} rank {r} nranks {hosts} cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc"
        lines += [f"{tid} ncclCommInitRankConfig {init} - Init START"]
        via = "NET/Socket/0" if r in socket else "NET/IB/0" + ("" if r in no_gdr else "/GDRDMA")
        nxt, prv = (r + 1) % hosts, (r - 1) % hosts
        for c in range((short or {}).get(r, channels)):
            lines += [
                f"{tid} Channel {c:02d}/0 : {r}[0] -> {nxt}[0] [send] via {via}",
                f"{tid} Channel {c:02d}/0 : {prv}[0] -> {r}[0] [receive] via {via}",
            ]
        lines += [f"{tid} ncclCommInitRankConfig {init} - Init COMPLETE"]
    return lines


def view(lines: list[str], when: datetime = T0):
    topo = NcclTopology()
    topo.feed(lines)
    batch = transport_batch(topo, "job-a", when)
    assert batch is not None
    return batch


def test_each_regression_is_one_finding_on_its_host() -> None:
    det = NcclTransportDetector()
    found = det.observe(view(ring_log(socket=(3,), no_gdr=(5,), short={6: 2})))
    got = {(f.kind, f.node, f.status) for f in found}
    assert got == {
        ("nccl_transport_fallback", "node-3", "firing"),
        ("nccl_gdrdma_missing", "node-5", "firing"),
        ("nccl_channels_reduced", "node-6", "firing"),
    }
    by = {f.kind: f for f in found}
    fb = by["nccl_transport_fallback"]
    assert fb.entity == "0xabc|node-3" and fb.node == "node-3"
    assert fb.port is None  # no "NET/Socket : Using" line named the interface
    assert fb.evidence["expected"] == "NET/IB" and fb.evidence["actual"] == ["NET/Socket"]
    assert fb.evidence["peer_share"] == {"NET/IB": 7 / 8, "NET/Socket": 1 / 8}
    assert fb.detector == "nccl_transport/1" and fb.confidence == 1.0
    assert "uses NET/Socket where its peers use NET/IB" in fb.summary
    gdr = by["nccl_gdrdma_missing"].evidence
    assert gdr["actual"] == ["0 of 8 connections with GDRDMA"] and gdr["peer_share_with_gdrdma"] == 6 / 7
    ch = by["nccl_channels_reduced"].evidence
    assert ch["actual"] == ["2 channels"] and ch["peer_median_channels"] == 4.0
    # The same view again says nothing new; a view with the host repaired clears it.
    assert (
        det.observe(view(ring_log(socket=(3,), no_gdr=(5,), short={6: 2}), T0 + timedelta(seconds=10))) == []
    )
    later = det.observe(view(ring_log(no_gdr=(5,), short={6: 2}), T0 + timedelta(seconds=20)))
    assert [(f.kind, f.node, f.status) for f in later] == [("nccl_transport_fallback", "node-3", "cleared")]


def test_a_healthy_ring_and_a_job_on_sockets_everywhere_are_quiet() -> None:
    assert NcclTransportDetector().observe(view(ring_log())) == []
    everyone = tuple(range(8))
    assert NcclTransportDetector().observe(view(ring_log(socket=everyone))) == []
    # ... unless the fabric is known to be IB: then every host is on the wrong transport.
    pinned = NcclTransportDetector(NcclTransportConfig(expected_net="NET/IB"))
    assert len(pinned.observe(view(ring_log(socket=everyone)))) == 8
    # GPUDirect missing everywhere is a site choice, unless required.
    assert NcclTransportDetector().observe(view(ring_log(no_gdr=everyone))) == []
    strict = NcclTransportDetector(NcclTransportConfig(expect_gdr=True))
    assert {f.kind for f in strict.observe(view(ring_log(no_gdr=everyone)))} == {"nccl_gdrdma_missing"}


def test_real_userguide_socket_lines(real_fixtures: Path) -> None:
    """NVIDIA's logging examples: one process sends over NET/Socket/0 on a node whose others use IB."""
    topo = NcclTopology()
    topo.feed((real_fixtures / "nccl" / "nccl_userguide_logging_examples.txt").read_text().splitlines())
    batch = transport_batch(topo, "example", T0)
    assert batch is not None
    rows = {r["pid"]: r for r in batch.to_pylist()}
    assert rows[1897709]["net_transport"] == "NET/Socket" and rows[1897709]["net_connections"] == 2
    assert rows[1896458]["net_transport"] is None and rows[1896458]["channels"] == 2  # SHM only
    # Alone in its communicator, sockets are its own norm; on an IB fabric they are a fallback.
    assert NcclTransportDetector().observe(batch) == []
    found = NcclTransportDetector(NcclTransportConfig(expected_net="NET/IB")).observe(batch)
    assert [(f.kind, f.node, f.evidence["ranks"], f.evidence["actual"]) for f in found] == [
        ("nccl_transport_fallback", "node-01", [0], ["NET/Socket"])
    ]


def test_communicator_not_described_for_an_hour_is_cleared() -> None:
    det = NcclTransportDetector()
    assert len(det.observe(view(ring_log(socket=(2,))))) == 1
    other = [ln.replace("commId 0xabc", "commId 0xdef") for ln in ring_log()]  # another job's ring
    assert det.observe(view(other, T0 + timedelta(minutes=30))) == []
    out = det.observe(view(other, T0 + timedelta(hours=2)))
    assert [(f.kind, f.node, f.status) for f in out] == [("nccl_transport_fallback", "node-2", "cleared")]
    assert "job ended" in out[0].summary


def test_fabricsim_transport_faults_fire_and_clear_on_their_hosts() -> None:
    faults = "nccl_transport_fallback@60s+120s=0.5:gpu-0004,nccl_gdrdma_missing@60s+120s:gpu-0009"
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16), duration_s=300.0, seed=1, faults=faults))
    det = NcclTransportDetector()
    found: list[Finding] = []
    views = 0
    for st in sim.run():
        if st.nccl_transport is not None:
            views += 1
            found += det.observe(st.nccl_transport)
    assert views == 3  # the first poll, when the faults start, when they end (then every 30 polls)
    got = [(f.kind, f.node, f.status, (f.time - EPOCH).total_seconds()) for f in found]
    assert sorted(got) == [
        ("nccl_gdrdma_missing", "gpu-0009", "cleared", 180.0),
        ("nccl_gdrdma_missing", "gpu-0009", "firing", 60.0),
        ("nccl_transport_fallback", "gpu-0004", "cleared", 180.0),
        ("nccl_transport_fallback", "gpu-0004", "firing", 60.0),
    ]
    fb = next(f for f in found if f.kind == "nccl_transport_fallback")
    assert fb.evidence["ranks"] == list(range(32, 40)) and fb.evidence["job"] == "job-000"
    assert len(fb.evidence["ports"]) == 8 and fb.port is None  # eight NICs: the host is the place
