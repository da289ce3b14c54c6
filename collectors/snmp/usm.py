"""SNMPv3 messages with the User-based Security Model (RFC 3412 framing, RFC 3414 USM).

The framing is written here, over :mod:`graywire.collectors.snmp.asn1`, and so is the HMAC
(the standard library's); key localization and the DES/3DES/AES ciphers are pysnmp's own USM
services, called with the protocol identifiers of its high-level API, so every protocol graywire
offers derives the keys it always did, including the AES-192/256 key extension, where agents
disagree.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pyasn1.type import univ
from pysnmp.hlapi.v3arch.asyncio import (
    USM_AUTH_HMAC96_MD5,
    USM_AUTH_HMAC96_SHA,
    USM_AUTH_HMAC128_SHA224,
    USM_AUTH_HMAC192_SHA256,
    USM_AUTH_HMAC256_SHA384,
    USM_AUTH_HMAC384_SHA512,
    USM_PRIV_CBC56_DES,
    USM_PRIV_CBC168_3DES,
    USM_PRIV_CFB128_AES,
    USM_PRIV_CFB192_AES,
    USM_PRIV_CFB256_AES,
)
from pysnmp.proto import error as pysnmp_error
from pysnmp.proto.secmod.rfc3414.service import SnmpUSMSecurityModel

from graywire.collectors.snmp import asn1
from graywire.collectors.snmp.asn1 import OCTET_STRING, SEQUENCE, BerError, Oid, Pdu

#: The configuration's protocol names -> pysnmp's protocol identifiers.
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
#: The hash of each HMAC (RFC 3414 6 and 7, RFC 7860); pysnmp's service gives its length.
_HASHES: dict[tuple[int, ...], Callable[..., Any]] = {
    USM_AUTH_HMAC96_MD5: hashlib.md5,
    USM_AUTH_HMAC96_SHA: hashlib.sha1,
    USM_AUTH_HMAC128_SHA224: hashlib.sha224,
    USM_AUTH_HMAC192_SHA256: hashlib.sha256,
    USM_AUTH_HMAC256_SHA384: hashlib.sha384,
    USM_AUTH_HMAC384_SHA512: hashlib.sha512,
}

AUTH_FLAG, PRIV_FLAG, REPORTABLE_FLAG = 0x01, 0x02, 0x04
USM_MODEL = 3
#: What a message may be; an agent answers with at most its own limit anyway (RFC 3412 6).
MAX_SIZE = 65_507

#: usmStats counters an agent reports a refused request with (RFC 3414 5), worded as pysnmp
#: worded them, so a failed scrape says what it always said.
REPORTS: dict[Oid, str] = {
    (1, 3, 6, 1, 6, 3, 15, 1, 1, 1, 0): "Unsupported SNMP security level",
    (1, 3, 6, 1, 6, 3, 15, 1, 1, 2, 0): "SNMP message timing parameters not in windows of trust",
    (1, 3, 6, 1, 6, 3, 15, 1, 1, 3, 0): "Unknown USM user",
    (1, 3, 6, 1, 6, 3, 15, 1, 1, 4, 0): "Unknown SNMP engine ID encountered",
    (1, 3, 6, 1, 6, 3, 15, 1, 1, 5, 0): "Wrong SNMP PDU digest",
    (1, 3, 6, 1, 6, 3, 15, 1, 1, 6, 0): "Ciphering services not available or ciphertext is broken",
}
NOT_IN_TIME_WINDOW = (1, 3, 6, 1, 6, 3, 15, 1, 1, 2, 0)
UNKNOWN_ENGINE_ID = (1, 3, 6, 1, 6, 3, 15, 1, 1, 4, 0)


class UsmError(Exception):
    """A message could not be secured or unsecured (the text says why)."""


@dataclass(frozen=True)
class UsmUser:
    """A USM user: pysnmp protocol identifiers and passphrases (None = that service is off)."""

    name: bytes
    auth_protocol: tuple[int, ...] | None = None
    auth_key: bytes | None = field(default=None, repr=False)
    priv_protocol: tuple[int, ...] | None = None
    priv_key: bytes | None = field(default=None, repr=False)

    @property
    def flags(self) -> int:
        return (AUTH_FLAG if self.auth_key else 0) | (PRIV_FLAG if self.priv_key else 0)


@dataclass
class Keys:
    """A user's keys: hashed from the passphrases once, localized once per agent engine."""

    user: UsmUser
    _master: tuple[Any, Any] | None = None
    _local: dict[bytes, tuple[bytes, Any]] = field(default_factory=dict)

    def local(self, engine_id: bytes) -> tuple[bytes, Any]:
        """(auth key, priv key) localized to one agent's engine (RFC 3414 2.6)."""
        keys = self._local.get(engine_id)
        if keys is not None:
            return keys
        user = self.user
        auth = priv = None
        if user.auth_key and user.auth_protocol:
            service = _auth(user.auth_protocol)
            if self._master is None:
                master_priv = None
                if user.priv_key and user.priv_protocol:
                    master_priv = _priv(user.priv_protocol).hash_passphrase(user.auth_protocol, user.priv_key)
                self._master = (service.hash_passphrase(user.auth_key), master_priv)
            engine = univ.OctetString(engine_id)
            auth = bytes(service.localize_key(self._master[0], engine))
            if self._master[1] is not None and user.priv_protocol:
                priv = _priv(user.priv_protocol).localize_key(user.auth_protocol, self._master[1], engine)
        keys = (auth or b"", priv)
        self._local[engine_id] = keys
        return keys


def _auth(protocol: tuple[int, ...]) -> Any:
    return SnmpUSMSecurityModel.AUTH_SERVICES[protocol]


def _priv(protocol: tuple[int, ...]) -> Any:
    return SnmpUSMSecurityModel.PRIV_SERVICES[protocol]


@dataclass
class Engine:
    """What a walk knows of an agent's SNMP engine: its id and clock (RFC 3414 2.3)."""

    engine_id: bytes = b""
    boots: int = 0
    time: int = 0
    synced_at: float = 0.0

    def now(self, clock: float) -> tuple[int, int]:
        return self.boots, self.time + int(clock - self.synced_at)


def encode(
    msg_id: int, keys: Keys | None, engine: Engine, context: bytes, body: bytes, clock: float
) -> bytes:
    """A v3 request; ``keys`` None sends it unauthenticated as an engine-id discovery does."""
    user = keys.user if keys is not None else UsmUser(b"")
    flags = user.flags if keys is not None else 0
    boots, etime = engine.now(clock) if flags else (0, 0)
    auth_key, priv_key = keys.local(engine.engine_id) if keys is not None and flags else (b"", None)
    scoped = asn1.sequence(asn1.octets(engine.engine_id), asn1.octets(context), body)
    priv_params = b""
    if flags & PRIV_FLAG:
        assert user.priv_protocol is not None
        try:
            data, salt = _priv(user.priv_protocol).encrypt_data(priv_key, (boots, etime, None), scoped)
        except pysnmp_error.StatusInformation as e:
            raise UsmError(str(e["errorIndication"])) from None
        msg_data = asn1.octets(bytes(data))
        priv_params = bytes(salt)
    else:
        msg_data = scoped
    digest_len = _auth(user.auth_protocol).digest_length if flags & AUTH_FLAG and user.auth_protocol else 0
    head = asn1.integer(boots) + asn1.integer(etime) + asn1.octets(user.name)
    sec_tail = asn1.octets(bytes(digest_len)) + asn1.octets(priv_params)
    sec = asn1.sequence(asn1.octets(engine.engine_id), head, sec_tail)
    glob = asn1.sequence(
        asn1.integer(msg_id), asn1.integer(MAX_SIZE), asn1.octets(bytes((flags | REPORTABLE_FLAG,))),
        asn1.integer(USM_MODEL),
    )  # fmt: skip
    message = asn1.sequence(asn1.integer(3), glob, asn1.octets(sec), msg_data)
    if not digest_len:
        return message
    # The digest covers the whole message with its own place zeroed: it is the last-but-one
    # field of the security parameters, so its offset is known from the tail's length.
    at = len(message) - len(msg_data) - len(sec_tail) + 2
    mac = _mac(user, auth_key, message)
    return message[:at] + mac + message[at + digest_len :]


def _mac(user: UsmUser, auth_key: bytes, message: bytes) -> bytes:
    """The truncated HMAC of a message whose digest field is zeros (RFC 3414 6.3.1, 7.3.1)."""
    assert user.auth_protocol is not None
    n: int = _auth(user.auth_protocol).digest_length
    return hmac.new(auth_key, message, _HASHES[user.auth_protocol]).digest()[:n]


class Message(NamedTuple):
    msg_id: int
    flags: int
    engine: Engine
    user: bytes
    pdu: Pdu


def decode(message: bytes, keys: Keys | None, clock: float) -> Message:
    """Parse a v3 response and check its digest and decrypt it when it says it is secured.

    Raises :class:`BerError` on malformed bytes and :class:`UsmError` on a message that fails
    authentication or decryption (a forged or garbled datagram: the caller drops it).
    """
    end = len(message)
    pos, end = asn1.expect(message, 0, end, SEQUENCE)
    version, pos = asn1.read_int(message, pos, end)
    if version != 3:
        raise BerError(f"not an SNMPv3 message (version {version})")
    g, pos = asn1.expect(message, pos, end, SEQUENCE)
    msg_id, g = asn1.read_int(message, g, pos)
    _max_size, g = asn1.read_int(message, g, pos)
    flags_b, g = asn1.read_octets(message, g, pos)
    flags = flags_b[0] if flags_b else 0
    s, pos = asn1.expect(message, pos, end, OCTET_STRING)
    s, s_end = asn1.expect(message, s, pos, SEQUENCE)
    engine_id, s = asn1.read_octets(message, s, s_end)
    boots, s = asn1.read_int(message, s, s_end)
    etime, s = asn1.read_int(message, s, s_end)
    user, s = asn1.read_octets(message, s, s_end)
    a_start, a_end = asn1.expect(message, s, s_end, OCTET_STRING)
    salt, _ = asn1.read_octets(message, a_end, s_end)
    engine = Engine(engine_id, boots, etime, clock)
    if flags & AUTH_FLAG:
        if keys is None or not keys.user.auth_key:
            raise UsmError("authenticated message for a user without a key")
        auth_key, priv_key = keys.local(engine_id)
        zeroed = message[:a_start] + bytes(a_end - a_start) + message[a_end:]
        if not hmac.compare_digest(_mac(keys.user, auth_key, zeroed), message[a_start:a_end]):
            raise UsmError("Wrong SNMP PDU digest")
    if flags & PRIV_FLAG:
        if keys is None or not keys.user.priv_key or not flags & AUTH_FLAG:
            raise UsmError("encrypted message for a user without a privacy key")
        data, _ = asn1.read_octets(message, pos, end)
        try:
            plain = bytes(
                _priv(keys.user.priv_protocol).decrypt_data(  # type: ignore[arg-type]
                    priv_key, (boots, etime, univ.OctetString(salt)), univ.OctetString(data)
                )
            )
        except (pysnmp_error.StatusInformation, ValueError) as e:
            raise UsmError(f"cannot decrypt: {e}") from None
        scoped, s_end = plain, len(plain)
        s = 0
    else:
        scoped, s, s_end = message, pos, end
    s, s_end = asn1.expect(scoped, s, s_end, SEQUENCE)
    _ctx_engine, s = asn1.read_octets(scoped, s, s_end)
    _ctx_name, s = asn1.read_octets(scoped, s, s_end)
    return Message(msg_id, flags, engine, user, asn1.decode_pdu(scoped, s, s_end))
