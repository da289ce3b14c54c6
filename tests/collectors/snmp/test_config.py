"""The SNMP source's configuration model and build_collectors."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from graywire.collectors.snmp import DEFAULT_EXCLUDE, SnmpCollector, SnmpSourceConfig, build_collectors
from graywire.collectors.snmp.walk import auth_data

TARGETS = [{"host": "10.0.0.1", "name": "leaf1"}, {"host": "10.0.0.2", "port": 1161}]


def test_defaults_and_build_collectors() -> None:
    cfg = SnmpSourceConfig.model_validate({"type": "snmp", "targets": TARGETS})
    assert (cfg.version, cfg.community.get_secret_value(), cfg.timeout_s, cfg.max_concurrency) == (
        "2c",
        "public",
        5.0,
        32,
    )
    cols = build_collectors(cfg, None)
    assert [type(c) for c in cols] == [SnmpCollector, SnmpCollector]
    assert [c.target for c in cols] == ["leaf1@10.0.0.1:161", "10.0.0.2:1161"]
    assert [c.source for c in cols] == ["snmp", "snmp"]
    assert cols[0].session is cols[1].session  # one engine and one concurrency bound per source


def test_secrets_do_not_leak_into_reprs() -> None:
    cfg = SnmpSourceConfig(targets=[{"host": "h", "community": "s3cret-community"}], community="other-s3cret")
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.model_dump())
    auth = auth_data(cfg, cfg.targets[0])
    assert auth.community == b"s3cret-community" and "s3cret" not in repr(auth)  # per-switch community wins


@pytest.mark.parametrize(
    ("v3", "level"),
    [
        ({"user": "u"}, "noAuthNoPriv"),
        ({"user": "u", "auth_key": "12345678"}, "authNoPriv"),
        (
            {"user": "u", "auth_key": "12345678", "priv_key": "abcdefgh", "priv_protocol": "AES256"},
            "authPriv",
        ),
    ],
)
def test_v3_security_levels(v3: dict[str, str], level: str) -> None:
    cfg = SnmpSourceConfig(targets=TARGETS, version="3", v3=v3)
    assert cfg.v3 is not None and cfg.v3.security_level == level
    auth = auth_data(cfg, cfg.targets[0])
    assert auth.name == b"u" and "12345678" not in repr(auth) and "abcdefgh" not in repr(auth)


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"version": "3"}, "version 3 needs a 'v3' user"),
        ({"version": "3", "v3": {"user": "u", "priv_key": "abcdefgh"}}, "needs authentication"),
        ({"version": "3", "v3": {"user": "u", "auth_key": "short"}}, "at least 8 characters"),
        (
            {"version": "3", "v3": {"user": "u", "auth_key": "12345678", "auth_protocol": "SHA1"}},
            "auth_protocol",
        ),
        ({"include": "(unclosed"}, "not a regular expression"),
        (
            {"targets": [{"host": "a", "name": "x"}, {"host": "b", "name": "x"}]},
            "switch names must be unique",
        ),
        ({"targets": [{"host": "a", "name": "leaf/1"}]}, "name"),
        ({"targets": []}, "targets"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"ieee_pfc_priority": 8}, "ieee_pfc_priority"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_invalid_configs_are_rejected_with_a_reason(update: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        SnmpSourceConfig.model_validate({"targets": TARGETS, **update})


@pytest.mark.parametrize(
    ("label", "excluded"),
    [
        ("Management1", True), ("mgmt0", True), ("re0:mgmt-0", True), ("eth0", True), ("em0", True),
        ("lo", True), ("bond10", True), ("bridge", True), ("peerlink", True), ("peerlink.4094", True),
        ("Vlan10", True), ("Port-Channel1000", True), ("et-0/0/0.0", True), ("docker0", True),
        ("Ethernet1", False), ("Ethernet49/1", False), ("Ethernet1/53", False), ("et-0/0/31", False),
        ("Eth1/53", False), ("swp12", False), ("p17", False), ("Ethernet0", False),
    ],
)  # fmt: skip
def test_default_exclude(label: str, excluded: bool) -> None:
    assert bool(re.search(DEFAULT_EXCLUDE, label)) is excluded
