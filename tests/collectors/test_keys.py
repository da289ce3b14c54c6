"""Port keys and GUID normalization: every spelling of one GUID gives one string."""

from __future__ import annotations

import pytest

from graywire.collectors.keys import (
    keys_named,
    label_of_key,
    link_ends,
    link_label,
    node_of_key,
    normalize_guid,
    port_key,
    split_port_key,
)

CANON = "0x0002c90300a1b2c3"


@pytest.mark.parametrize(
    "spelling",
    [
        "0x0002C90300A1B2C3",  # 0x-prefixed, upper case
        "0X0002c90300a1b2c3",  # upper-case prefix
        "0002c90300a1b2c3",  # no prefix
        "2c90300a1b2c3",  # leading zeros dropped
        "0x2c90300a1b2c3",  # prefix, leading zeros dropped
        "0002:c903:00a1:b2c3",  # colon-separated
        "00:02:c9:03:00:a1:b2:c3",  # colon-separated bytes
        "  0x0002c90300a1b2c3\n",  # surrounding whitespace
        0x0002C90300A1B2C3,  # int
    ],
)
def test_normalize_guid_spellings(spelling: str | int) -> None:
    assert normalize_guid(spelling) == CANON


def test_normalize_guid_edges() -> None:
    assert normalize_guid(0) == "0x0000000000000000"
    assert normalize_guid(2**64 - 1) == "0xffffffffffffffff"
    assert normalize_guid("1") == "0x0000000000000001"


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "0x",
        "xyz",
        "0x0002c90300a1b2cg",  # non-hex digit
        "10002c90300a1b2c3",  # 17 digits: more than 64 bits
        "0x 0002c903",  # inner whitespace
        "-0x1",
        "0002-c903-00a1-b2c3",
    ],
)
def test_normalize_guid_rejects_garbage(garbage: str) -> None:
    with pytest.raises(ValueError, match="not a GUID"):
        normalize_guid(garbage)


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_normalize_guid_rejects_out_of_range_int(bad: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        normalize_guid(bad)


def test_port_key_joins_and_strips() -> None:
    assert port_key("gpu-0001", "mlx5_3") == "gpu-0001/mlx5_3"
    assert port_key(" leaf-r0-000 ", 17) == "leaf-r0-000/17"
    assert port_key("sw1", " Ethernet17 ") == "sw1/Ethernet17"


@pytest.mark.parametrize(("node", "port"), [("", "p1"), ("sw1", ""), ("  ", "p1"), ("sw1", " ")])
def test_port_key_rejects_empty(node: str, port: str) -> None:
    with pytest.raises(ValueError, match="empty node or port"):
        port_key(node, port)


def test_port_key_rejects_slash_in_node() -> None:
    with pytest.raises(ValueError, match="may not contain '/'"):
        port_key("rack1/sw1", "p1")


def test_split_port_key_inverts_port_key() -> None:
    assert split_port_key("gpu-0001/mlx5_3") == ("gpu-0001", "mlx5_3")
    # Only the first '/' separates: a label may itself contain one.
    assert split_port_key("sw1/1/1/5") == ("sw1", "1/1/5")
    for node, label in [("gpu-0001", "mlx5_3"), ("sw1", "Ethernet17"), ("leaf-r7-003", "p64")]:
        assert split_port_key(port_key(node, label)) == (node, label)


@pytest.mark.parametrize("bad", ["", "gpu-0001", "/p1", "sw1/", "/"])
def test_split_port_key_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not a port key"):
        split_port_key(bad)


def test_macs_in_every_usual_spelling() -> None:
    from graywire.collectors.keys import normalize_mac

    for spelling in (
        "AA:BB:CC:DD:EE:0F",
        "aa-bb-cc-dd-ee-0f",
        "aabb.ccdd.ee0f",
        "aabbccddee0f",
        " aa:bb:cc:dd:ee:0f\n",
    ):
        assert normalize_mac(spelling) == "aa:bb:cc:dd:ee:0f", spelling
    for bad in (None, "", "00:00:00:00:00:00", "aa:bb:cc", "gg:bb:cc:dd:ee:ff", "mlx5_0"):
        assert normalize_mac(bad) is None, bad


@pytest.mark.parametrize(
    ("key", "node", "label"),
    [("gpu-0003/mlx5_2", "gpu-0003", "mlx5_2"), ("leaf1/Ethernet1/54", "leaf1", "Ethernet1/54"),
     ("gpu-0003", None, None), ("/p1", None, None), ("leaf1/", None, None), (None, None, None),
     (7, None, None)],
)  # fmt: skip
def test_node_and_label_are_none_for_what_is_not_a_port_key(
    key: object, node: str | None, label: str | None
) -> None:
    """A switch port's label may hold '/': the node ends at the first one, the label takes the rest."""
    assert node_of_key(key) == node
    assert label_of_key(key) == label


def test_a_link_is_named_alike_from_either_end_and_read_back() -> None:
    a, b = "leaf-r2-000/p4", "gpu-0003/mlx5_2"
    assert link_label(a, b) == link_label(b, a) == "gpu-0003/mlx5_2<->leaf-r2-000/p4"
    assert link_ends(link_label(a, b)) == [b, a]
    assert link_ends(a) == [] and link_ends(None) == [] and link_ends("") == []
    assert keys_named(link_label(a, b)) == [b, a] and keys_named(a) == [a] and keys_named(None) == []
