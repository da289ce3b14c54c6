"""How a user configures the SNMP source: the switches, the credentials, the limits."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from graywire.collectors.snmp.oids import PHYSICAL_IF_TYPES
from graywire.collectors.units import PositiveDuration

#: Interfaces that are ifType ethernetCsmacd but not fabric ports: management ports (Arista
#: Management1, NX-OS mgmt0, Junos re0:mgmt-0/em0/fxp0, SONiC/Cumulus eth0), Linux bonds,
#: bridges and the like on Cumulus, VLAN and port-channel interfaces, sub-interfaces (x.100).
DEFAULT_EXCLUDE = (
    r"^(?:[Mm]anagement\d*|mgmt\d*|eth\d+|em\d+|fxp\d+|me\d+|re\d+:mgmt-\d+|lo\d*|docker\d*|bridge\d*"
    r"|bond\d+|peerlink|[Vv]lan\d+|[Pp]ort-[Cc]hannel\d+|[Pp]o\d+|mirror|swid\d+_eth)$|\.\d+$"
)

AuthProtocol = Literal["MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512"]
PrivProtocol = Literal["DES", "3DES", "AES", "AES128", "AES192", "AES256"]
PfcMib = Literal["arista", "cisco", "ieee"]


class SnmpTarget(BaseModel):
    """One switch."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    port: int = Field(161, ge=1, le=65_535)
    #: Switch name used in port keys (``<name>/<ifName>``); must match the inventory. When
    #: absent, the switch's sysName is used.
    name: str | None = Field(None, min_length=1, pattern=r"^[^/\s]+$")
    #: SNMPv2c community for this switch, overriding the source's.
    community: SecretStr | None = None
    #: SNMPv3 context name (some agents select a virtual switch or VRF by it).
    context: str = ""


class SnmpV3User(BaseModel):
    """A USM user: no auth keys = noAuthNoPriv, auth key only = authNoPriv, both = authPriv."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1)
    auth_protocol: AuthProtocol = "SHA"
    auth_key: SecretStr | None = None
    priv_protocol: PrivProtocol = "AES"
    priv_key: SecretStr | None = None

    @field_validator("auth_key", "priv_key")
    @classmethod
    def _long_enough(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 8:
            raise ValueError("SNMPv3 keys must be at least 8 characters (RFC 3414)")
        return v

    @model_validator(mode="after")
    def _priv_needs_auth(self) -> SnmpV3User:
        if self.priv_key is not None and self.auth_key is None:
            raise ValueError("SNMPv3 privacy (priv_key) needs authentication (auth_key) too")
        return self

    @property
    def security_level(self) -> str:
        if self.auth_key is None:
            return "noAuthNoPriv"
        return "authPriv" if self.priv_key is not None else "authNoPriv"


class SnmpSourceConfig(BaseModel):
    """Ethernet (RoCE) switches polled over SNMP: IF-MIB counters and PFC MIBs."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["snmp"] = "snmp"
    targets: list[SnmpTarget] = Field(min_length=1)
    version: Literal["2c", "3"] = "2c"
    community: SecretStr = SecretStr("public")
    v3: SnmpV3User | None = None
    #: Whole-switch limit: every request of one poll of one switch must fit in it.
    timeout_s: float = Field(5.0, gt=0)
    #: Limit for one request; a request is never retried (the service runner retries the poll).
    request_timeout_s: float = Field(2.0, gt=0)
    #: Switches polled at once by this source.
    max_concurrency: int = Field(32, ge=1)
    #: GETBULK max-repetitions, capped so a request asks for at most ``max_varbinds`` values.
    max_repetitions: int = Field(25, ge=1, le=1000)
    max_varbinds: int = Field(64, ge=1, le=10_000)
    #: Interfaces kept: ifType in ``if_types`` (when the switch reports ifType), port label
    #: matching ``include`` (if set, ``re.search``) and not matching ``exclude``.
    if_types: list[int] = Field(default_factory=lambda: list(PHYSICAL_IF_TYPES))
    include: str | None = None
    exclude: str | None = DEFAULT_EXCLUDE
    #: PFC MIBs walked. Per-priority MIBs (Arista, Cisco) win over the per-port IEEE one.
    pfc_mibs: list[PfcMib] = Field(default_factory=lambda: ["arista", "cisco", "ieee"])
    #: IEEE8021-PFC-MIB counts PFC frames per port, not per priority; they are reported on this
    #: priority (the lossless RoCE priority), or ignored when null.
    ieee_pfc_priority: int | None = Field(3, ge=0, le=7)
    #: Also walk LLDP-MIB and send the cables it shows as a ``link`` batch (source ``lldp``).
    lldp: bool = False
    #: How often: LLDP tables change when cables do, so every poll would re-read the same rows.
    lldp_every: PositiveDuration = timedelta(minutes=10)

    @field_validator("include", "exclude")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a regular expression: {v!r}: {e}") from None
        return v

    @model_validator(mode="after")
    def _v3_user(self) -> SnmpSourceConfig:
        if self.version == "3" and self.v3 is None:
            raise ValueError("version 3 needs a 'v3' user (user, auth_key, priv_key, ...)")
        names = [t.name for t in self.targets if t.name]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"switch names must be unique: {dup[:5]}")
        return self
