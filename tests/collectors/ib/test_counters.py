"""The IBA PM names shared by UFM, perfquery and sysfs: one column and width per attribute."""

from __future__ import annotations

import pytest

from graywire.collectors.host.sysfs import PMA_COUNTERS
from graywire.collectors.ib.counters import ERROR_COLUMNS, IBA_COUNTERS, iba_spec
from graywire.collectors.schemas import PORT_COUNTERS
from graywire.collectors.ufm.counters import counter_spec

LEGACY_BITS = {
    "SymbolErrorCounter": 16,
    "LinkErrorRecoveryCounter": 8,
    "LinkDownedCounter": 8,
    "PortRcvErrors": 16,
    "PortRcvRemotePhysicalErrors": 16,
    "PortRcvSwitchRelayErrors": 16,
    "PortXmitDiscards": 16,
    "PortXmitConstraintErrors": 8,
    "PortRcvConstraintErrors": 8,
    "LocalLinkIntegrityErrors": 4,
    "ExcessiveBufferOverrunErrors": 4,
    "VL15Dropped": 16,
    "PortXmitWait": 32,
    "PortXmitData": 32,
    "PortRcvData": 32,
    "PortXmitPkts": 32,
    "PortRcvPkts": 32,
}


@pytest.mark.parametrize(("name", "bits"), sorted(LEGACY_BITS.items()))
def test_legacy_and_extended_forms_in_ufm_spelling(name: str, bits: int) -> None:
    legacy, ext = counter_spec(name), counter_spec(f"{name}Extended")
    assert legacy is not None and ext is not None
    assert (legacy.bits, legacy.saturating) == (bits, True)
    assert (ext.bits, ext.saturating) == (64, False)
    assert legacy.column == ext.column and ext.rank > legacy.rank
    # perfquery: the same name is 64-bit when it comes from PortCountersExtended.
    assert iba_spec(name, extended=True).bits == 64  # type: ignore[union-attr]


def test_every_iba_column_is_canonical_and_errors_are_known() -> None:
    assert {c.column for c in IBA_COUNTERS.values()} <= set(PORT_COUNTERS)
    assert set(ERROR_COLUMNS) <= set(PORT_COUNTERS)


@pytest.mark.parametrize(
    ("name", "column"),
    [
        ("PortFECCorrectableBlockCounter", "fec_corrected_blocks"),
        ("PortFECUncorrectableBlockCounter", "fec_uncorrectable_blocks"),
        ("PortFECCorrectedSymbolCounter", "fec_corrected_symbols"),
        ("Infiniband_RcvRemotePhysErrors_u_Errors", "rcv_remote_physical_errors"),
        ("Infiniband_VL15Dropped_u_Errors", "vl15_dropped"),
        ("phy_symbol_errors", "symbol_errors"),
    ],
)
def test_fec_and_tfs_names(name: str, column: str) -> None:
    spec = counter_spec(name)
    assert spec is not None and spec.column == column


def test_sysfs_uses_the_same_widths() -> None:
    assert PMA_COUNTERS["local_link_integrity_errors"].bits == 4
    assert PMA_COUNTERS["VL15_dropped"].column == "vl15_dropped"
    assert PMA_COUNTERS["port_xmit_data"].bits == 64  # PortCountersExtended on mlx4/mlx5
    assert PMA_COUNTERS["port_xmit_wait"].bits == 32
