"""fabricsim's snmprec writer: format, order, and what a fault looks like to an SNMP manager."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graywire.collectors.snmp import oids as O
from graywire.fabricsim.sim import FabricSim, SimConfig, SimStep
from graywire.fabricsim.snmprec import render_snmprec, write_snmprec
from graywire.fabricsim.topology import TopologySpec

NIC = "gpu-0003/mlx5_2"
LEAF, LEAF_PORT = "leaf-r2-000", 4  # NIC's link goes to leaf-r2-000/p4
TYPES = {"2", "4", "4x", "6", "65", "66", "67", "70"}


def run(faults: str, steps: int) -> tuple[FabricSim, SimStep]:
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=8), interval_s=10.0, duration_s=600.0, faults=faults)
    )
    step = sim.step()
    for _ in range(steps):
        step = sim.step()
    return sim, step


def parse(text: str) -> dict[tuple[int, ...], tuple[str, str]]:
    out = {}
    for line in text.splitlines():
        oid, tag, value = line.split("|", 2)
        out[O.oid(oid)] = (tag, value)
    return out


def value(rec: dict[tuple[int, ...], tuple[str, str]], col: O.Oid, *index: int) -> tuple[str, str]:
    return rec[(*col, *index)]


@pytest.fixture(scope="module")
def downgraded() -> tuple[FabricSim, SimStep]:
    return run(f"speed_downgrade@30s+300s:{NIC}", steps=4)  # t = 40 s: the fault is on


def test_one_recording_per_switch_sorted_numerically_and_well_formed(
    downgraded: tuple[FabricSim, SimStep],
) -> None:
    sim, step = downgraded
    texts = render_snmprec(step.port_sample, sim.fabric)
    assert sorted(texts) == [f"leaf-r{r}-000" for r in range(8)] + ["spine-0000"]
    for name, text in texts.items():
        lines = text.splitlines()
        oids = [O.oid(line.split("|", 1)[0]) for line in lines]
        assert oids == sorted(oids), name  # numeric order (string order would put .10 before .2)
        assert len(set(oids)) == len(oids), name
        assert {line.split("|")[1] for line in lines} <= TYPES
    leaf = parse(texts[LEAF])
    assert value(leaf, O.SYS_NAME, 0) == ("4", LEAF)
    assert value(leaf, O.IF_NUMBER, 0) == ("2", "16")  # 8 host ports, 8 uplinks
    assert value(leaf, O.SYS_UPTIME, 0) == ("67", "4000")  # 40 s in hundredths since the sim started
    spine = parse(texts["spine-0000"])
    assert value(spine, O.IF_NUMBER, 0) == ("2", "64")


def test_speed_downgrade_shows_as_if_high_speed_400000(downgraded: tuple[FabricSim, SimStep]) -> None:
    sim, step = downgraded
    leaf = parse(render_snmprec(step.port_sample, sim.fabric)[LEAF])
    assert value(leaf, O.IF_NAME, LEAF_PORT) == ("4", "p4")
    assert value(leaf, O.IF_DESCR, LEAF_PORT) == ("4", "p4")
    assert value(leaf, O.IF_ALIAS, LEAF_PORT) == ("4", NIC)
    assert value(leaf, O.IF_OPER_STATUS, LEAF_PORT) == ("2", "1")
    assert value(leaf, O.IF_HIGH_SPEED, LEAF_PORT) == ("66", "400000")
    assert value(leaf, O.IF_HIGH_SPEED, 5) == ("66", "800000")
    assert value(leaf, O.IF_SPEED, LEAF_PORT) == ("66", "4294967295")  # saturated above 4.29 Gb/s


def test_counters_64_and_32_bit(downgraded: tuple[FabricSim, SimStep]) -> None:
    sim, step = downgraded
    leaf = parse(render_snmprec(step.port_sample, sim.fabric)[LEAF])
    b = step.port_sample
    row = b.column("port").to_pylist().index(f"{LEAF}/p{LEAF_PORT}")
    rx = b.column("rx_bytes")[row].as_py()
    assert rx > 2**32
    assert value(leaf, O.IF_HC_IN_OCTETS, LEAF_PORT) == ("70", str(rx))
    assert value(leaf, O.IF_IN_OCTETS, LEAF_PORT) == ("65", str(rx % 2**32))
    tx_pkts = b.column("tx_packets")[row].as_py()
    assert value(leaf, O.IF_HC_OUT_UCAST_PKTS, LEAF_PORT) == ("70", str(tx_pkts))
    assert value(leaf, O.IF_IN_ERRORS, LEAF_PORT) == ("65", str(b.column("rcv_errors")[row].as_py()))
    assert value(leaf, O.IF_OUT_DISCARDS, LEAF_PORT)[0] == "65"
    # PFC, IEEE8021-PFC-MIB by default: per port, Counter32; Requests = sent, Indications = received.
    tx, rx_p = (b.column(f"pfc3_{d}_pause_frames")[row].as_py() for d in ("tx", "rx"))
    assert value(leaf, O.IEEE_PFC_REQUESTS, LEAF_PORT) == ("65", str(tx % 2**32))
    assert value(leaf, O.IEEE_PFC_INDICATIONS, LEAF_PORT) == ("65", str(rx_p % 2**32))
    assert not any(k[:7] == O.ARISTA_PFC_ENTRY[:7] for k in leaf)


@pytest.mark.parametrize(("mib", "req", "ind"), [
    ("arista", O.ARISTA_PFC_REQUESTS, O.ARISTA_PFC_INDICATIONS),
    ("cisco", O.CISCO_PFC_REQUESTS, O.CISCO_PFC_INDICATIONS),
])  # fmt: skip
def test_per_priority_pfc_mibs(
    downgraded: tuple[FabricSim, SimStep], mib: str, req: O.Oid, ind: O.Oid
) -> None:
    sim, step = downgraded
    leaf = parse(render_snmprec(step.port_sample, sim.fabric, pfc_mib=mib)[LEAF])  # type: ignore[arg-type]
    b = step.port_sample
    row = b.column("port").to_pylist().index(f"{LEAF}/p{LEAF_PORT}")
    assert value(leaf, req, LEAF_PORT, 3) == ("70", str(b.column("pfc3_tx_pause_frames")[row].as_py()))
    assert value(leaf, ind, LEAF_PORT, 3) == ("70", str(b.column("pfc3_rx_pause_frames")[row].as_py()))
    # The sim has PFC on priority 3 only: other priorities are absent, as on a switch without them.
    assert (*req, LEAF_PORT, 0) not in leaf
    assert not any(k[:7] == O.IEEE_PFC_ENTRY[:7] for k in leaf)


def test_a_port_that_is_down_shows_its_configured_speed() -> None:
    sim, step = run(f"link_flap@20s+200s=2:{NIC}", steps=2)  # t = 20 s: first outage of the flap
    row = step.port_sample.column("port").to_pylist().index(f"{LEAF}/p{LEAF_PORT}")
    assert step.port_sample.column("speed_bps")[row].as_py() is None
    leaf = parse(render_snmprec(step.port_sample, sim.fabric)[LEAF])
    assert value(leaf, O.IF_OPER_STATUS, LEAF_PORT) == ("2", "2")
    assert value(leaf, O.IF_HIGH_SPEED, LEAF_PORT) == ("66", "800000")


def test_a_switch_missing_from_the_poll_gets_no_recording() -> None:
    sim, step = run("collector_outage@0s+100s:leaf-r1-000", steps=1)
    texts = render_snmprec(step.port_sample, sim.fabric)
    assert "leaf-r1-000" not in texts and LEAF in texts
    assert render_snmprec(step.port_sample, sim.fabric, nodes=["spine-0000"]).keys() == {"spine-0000"}


def test_write_snmprec_files(tmp_path: Path, downgraded: tuple[FabricSim, SimStep]) -> None:
    sim, step = downgraded
    paths = write_snmprec(step.port_sample, sim.fabric, tmp_path, nodes=[LEAF, "spine-0000"])
    assert paths == {LEAF: tmp_path / f"{LEAF}.snmprec", "spine-0000": tmp_path / "spine-0000.snmprec"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{LEAF}.snmprec", "spine-0000.snmprec"]
    text = paths[LEAF].read_text()
    # LLDP-MIB (iso.0.8802) sorts before the system group (iso.3.6.1).
    assert text.startswith("1.0.8802.1.1.2.1.3.1.0|2|4\n") and text.endswith("\n")
    assert f"\n1.3.6.1.2.1.1.1.0|4|graywire fabricsim switch {LEAF}\n" in text
    bare = render_snmprec(step.port_sample, sim.fabric, nodes=[LEAF], lldp=False)[LEAF]
    assert bare.startswith(f"1.3.6.1.2.1.1.1.0|4|graywire fabricsim switch {LEAF}\n")
    assert "1.0.8802." not in bare
    with pytest.raises(ValueError, match="pfc_mib"):
        render_snmprec(step.port_sample, sim.fabric, pfc_mib="juniper")  # type: ignore[arg-type]
    # Stamped before it takes its name: snmpsim only ever sees the recording with its own time.
    again = write_snmprec(step.port_sample, sim.fabric, tmp_path, nodes=[LEAF], mtime=1_767_571_200.0)
    assert again[LEAF].stat().st_mtime == 1_767_571_200.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{LEAF}.snmprec", "spine-0000.snmprec"]


def test_every_switch_port_of_a_large_fabric_is_recorded() -> None:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=256), duration_s=20.0, faults="none"))
    sim.step()
    batch = sim.step().port_sample
    texts = render_snmprec(batch, sim.fabric)
    switch_ports = int(np.isin(sim.fabric.port_role, ("leaf", "spine")).sum())
    assert len(texts) == 64 + 32  # 64 leaves (8 rails x 8 groups of 32 hosts), 32 spines of radix 64
    assert sum(t.count("\n1.3.6.1.2.1.31.1.1.1.15.") for t in texts.values()) == switch_ports


def test_lldp_rows_name_the_other_end_of_every_cable(downgraded: tuple[FabricSim, SimStep]) -> None:
    """As real agents send them (LibreNMS's SONiC recording in ../shared): chassis ids by MAC,
    a host NIC by its MAC (lldpd's default) with its netdev as description, never as
    ``mlx5_N``; a switch port by name (subtype local); rows under a time mark other than 0."""
    sim, step = downgraded
    fabric = sim.fabric
    texts = render_snmprec(step.port_sample, fabric)
    leaf, spine = parse(texts[LEAF]), parse(texts["spine-0000"])
    assert value(leaf, O.LLDP_LOC_SYS_NAME, 0) == ("4", LEAF)
    assert value(leaf, O.LLDP_LOC_CHASSIS_ID_SUBTYPE, 0) == ("2", "4")  # macAddress
    assert value(leaf, O.LLDP_LOC_CHASSIS_ID, 0)[0] == "4x"
    assert len(bytes.fromhex(value(leaf, O.LLDP_LOC_CHASSIS_ID, 0)[1])) == 6
    assert value(leaf, O.LLDP_LOC_PORT_ID_SUBTYPE, LEAF_PORT) == ("2", "5")  # interfaceName
    assert value(leaf, O.LLDP_LOC_PORT_ID, LEAF_PORT) == ("4", f"p{LEAF_PORT}")  # lldpLocPortNum = ifIndex
    # lldpRemTable index (time mark, lldpRemLocalPortNum, lldpRemIndex): the host NIC.
    host, _ = NIC.split("/")
    netdev, mac = fabric.aliases[fabric.keys.index(NIC)]
    rem = [k for k in leaf if k[: len(O.LLDP_REM_SYS_NAME)] == O.LLDP_REM_SYS_NAME and k[-2] == LEAF_PORT]
    assert len(rem) == 1
    mark, _, index = rem[0][len(O.LLDP_REM_SYS_NAME) :]
    assert mark > 0 and index == LEAF_PORT  # the leaf's 4th neighbour, in port order
    assert value(leaf, O.LLDP_REM_SYS_NAME, mark, LEAF_PORT, index) == ("4", host)
    assert value(leaf, O.LLDP_REM_CHASSIS_ID_SUBTYPE, mark, LEAF_PORT, index) == ("2", "4")
    assert value(leaf, O.LLDP_REM_PORT_ID_SUBTYPE, mark, LEAF_PORT, index) == ("2", "3")  # macAddress
    assert value(leaf, O.LLDP_REM_PORT_ID, mark, LEAF_PORT, index) == ("4x", mac.replace(":", ""))
    assert value(leaf, O.LLDP_REM_PORT_DESC, mark, LEAF_PORT, index) == ("4", netdev)
    assert netdev.startswith("enp") and mac.startswith("b8:ce:f6:")
    # An uplink names the spine port (subtype local), and the spine names the leaf port back.
    up = [
        k for k in leaf if k[: len(O.LLDP_REM_SYS_NAME)] == O.LLDP_REM_SYS_NAME and leaf[k][1] == "spine-0000"
    ]
    uplink = up[0][len(O.LLDP_REM_SYS_NAME) :]
    assert value(leaf, O.LLDP_REM_PORT_ID_SUBTYPE, *uplink) == ("2", "7")
    at = int(value(leaf, O.LLDP_REM_PORT_ID, *uplink)[1].removeprefix("p"))
    back = [k for k in spine if k[: len(O.LLDP_REM_SYS_NAME)] == O.LLDP_REM_SYS_NAME and k[-2] == at]
    assert spine[back[0]] == ("4", LEAF)
    assert spine[(*O.LLDP_REM_PORT_ID, *back[0][len(O.LLDP_REM_SYS_NAME) :])] == ("4", f"p{uplink[1]}")
    # One neighbour per cabled switch port: every port of this fabric has a cable.
    rows = sum(k[: len(O.LLDP_REM_PORT_ID)] == O.LLDP_REM_PORT_ID for k in leaf)
    assert rows == 16
