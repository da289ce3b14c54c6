"""SNMP collector for Ethernet (RoCE) switches: IF-MIB counters and PFC MIBs over SNMP v2c/v3,
and the cables LLDP-MIB shows (``walk_lldp`` for discovery, ``lldp: true`` in the poll).

The configuration model imports without pysnmp (the service validates its YAML before any
source starts); the collector and its session load pysnmp on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graywire.collectors.snmp.config import DEFAULT_EXCLUDE, SnmpSourceConfig, SnmpTarget, SnmpV3User

if TYPE_CHECKING:
    from graywire.collectors.snmp.collector import SnmpCollector, build_collectors
    from graywire.collectors.snmp.lldp import LldpDiscovery, walk_lldp, walk_lldp_async
    from graywire.collectors.snmp.walk import SnmpSession

__all__ = [
    "DEFAULT_EXCLUDE",
    "LldpDiscovery",
    "SnmpCollector",
    "SnmpSession",
    "SnmpSourceConfig",
    "SnmpTarget",
    "SnmpV3User",
    "build_collectors",
    "walk_lldp",
    "walk_lldp_async",
]

_LAZY = {
    "SnmpCollector": "graywire.collectors.snmp.collector",
    "build_collectors": "graywire.collectors.snmp.collector",
    "SnmpSession": "graywire.collectors.snmp.walk",
    "LldpDiscovery": "graywire.collectors.snmp.lldp",
    "walk_lldp": "graywire.collectors.snmp.lldp",
    "walk_lldp_async": "graywire.collectors.snmp.lldp",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
