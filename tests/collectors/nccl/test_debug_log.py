"""NCCL_DEBUG=INFO lines -> ranks, channel connections (transport, NIC, peers) and transport fallbacks."""

# ruff: noqa: E501  (format samples keep their real line width)
from __future__ import annotations

from pathlib import Path

import pytest

from graywire.collectors.nccl.debug_log import NcclTopology, split_via

LOG = Path("nccl") / "nccl_userguide_logging_examples.txt"

# Two nodes, 16 ranks: what NCCL prints on an IB fabric (rank 5 on node-a, ring hop to node-b),
# with one process whose GPU cannot do GDR and one that fell back to sockets.
MULTINODE = """\
[2026-05-05 06:16:47] node-a:1001:1001 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]{mlx5_4:1/IB, mlx5_5:1/IB} [RO]; OOB ib0:10.0.0.1<0>
node-a:1001:1001 [5] NCCL INFO Using network IB
node-a:1001:1040 [5] NCCL INFO ncclCommInitRankConfig comm 0x55d0a1 rank 5 nranks 16 cudaDev 5 nvmlDev 5 busId b5000 commId 0x9a3cc1d0 - Init START
node-a:1001:1040 [5] NCCL INFO comm 0x55d0a1 rank 5 nRanks 16 nNodes 2 localRanks 8 localRank 5 MNNVL 0
node-a:1001:1040 [5] NCCL INFO Ring 03 : 4 -> 5 -> 13
node-a:1001:1040 [5] NCCL INFO Tree 3 : 4 -> 5 -> 6/13/-1
node-a:1001:1040 [5] NCCL INFO Channel 03/0 : 5[5] -> 13[5] [send] via NET/IB/1/GDRDMA
node-a:1001:1040 [5] NCCL INFO Channel 03/0 : 5[5] -> 6[6] via P2P/CUMEM/read
node-a:1001:1040 [5] NCCL INFO Channel 07/1 : 5[5] -> 13[5] [send] via NET/IB/2(7)/GDRDMA(PCI)/Shared
node-a:1001:1040 [5] NCCL INFO Channel 07/0 : 13[5] -> 5[5] [receive] via NET/IB/1/GDRDMA
node-a:1001:1040 [5] NCCL INFO ncclCommInitRankConfig comm 0x55d0a1 rank 5 nranks 16 cudaDev 5 nvmlDev 5 busId b5000 commId 0x9a3cc1d0 - Init COMPLETE
node-b:2002:2002 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ib0:10.0.0.2<0>
node-b:2002:2050 [5] NCCL INFO ncclCommInitRankConfig comm 0x77aa rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId b5000 commId 0x9a3cc1d0 - Init START
node-b:2002:2050 [5] NCCL INFO Channel 03/0 : 13[5] -> 5[5] [send] via NET/IB/1
node-b:2003:2060 [6] NCCL INFO Using network Socket
node-b:2003:2060 [6] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.2<0> [1]eth1:10.2.0.2<0>
node-b:2003:2061 [6] NCCL INFO ncclCommInitRankConfig comm 0x77bb rank 14 nranks 16 cudaDev 6 nvmlDev 6 busId c6000 commId 0x9a3cc1d0 - Init START
node-b:2003:2061 [6] NCCL INFO Channel 03/0 : 14[6] -> 6[6] [send] via NET/Socket/0
node-b:2003:2061 [6] NCCL INFO Channel 03/0 : 14[6 -> 6[6] [send] via NET/Socket/0
training step 100 loss 2.31
"""


@pytest.fixture
def userguide(real_fixtures: Path) -> NcclTopology:
    topo = NcclTopology()
    topo.feed((real_fixtures / LOG).read_text().splitlines())
    return topo


def test_userguide_lines_are_all_nccl_lines(userguide: NcclTopology) -> None:
    assert (userguide.nccl_lines, userguide.other_lines, userguide.malformed) == (74, 0, 0)
    assert userguide.warnings == ["node-01:189884 Failed to initialize any NET plugin"]
    assert userguide.network == {("node-01", 3873285): "IB", ("node-01", 1895902): "IB"}


def test_userguide_channel_lines_give_transport_and_peers(userguide: NcclTopology) -> None:
    links = [(lk.pid, lk.channel, lk.conn_index, lk.from_rank, lk.to_rank, lk.direction, lk.transport, lk.nic)
             for lk in userguide.links]  # fmt: skip
    assert links == [
        (1896458, 0, None, 0, 1, None, "SHM", None),
        (1896458, 1, None, 0, 1, None, "SHM", None),
        (1897709, 0, 0, 0, 1, "send", "NET/Socket", 0),
        (1897709, 1, 0, 0, 1, "send", "NET/Socket", 0),
        (631398, 0, 0, 0, 1, None, "P2P", None),
        (631398, 1, 0, 0, 1, None, "P2P", None),
    ]
    assert userguide.links[2].via == "NET/Socket/0" and not userguide.links[2].gdrdma
    assert userguide.rings == {("node-01:1895811", 0): {0: (1, 1)}, ("node-01:1895811", 1): {0: (1, 1)}}
    assert userguide.trees == {
        ("node-01:1895811", 0): {0: (-1, (1,))},
        ("node-01:1895811", 1): {0: (-1, (1,))},
    }


def test_userguide_init_and_destroy_lines_give_ranks(userguide: NcclTopology) -> None:
    ranks = {(r.pid, r.rank): r for r in userguide.ranks}
    assert set(ranks) == {(1895902, 0), (2056032, 0), (2056033, 1), (2056034, 2), (2056035, 3)}
    r0 = ranks[(1895902, 0)]
    assert (r0.nranks, r0.device, r0.nvml_device, r0.bus_id, r0.state) == (2, 0, 0, "XXXX", "init")
    assert r0.communicator == "0x..."  # commId, redacted in the user guide
    r3 = ranks[(2056035, 3)]
    assert (r3.nranks, r3.device, r3.state) == (4, 3, "destroyed")
    assert userguide.device_of("node-01", 2056035, 3, 4) == 3
    assert userguide.device_of("node-01", 1897709) == 0  # from the [0] prefix of its lines
    assert userguide.device_of("node-01", 1) is None


def test_userguide_socket_fallback_is_flagged_when_ib_is_expected(userguide: NcclTopology) -> None:
    issues = userguide.transport_issues(expected_net="IB")
    assert [(i.kind, i.pid, i.channel, i.via, i.expected, i.peer_rank) for i in issues] == [
        ("net_fallback", 1897709, 0, "NET/Socket/0", "NET/IB", 1),
        ("net_fallback", 1897709, 1, "NET/Socket/0", "NET/IB", 1),
    ]
    assert userguide.transport_issues() == []  # without an expectation, sockets alone are the norm


def test_multinode_links_map_nics_to_ports() -> None:
    topo = NcclTopology()
    topo.feed(MULTINODE.splitlines())
    assert (topo.nccl_lines, topo.other_lines, topo.malformed) == (19, 1, 1)
    assert topo.socket_nics[("node-b", 2003)] == {0: ["eth0"], 1: ["eth1"]}
    assert topo.nics[("node-a", 1001)] == {0: ["mlx5_0"], 1: ["mlx5_3"], 2: ["mlx5_4", "mlx5_5"]}
    a = [lk for lk in topo.links if lk.host == "node-a"]
    assert [(lk.channel, lk.rank, lk.from_rank, lk.to_rank, lk.transport, lk.nic, lk.proxy_rank, lk.gdrdma,
             lk.port) for lk in a] == [
        (3, 5, 5, 13, "NET/IB", 1, None, True, "node-a/mlx5_3"),
        (3, 5, 5, 6, "P2P", None, None, False, None),
        (7, 5, 5, 13, "NET/IB", 2, 7, True, "node-a/mlx5_4"),
        (7, 5, 13, 5, "NET/IB", 1, None, True, "node-a/mlx5_3"),
    ]  # fmt: skip
    assert {lk.communicator for lk in topo.links} == {"0x9a3cc1d0"}  # one commId across processes
    assert topo.rings[("0x9a3cc1d0", 3)] == {5: (4, 13)}
    assert topo.trees[("0x9a3cc1d0", 3)] == {5: (4, (6, 13))}
    ranks = topo.ranks_table().to_pylist()
    assert [(r["host"], r["rank"], r["device"], r["nnodes"], r["local_rank"], r["state"]) for r in ranks] == [
        ("node-a", 5, 5, 2, 5, "complete"), ("node-b", 13, 5, None, None, "init"),
        ("node-b", 14, 6, None, None, "init"),
    ]  # fmt: skip
    assert topo.transport_of("node-a", 1001, 5, 3) == "NET/IB"
    assert topo.transport_of("node-a", 1001, 5, 9) is None
    table = topo.links_table()
    assert table.num_rows == 6 and table.column("port").to_pylist()[0] == "node-a/mlx5_3"


def test_multinode_fallbacks() -> None:
    topo = NcclTopology()
    topo.feed(MULTINODE.splitlines())
    issues = {(i.kind, i.host, i.rank, i.channel, i.via, i.port) for i in topo.transport_issues()}
    assert issues == {
        ("net_fallback", "node-b", 14, 3, "NET/Socket/0", "node-b/eth0"),  # the communicator runs on IB
        ("no_gdrdma", "node-b", 13, 3, "NET/IB/1", "node-b/mlx5_3"),  # its peers have GDRDMA
    }
    kinds = sorted(i.kind for i in topo.transport_issues(expected_net="IB", expect_gdr=True))
    assert kinds == ["net_fallback", "network_fallback", "no_gdrdma"]


def test_split_via() -> None:
    assert split_via("NET/IB/3/GDRDMA") == ("NET/IB", 3, None, True)
    assert split_via("NET/IB/0(1)/GDRDMA(PCI)/Shared") == ("NET/IB", 0, 1, True)
    assert split_via("NET/Socket/0") == ("NET/Socket", 0, None, False)
    assert split_via("P2P/direct pointer") == ("P2P", None, None, False)
    assert split_via("SHM/direct/direct") == ("SHM", None, None, False)


def test_transport_of_a_channel_prefers_its_network_hop() -> None:
    topo = NcclTopology()
    p = "h:1:1 [0] NCCL INFO "
    topo.feed(
        [
            p + "comm 0x1 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
            p + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
            p + "Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA",
            p + "Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct",
            p + "Channel 02/0 : 0[0] -> 2[0] [send] via NET/IB/0",
            p + "Channel 02/1 : 0[0] -> 3[1] [send] via NET/Socket/0",
        ]
    )
    assert [topo.transport_of("h", 1, 0, c) for c in range(4)] == ["NET/IB", "SHM", None, None]
    assert topo.transport_of("h", 2, 0, 0) is None
