"""``graywire check``: the data-path checks once, on this node, for acceptance and Slurm prolog/epilog.

The same readers as the host agent (:mod:`graywire.collectors.host.gpu_topo`), judged without
peers: each GPU's nearest RDMA NIC must be at most ``max_level`` away (``PXB`` by default, the
farthest path NCCL uses GPUDirect RDMA over). Like gcm's health checks, the verdict is the exit
code: 0 ok (or skipped: no GPU), 1 a finding, 2 the check could not run. Pure: the CLI reads and
prints; :func:`judge` decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from graywire.collectors.host.gpu_topo import LEVEL_RANK, GpuNicReading

OK, FINDING, ERROR = 0, 1, 2


@dataclass(slots=True)
class CheckResult:
    status: str  # "ok", "finding", "skipped", "error"
    message: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"ok": OK, "skipped": OK, "finding": FINDING}.get(self.status, ERROR)


def judge(reading: GpuNicReading, max_level: str = "PXB", nics: str | None = None) -> CheckResult:
    """Each GPU's nearest NIC (among ``nics``, a regex on RDMA device names) against ``max_level``."""
    if max_level not in LEVEL_RANK:
        return CheckResult("error", f"--max-level must be one of {', '.join(LEVEL_RANK)}, not {max_level!r}")
    if reading.source is None:
        if reading.errors:
            return CheckResult("error", "; ".join(reading.errors))
        return CheckResult("skipped", "skipped: no GPU")
    pattern = re.compile(nics) if nics else None
    rows = [r for r in reading.rows if pattern is None or pattern.fullmatch(str(r["nic"]))]
    if not rows:
        return CheckResult(
            "finding", f"{reading.gpus} GPUs and no RDMA NIC{' matching ' + nics if nics else ''}"
        )
    limit = LEVEL_RANK[max_level]
    out: list[dict[str, Any]] = []
    for g in sorted({int(str(r["gpu"])) for r in rows}):
        mine = [r for r in rows if r["gpu"] == g]
        known = [r for r in mine if r["path"] is not None]
        if not known:
            out.append({"gpu": g, "gpu_numa": mine[0]["gpu_numa"], "nic": None, "nic_numa": None,
                        "path": None, "result": "unknown"})  # fmt: skip
            continue
        best = min(known, key=lambda r: LEVEL_RANK[str(r["path"])])
        far = LEVEL_RANK[str(best["path"])] > limit
        numa_apart = (
            best["gpu_numa"] is not None
            and best["nic_numa"] is not None
            and (best["gpu_numa"] != best["nic_numa"])
        )
        result = "ok"
        if far:
            result = f"farther than {max_level}"
        elif numa_apart:
            result = "NIC on another NUMA node"
        out.append({"gpu": g, "gpu_numa": best["gpu_numa"], "nic": best["nic"], "nic_numa": best["nic_numa"],
                    "path": best["path"], "result": result})  # fmt: skip
    bad = [r for r in out if r["result"] not in ("ok", "unknown")]
    unknown = [r for r in out if r["result"] == "unknown"]
    if bad:
        return CheckResult("finding", f"{len(bad)} of {len(out)} GPUs without a near RDMA NIC", out)
    if unknown and len(unknown) == len(out):
        return CheckResult("error", f"no GPU-NIC path could be read ({reading.source})", out)
    note = f" ({len(unknown)} unknown)" if unknown else ""
    return CheckResult("ok", f"{len(out)} GPUs, each with an RDMA NIC at most {max_level} away{note}", out)


def table(result: CheckResult, source: str | None) -> str:
    """Plain aligned text: one line per GPU, then the verdict."""
    head = ("GPU", "NUMA", "NIC", "NIC NUMA", "PATH", "RESULT")
    lines = []
    if result.rows:
        cells = [head] + [
            tuple(
                "-" if v is None else str(v)
                for v in (r["gpu"], r["gpu_numa"], r["nic"], r["nic_numa"], r["path"], r["result"])
            )
            for r in result.rows
        ]
        widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
        lines += ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells]
        lines.append(f"source: {source}")
    lines.append(f"{result.status}: {result.message}" if result.status != "skipped" else result.message)
    return "\n".join(lines)
