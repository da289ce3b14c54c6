"""The multi-column GETBULK walker on agent behaviour snmpsim cannot produce.

snmpsim truncates bulk responses at whole repetitions and always answers in order; real agents
also cut a response in the middle of a repetition (at their message size) and some misbehave.
This stand-in agent answers a GETBULK from a sorted OID list by the GETBULK rules of RFC 3416
(4.2.3); pysnmp encodes its responses and graywire's decoder reads them, as on the wire.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

import pytest
from pysnmp.proto.rfc1902 import Counter64, ObjectName, OctetString
from pysnmp.proto.rfc1905 import EndOfMibView

import graywire.collectors.snmp.walk as walk
from graywire.collectors.snmp import oids as O
from graywire.collectors.snmp.asn1 import Pdu
from tests.collectors.snmp.conftest import pysnmp_response

Agent = dict[tuple[int, ...], Any]


class FakeBulkAgent:
    def __init__(self, data: Agent, cap: int, timeout: bool = False, backwards_at: int | None = None) -> None:
        self.oids = sorted(data)
        self.data = data
        self.cap = cap  # var-binds per response, cut anywhere
        self.timeout = timeout
        self.backwards_at = backwards_at
        self.requests: list[tuple[int, int]] = []  # (repeaters, max-repetitions)

    async def __call__(self, request: list[tuple[int, ...]], reps: int) -> Pdu:
        self.requests.append((len(request), reps))
        if self.timeout:
            raise walk.SnmpError(walk.TIMEOUT)
        firsts = [bisect.bisect_right(self.oids, start) for start in request]
        out: list[tuple[ObjectName, Any]] = []
        for r in range(reps):  # repetition-major, one successor per repeater (RFC 3416 4.2.3)
            for start, i in zip(request, firsts, strict=True):
                if i + r >= len(self.oids):
                    out.append((ObjectName(start), EndOfMibView()))
                    continue
                o = self.oids[i + r]
                if self.backwards_at is not None and len(self.requests) >= self.backwards_at:
                    o = self.oids[i - 1]  # a broken agent: answers with the OID it was asked after
                out.append((ObjectName(o), self.data[o]))
        return pysnmp_response(out[: self.cap])


def agent_data(ports: int) -> Agent:
    data: Agent = {(*O.SYS_NAME, 0): OctetString(b"sw")}
    for i in range(1, ports + 1):
        data[(*O.IF_DESCR, i)] = OctetString(f"Ethernet{i}".encode())
        data[(*O.IF_HC_IN_OCTETS, i)] = Counter64(2**40 + i)
        data[(*O.ARISTA_PFC_REQUESTS, i, 3)] = Counter64(i)
    return data


def run(agent: FakeBulkAgent, cols: list[O.Oid], **kw: int) -> walk.Tables:
    return asyncio.run(walk.walk_columns(agent, cols, **kw))


COLUMNS = [O.SYS_NAME, O.IF_DESCR, O.IF_HC_IN_OCTETS, O.ARISTA_PFC_REQUESTS, O.IEEE_PFC_REQUESTS]


@pytest.mark.parametrize("cap", [1, 7, 10, 64, 10_000])
def test_responses_cut_anywhere_still_give_every_value_once(cap: int) -> None:
    agent = FakeBulkAgent(agent_data(30), cap=cap)
    t = run(agent, COLUMNS, max_repetitions=25, max_varbinds=50)
    assert t[O.SYS_NAME] == {(0,): b"sw"}
    assert t[O.IF_DESCR] == {(i,): f"Ethernet{i}".encode() for i in range(1, 31)}
    assert t[O.IF_HC_IN_OCTETS] == {(i,): 2**40 + i for i in range(1, 31)}
    assert t[O.ARISTA_PFC_REQUESTS] == {(i, 3): i for i in range(1, 31)}
    assert t[O.IEEE_PFC_REQUESTS] == {}  # past the end of the agent's MIB: endOfMibView
    # Repetitions are capped so one request asks for at most max_varbinds values.
    assert all(n * reps <= 50 or reps == 1 for n, reps in agent.requests)


def test_agent_errors_and_loops_raise() -> None:
    timeout = FakeBulkAgent(agent_data(3), cap=64, timeout=True)
    with pytest.raises(walk.SnmpError, match="No SNMP response received before timeout"):
        run(timeout, COLUMNS, max_repetitions=10, max_varbinds=64)
    looping = FakeBulkAgent(agent_data(30), cap=64, backwards_at=2)
    with pytest.raises(walk.SnmpError, match="non-increasing OID"):
        run(looping, [O.IF_DESCR], max_repetitions=5, max_varbinds=64)
