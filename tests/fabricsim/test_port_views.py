"""Port views: the simulator's ports through real wire formats and the collectors' parsers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from graywire.collectors.schemas import COUNTER_BITS_KEY, record_kind
from graywire.evaluation.suite import Scenario, run_scenario
from graywire.fabricsim.port_views import PORT_VIEWS
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

HOST = "gpu-0003/mlx5_2"
LEAF = "leaf-r2-000/p4"


@pytest.fixture(scope="module")
def poll():
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=60.0, seed=1, faults="none"))
    steps = list(sim.run())
    return sim.fabric, steps[-1].port_sample


def rows(batches) -> dict[str, dict]:
    """Each port's row, its sources' batches joined as the pipeline joins them (first value wins)."""
    out: dict[str, dict] = {}
    for b in batches:
        for r in b.to_pylist():
            known = out.setdefault(r["port"], {})
            known.update({k: v for k, v in r.items() if known.get(k) is None})
    return out


def test_every_view_gives_a_port_sample_of_every_polled_port(poll) -> None:
    fabric, batch = poll
    for name, make in PORT_VIEWS.items():
        out = make(fabric).apply(batch)
        assert out and all(record_kind(b.schema) == "port_sample" for b in out), name
        assert sorted(rows(out)) == sorted(fabric.keys), name


def test_ufm_telemetry_has_no_speed_as_real_ufm_telemetry(poll) -> None:
    """UFM REST carries the state and speed, UFM Telemetry the counters: two batches."""
    fabric, batch = poll
    rest, tele = PORT_VIEWS["ufm_default"](fabric).apply(batch)
    assert rest.column("speed_bps").null_count < rest.num_rows
    assert rest.column("tx_bytes").null_count == rest.num_rows
    assert tele.column("speed_bps").null_count == tele.num_rows
    assert tele.column("phys_state").null_count == tele.num_rows
    assert tele.column("tx_bytes").null_count == 0


def test_ufm_default_has_no_phy_bits_but_rsfec_counts(poll) -> None:
    fabric, batch = poll
    rich, got = rows([batch]), rows(PORT_VIEWS["ufm_default"](fabric).apply(batch))
    h = got[HOST]
    assert h["fec_corrected_bits"] is None and h["phy_received_bits"] is None and h["fec_lane_errors"] is None
    assert h["fec_corrected_blocks"] == rich[HOST]["fec_corrected_blocks"] > 0
    assert h["fec_corrected_symbols"] == rich[HOST]["fec_corrected_symbols"] > 0
    assert h["tx_bytes"] == rich[HOST]["tx_bytes"] // 4 * 4  # 4-octet words on the wire
    assert (h["speed_bps"], h["width"], h["phys_state"]) == (
        rich[HOST]["speed_bps"],
        rich[HOST]["width"],
        rich[HOST]["phys_state"],
    )
    assert h["pfc3_tx_pause_seconds"] is None and h["ecn_marked_packets"] is None  # IB: no PFC, no ECN


def test_perfquery_legacy_saturates_narrow_fields_and_keeps_wide_host_values(poll) -> None:
    fabric, batch = poll
    out = PORT_VIEWS["perfquery_legacy"](fabric).apply(batch)
    rich, got = rows([batch]), rows(out)
    assert got[LEAF]["rx_bytes"] == (2**32 - 1) * 4  # the switch's 32-bit PortRcvData is stuck
    assert got[HOST]["rx_bytes"] == rich[HOST]["rx_bytes"] // 4 * 4 > 2**34  # wide under a legacy name
    bits = json.loads(out[0].schema.metadata[COUNTER_BITS_KEY])
    assert bits["rx_bytes"] == 32 and bits["symbol_errors"] == 16 and bits["link_downed"] == 8
    assert got[HOST]["fec_corrected_blocks"] is None and got[HOST]["speed_bps"] == rich[HOST]["speed_bps"]


def test_host_ethtool_reads_phy_counters_on_hosts(poll) -> None:
    fabric, batch = poll
    rich, got = rows([batch]), rows(PORT_VIEWS["host_ethtool"](fabric).apply(batch))
    h = got[HOST]
    assert h["source"] == "agent" and got[LEAF]["source"] == "ufm"
    assert h["fec_corrected_bits"] == rich[HOST]["fec_corrected_bits"]
    assert h["phy_received_bits"] == rich[HOST]["phy_received_bits"]
    assert h["crc_errors"] == rich[HOST]["crc_errors"]
    assert h["pfc3_tx_pause_seconds"] == pytest.approx(rich[HOST]["pfc3_tx_pause_seconds"], abs=1e-6)
    assert h["ecn_marked_packets"] == rich[HOST]["ecn_marked_packets"]


@pytest.mark.parametrize("view", sorted(PORT_VIEWS))
def test_healthy_fabric_gives_no_finding_in_any_view(view: str) -> None:
    sc = Scenario(
        "healthy", 8, 0, 1200.0, 10.0, "checkpoint_burst@600s+2m,counter_reset@300s+5m", f"{view}+rich"
    )
    rep, _ = run_scenario(sc, None)
    assert rep.false_findings == 0 and rep.benign_alarms == 0 and rep.true_findings == 0


def test_ber_ramp_without_corrected_bits_is_found_from_rsfec_blocks() -> None:
    rep, _ = run_scenario(
        Scenario("ramp", 8, 0, 1200.0, 10.0, "ber_ramp@60s+900s=3", "ufm_default+rich"), None
    )
    s = rep.by_fault["ber_ramp"]
    assert (s.total, s.detected) == (1, 1)
    assert rep.false_findings == 0
    assert np.isfinite(s.delays_s[0]) and s.delays_s[0] < 900
