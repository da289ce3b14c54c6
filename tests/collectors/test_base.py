"""The collector contract: scrape results and GUID -> port key resolution."""

from __future__ import annotations

import pyarrow as pa

from graywire.collectors.base import KeyResolver, ScrapeResult, failed
from graywire.fabricsim.topology import TopologySpec, build_fabric


def test_resolver_uses_port_guid_for_hcas_and_guid_plus_number_for_switches() -> None:
    fabric = build_fabric(TopologySpec(hosts=8))
    r = KeyResolver.from_fabric(fabric)
    assert r.resolve("0xB8CEF60300000003", 1) == "gpu-0000/mlx5_3"
    assert r.resolve("b8cef60300000003") == "gpu-0000/mlx5_3"  # an HCA GUID alone is enough
    leaf = fabric.keys.index("leaf-r2-000/p5")
    assert r.resolve(fabric.guids[leaf], 5) == "leaf-r2-000/p5"
    # A switch GUID without a port number is ambiguous: it keeps a key of its own.
    assert r.resolve(fabric.guids[leaf]) == f"{fabric.guids[leaf]}/1"
    assert r.resolve("0x2c903000abcd", 7) == "0x00002c903000abcd/7"


def test_failed_scrape_carries_a_readable_reason() -> None:
    res = failed("ufm", "https://ufm:443", TimeoutError("read timed out"), 5.0)
    assert (res.ok, res.error, res.samples, res.duration_s) == (False, "TimeoutError: read timed out", 0, 5.0)
    ok = ScrapeResult("agent", "h:9", True, (pa.record_batch({"x": [1, 2]}),))
    assert ok.samples == 2
