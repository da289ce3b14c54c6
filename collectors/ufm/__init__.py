"""NVIDIA UFM: REST (port state, speed, width, links) and UFM Telemetry (counters) collectors."""

from graywire.collectors.ufm.config import UfmSourceConfig, build_collectors
from graywire.collectors.ufm.http import UfmHttpError, UfmHttpSettings
from graywire.collectors.ufm.ports import PortKeys, SpellingCache
from graywire.collectors.ufm.rest import (
    LANE_GBPS,
    UfmRestCollector,
    expected_from_capabilities,
    parse_links,
    parse_ports,
    port_speed_bps,
)
from graywire.collectors.ufm.telemetry import (
    TelemetryParseError,
    UfmTelemetryCollector,
    parse_csv,
    parse_prometheus,
    parse_tfs_json,
    sniff_format,
)

__all__ = [
    "LANE_GBPS",
    "PortKeys",
    "SpellingCache",
    "TelemetryParseError",
    "UfmHttpError",
    "UfmHttpSettings",
    "UfmRestCollector",
    "UfmSourceConfig",
    "UfmTelemetryCollector",
    "build_collectors",
    "expected_from_capabilities",
    "parse_csv",
    "parse_links",
    "parse_ports",
    "parse_prometheus",
    "parse_tfs_json",
    "port_speed_bps",
    "sniff_format",
]
