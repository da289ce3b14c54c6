"""graywire's host-side parsers over every real capture in the corpus (SOURCES.md per folder).

Formats: ``nvidia-smi topo -m``, ``ethtool -S``, ``ethtool <if>`` / ``--show-fec``, sysfs
InfiniBand transcripts and trees, and exporter text (node_exporter, infiniband_exporter).
Every capture has a row of expected values below; a capture a parser misreads today is marked
``xfail(strict=True)`` with what it gets wrong, and asserts what it should read.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graywire.collectors.host.ethtool import (
    EthtoolReading,
    apply_ethtool,
    fec_mode_code,
    parse_fec,
    parse_settings,
    parse_statistics,
)
from graywire.collectors.host.gpu_topo import TopoParseError, parse_topo_matrix
from graywire.collectors.host.sysfs import (
    PortReading,
    SysfsConfig,
    parse_logical_state,
    parse_phys_state,
    parse_rate,
    read_ports,
)
from graywire.collectors.prometheus.parse import parse_exposition
from graywire.collectors.schemas import COUNTER_BITS_KEY
from tests.collectors.corpus.conftest import captures, ids


def _params(paths: list[Path], xfail: dict[str, str]) -> list:
    """One parameter per capture; those in ``xfail`` carry a strict xfail with the reason."""
    return [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=xfail[p.name])) if p.name in xfail else p
        for p in paths
    ]


# -- nvidia-smi topo -m ------------------------------------------------------------------------

TOPO = captures("nvidia_smi_topo")

_MLX = tuple(f"mlx5_{i}" for i in range(10))

#: file -> gpus, nics (RDMA names, column order), a few (gpu, nic) -> level cells, numa, cpu affinity.
TOPO_EXPECTED: dict[str, dict] = {
    "h200_single_gpu_tty.txt": {
        "gpus": (0,),
        "nics": (),
        "cells": {},
        "numa": {0: 0},
        "cpu": {0: "0-15"},
    },
    "h200_single_gpu_pipe.txt": {
        "gpus": (0,),
        "nics": (),
        "cells": {},
        "numa": {0: 0},
        "cpu": {0: "0-15"},
    },
    "glm52_fp8_h200_8gpu_10nic_escapes_tabs.txt": {
        "gpus": tuple(range(8)),
        "nics": _MLX,
        "cells": {
            (0, "mlx5_3"): "PIX",
            (0, "mlx5_0"): "NODE",
            (0, "mlx5_6"): "SYS",
            (1, "mlx5_5"): "PIX",
            (2, "mlx5_4"): "PIX",
            (3, "mlx5_0"): "PIX",
            (3, "mlx5_1"): "PIX",
            (3, "mlx5_2"): "PIX",
            (4, "mlx5_7"): "PIX",
            (4, "mlx5_0"): "SYS",
            (5, "mlx5_9"): "PIX",
            (6, "mlx5_8"): "PIX",
            (7, "mlx5_6"): "PIX",
        },
        "numa": {0: 0, 3: 0, 4: 1, 7: 1},
        "cpu": {0: "0-63,128-191", 7: "64-127,192-255"},
    },
    "sglang_30401_h100_8gpu_8nic_check_env.txt": {
        "gpus": tuple(range(8)),
        "nics": _MLX[:8],
        "cells": {
            (0, "mlx5_0"): "PIX",
            (0, "mlx5_1"): "NODE",
            (0, "mlx5_4"): "SYS",
            (3, "mlx5_3"): "PIX",
            (4, "mlx5_4"): "PIX",
            (5, "mlx5_6"): "NODE",
            (7, "mlx5_7"): "PIX",
            (7, "mlx5_0"): "SYS",
        },
        "numa": {0: 0, 3: 0, 4: 1, 7: 1},
        "cpu": {0: "0-47,96-143", 4: "48-95,144-191"},
    },
    "sglang_24413_h100_pcie_vm_1nic_phb.txt": {
        "gpus": (0,),
        "nics": ("mlx5_0",),
        "cells": {(0, "mlx5_0"): "PHB"},
        "numa": {0: 0},
        "cpu": {0: "0-251"},
    },
    "stelline_asus_esc8000a_rtx6000ada_4gpu_4nic.txt": {
        "gpus": (0, 1, 2, 3),
        "nics": _MLX[:4],
        "cells": {
            (0, "mlx5_0"): "NODE",
            (1, "mlx5_1"): "NODE",
            (0, "mlx5_2"): "SYS",
            (2, "mlx5_2"): "NODE",
            (3, "mlx5_3"): "NODE",
            (3, "mlx5_0"): "SYS",
        },
        "numa": {0: 0, 1: 0, 2: 1, 3: 1},
        "cpu": {0: "0-31", 2: "32-63"},
    },
    # The header lost the separators between its GPU columns when it was posted
    # ("\t    GPU0GPU1...GPU7mlx5_0\tmlx5_2..."): no column is named GPU0, so the matrix cannot be
    # placed and the parser must refuse it rather than guess.
    "rse_sheffield_dgx1_p100_soc_damaged_header.txt": {"raises": TopoParseError},
}

TOPO_XFAIL: dict[str, str] = {}


def test_every_topo_capture_has_expectations() -> None:
    assert TOPO, "no nvidia-smi topo -m captures"
    assert {p.name for p in TOPO} == set(TOPO_EXPECTED)


@pytest.mark.parametrize("path", _params(TOPO, TOPO_XFAIL), ids=ids(TOPO))
def test_topo_matrix_capture(path: Path) -> None:
    want = TOPO_EXPECTED[path.name]
    text = path.read_bytes().decode("utf-8")
    if "raises" in want:
        with pytest.raises(want["raises"]):
            parse_topo_matrix(text)
        return
    m = parse_topo_matrix(text)
    assert m.gpus == want["gpus"]
    assert m.nics == want["nics"]
    for (gpu, nic), level in want["cells"].items():
        assert m.levels[gpu][nic] == level, (gpu, nic)
    for gpu, node in want["numa"].items():
        assert m.numa[gpu] == node, gpu
    for gpu, cpus in want["cpu"].items():
        assert m.cpu_affinity[gpu] == cpus, gpu
    # Every GPU row has a level for every NIC column, and never an unknown cell.
    assert all(set(m.levels[g]) == set(m.nics) for g in m.gpus)
    assert all(level is not None for g in m.gpus for level in m.levels[g].values())


# -- ethtool -S ----------------------------------------------------------------------------------

STATS = captures("ethtool_stats")

#: file -> number of statistics, some values as parsed, and (mlx5 only) what an Ethernet port
#: reading gets from them: canonical counters and ``extra`` keys. ``absent``: canonical columns
#: the capture gives no value for.
STATS_EXPECTED: dict[str, dict] = {
    "ethq_mlx5_core_connectx4_ubuntu18.04_kernel4.15_unindented.txt": {
        "count": 751,
        "values": {
            "rx_bytes_phy": 2202570777997,
            "tx_bytes_phy": 2662454044895,
            "rx_corrected_bits_phy": 0,
            "rx_pcs_symbol_err_phy": 0,
            "rx_prio0_bytes": 2202570777997,
            "tx15_xmit_more": 5530,
        },
        "counters": {
            "rx_bytes": 2202570777997,
            "tx_bytes": 2662454044895,
            "fec_corrected_bits": 0,
            "symbol_errors": 0,
            "crc_errors": 0,
            "link_downed": 0,
        },
        "extra": {"ethtool/rx_discards_phy": 0, "ethtool/module_unplug": 0},
        "absent": ("phy_received_bits",),
    },
    "ethq_mlx5_core_connectx4_ubuntu16.04_legacy_names.txt": {
        "count": 309,
        "values": {"rx_bytes": 1063043816, "symbol_err": 0, "pause_ctrl_rx": 0, "tx15_0_nop": 7392},
        # Before the *_phy names (the Ubuntu 16.04 mlx5 driver): nothing maps to a canonical column.
        "counters": {},
        "extra": {},
        "absent": ("fec_corrected_bits", "symbol_errors", "rx_bytes"),
    },
    "lore_bpf_2024-06-19_mlx5_kernel5.15_nonzero_only.txt": {
        "count": 101,
        "values": {
            "rx_discards_phy": 58591428329,
            "rx_prio0_discards": 58591314012,
            "rx_out_of_buffer": 990473555,
        },
        "counters": {"rx_bytes": 6211329423080, "rx_packets": 97052087562, "xmit_discards": 0},
        "extra": {"ethtool/rx_discards_phy": 58591428329, "ethtool/tx_global_pause_duration": 771103810},
        # The poster dropped the zero counters: no FEC or symbol-error line at all.
        "absent": ("fec_corrected_bits", "symbol_errors", "crc_errors"),
    },
    "lore_bpf_2024-06-19_mlx5_kernel6.5_nonzero_only.txt": {
        "count": 108,
        "values": {"rx_bytes_phy": 46609758231313, "rx_pp_recycle_cached": 3641280},
        "counters": {"rx_bytes": 46609758231313, "tx_packets": 47000866603},
        "extra": {"ethtool/rx_buffer_passed_thres_phy": 1192226, "ethtool/rx_discards_phy": 441063206498},
        "absent": ("fec_corrected_bits", "xmit_discards"),
    },
    "lore_netdev_2024-11-07_mlx5_grep_pci.txt": {
        "count": 6,
        "values": {
            "rx_pci_signal_integrity": 1,
            "tx_pci_signal_integrity": 1471,
            "outbound_pci_stalled_wr": 0,
        },
        "counters": {},
        "extra": {},
        "absent": ("rx_bytes",),
    },
    "ethq_bnxt_en_per_ring.txt": {
        "count": 499,
        "values": {
            "[0]: rx_discards": 11763190,
            "[11]: rx_l4_csum_errors": 5858,
            "rx_bits": 4621497487696704,
            "rx_corrected_bits": 0,
            "rx_fec_corrected_blocks": 0,
            "rx_pcs_symbol_err": 0,
            "tx_bytes": 770394433789550,
            "pfc_pri3_rx_duration_us": 0,
        },
    },
    "showmax_bnxt_en_418_10g.txt": {
        "count": 395,
        "values": {
            "[7]: rx_l4_csum_errors": 130,
            "link_down_events": 4,
            "rx_buffer_passed_threshold": 417,
            "rx_bits": 1722813173120,
        },
    },
    "ethq_ice_e810_dotted_nic_keys.txt": {
        "count": 602,
        "values": {
            "rx_unicast": 12117448,
            "rx_bytes.nic": 848255752,
            "fdir_sb_status.nic": 1,
            "tx_queue_127_packets": 0,
            "rx_priority_7_xoff.nic": 0,
        },
    },
}


def test_every_ethtool_stats_capture_has_expectations() -> None:
    assert len(STATS) >= 5
    assert {p.name for p in STATS} == set(STATS_EXPECTED)


@pytest.mark.parametrize("path", STATS, ids=ids(STATS))
def test_ethtool_statistics_capture(path: Path) -> None:
    want = STATS_EXPECTED[path.name]
    stats = parse_statistics(path.read_text())
    assert len(stats) == want["count"]
    for name, value in want["values"].items():
        assert stats[name] == value, name
    assert all(k == k.strip() and k for k in stats)
    if "counters" not in want:
        return
    r = PortReading(label="p", device=None, port_num=None, netdev="p", link_layer="Ethernet")
    apply_ethtool(r, EthtoolReading(statistics=stats))
    assert {c: r.counters[c] for c in want["counters"]} == want["counters"]
    if not want["counters"]:
        assert r.counters == {}
    for key, value in want["extra"].items():
        assert r.extra[key] == value, key
    for column in want["absent"]:
        assert r.counters.get(column) is None, column


# -- ethtool <if> and ethtool [-I] --show-fec ---------------------------------------------------

SETTINGS = captures("ethtool_settings")

#: file -> ``settings`` (speed b/s, lanes, duplex, link detected; None: parse_settings gives
#: None) and ``fec`` (active, configured, stats, lanes; None: parse_fec gives None).
SETTINGS_EXPECTED: dict[str, dict] = {
    "showmax_bnxt_en_418_10g_sfp.txt": {"settings": (10**10, None, "Full", True), "fec": None},
    "softroce_rxe_dev_52_eth0_1g_virtio.txt": {"settings": (10**9, None, "Full", True), "fec": None},
    "zyxel_gpon_sfp_8_enp1s0_link_down_unknown_speed.txt": {
        "settings": (None, None, "Unknown! (255)", False),
        "fec": None,
    },
    "fpp_2381_eth0_netlink_error_link_down.txt": {
        "settings": (None, None, "Unknown! (255)", False),
        "fec": None,
    },
    # No Speed line at all (an unprivileged run against a minimal driver): documented as None.
    "open_nic_driver_29_no_speed_unprivileged.txt": {"settings": None, "fec": None},
    "lore_netdev_2023-03-31_mlxsw_swp1_400g_8_lanes_grep.txt": {
        "settings": (4 * 10**11, 8, "Full", None),
        "fec": None,
    },
    "lore_netdev_2021-02-02_mlxsw_swp1_100g_4_lanes_repeated_lines.txt": {
        "settings": (10**11, 4, "Full", True),
        "fec": None,
    },
    "lore_netdev_2021-04-16_ethtool_fec_stats_per_lane.txt": {
        "settings": None,
        "fec": (
            "None",
            ("None",),
            {"corrected_blocks": 256, "uncorrectable_blocks": 145},
            {"corrected_blocks": [255, 1], "uncorrectable_blocks": [128, 17]},
        ),
    },
    "lore_netdev_2025-10-14_ethtool_fec_histogram_per_lane_brackets.txt": {
        "settings": None,
        "fec": (
            "None",
            ("None",),
            {
                "corrected_blocks": 123,
                "uncorrectable_blocks": 4,
                "fec_symbol_err_0": 445,
                "fec_symbol_err_1_to_3": 12,
                "fec_symbol_err_4_to_7": 2,
            },
            {"fec_symbol_err_0": [125, 120, 100, 100]},
        ),
    },
    "intel_wired_lan_2024-07-08_ice_fec_rs_mangled_indent.txt": {
        "settings": None,
        "fec": ("RS", ("Auto", "RS", "BaseR"), {"corrected_blocks": 0, "uncorrectable_blocks": 0}, {}),
    },
}


def test_every_ethtool_settings_capture_has_expectations() -> None:
    assert len(SETTINGS) >= 5
    assert {p.name for p in SETTINGS} == set(SETTINGS_EXPECTED)


@pytest.mark.parametrize("path", SETTINGS, ids=ids(SETTINGS))
def test_ethtool_settings_and_fec_capture(path: Path) -> None:
    want = SETTINGS_EXPECTED[path.name]
    text = path.read_text()
    settings = parse_settings(text)
    if want["settings"] is None:
        assert settings is None
    else:
        got = (settings.speed_bps, settings.lanes, settings.duplex, settings.link_detected)
        assert got == want["settings"]
    fec = parse_fec(text)
    if want["fec"] is None:
        assert fec is None
        return
    assert (fec.active, fec.configured, fec.stats, fec.lanes) == want["fec"]
    # The block counts land in their canonical columns; "None" (no active mode) is no FEC mode.
    r = PortReading(label="p", device=None, port_num=None, netdev="p", link_layer="Ethernet")
    apply_ethtool(r, EthtoolReading(fec=fec))
    assert r.counters["fec_corrected_blocks"] == fec.stats["corrected_blocks"]
    assert r.counters["fec_uncorrectable_blocks"] == fec.stats["uncorrectable_blocks"]
    if fec.active == "None":
        assert r.fec_mode is None


def test_ice_rs_fec_mode_code_needs_the_lane_rate() -> None:
    """The ice capture prints RS with no speed beside it: RS(528) or RS(544) depends on the lanes."""
    (path,) = captures("ethtool_settings", "intel_wired_lan_*")
    fec = parse_fec(path.read_text())
    assert fec is not None and fec.active == "RS"
    assert fec_mode_code(fec.active, None, None) is None
    assert fec_mode_code(fec.active, 100 * 10**9, 4) == 2  # 25G NRZ lanes: RS(528,514)
    assert fec_mode_code(fec.active, 400 * 10**9, 4) == 7  # 100G PAM4 lanes: RS(544,514)


# -- sysfs: /sys/class/infiniband transcripts and trees ------------------------------------------

SYSFS = captures("sysfs_ib")

_DEV_IN_PATH = re.compile(r"^(sys/devices/.*/infiniband/([^/]+))/")


def _put(root: Path, rel: str, value: str) -> None:
    """Write one sysfs file under ``root`` and, for a device directory under ``sys/devices``,
    the ``sys/class/infiniband/<dev>`` link the kernel makes to it."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value)
    if m := _DEV_IN_PATH.match(rel):
        link = root / "sys/class/infiniband" / m.group(2)
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(root / m.group(1), link.parent))


def _load_ttar(text: str, root: Path) -> None:
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Path: "):
            rel = line[len("Path: ") :]
            n = int(lines[i + 1].removeprefix("Lines: "))
            body = lines[i + 2 : i + 2 + n]
            content = "\n".join(body)
            content = content[: -len("EOF")] if content.endswith("EOF") else content + "\n"
            _put(root, rel, content)
            i += 2 + n
        else:
            i += 1


def _load_grep(text: str, root: Path) -> None:
    """``grep -s . /sys/...``: one ``path:value`` line per file."""
    for line in text.splitlines():
        if line.startswith("/sys/"):
            # PCI addresses put colons in the directories: the value starts after the first
            # colon of the last path component.
            head, _, last = line.rpartition("/")
            name, _, value = last.partition(":")
            _put(root, f"{head}/{name}".lstrip("/"), value + "\n")


def _load_find_cat(text: str, root: Path) -> None:
    """``<cwd>$ for file in $(find . -type f); do echo "=== $file ==="; cat "$file"; echo; done``."""
    cwd = text.split("$", 1)[0].lstrip("/")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := re.fullmatch(r"=== \./(\S+) ===", line):
            _put(root, f"{cwd}/{m.group(1)}", lines[i + 1] + "\n")


def _load_printf_table(text: str, root: Path) -> None:
    """``cd <dir>; for i in *; do printf "%-20.20s  %s\\n" "$i" "$(<$i)"; done``."""
    lines = text.splitlines()
    cwd = lines[0].removeprefix("cd ").lstrip("/")
    for line in lines[2:]:
        name, value = line.split()
        _put(root, f"{cwd}/{name}", value + "\n")


def _load_ttar_fixtures(text: str, root: Path) -> None:
    """A ttar excerpt of a project's test tree, whose paths start at its ``fixtures/`` folder."""
    _load_ttar(text.replace("Path: fixtures/sys/", "Path: sys/"), root)


def _load_ibstatus(text: str, root: Path) -> None:
    """``ibstatus`` (infiniband-diags) prints each port's sysfs files after a label: ``state``,
    ``phys state`` (``phys_state``), ``rate`` and ``link_layer``, values verbatim."""
    port: str | None = None
    files = {"state": "state", "phys state": "phys_state", "rate": "rate", "link_layer": "link_layer"}
    for line in text.splitlines():
        if m := re.match(r"Infiniband device '([^']+)' port (\d+) status:", line):
            port = f"sys/class/infiniband/{m.group(1)}/ports/{m.group(2)}"
            continue
        label, sep, value = line.strip().partition(":")
        if port and sep and label.strip() in files:
            _put(root, f"{port}/{files[label.strip()]}", value.strip() + "\n")


_LOADERS = {
    "gpud_h100_mlx5_1_ib_and_mlx5_bond_0_roce.ttar": _load_ttar,
    "procfs_testdata_mlx4_0_qdr_mlx5_0_hw_counters_ttar_excerpt.ttar": _load_ttar_fixtures,
    "nccl_489_ibstatus_hdr_active_and_down_4x_no_speed_name.txt": _load_ibstatus,
    "nccl_1935_ibstatus_tabs_all_down_sdr_and_ethernet_qdr_excerpt.txt": _load_ibstatus,
    "node_exporter_966_i40iw_x722_grep_no_pma.txt": _load_grep,
    "gpud_pr943_h100_mlx5_1_counters_saturated.txt": _load_find_cat,
    "netdata_9091_hfi1_omnipath_hw_counters_printf.txt": _load_printf_table,
}


def _ports(path: Path, tmp_path: Path) -> dict[str, PortReading]:
    _LOADERS[path.name](path.read_text(), tmp_path)
    return {r.label: r for r in read_ports(SysfsConfig(root=tmp_path))}


def _check_gpud_tree(ports: dict[str, PortReading]) -> None:
    assert set(ports) == {"mlx5_1", "mlx5_bond_0"}
    ib, roce = ports["mlx5_1"], ports["mlx5_bond_0"]
    assert (ib.link_layer, ib.rate_bps, ib.rate_width) == ("InfiniBand", 400 * 10**9, 4)
    assert (ib.phys_state, ib.logical_state, ib.speed_bps) == (5, 4, 400 * 10**9)
    assert ib.counters["rx_bytes"] == 205128687774249 * 4  # port_rcv_data counts 4-octet words
    assert ib.counters["link_downed"] == 255 and ib.narrow["link_downed"] == 8  # stuck at 8 bits
    ebo = "excessive_buffer_overrun_errors"
    assert (ib.counters[ebo], ib.narrow[ebo]) == (15, 4)
    assert ib.counters["xmit_wait_ticks"] == 2489603687 and ib.narrow["xmit_wait_ticks"] == 32
    assert ib.extra["hw_counters/out_of_sequence"] == 0
    assert "hw_counters/lifespan" not in ib.extra  # a setting, not a counter
    assert ib.counters.get("cnp_sent") is None  # IB port: no RoCE congestion counters
    assert ib.netdev is None  # the tree carries no device/net link
    # The RoCE bond reports its Ethernet speed in IB words: 200 Gb/s over 2 NDR lanes.
    assert (roce.link_layer, roce.ethernet) == ("Ethernet", True)
    assert (roce.rate_bps, roce.rate_width) == (200 * 10**9, 2)
    assert (roce.phys_state, roce.logical_state) == (5, 4)
    # This bond shows no np_*/rp_* congestion counters at all: null, not 0.
    for column in ("cnp_sent", "cnp_handled", "ecn_marked_packets"):
        assert roce.counters.get(column) is None, column


def _check_i40iw(ports: dict[str, PortReading]) -> None:
    assert set(ports) == {"i40iw0"}
    r = ports["i40iw0"]
    # iWARP has no PMA: every counter file reads "N/A (no PMA)" and must be null, never 0.
    for column in ("rx_bytes", "rx_packets", "link_downed", "link_recovery", "rcv_errors"):
        assert column in r.counters and r.counters[column] is None, column
    assert r.narrow == {}
    # The transcript holds counters only: state and rate unknown, so the link is not called down.
    assert (r.phys_state, r.logical_state, r.rate_bps) == (None, None, None)
    assert r.link_up


def _check_gpud_pr943(ports: dict[str, PortReading]) -> None:
    assert set(ports) == {"mlx5_1"}
    r = ports["mlx5_1"]
    assert r.counters["rx_bytes"] == 205128687774249 * 4
    assert r.counters["tx_bytes"] == 205143497464492 * 4
    assert r.counters["rx_packets"] == 240037171331
    # Every legacy error counter that moved is pinned at its field's maximum.
    assert (r.counters["xmit_wait_ticks"], r.narrow["xmit_wait_ticks"]) == (2**32 - 1, 32)
    assert (r.counters["link_downed"], r.narrow["link_downed"]) == (2**8 - 1, 8)
    assert (r.counters["xmit_discards"], r.narrow["xmit_discards"]) == (2**16 - 1, 16)
    ebo = "excessive_buffer_overrun_errors"
    assert (r.counters[ebo], r.narrow[ebo]) == (15, 4)
    assert r.counters["rcv_switch_relay_errors"] == 2
    assert r.extra["counters/unicast_rcv_packets"] == 240037171331  # no canonical column: kept


def _check_hfi1(ports: dict[str, PortReading]) -> None:
    assert set(ports) == {"hfi1_0"}
    r = ports["hfi1_0"]
    assert r.extra["hw_counters/DmaWait"] == 50646
    assert r.extra["hw_counters/RcAcks"] == 19918731
    assert r.extra["hw_counters/RcResend"] == 2079
    assert "hw_counters/lifespan" not in r.extra
    # The Omni-Path driver names none of the RoCE congestion counters.
    assert not any(r.counters.get(c) is not None for c in ("cnp_sent", "cnp_handled", "ecn_marked_packets"))


def _check_procfs(ports: dict[str, PortReading]) -> None:
    assert set(ports) == {"mlx4_0", "mlx4_0:2", "mlx5_0"}
    one, two, cx5 = ports["mlx4_0"], ports["mlx4_0:2"], ports["mlx5_0"]
    for r in (one, two):
        assert (r.link_layer, r.rate_bps, r.rate_width, r.phys_state, r.logical_state) == (
            "InfiniBand", 40 * 10**9, 4, 5, 4)  # fmt: skip
    assert (one.counters["rx_bytes"], one.counters["xmit_wait_ticks"]) == (2221223609 * 4, 3599)
    assert (two.counters["rx_bytes"], two.counters["xmit_wait_ticks"]) == (2460436784 * 4, 3846)
    # 1X EDR: one lane of 25 Gb/s. Its phys_state file reads "4: ACTIVE", which the kernel never
    # writes there: unknown (null), and the port is judged by its logical state.
    assert (cx5.rate_bps, cx5.rate_width, cx5.phys_state, cx5.logical_state) == (25 * 10**9, 1, None, 4)
    assert cx5.extra["hw_counters/local_ack_timeout_err"] == 131
    assert cx5.counters.get("cnp_sent") is None  # no np_*/rp_* files: null, not 0


def _check_nccl_489(ports: dict[str, PortReading]) -> None:
    up, down = ports["mlx5_0"], ports["mlx5_1"]
    assert (up.rate_bps, up.rate_width, up.phys_state, up.logical_state, up.link_up) == (
        200 * 10**9, 4, 5, 4, True)  # fmt: skip
    # A disabled port prints "10 Gb/sec (4X)", no speed name: the rate read, no speed (not up).
    assert (down.rate_bps, down.rate_width, down.phys_state, down.logical_state) == (10 * 10**9, 4, 3, 1)
    assert (down.speed_bps, down.link_up) == (None, False)


def _check_nccl_1935(ports: dict[str, PortReading]) -> None:
    assert set(ports) == {"mlx5_11", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"}
    assert all(
        (r.phys_state, r.logical_state, r.link_up, r.speed_bps) == (3, 1, False, None) for r in ports.values()
    )
    assert (ports["mlx5_2"].link_layer, ports["mlx5_2"].rate_bps) == ("Ethernet", 40 * 10**9)
    assert (ports["mlx5_3"].link_layer, ports["mlx5_3"].rate_bps) == ("InfiniBand", 10 * 10**9)


_SYSFS_CHECKS = {
    "procfs_testdata_mlx4_0_qdr_mlx5_0_hw_counters_ttar_excerpt.ttar": _check_procfs,
    "nccl_489_ibstatus_hdr_active_and_down_4x_no_speed_name.txt": _check_nccl_489,
    "nccl_1935_ibstatus_tabs_all_down_sdr_and_ethernet_qdr_excerpt.txt": _check_nccl_1935,
    "gpud_h100_mlx5_1_ib_and_mlx5_bond_0_roce.ttar": _check_gpud_tree,
    "node_exporter_966_i40iw_x722_grep_no_pma.txt": _check_i40iw,
    "gpud_pr943_h100_mlx5_1_counters_saturated.txt": _check_gpud_pr943,
    "netdata_9091_hfi1_omnipath_hw_counters_printf.txt": _check_hfi1,
}
#: Transcripts of single values whose path is a glob (nothing to lay out as a tree): the values
#: through the parsers directly. file -> (rate bits/s, width).
SYSFS_RATES = {"pacemaker_1333_hfi1_ib0_rate_edr.txt": (100 * 10**9, 4)}


def test_every_sysfs_capture_has_expectations() -> None:
    assert len(SYSFS) >= 5
    assert {p.name for p in SYSFS} == set(_SYSFS_CHECKS) | set(SYSFS_RATES)


@pytest.mark.parametrize("path", SYSFS, ids=ids(SYSFS))
def test_sysfs_capture(path: Path, tmp_path: Path) -> None:
    if path.name in SYSFS_RATES:
        lines = [ln.strip().lstrip("#").strip() for ln in path.read_text().splitlines()]
        value = next(ln for ln in lines if "Gb/sec" in ln)
        assert parse_rate(value) == SYSFS_RATES[path.name]
        return
    _SYSFS_CHECKS[path.name](_ports(path, tmp_path))


def test_sysfs_state_files_from_the_gpud_tree(tmp_path: Path) -> None:
    """The state files as the kernel prints them, through the state parsers directly."""
    (path,) = captures("sysfs_ib", "gpud_*.ttar")
    _load_ttar(path.read_text(), tmp_path)
    port = tmp_path / "sys/class/infiniband/mlx5_bond_0/ports/1"
    assert (port / "state").read_text() == "4: ACTIVE"  # stored without the newline sysfs prints
    assert parse_logical_state((port / "state").read_text()) == 4
    assert parse_phys_state((port / "phys_state").read_text()) == 5
    assert parse_rate((port / "rate").read_text()) == (200 * 10**9, 2)


# -- exporter text: node_exporter and infiniband_exporter ----------------------------------------

EXPORTERS = captures("node_exporter")
_TIME = datetime(2026, 1, 1, tzinfo=UTC)

#: file -> port key -> expected non-null values of the port_sample row (a subset), and the
#: cables (a_port, b_port) of the link batch.
EXPORTER_EXPECTED: dict[str, dict] = {
    "node_exporter_e2e_infiniband_collector.prom": {
        "ports": {
            "host1/i40iw0": {"phys_state": 5, "logical_state": 4, "speed_bps": 10 * 10**9},
            "host1/mlx4_0": {
                "speed_bps": 40 * 10**9,
                "rx_bytes": 18527668,
                "xmit_discards": 5,
                "xmit_wait_ticks": 2**32 - 1,
            },
            "host1/mlx4_0:2": {"speed_bps": 40 * 10**9, "rx_bytes": 0, "link_downed": 0},
        },
        "absent": {"host1/i40iw0": ("rx_bytes", "link_downed")},
        "links": [],
        # node_exporter reads sysfs: the legacy PortCounters widths, declared saturating.
        "bits": {"link_downed": 8, "xmit_discards": 16, "xmit_wait_ticks": 32},
    },
    "spiderpool_3615_node_exporter_infiniband_indented_paste.prom": {
        "ports": {
            "host1/mlx5_0": {"symbol_errors": 0},
            "host1/mlx5_1": {"logical_state": 4, "symbol_errors": 0},
        },
        "absent": {},
        "links": [],
        "bits": {"symbol_errors": 16},
    },
    "infiniband_exporter_switch_rcv_err_details.prom": {
        "ports": {
            "0x506b4b03005c2740/1": {"link_downed": 1, "xmit_discards": 20046, "rcv_switch_relay_errors": 7},
            "0x7cfe9003009ce5b0/1": {"speed_bps": 100 * 10**9, "xmit_wait_ticks": 22730501},
            "0x7cfe9003009ce5b0/2": {"rx_bytes": 156315219973512},
        },
        "absent": {"0x506b4b03005c2740/1": ("speed_bps",)},
        "links": [
            ("0x506b4b03005c2740/35", "0x506b4b0300cc02a6/1"),
            ("0x7cfe9003009ce5b0/1", "0x7cfe900300b07320/1"),
            ("0x7cfe9003009ce5b0/10", "0x7cfe9003003b4bde/1"),
            ("0x7cfe9003009ce5b0/11", "0x7cfe9003003b4b96/1"),
        ],
        "bits": {},  # perfquery -x: 64-bit extended counters, nothing narrow
    },
    "infiniband_exporter_hca_rcv_err_details.prom": {
        "ports": {
            "0x7cfe9003003b4b96/1": {"speed_bps": 100 * 10**9, "rx_bytes": 148901607811540},
            "0x7cfe9003003b4bde/1": {"tx_packets": 28825338611, "symbol_errors": 0},
        },
        "absent": {},
        "links": [
            ("0x7cfe9003003b4b96/1", "0x7cfe9003009ce5b0/11"),
            ("0x7cfe9003003b4bde/1", "0x7cfe9003009ce5b0/10"),
        ],
        "bits": {},
    },
    # ixgbe VF statistics through node_exporter's ethtool collector: the port is read, and none
    # of its names is a counter graywire knows (the ethtool name is in the HELP, spaces as "_").
    "node_exporter_issue3217_ethtool_ixgbe_vf_paste.prom": {
        "ports": {"host1/enp3s0f0": {}},
        "absent": {"host1/enp3s0f0": ("rx_bytes", "tx_bytes", "rx_packets")},
        "links": [],
        "bits": {},
    },
}
#: Exporter text with none of the families graywire reads (another ethtool exporter's
#: ``node_net_ethtool``, IF-MIB-like ``node_network_*``, guilbaults' ``infiniband_*_total``): no
#: batch, so the prometheus source fails the scrape naming what it looked for (never ok, empty).
EXPORTER_NOTHING = {
    "node_exporter_pr1832_showmax_ethtool_exporter_mlx5_paste.prom",
    "node_exporter_issue2125_netdev_grep_paste.prom",
    "guilbaults_infiniband_exporter_readme_example.prom",
}
EXPORTER_XFAIL: dict[str, str] = {}


def test_every_exporter_capture_has_expectations() -> None:
    assert len(EXPORTERS) >= 4
    assert {p.name for p in EXPORTERS} == set(EXPORTER_EXPECTED) | EXPORTER_NOTHING


@pytest.mark.parametrize("path", _params(EXPORTERS, EXPORTER_XFAIL), ids=ids(EXPORTERS))
def test_exporter_capture(path: Path) -> None:
    batches = parse_exposition(path.read_text(), node="host1", time=_TIME)
    if path.name in EXPORTER_NOTHING:
        assert batches == ()
        return
    want = EXPORTER_EXPECTED[path.name]
    assert batches, "no batch at all"
    rows = batches[0].to_pylist()
    by_key = {r["port"]: r for r in rows}
    assert set(want["ports"]) <= set(by_key)
    for key, values in want["ports"].items():
        for column, value in values.items():
            assert by_key[key][column] == value, (key, column)
    for key, columns in want["absent"].items():
        for column in columns:
            assert by_key[key].get(column) is None, (key, column)
    links = batches[1].to_pylist() if len(batches) > 1 else []
    assert sorted((r["a_port"], r["b_port"]) for r in links) == sorted(want["links"])
    declared = json.loads((batches[0].schema.metadata or {}).get(COUNTER_BITS_KEY, b"{}"))
    assert {c: declared.get(c) for c in want["bits"]} == want["bits"]
    if not want["bits"]:
        assert declared == {}
