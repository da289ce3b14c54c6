"""GETBULK walks of several table columns at once, over pysnmp's asyncio API.

A switch's ifTable, ifXTable and PFC tables are walked together: one GETBULK carries every
column still in progress, so a 64-port switch costs a few round trips, not one per column.
Agents truncate bulk responses (to their message size or a var-bind limit), so a response is
read repetition by repetition and each column resumes from the last OID it got.

pysnmp engines are bound to the event loop they first ran on, so :class:`SnmpSession` keeps
one engine (and one concurrency bound) per loop, shared by every switch of a source: creating
an engine per scrape costs ~80 ms of CPU, which a fleet of switches at a 10 s poll cannot pay.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graywire.collectors.extras import missing_import

# pysnmp (and its pyasn1) is the optional extra graywire[snmp]; this is the one module that
# imports it, so a missing extra is one line wherever SNMP is first used.
try:
    from pyasn1.type import univ
    from pysnmp.hlapi.v3arch.asyncio import (
        USM_AUTH_HMAC96_MD5,
        USM_AUTH_HMAC96_SHA,
        USM_AUTH_HMAC128_SHA224,
        USM_AUTH_HMAC192_SHA256,
        USM_AUTH_HMAC256_SHA384,
        USM_AUTH_HMAC384_SHA512,
        USM_AUTH_NONE,
        USM_PRIV_CBC56_DES,
        USM_PRIV_CBC168_3DES,
        USM_PRIV_CFB128_AES,
        USM_PRIV_CFB192_AES,
        USM_PRIV_CFB256_AES,
        USM_PRIV_NONE,
        CommunityData,
        ContextData,
        ObjectIdentity,
        ObjectType,
        SnmpEngine,
        UdpTransportTarget,
        UsmUserData,
        bulk_cmd,
    )
    from pysnmp.proto.rfc1902 import ObjectName
    from pysnmp.smi import builder, view
except ImportError as e:
    raise missing_import("pysnmp", "SNMP (polling, LLDP discovery)", e) from None


from graywire.collectors.snmp.config import SnmpSourceConfig, SnmpTarget
from graywire.collectors.snmp.oids import Oid, oid_text

Value = int | bytes | tuple[int, ...] | None
#: column OID -> {instance suffix (table index): value}
Tables = dict[Oid, dict[Oid, Value]]

AUTH_PROTOCOLS = {
    "MD5": USM_AUTH_HMAC96_MD5,
    "SHA": USM_AUTH_HMAC96_SHA,
    "SHA224": USM_AUTH_HMAC128_SHA224,
    "SHA256": USM_AUTH_HMAC192_SHA256,
    "SHA384": USM_AUTH_HMAC256_SHA384,
    "SHA512": USM_AUTH_HMAC384_SHA512,
}
PRIV_PROTOCOLS = {
    "DES": USM_PRIV_CBC56_DES,
    "3DES": USM_PRIV_CBC168_3DES,
    "AES": USM_PRIV_CFB128_AES,
    "AES128": USM_PRIV_CFB128_AES,
    "AES192": USM_PRIV_CFB192_AES,
    "AES256": USM_PRIV_CFB256_AES,
}

#: A walk that needs more requests than this is an agent looping, not a switch.
MAX_REQUESTS = 10_000


class SnmpError(Exception):
    """The agent answered with an error, or not at all."""


def auth_data(cfg: SnmpSourceConfig, target: SnmpTarget) -> CommunityData | UsmUserData:
    """pysnmp credentials for one switch."""
    if cfg.version == "2c":
        community = target.community or cfg.community
        return CommunityData(community.get_secret_value(), mpModel=1)
    user = cfg.v3
    assert user is not None  # the config validator guarantees it
    auth_key = user.auth_key.get_secret_value() if user.auth_key else None
    priv_key = user.priv_key.get_secret_value() if user.priv_key else None
    return UsmUserData(
        user.user,
        authKey=auth_key,
        privKey=priv_key,
        authProtocol=AUTH_PROTOCOLS[user.auth_protocol] if auth_key else USM_AUTH_NONE,
        privProtocol=PRIV_PROTOCOLS[user.priv_protocol] if priv_key else USM_PRIV_NONE,
    )


_MIB_VIEW: view.MibViewController | None = None


def _shared_mib_view() -> view.MibViewController:
    """One MIB view for every engine: building it costs ~0.5 s, and it is only read."""
    global _MIB_VIEW
    if _MIB_VIEW is None:
        _MIB_VIEW = view.MibViewController(builder.MibBuilder())
    return _MIB_VIEW


@dataclass
class _LoopState:
    loop: weakref.ref[asyncio.AbstractEventLoop]
    engine: SnmpEngine
    semaphore: asyncio.Semaphore


class SnmpSession:
    """The pysnmp engine and the concurrency bound shared by the switches of one source."""

    def __init__(self, max_concurrency: int) -> None:
        self.max_concurrency = max_concurrency
        self._states: dict[int, _LoopState] = {}

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        self._prune()
        state = self._states.get(id(loop))
        if state is None or state.loop() is not loop:
            engine = SnmpEngine()
            engine.cache["mibViewController"] = _shared_mib_view()
            state = _LoopState(weakref.ref(loop), engine, asyncio.Semaphore(self.max_concurrency))
            self._states[id(loop)] = state
        return state

    def engine(self) -> SnmpEngine:
        return self._state().engine

    def semaphore(self) -> asyncio.Semaphore:
        return self._state().semaphore

    def _prune(self) -> None:
        """Close engines whose event loop has ended (their sockets would leak otherwise)."""
        for key, state in list(self._states.items()):
            loop = state.loop()
            if loop is None or loop.is_closed():
                del self._states[key]
                _close_engine(state.engine)

    def close(self) -> None:
        """Close every engine (call from the loop that used it, or after that loop ended)."""
        states, self._states = self._states, {}
        for state in states.values():
            _close_engine(state.engine)


def _close_engine(engine: SnmpEngine) -> None:
    # A dispatcher whose loop has already closed cannot be closed cleanly; its sockets go with it.
    with contextlib.suppress(Exception):
        engine.close_dispatcher()


def _py(value: Any) -> Value:
    """A pyasn1 value as plain Python: counters and integers as int, strings as bytes."""
    if isinstance(value, univ.Integer):  # Integer32, Counter32/64, Gauge32, TimeTicks
        return int(value)
    if isinstance(value, univ.OctetString):  # OCTET STRING, IpAddress, Opaque
        return bytes(value)
    if isinstance(value, univ.ObjectIdentifier):
        return tuple(value)
    return None


async def walk_columns(
    engine: SnmpEngine,
    auth: CommunityData | UsmUserData,
    transport: UdpTransportTarget,
    context: ContextData,
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
        request = [ObjectType(ObjectIdentity(ObjectName(cursor[c]))) for c in active]
        err_ind, err_status, err_index, varbinds = await bulk_cmd(
            engine, auth, transport, context, 0, reps, *request, lookupMib=False
        )
        if err_ind:
            raise SnmpError(str(err_ind))
        if err_status and int(err_status):
            at = oid_text(cursor[active[int(err_index) - 1]]) if 0 < int(err_index) <= len(active) else "?"
            status = err_status.prettyPrint() if hasattr(err_status, "prettyPrint") else str(err_status)
            raise SnmpError(f"agent error {status} at {at}")
        if not varbinds:
            raise SnmpError("empty GETBULK response")
        n = len(active)
        done: set[Oid] = set()
        for i, (name, value) in enumerate(varbinds):
            col = active[i % n]
            if col in done:
                continue
            o = tuple(name)
            if o[: len(col)] != col or isinstance(value, univ.Null):  # left the column, or endOfMibView
                done.add(col)
                continue
            if o <= cursor[col]:
                prev = oid_text(cursor[col])
                raise SnmpError(f"agent returned non-increasing OID {oid_text(o)} after {prev}")
            out[col][o[len(col) :]] = _py(value)
            cursor[col] = o
        active = [c for c in active if c not in done]
    raise SnmpError(f"walk did not end after {MAX_REQUESTS} requests")
