"""nccl_topology_mismatch: a host's own topology probe against its shape's peers across the fleet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from graywire.collectors.schemas import NCCL_LAYOUT, TS, make_batch
from graywire.detectors.findings import Kind
from graywire.detectors.nccl_topology import NcclTopologyDetector

T = datetime(2026, 3, 1, tzinfo=UTC)
GOOD = {"intra_p2p": 8, "intra_shm": 0, "graph_channels": 16, "graph_type_intra": "NVL",
        "graph_type_inter": "PIX", "graph_cross_nic": 0, "net_connections": 16,
        "gdrdma_connections": 16, "pxn_connections": 0, "nvls": True, "coll_channels": 16}  # fmt: skip
MISSED_P2P = {**GOOD, "intra_p2p": 0, "intra_shm": 8, "graph_channels": 4, "graph_type_intra": "SYS",
              "nvls": False}  # fmt: skip


def view(rows: list[dict[str, Any]], when: datetime = T, comm: str = "c1") -> pa.RecordBatch:
    full = [{"local_ranks": 8, "net_devices": 8, "nnodes": 2, "communicator": comm, "job": "j",
             "started_at": when, **r} for r in rows]  # fmt: skip
    cols: dict[str, pa.Array] = {"time": pa.array([when] * len(full), TS)}
    for f in NCCL_LAYOUT:
        if f.name != "time" and any(f.name in r for r in full):
            typ = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
            arr = pa.array([r.get(f.name) for r in full], typ)
            cols[f.name] = arr.dictionary_encode() if pa.types.is_dictionary(f.type) else arr
    return make_batch(NCCL_LAYOUT, len(full), cols)


def test_host_that_missed_p2p_is_named_with_what_differs() -> None:
    det = NcclTopologyDetector()
    rows = [{"host": f"h{i}", **GOOD} for i in range(7)] + [{"host": "h7", **MISSED_P2P}]
    out = det.observe(view(rows))
    assert [(f.kind, f.node, f.status) for f in out] == [(Kind.NCCL_TOPOLOGY_MISMATCH, "h7", "firing")]
    differs = out[0].evidence["differs"]
    assert set(differs) == {"shm_not_p2p", "fewer_channels", "intra_path", "nvls_missing"}
    assert differs["fewer_channels"]["host"] == 4 and differs["fewer_channels"]["peers"] == 16
    assert differs["intra_path"] == {"host": "SYS", "peers": "NVL", "peer_share": 0.875, "hosts_judged": 8}
    # The same view again: nothing new. The host's next init matches: cleared.
    assert det.observe(view(rows)) == []
    later = T + timedelta(minutes=5)
    out = det.observe(view([{"host": "h7", **GOOD}], later, comm="c2"))
    assert [(f.node, f.status) for f in out] == [("h7", "cleared")]


def test_cross_numa_network_path() -> None:
    det = NcclTopologyDetector()
    bad = {**GOOD, "graph_type_inter": "SYS", "gdrdma_connections": 0}
    out = det.observe(view([{"host": f"h{i}", **GOOD} for i in range(5)] + [{"host": "h5", **bad}]))
    assert [f.node for f in out] == ["h5"]
    assert set(out[0].evidence["differs"]) == {"net_path"}
    assert out[0].evidence["layout"]["gdrdma_connections"] == 0


def test_fleet_with_the_same_lesser_layout_raises_nothing() -> None:
    det = NcclTopologyDetector()
    assert det.observe(view([{"host": f"h{i}", **MISSED_P2P} for i in range(8)])) == []


def test_no_norm_without_enough_hosts_or_agreement() -> None:
    det = NcclTopologyDetector()
    assert (
        det.observe(view([{"host": "h0", **GOOD}, {"host": "h1", **GOOD}, {"host": "h2", **MISSED_P2P}]))
        == []
    )
    det = NcclTopologyDetector()
    half = [{"host": f"h{i}", **(GOOD if i % 2 else MISSED_P2P)} for i in range(8)]
    assert det.observe(view(half)) == []


def test_unknown_fields_and_other_shapes_are_not_judged() -> None:
    det = NcclTopologyDetector()
    unknown = {k: None for k in GOOD}
    rows = [{"host": f"h{i}", **GOOD} for i in range(6)]
    rows += [{"host": "h6", **unknown}, {"host": "h7", **MISSED_P2P, "local_ranks": 4}]
    rows += [{"host": "h8", **GOOD, "local_ranks": None}]
    assert det.observe(view(rows)) == []


def test_an_earlier_init_does_not_bring_an_old_layout_back() -> None:
    det = NcclTopologyDetector()
    peers = [{"host": f"h{i}", **GOOD} for i in range(6)]
    old = view([*peers, {"host": "h6", **MISSED_P2P}], T, comm="c1")
    assert [f.status for f in det.observe(old)] == ["firing"]
    new = view([{"host": "h6", **GOOD}], T + timedelta(minutes=3), comm="c2")
    assert [f.status for f in det.observe(new)] == ["cleared"]
    # A later view still lists the first communicator (its logs are still there): no finding.
    stale = view([{"host": "h6", **MISSED_P2P}], T, comm="c1")
    assert det.observe(stale) == []
