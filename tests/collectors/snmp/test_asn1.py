"""The BER codec of SNMP messages, against pysnmp's (pyasn1) encoder and decoder.

Every value type SNMPv2 defines, the awkward OIDs (arcs of one, two and five bytes, the 2.x
arc), and bytes that are no message at all: those raise BerError, nothing else.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api
from pysnmp.proto.rfc1902 import (
    Counter32,
    Counter64,
    Gauge32,
    Integer32,
    IpAddress,
    ObjectName,
    OctetString,
    Opaque,
    TimeTicks,
)
from pysnmp.proto.rfc1905 import EndOfMibView, NoSuchInstance, NoSuchObject

from graywire.collectors.snmp import asn1
from tests.collectors.snmp.conftest import pysnmp_response
from tests.strategies import PROPERTY

V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]

VALUES: list[tuple[Any, int, asn1.Value]] = [
    (Integer32(-2147483648), asn1.INTEGER, -2147483648),
    (Integer32(0), asn1.INTEGER, 0),
    (Integer32(2147483647), asn1.INTEGER, 2147483647),
    (OctetString(b""), asn1.OCTET_STRING, b""),
    (OctetString(b"Ethernet1/1"), asn1.OCTET_STRING, b"Ethernet1/1"),
    (OctetString(bytes(range(256)) * 3), asn1.OCTET_STRING, bytes(range(256)) * 3),  # long form length
    (ObjectName((1, 3, 6, 1, 4, 1, 30065)), asn1.OBJECT_ID, (1, 3, 6, 1, 4, 1, 30065)),
    (IpAddress("10.0.0.255"), asn1.IP_ADDRESS, bytes((10, 0, 0, 255))),
    (Counter32(0), asn1.COUNTER32, 0),
    (Counter32(2**31), asn1.COUNTER32, 2**31),  # high bit set: five bytes on the wire
    (Counter32(2**32 - 1), asn1.COUNTER32, 2**32 - 1),
    (Gauge32(4294967295), asn1.GAUGE32, 4294967295),
    (TimeTicks(123456), asn1.TIMETICKS, 123456),
    (Opaque(b"\x9f\x78\x04"), asn1.OPAQUE, b"\x9f\x78\x04"),
    (Counter64(2**63), asn1.COUNTER64, 2**63),
    (Counter64(2**64 - 1), asn1.COUNTER64, 2**64 - 1),
    (NoSuchObject(), asn1.NO_SUCH_OBJECT, None),
    (NoSuchInstance(), asn1.NO_SUCH_INSTANCE, None),
    (EndOfMibView(), asn1.END_OF_MIB_VIEW, None),
]
OIDS = [
    (1, 3, 6, 1, 2, 1, 2, 2, 1, 10, 1),
    (1, 3, 6, 1, 2, 1, 2, 2, 1, 10, 127),
    (1, 3, 6, 1, 2, 1, 2, 2, 1, 10, 128),  # two-byte arcs from here
    (1, 3, 6, 1, 2, 1, 2, 2, 1, 10, 50001),
    (1, 3, 6, 1, 4, 1, 30065, 3, 11, 1, 1, 1, 3, 2**32 - 1, 7),
    (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1, 9, 0, 1, 1),
    (0, 0),
    (2, 100, 3),  # first byte 180: arc 2 and 100
]


@pytest.mark.parametrize(("value", "tag", "expected"), VALUES, ids=[type(v[0]).__name__ for v in VALUES])
def test_every_value_type_decodes_as_pysnmp_encodes_it(value: Any, tag: int, expected: asn1.Value) -> None:
    pdu = pysnmp_response([((1, 3, 6, 1, 2, 1, 1, 5, 0), value)])
    assert pdu.varbinds == [((1, 3, 6, 1, 2, 1, 1, 5, 0), tag, expected)]


@pytest.mark.parametrize("oid", OIDS)
def test_oids_round_trip_through_pysnmp(oid: tuple[int, ...]) -> None:
    ours = asn1.object_id(oid)
    assert ours == encoder.encode(ObjectName(oid))
    assert asn1.decode_oid(ours[2:]) == oid
    pdu = pysnmp_response([(oid, OctetString(b"x"))])
    assert pdu.varbinds[0][0] == oid


def test_a_getbulk_request_reads_back_in_pysnmp() -> None:
    oids = [OIDS[0], OIDS[3], OIDS[5]]
    message = asn1.v2c_message(b"s3cret", asn1.pdu(asn1.GETBULK, 2**31 - 1, 0, 25, oids))
    msg, rest = decoder.decode(message, asn1Spec=V2C.Message())
    assert not rest
    pdu = V2C.apiMessage.get_pdu(msg)
    assert bytes(V2C.apiMessage.get_community(msg)) == b"s3cret"
    assert int(V2C.apiBulkPDU.get_request_id(pdu)) == 2**31 - 1
    assert int(V2C.apiBulkPDU.get_max_repetitions(pdu)) == 25
    assert int(V2C.apiBulkPDU.get_non_repeaters(pdu)) == 0
    assert [tuple(o) for o, _ in V2C.apiBulkPDU.get_varbinds(pdu)] == oids


def test_error_status_and_index_are_read() -> None:
    pdu = pysnmp_response([(OIDS[0], Integer32(1))], error_status=5, error_index=1)
    assert (pdu.tag, pdu.request_id, pdu.error_status, pdu.error_index) == (asn1.RESPONSE, 7, 5, 1)


VALID = asn1.v2c_message(b"c", asn1.pdu(asn1.RESPONSE, 1, 0, 0, OIDS))


@pytest.mark.parametrize(
    "data",
    [b"", b"\x30", b"\x30\x84\xff\xff\xff\xff", b"\x30\x80\x00\x00", b"\x04\x01x", VALID[:-1], VALID[:10]],
    ids=["empty", "tag only", "4 GB length", "indefinite length", "not a sequence", "cut short", "header"],
)
def test_malformed_messages_raise_ber_error(data: bytes) -> None:
    with pytest.raises(asn1.BerError):
        asn1.decode_v2c(data)


def test_garbage_raises_ber_error_only() -> None:
    @PROPERTY
    @given(st.binary(max_size=200) | st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)))
    def check(data: bytes | tuple[int, int]) -> None:
        if isinstance(data, tuple):  # one byte of a valid message changed
            at, b = data
            data = VALID[:at] + bytes((b,)) + VALID[at + 1 :]
        with contextlib.suppress(asn1.BerError):
            asn1.decode_v2c(data)

    check()


def test_unencodable_oids_are_refused() -> None:
    for oid in [(1,), (3, 1), (1, 40), (1, 3, -1)]:
        with pytest.raises(asn1.BerError):
            asn1.object_id(oid)
