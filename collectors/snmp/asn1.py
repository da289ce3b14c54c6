"""SNMP messages as bytes: the GETBULK requests a walk sends and the responses it reads.

RFC 3416 PDUs inside RFC 1901 (v2c) and RFC 3412 (v3) messages, in the BER subset RFC 3417
allows (definite lengths, primitive encodings). Written here rather than through pyasn1 because
a 64-port switch answers with about a thousand var-binds per poll, and pyasn1 spends ~170 us of
CPU on each (its objects are built and checked one by one); this decoder slices the datagram
directly, ~2 us a var-bind. Anything malformed raises :class:`BerError`, never an IndexError.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

Oid = tuple[int, ...]
#: A var-bind value as plain Python: integers and counters as int, strings as bytes, OIDs as
#: tuples; None for NULL and the exceptions (noSuchObject, noSuchInstance, endOfMibView).
Value = int | bytes | tuple[int, ...] | None

INTEGER, OCTET_STRING, NULL, OBJECT_ID, SEQUENCE = 0x02, 0x04, 0x05, 0x06, 0x30
IP_ADDRESS, COUNTER32, GAUGE32, TIMETICKS, OPAQUE, COUNTER64 = 0x40, 0x41, 0x42, 0x43, 0x44, 0x46
NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW = 0x80, 0x81, 0x82
GET, RESPONSE, GETBULK, REPORT = 0xA0, 0xA2, 0xA5, 0xA8

_INTEGERS = frozenset((INTEGER, COUNTER32, GAUGE32, TIMETICKS, COUNTER64))
_STRINGS = frozenset((OCTET_STRING, IP_ADDRESS, OPAQUE))
#: Tags whose var-bind ends a column: NULL and the three exceptions (RFC 3416 4.2.3).
END_TAGS = frozenset((NULL, NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW))


class BerError(ValueError):
    """The bytes are not a well-formed SNMP message."""


class Pdu(NamedTuple):
    tag: int
    request_id: int
    error_status: int
    error_index: int
    #: (OID, value tag, value); the tag tells a column's end (:data:`END_TAGS`) from a value.
    varbinds: list[tuple[Oid, int, Value]]


# --- encoding -------------------------------------------------------------------------------


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def tlv(tag: int, content: bytes) -> bytes:
    return bytes((tag,)) + _length(len(content)) + content


def integer(value: int) -> bytes:
    return tlv(INTEGER, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))


def octets(value: bytes) -> bytes:
    return tlv(OCTET_STRING, value)


def sequence(*parts: bytes) -> bytes:
    return tlv(SEQUENCE, b"".join(parts))


@functools.lru_cache(maxsize=4096)
def _arc(arc: int) -> bytes:
    """One OID arc in base 128, high bit set on all but the last byte (X.690 8.19.2)."""
    out = bytearray((arc & 0x7F,))
    arc >>= 7
    while arc:
        out.append((arc & 0x7F) | 0x80)
        arc >>= 7
    return bytes(out[::-1])


def object_id(oid: Oid) -> bytes:
    if len(oid) < 2 or oid[0] > 2 or (oid[0] < 2 and oid[1] > 39) or min(oid) < 0:
        raise BerError(f"cannot encode OID {oid!r}")
    first, rest = oid[0] * 40 + oid[1], oid[2:]
    if first < 0x80 and (not rest or max(rest) < 0x80):  # one byte an arc: the common case
        return tlv(OBJECT_ID, bytes((first, *rest)))
    return tlv(OBJECT_ID, b"".join(map(_arc, (first, *rest))))


_NULL = b"\x05\x00"


def pdu(tag: int, request_id: int, non_repeaters: int, max_repetitions: int, oids: Sequence[Oid]) -> bytes:
    """A request PDU (GetBulk's non-repeaters and max-repetitions sit where Get's error fields do)."""
    varbinds = b"".join(sequence(object_id(o), _NULL) for o in oids)
    return tlv(
        tag, integer(request_id) + integer(non_repeaters) + integer(max_repetitions) + tlv(SEQUENCE, varbinds)
    )


def v2c_message(community: bytes, body: bytes) -> bytes:
    return sequence(integer(1), octets(community), body)


# --- decoding -------------------------------------------------------------------------------


def header(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the TLV at ``pos``."""
    if pos + 2 > end:
        raise BerError("truncated")
    tag = buf[pos]
    n = buf[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0 or k > 4 or pos + k > end:
            raise BerError("bad length")
        n = int.from_bytes(buf[pos : pos + k], "big")
        pos += k
    if pos + n > end:
        raise BerError("truncated")
    return tag, pos, pos + n


def expect(buf: bytes, pos: int, end: int, tag: int) -> tuple[int, int]:
    t, start, stop = header(buf, pos, end)
    if t != tag:
        raise BerError(f"expected tag 0x{tag:02x}, got 0x{t:02x}")
    return start, stop


def read_int(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, next position) of an INTEGER."""
    start, stop = expect(buf, pos, end, INTEGER)
    if start == stop:
        raise BerError("empty INTEGER")
    return int.from_bytes(buf[start:stop], "big", signed=True), stop


def read_octets(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    start, stop = expect(buf, pos, end, OCTET_STRING)
    return buf[start:stop], stop


def decode_oid(content: bytes) -> Oid:
    if not content:
        raise BerError("empty OID")
    if content.isascii():  # every arc below 128: one byte each (the common case, C speed)
        first = content[0]
    else:
        arcs: list[int] = []
        arc = 0
        for b in content:
            arc = (arc << 7) | (b & 0x7F)
            if not b & 0x80:
                arcs.append(arc)
                arc = 0
        if content[-1] & 0x80:
            raise BerError("truncated OID")
        first = arcs[0]
        rest: Oid = tuple(arcs[1:])
        return ((first // 40, first % 40) if first < 80 else (2, first - 80)) + rest
    return ((first // 40, first % 40) if first < 80 else (2, first - 80)) + tuple(content[1:])


def decode_pdu(buf: bytes, pos: int, end: int) -> Pdu:
    """A Response or Report PDU: its fields and every var-bind."""
    tag, pos, end = header(buf, pos, end)
    request_id, pos = read_int(buf, pos, end)
    error_status, pos = read_int(buf, pos, end)
    error_index, pos = read_int(buf, pos, end)
    pos, end = expect(buf, pos, end, SEQUENCE)
    out: list[tuple[Oid, int, Value]] = []
    append = out.append
    try:
        while pos < end:
            # Once per var-bind, the hot path of a walk: short-form lengths (under 128 bytes,
            # every OID and nearly every value) are read inline, long ones by header().
            if buf[pos] != SEQUENCE:
                raise BerError("var-bind is not a SEQUENCE")
            n = buf[pos + 1]
            if n < 0x80:
                pos, vb_end = pos + 2, pos + 2 + n
                if vb_end > end:
                    raise BerError("truncated")
            else:
                _, pos, vb_end = header(buf, pos, end)
            if buf[pos] != OBJECT_ID:
                raise BerError("var-bind name is not an OID")
            n = buf[pos + 1]
            if n < 0x80:
                start, stop = pos + 2, pos + 2 + n
            else:
                _, start, stop = header(buf, pos, vb_end)
            if stop > vb_end:
                raise BerError("truncated")
            oid = decode_oid(buf[start:stop])
            t = buf[stop]
            n = buf[stop + 1]
            if n < 0x80:
                start, stop = stop + 2, stop + 2 + n
            else:
                t, start, stop = header(buf, stop, vb_end)
            if stop > vb_end:
                raise BerError("truncated")
            if t in _INTEGERS:
                if start == stop:
                    raise BerError("empty INTEGER")
                value: Value = int.from_bytes(buf[start:stop], "big", signed=True)
            elif t in _STRINGS:
                value = buf[start:stop]
            elif t == OBJECT_ID:
                value = decode_oid(buf[start:stop])
            else:  # NULL, the exceptions, and types SNMPv2 does not define: no value
                value = None
            append((oid, t, value))
            pos = vb_end
    except IndexError:  # a length that points past the datagram
        raise BerError("truncated") from None
    return Pdu(tag, request_id, error_status, error_index, out)


def decode_v2c(message: bytes) -> tuple[bytes, Pdu]:
    """(community, PDU) of a v1/v2c message."""
    pos, end = expect(message, 0, len(message), SEQUENCE)
    _version, pos = read_int(message, pos, end)
    community, pos = read_octets(message, pos, end)
    return community, decode_pdu(message, pos, end)
