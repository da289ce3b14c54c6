"""NCCL timing sources: the Inspector plugin, the example profiler plugin, nccl-tests and NCCL_DEBUG logs.

- :mod:`graywire.collectors.nccl.inspector`: Inspector JSON lines -> nccl_timing (whole collective and
  per channel); its Prometheus textfile -> an aggregate table.
- :mod:`graywire.collectors.nccl.profiler`: example-plugin Chrome traces -> per-channel kernel times
  and per-peer proxy steps (read as columns by ``profiler_columns``, event by event by
  ``profiler_events`` where the columns cannot follow).
- :mod:`graywire.collectors.nccl.jsonlines`: JSON lines read into columns by pyarrow, the lines it
  cannot read handed back to the parsers' per-line paths.
- :mod:`graywire.collectors.nccl.nccl_tests`: nccl-tests output -> result table, summary, timing rows.
- :mod:`graywire.collectors.nccl.debug_log`: NCCL_DEBUG=INFO lines -> ranks, channels, NICs, and
  transport fallbacks.
- :mod:`graywire.collectors.nccl.tail`: the file collector (tailing a job's directory).
- :mod:`graywire.collectors.nccl.push`: Inspector records a job POSTs, parsed strictly.
- :mod:`graywire.collectors.nccl.config`: the ``nccl`` and ``nccl_ras`` source configurations.
"""

from graywire.collectors.nccl.config import (
    NcclRasSourceConfig,
    NcclSourceConfig,
    build_collectors,
    build_ras_collectors,
)
from graywire.collectors.nccl.push import parse_push
from graywire.collectors.nccl.tail import NcclFileCollector

__all__ = [
    "NcclFileCollector",
    "NcclRasSourceConfig",
    "NcclSourceConfig",
    "build_collectors",
    "build_ras_collectors",
    "parse_push",
]
