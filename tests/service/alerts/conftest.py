"""Shared helpers for the alerting tests: incidents from findings, a recording HTTP server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from detectors.findings import Finding
from tests.service.alerts.receiver import Recorder, serve_recorder

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def finding(
    entity: str = "gpu-0002/mlx5_5",
    status: str = "firing",
    t: float = 0,
    *,
    kind: str = "speed_downgrade",
    severity: str = "critical",
    **kwargs: Any,
) -> Finding:
    values: dict[str, Any] = {
        "summary": f"{kind} on {entity}: 400G, expected 800G",
        "detector": "link/1.0",
        "node": "gpu-0002",
        "port": entity,
        "score": 1.0,
    }
    values.update(kwargs)
    return Finding(
        kind=kind, entity=entity, status=status, time=T0 + timedelta(seconds=t), severity=severity, **values
    )


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with serve_recorder() as rec:
        yield rec
