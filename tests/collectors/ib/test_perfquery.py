"""perfquery parsing: the real infiniband-diags outputs (../shared/fixtures/real/infiniband) and
the widths each attribute carries into the batch metadata."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graywire.collectors.host.sysfs import PortReading
from graywire.collectors.ib.counters import iba_spec
from graywire.collectors.ib.perfquery import (
    PerfqueryCommand,
    apply_perfquery,
    parse_perfquery,
    perfquery_batch,
)
from graywire.collectors.schemas import COUNTER_BITS_KEY, SATURATING_KEY

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _meta(batch) -> tuple[dict, list]:
    meta = batch.schema.metadata or {}
    return json.loads(meta.get(COUNTER_BITS_KEY, b"{}")), json.loads(meta.get(SATURATING_KEY, b"[]"))


def test_real_extended_switch_output(real_fixtures: Path) -> None:
    text = (real_fixtures / "infiniband" / "perfquery_extended_switch_0x7cfe9003009ce5b0.out").read_text()
    blocks = parse_perfquery(text)
    assert [(b.kind, b.lid, b.port) for b in blocks] == [("extended", 1719, 1), ("extended", 1719, 2)]
    assert blocks[0].values["PortXmitData"] == 36298026860928
    assert blocks[1].values["PortXmitWait"] == 36510964
    assert blocks[0].values["CounterSelect2"] == 0
    batch = perfquery_batch([("leaf-0/p1", blocks[:1]), ("leaf-0/p2", blocks[1:])], T)
    row = batch.to_pylist()
    # 4-octet words become bytes; error counters of the Extended block are 64-bit.
    assert row[0]["tx_bytes"] == 36298026860928 * 4
    assert row[1]["rx_bytes"] == 39078804993378 * 4
    assert row[0]["rx_packets"] == 32262508468
    assert row[1]["xmit_wait_ticks"] == 36510964
    assert row[0]["symbol_errors"] == 0 and row[0]["vl15_dropped"] == 0
    assert row[0]["local_link_integrity_errors"] == 0
    assert row[0]["speed_bps"] is None  # perfquery has no port state
    assert _meta(batch) == ({}, [])


def test_real_extended_hca_output(real_fixtures: Path) -> None:
    text = (real_fixtures / "infiniband" / "perfquery_extended_hca_0x7cfe9003003b4bde.out").read_text()
    (block,) = parse_perfquery(text)
    assert (block.kind, block.lid, block.port) == ("extended", 134, 1)
    row = perfquery_batch([("gpu-0/mlx5_0", [block])], T).to_pylist()[0]
    assert row["rx_bytes"] == 9752484588300 * 4
    assert row["tx_packets"] == 28825338611
    assert row["xmit_wait_ticks"] == 0


def test_real_rcv_error_details(real_fixtures: Path) -> None:
    text = (real_fixtures / "infiniband" / "perfquery_rcv_error_details_0x7cfe9003009ce5b0-1.out").read_text()
    (block,) = parse_perfquery(text)
    assert block.kind == "rcv_error_details" and block.port == 1
    assert set(block.values) >= {"PortLocalPhysicalErrors", "PortMalformedPktErrors", "PortLoopingErrors"}
    # No canonical column: the row carries no counters from it.
    row = perfquery_batch([("leaf-0/p1", [block])], T).to_pylist()[0]
    assert row["rcv_errors"] is None


LEGACY = """# Port counters: Lid 12 port 1 (CapMask: 0x1400)
PortSelect:......................1
CounterSelect:...................0x0000
SymbolErrorCounter:..............65535
LinkErrorRecoveryCounter:........255
LinkDownedCounter:...............255
PortRcvErrors:...................17
PortRcvRemotePhysicalErrors:.....0
PortRcvSwitchRelayErrors:........3
PortXmitDiscards:................65535
PortXmitConstraintErrors:........0
PortRcvConstraintErrors:.........0
CounterSelect2:..................0x00
LocalLinkIntegrityErrors:........15
ExcessiveBufferOverrunErrors:....2
VL15Dropped:.....................0
PortXmitData:....................4294967295
PortRcvData:.....................123456
PortXmitPkts:....................4294967295
PortRcvPkts:.....................1000
PortXmitWait:....................4294967295
"""


def test_legacy_block_declares_narrow_saturating_widths() -> None:
    (block,) = parse_perfquery(LEGACY)
    assert block.kind == "legacy"
    batch = perfquery_batch([("gpu-0/mlx5_0", [block])], T)
    bits, sat = _meta(batch)
    assert bits["symbol_errors"] == 16 and bits["link_downed"] == 8 and bits["link_recovery"] == 8
    assert bits["local_link_integrity_errors"] == 4 and bits["excessive_buffer_overrun_errors"] == 4
    assert bits["xmit_constraint_errors"] == 8 and bits["vl15_dropped"] == 16
    assert bits["tx_bytes"] == 32 and bits["xmit_wait_ticks"] == 32
    assert set(sat) == set(bits)
    row = batch.to_pylist()[0]
    assert row["link_downed"] == 255 and row["xmit_discards"] == 65535
    assert row["local_link_integrity_errors"] == 15 and row["rcv_switch_relay_errors"] == 3
    assert row["rx_bytes"] == 123456 * 4


def test_extended_wins_over_legacy_for_one_port() -> None:
    legacy = parse_perfquery(LEGACY)
    wide = LEGACY.replace("# Port counters:", "# Port extended counters:").replace("65535", "70000")
    ext = parse_perfquery(wide)
    batch = perfquery_batch([("gpu-0/mlx5_0", [*ext, *legacy])], T)
    row = batch.to_pylist()[0]
    assert row["symbol_errors"] == 70000
    assert "symbol_errors" not in _meta(batch)[0]


def test_rsfec_spellings_of_perfquery_and_ufm_share_one_column() -> None:
    text = "# Port extended speeds RS-FEC counters: Lid 3 port 1\nPortFECCorrectableBlockCtr:......42\n"
    row = perfquery_batch([("gpu-0/mlx5_0", parse_perfquery(text))], T).to_pylist()[0]
    assert row["fec_corrected_blocks"] == 42
    assert iba_spec("PortFECCorrectedSymbolCounter", extended=False).column == "fec_corrected_symbols"
    assert iba_spec("PortFECCorrectedSymbolCtr", extended=False).bits == 32


def test_field_before_header_is_rejected() -> None:
    with pytest.raises(ValueError, match="not perfquery output"):
        parse_perfquery("SymbolErrorCounter:......3\n")


def test_agent_replaces_saturating_sysfs_errors_with_perfquery_x(real_fixtures: Path, tmp_path: Path) -> None:
    """A fake perfquery printing the real HCA capture: its 64-bit values replace sysfs's."""
    out = real_fixtures / "infiniband" / "perfquery_extended_hca_0x7cfe9003003b4bde.out"
    fake = tmp_path / "perfquery"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat {out}\n')
    fake.chmod(0o755)
    r = PortReading("mlx5_0", "mlx5_0", 1, None, "InfiniBand", 5, 4)
    r.set_counter("symbol_errors", 65535, 16)
    r.set_counter("rx_bytes", 123, 64)
    errors = apply_perfquery([r], PerfqueryCommand(str(fake)))
    assert errors == []
    assert (tmp_path / "args").read_text().split() == ["-x", "-C", "mlx5_0", "-P", "1"]
    assert r.counters["symbol_errors"] == 0 and "symbol_errors" not in r.narrow
    assert r.counters["rx_bytes"] == 9752484588300 * 4
    # A RoCE port has no IB PMA through umad: not queried. A failing binary is a message.
    roce = PortReading("mlx5_1", "mlx5_1", 1, "eth0", "Ethernet", 5, 4)
    assert apply_perfquery([roce], PerfqueryCommand("/nonexistent/perfquery")) == []
    bad = PortReading("mlx5_2", "mlx5_2", 1, None, "InfiniBand", 5, 4)
    (msg,) = apply_perfquery([bad], PerfqueryCommand("/nonexistent/perfquery"))
    assert "/nonexistent/perfquery -x -C mlx5_2 -P 1" in msg
