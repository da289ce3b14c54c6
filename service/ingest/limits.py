"""Per-token push rate limits, and the count of pushes refused whole.

A token bucket per token that pushes (``ingest.rate_limit``, or the token's own): one bucket
for requests, checked before the body is read so a flood costs no parsing, and one for rows
when ``rows_per_second`` is set, checked once the rows are known. ``limits`` offers fixed and
moving windows but no bucket with a steady rate and a separate burst, nor the wait until the
next token, which ``Retry-After`` needs: this is the bucket, in a few lines.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from graywire.service.config import RateLimit


@dataclass
class TokenBucket:
    """``rate`` tokens a second, up to ``capacity``; starts full."""

    rate: float
    capacity: float
    tokens: float
    updated: float

    def take(self, cost: float, now: float) -> float:
        """Take ``cost`` tokens: 0 if they were there (and are now taken), else the seconds until
        they will be (nothing is taken then)."""
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) / self.rate


BucketKey = tuple[str, float, float]


class RateLimiter:
    """Buckets by token name (and limit), made on a token's first push: as many as tokens."""

    def __init__(self, default: RateLimit | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.default = default
        self._clock = clock
        self._lock = threading.Lock()
        self._requests: dict[BucketKey, TokenBucket] = {}
        self._rows: dict[BucketKey, TokenBucket] = {}

    def _bucket(
        self, buckets: dict[BucketKey, TokenBucket], name: str, rate: float, capacity: float
    ) -> TokenBucket:
        b = buckets.get((name, rate, capacity))
        if b is None:
            b = buckets[(name, rate, capacity)] = TokenBucket(rate, capacity, capacity, self._clock())
        return b

    def request(self, name: str, limit: RateLimit | None) -> float:
        """One request of token ``name``: 0 to go on, else the seconds to wait."""
        limit = limit or self.default
        if limit is None:
            return 0.0
        with self._lock:
            b = self._bucket(self._requests, name, limit.requests_per_second, float(limit.burst))
            return b.take(1, self._clock())

    def rows(self, name: str, limit: RateLimit | None, n: int) -> float:
        """``n`` rows of token ``name``: 0 to go on, else the seconds to wait; ``math.inf`` if
        ``n`` is more than the bucket holds (the push must be split)."""
        limit = limit or self.default
        capacity = limit.row_capacity if limit is not None else None
        if limit is None or capacity is None or limit.rows_per_second is None:
            return 0.0
        if n > capacity:
            return math.inf
        with self._lock:
            b = self._bucket(self._rows, name, limit.rows_per_second, capacity)
            return b.take(n, self._clock())


def retry_after(seconds: float) -> str:
    """Whole seconds, at least 1: ``Retry-After`` takes no fractions, and 0 invites a retry storm."""
    return str(max(1, math.ceil(seconds)))


class RefusedPushes(Collector):
    """``graywire_ingest_refused_pushes_total{token,reason}``: pushes refused whole, counted even
    when their rows were never read (rate limited before the body, a job out of scope)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, token: str, reason: str) -> None:
        with self._lock:
            self.counts[(token, reason)] += 1

    def collect(self) -> Iterator[CounterMetricFamily]:
        c = CounterMetricFamily(
            "graywire_ingest_refused_pushes",
            "NCCL pushes refused whole, by token and reason (rate_limited, job_out_of_scope, "
            "host_out_of_scope, scheduler_unavailable)",
            labels=["token", "reason"],
        )
        with self._lock:
            items = sorted(self.counts.items())
        for (token, reason), n in items:
            c.add_metric([token, reason], n)
        yield c
