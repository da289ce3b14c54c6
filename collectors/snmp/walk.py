"""GETBULK walks of several table columns at once, over SNMP v2c or v3 on UDP.

A switch's ifTable, ifXTable and PFC tables are walked together: one GETBULK carries every
column still in progress, so a 64-port switch costs a few round trips, not one per column.
Agents truncate bulk responses (to their message size or a var-bind limit), so a response is
read repetition by repetition and each column resumes from the last OID it got.

The messages are encoded and decoded by :mod:`~graywire.collectors.snmp.asn1` and
:mod:`~graywire.collectors.snmp.usm` rather than by pysnmp's engine: pysnmp spent ~200 ms of
CPU on a 64-port walk (pyasn1 objects for every var-bind, a MIB lookup for every OID), ten
times the budget of a switch at a 10 s poll with hundreds of switches per source. pysnmp still
provides the SNMPv3 key localization and ciphers, and this module is the one that imports it,
so a missing ``graywire[snmp]`` extra is one line wherever SNMP is first used.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from graywire.collectors.extras import missing_import

try:
    from graywire.collectors.snmp import usm
except ImportError as e:
    raise missing_import("pysnmp", "SNMP (polling, LLDP discovery)", e) from None

from graywire.collectors.snmp import asn1
from graywire.collectors.snmp.asn1 import END_TAGS, GET, GETBULK, REPORT, RESPONSE, BerError, Pdu, Value
from graywire.collectors.snmp.config import SnmpSourceConfig, SnmpTarget
from graywire.collectors.snmp.oids import Oid, oid_text

__all__ = ["SnmpError", "SnmpSession", "Tables", "Value", "auth_data", "walk_columns"]

#: column OID -> {instance suffix (table index): value}
Tables = dict[Oid, dict[Oid, Value]]
#: One GETBULK: (OIDs to resume after, max-repetitions) -> the agent's response.
Bulk = Callable[[list[Oid], int], Awaitable[Pdu]]

#: A walk that needs more requests than this is an agent looping, not a switch.
MAX_REQUESTS = 10_000
TIMEOUT = "No SNMP response received before timeout"
#: error-status names (RFC 3416 3).
ERROR_STATUS = (
    "noError", "tooBig", "noSuchName", "badValue", "readOnly", "genErr", "noAccess", "wrongType",
    "wrongLength", "wrongEncoding", "wrongValue", "noCreation", "inconsistentValue",
    "resourceUnavailable", "commitFailed", "undoFailed", "authorizationError", "notWritable",
    "inconsistentName",
)  # fmt: skip

T = TypeVar("T")


class SnmpError(Exception):
    """The agent answered with an error, or not at all."""


@dataclass(frozen=True)
class Community:
    """SNMPv2c credentials."""

    community: bytes = field(repr=False)


Credentials = Community | usm.UsmUser


def auth_data(cfg: SnmpSourceConfig, target: SnmpTarget) -> Credentials:
    """The credentials for one switch."""
    if cfg.version == "2c":
        community = target.community or cfg.community
        return Community(community.get_secret_value().encode())
    user = cfg.v3
    assert user is not None  # the config validator guarantees it
    auth_key = user.auth_key.get_secret_value().encode() if user.auth_key else None
    priv_key = user.priv_key.get_secret_value().encode() if user.priv_key else None
    return usm.UsmUser(
        user.user.encode(),
        usm.AUTH_PROTOCOLS[user.auth_protocol] if auth_key else None,
        auth_key,
        usm.PRIV_PROTOCOLS[user.priv_protocol] if priv_key else None,
        priv_key,
    )


class SnmpSession:
    """What the switches of one source share: the concurrency bound, and for SNMPv3 each
    agent's engine id and clock and each user's keys (hashing a passphrase costs ~5 ms, a
    discovery one round trip: once per session, not per poll)."""

    def __init__(self, max_concurrency: int) -> None:
        self.max_concurrency = max_concurrency
        # asyncio primitives bind to the loop that first waits on them: one bound per loop.
        self._semaphores: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], asyncio.Semaphore]] = {}
        self._engines: dict[tuple[str, int], usm.Engine] = {}
        self._keys: dict[usm.UsmUser, usm.Keys] = {}
        self._ids = random.randrange(1, 2**30)

    def semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        self._semaphores = {k: v for k, v in self._semaphores.items() if v[0]() is not None}
        entry = self._semaphores.get(id(loop))
        if entry is None or entry[0]() is not loop:
            entry = (weakref.ref(loop), asyncio.Semaphore(self.max_concurrency))
            self._semaphores[id(loop)] = entry
        return entry[1]

    def next_id(self) -> int:
        """Request and message ids: unique within the session, positive 31-bit."""
        self._ids = self._ids % (2**31 - 1) + 1
        return self._ids

    def keys(self, user: usm.UsmUser) -> usm.Keys:
        keys = self._keys.get(user)
        if keys is None:
            keys = self._keys[user] = usm.Keys(user)
        return keys

    @contextlib.asynccontextmanager
    async def open(
        self, host: str, port: int, credentials: Credentials, context: str, timeout_s: float
    ) -> AsyncIterator[Agent]:
        """A UDP endpoint talking to one agent, for one walk."""
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_DGRAM)
        except OSError as e:
            raise SnmpError(f"bad IPv4/UDP transport address {host}:{port}: {e.strerror or e}") from None
        addr = infos[0][4]
        transport, protocol = await loop.create_datagram_endpoint(_Datagrams, family=socket.AF_INET)
        try:
            yield Agent(self, transport, protocol, addr, credentials, context.encode(), timeout_s)
        finally:
            transport.close()

    def close(self) -> None:
        """Forget the SNMPv3 engines and keys (sockets live only as long as a walk)."""
        self._engines.clear()
        self._keys.clear()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.queue.put_nowait(data)

    def error_received(self, exc: Exception) -> None:
        """An ICMP error (port unreachable): the request times out as a lost datagram would."""


class Agent:
    """One agent, one walk: sends GETBULKs and matches their answers by id."""

    def __init__(
        self,
        session: SnmpSession,
        transport: asyncio.DatagramTransport,
        protocol: _Datagrams,
        addr: tuple[str, int],
        credentials: Credentials,
        context: bytes,
        timeout_s: float,
    ) -> None:
        self.session = session
        self.transport = transport
        self.queue = protocol.queue
        self.addr = addr
        self.credentials = credentials
        self.context = context
        self.timeout_s = timeout_s

    async def bulk(self, oids: list[Oid], max_repetitions: int) -> Pdu:
        def body(request_id: int) -> bytes:
            return asn1.pdu(GETBULK, request_id, 0, max_repetitions, oids)

        if isinstance(self.credentials, Community):
            return await self._v2c(self.credentials.community, body)
        return await self._v3(self.credentials, body)

    async def _exchange(self, message: bytes, accept: Callable[[bytes], T | None]) -> T:
        """Send one request and wait for the datagram ``accept`` takes as its answer; others
        (late answers to an earlier request, garbage, forgeries) are dropped."""
        loop = asyncio.get_running_loop()
        self.transport.sendto(message, self.addr)
        deadline = loop.time() + self.timeout_s
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    data = await self.queue.get()
            except TimeoutError:
                raise SnmpError(TIMEOUT) from None
            try:
                answer = accept(data)
            except (BerError, usm.UsmError):
                continue
            if answer is not None:
                return answer

    async def _v2c(self, community: bytes, body: Callable[[int], bytes]) -> Pdu:
        request_id = self.session.next_id()

        def accept(data: bytes) -> Pdu | None:
            _, pdu = asn1.decode_v2c(data)
            return pdu if pdu.tag == RESPONSE and pdu.request_id == request_id else None

        return await self._exchange(asn1.v2c_message(community, body(request_id)), accept)

    async def _v3(self, user: usm.UsmUser, body: Callable[[int], bytes]) -> Pdu:
        session, loop = self.session, asyncio.get_running_loop()
        keys = session.keys(user)
        where = (self.addr[0], self.addr[1])
        engine = session._engines.get(where)
        if engine is None:
            engine = await self._discover(where)
        for attempt in range(2):
            msg_id, request_id = session.next_id(), session.next_id()
            try:
                message = usm.encode(msg_id, keys, engine, self.context, body(request_id), loop.time())
            except usm.UsmError as e:
                raise SnmpError(str(e)) from None

            def accept(data: bytes, msg_id: int = msg_id, request_id: int = request_id) -> usm.Message | None:
                m = usm.decode(data, keys, loop.time())
                if m.msg_id != msg_id:
                    return None
                secured = m.flags & (usm.AUTH_FLAG | usm.PRIV_FLAG)
                if m.pdu.tag == RESPONSE and (secured != user.flags or m.pdu.request_id != request_id):
                    return None  # a response must be as secured as its request
                return m

            m = await self._exchange(message, accept)
            if m.pdu.tag == REPORT:
                oid = m.pdu.varbinds[0][0] if m.pdu.varbinds else ()
                if attempt == 0 and oid == usm.NOT_IN_TIME_WINDOW and m.flags & usm.AUTH_FLAG:
                    engine = session._engines[where] = m.engine  # the agent's clock, authenticated
                    continue
                if attempt == 0 and oid == usm.UNKNOWN_ENGINE_ID:  # the agent was replaced
                    engine = await self._discover(where)
                    continue
                raise SnmpError(usm.REPORTS.get(oid, f"Remote SNMP engine reported {oid_text(oid)}"))
            if m.flags & usm.AUTH_FLAG:
                session._engines[where] = m.engine
            return m.pdu
        raise SnmpError(usm.REPORTS[usm.NOT_IN_TIME_WINDOW])

    async def _discover(self, where: tuple[str, int]) -> usm.Engine:
        """Learn the agent's engine id and clock from the report an empty request gets
        (RFC 3414 4)."""
        session, loop = self.session, asyncio.get_running_loop()
        msg_id = session.next_id()
        request = usm.encode(msg_id, None, usm.Engine(), b"", asn1.pdu(GET, session.next_id(), 0, 0, []), 0.0)

        def accept(data: bytes) -> usm.Message | None:
            m = usm.decode(data, None, loop.time())
            return m if m.msg_id == msg_id else None

        m = await self._exchange(request, accept)
        if not m.engine.engine_id:
            raise SnmpError("agent reported no SNMP engine ID")
        session._engines[where] = m.engine
        return m.engine


async def walk_columns(
    bulk: Bulk,
    columns: Sequence[Oid],
    *,
    max_repetitions: int,
    max_varbinds: int,
) -> Tables:
    """Walk every column to its end; returns each column's values by instance suffix.

    Raises :class:`SnmpError` on a timeout, an error status, or an agent whose OIDs do not
    increase (which would make the walk loop forever).
    """
    out: Tables = {c: {} for c in columns}
    cursor: dict[Oid, Oid] = {c: c for c in columns}
    active = list(dict.fromkeys(columns))
    for _ in range(MAX_REQUESTS):
        if not active:
            return out
        reps = max(1, min(max_repetitions, max_varbinds // len(active)))
        pdu = await bulk([cursor[c] for c in active], reps)
        if pdu.error_status:
            i, code = pdu.error_index, pdu.error_status
            at = oid_text(cursor[active[i - 1]]) if 0 < i <= len(active) else "?"
            raise SnmpError(
                f"agent error {ERROR_STATUS[code] if 0 < code < len(ERROR_STATUS) else code} at {at}"
            )
        if not pdu.varbinds:
            raise SnmpError("empty GETBULK response")
        n = len(active)
        done: set[Oid] = set()
        for i, (o, tag, value) in enumerate(pdu.varbinds):
            col = active[i % n]
            if col in done:
                continue
            if o[: len(col)] != col or tag in END_TAGS:  # left the column, or endOfMibView
                done.add(col)
                continue
            if o <= cursor[col]:
                prev = oid_text(cursor[col])
                raise SnmpError(f"agent returned non-increasing OID {oid_text(o)} after {prev}")
            out[col][o[len(col) :]] = value
            cursor[col] = o
        active = [c for c in active if c not in done]
    raise SnmpError(f"walk did not end after {MAX_REQUESTS} requests")
