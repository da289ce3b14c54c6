"""What every collector promises: one scrape of one target gives canonical batches or an error.

A collector never raises out of :meth:`Collector.scrape`: a target that times out, refuses,
returns garbage or half a payload gives ``ok=False`` with a message a person can act on, and
whatever it did parse is *not* used (half a payload must not look like ports that vanished or
links that slowed down). Retries, backoff, concurrency bounds and staleness are the caller's
policy (the service runner), so every collector behaves the same way under failure.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np
import pyarrow as pa

from graywire.collectors.keys import normalize_guid, port_key
from graywire.collectors.model import Fabric

T = TypeVar("T")

#: What a parser left out of a payload it otherwise used, by reason. Parsers add to one (they
#: stay pure: no metrics in collectors); the service counts it as
#: ``graywire_parse_skipped_total{source,reason}``.
Skips = Counter[str]

#: A line or record that is not in the source's format (kept: every other line).
MALFORMED_LINE = "malformed_line"
#: A number that fits no column (a negative or 65-bit counter, a width of 300 lanes): its cell is null.
OUT_OF_RANGE = "out_of_range"
#: A value that is not a number where one is due (``12abc``): its cell is null.
NOT_A_NUMBER = "not_a_number"
#: A record naming no usable port (a GUID that is not one, a port number that is not a number).
BAD_PORT = "bad_port"
#: A document nested deeper than any source writes (the parser's recursion bound).
TOO_DEEP = "too_deep"
#: Every reason a parser may give (the metric's ``reason`` label is bounded by this set).
SKIP_REASONS = frozenset({MALFORMED_LINE, OUT_OF_RANGE, NOT_A_NUMBER, BAD_PORT, TOO_DEEP})


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """The outcome of one scrape of one target."""

    source: str  # collector kind: "ufm", "snmp", "agent", "nccl", "fabricsim"
    target: str  # what was scraped: a URL, host:port, or a path
    ok: bool
    #: Canonical records (collectors/schemas.py): everything the scrape learned, views included
    #: (``port_capability``), so the caller routes by record and asks the collector nothing else.
    batches: tuple[pa.RecordBatch, ...] = ()
    error: str | None = None
    duration_s: float = 0.0
    #: Lines, records and values the parse left out of ``batches`` (reason -> count).
    skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return sum(b.num_rows for b in self.batches)


class Collector(Protocol):
    """One target of one source. ``scrape`` is async because it waits on the network;
    ``aclose`` lets go of what it holds open (connections, engines) when the service stops."""

    source: str
    target: str

    async def scrape(self) -> ScrapeResult: ...

    async def aclose(self) -> None: ...


#: Everything between ``://`` and the authority's last ``@`` (a password may contain ``@``).
_USERINFO = re.compile(r"(?<=://)[^/\s]*@")


def redact_url(text: str) -> str:
    """``text`` with the userinfo of every URL in it (``user:password@``) replaced by ``***@``.

    Targets and scrape errors are shown on the unauthenticated ``/metrics``, in
    ``/api/v1/sources`` and in logs; a password in a configured URL must reach none of them.
    """
    return _USERINFO.sub("***@", text)


def failed(source: str, target: str, error: str | BaseException, duration_s: float = 0.0) -> ScrapeResult:
    """A failed scrape with a readable reason (exception type and message), URLs redacted."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    else:
        text = error
    return ScrapeResult(source, redact_url(target), ok=False, error=redact_url(text), duration_s=duration_s)


#: The scrape a parse in a worker thread serves has given up on it (timed out, or cancelled with
#: its poll): set by :func:`guarded_scrape`, read by :func:`raise_if_abandoned` in the thread
#: (``asyncio.to_thread`` carries this context there).
_ABANDONED: ContextVar[threading.Event | None] = ContextVar("graywire_parse_abandoned", default=None)


class ScrapeAbandoned(Exception):
    """Raised inside a parse whose scrape gave up on it: nobody waits for its batches."""


def raise_if_abandoned() -> None:
    """Called between a long parse's stages, so a parse stops with the scrape that timed out
    instead of running on in its thread, holding its memory, while the next poll starts."""
    abandoned = _ABANDONED.get()
    if abandoned is not None and abandoned.is_set():
        raise ScrapeAbandoned("the scrape gave up waiting for this parse")


async def guarded_scrape(
    source: str,
    target: str,
    timeout_s: float,
    fetch: Callable[[], Awaitable[T]],
    parse: Callable[[T, Skips], tuple[pa.RecordBatch, ...]],
) -> ScrapeResult:
    """One scrape under the contract: ``fetch`` within ``timeout_s``, then ``parse`` in a worker
    thread (CPU work off the event loop); never raises.

    ``parse`` adds what it left out to the :data:`Skips` it is given; they reach the result.
    A timeout says how long it waited; any other error becomes a failed scrape with its reason,
    and nothing parsed before the failure is returned.
    """
    t0 = time.perf_counter()
    skipped: Skips = Counter()
    try:
        async with asyncio.timeout(timeout_s):
            payload = await fetch()
        abandoned = threading.Event()
        context = _ABANDONED.set(abandoned)
        try:
            batches = await asyncio.to_thread(parse, payload, skipped)
        except BaseException:  # cancelled (the poll's own timeout): the parse stops at its next stage
            abandoned.set()
            raise
        finally:
            _ABANDONED.reset(context)
    except TimeoutError:
        return failed(
            source, target, f"timed out after {timeout_s:g} s fetching {target}", time.perf_counter() - t0
        )
    except Exception as e:  # the contract: a scrape never raises
        return failed(source, target, e, time.perf_counter() - t0)
    return ScrapeResult(source, target, True, batches, None, time.perf_counter() - t0, dict(skipped))


@dataclass(slots=True)
class KeyResolver:
    """Turns what a source calls a port into the canonical port key.

    GUID-addressed sources (UFM, perfquery) name ports by (GUID, port number); the inventory
    maps those to ``node/label``. A GUID the inventory does not know keeps a stable key of its
    own, ``0x<guid>/<port number>``, so its data is still collected and can be joined later.
    """

    by_guid_port: dict[tuple[str, int], str] = field(default_factory=dict)
    by_guid: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_fabric(cls, fabric: Fabric | None) -> KeyResolver:
        """Index the fabric's GUIDs: (GUID, port number) where numbers are known, else GUID."""
        r = cls()
        if fabric is None:
            return r
        nums = fabric.port_num if fabric.port_num is not None else np.zeros(fabric.n_ports, np.int16)
        shared: set[str] = set()
        for i, g in enumerate(fabric.guids):
            if not g:
                continue
            key = fabric.keys[i]
            guid = normalize_guid(g)
            if nums[i]:
                r.by_guid_port[(guid, int(nums[i]))] = key
            if guid in r.by_guid:
                shared.add(guid)  # a switch: its ports share the node GUID
            r.by_guid[guid] = key
        for guid in shared:
            del r.by_guid[guid]
        return r

    def resolve(self, guid: str | int, port_num: int | None = None) -> str:
        g = normalize_guid(guid)
        if port_num is not None:
            hit = self.by_guid_port.get((g, int(port_num)))
            if hit:
                return hit
        hit = self.by_guid.get(g)
        if hit:
            return hit
        return port_key(g, port_num if port_num is not None else 1)
