"""Port-key normalization, done once at the edge so every source joins on the same string.

A port key is ``"<node>/<port>"``: the node's name (host name or switch name) and the port's
label on that node (``mlx5_3`` for a host NIC, ``p17`` or ``Ethernet17`` for a switch port).
GUID-addressed sources (UFM, perfquery) are translated to names through the inventory, after
normalizing the GUID with :func:`normalize_guid`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

_HEX = re.compile(r"^(?:0x)?([0-9a-f]{1,16})$")


T = TypeVar("T")


def normalize_guid(guid: str | int) -> str:
    """Return ``0x`` + 16 lower-case hex digits for any spelling of a 64-bit GUID.

    UFM, perfquery and sysfs spell the same GUID as ``0x0002C903...``, ``2c903...`` or
    ``0002:c903:...``; joining on the raw strings silently drops rows.
    """
    if isinstance(guid, int):
        if not 0 <= guid < 1 << 64:
            raise ValueError(f"GUID out of range: {guid!r}")
        return f"0x{guid:016x}"
    text = guid.strip().lower().replace(":", "")
    m = _HEX.match(text)
    if not m:
        raise ValueError(f"not a GUID: {guid!r}")
    return f"0x{int(m.group(1), 16):016x}"


def port_key(node: str, port: str | int) -> str:
    """Join a node name and a port label into the canonical key."""
    node = node.strip()
    label = str(port).strip()
    if not node or not label:
        raise ValueError(f"empty node or port in port key: {node!r}/{label!r}")
    if "/" in node:
        raise ValueError(f"node name may not contain '/': {node!r}")
    return f"{node}/{label}"


def split_port_key(key: str) -> tuple[str, str]:
    """Inverse of :func:`port_key`."""
    node, sep, label = key.partition("/")
    if not sep or not node or not label:
        raise ValueError(f"not a port key: {key!r}")
    return node, label


def node_of_key(key: object) -> str | None:
    """The node of a port key, None for anything that is not one (an incident's missing port)."""
    try:
        return split_port_key(key)[0] if isinstance(key, str) else None
    except ValueError:
        return None


def label_of_key(key: object) -> str | None:
    """The port label of a port key (it may hold a '/': ``leaf-1/Ethernet1/1``), None for a non-key."""
    try:
        return split_port_key(key)[1] if isinstance(key, str) else None
    except ValueError:
        return None


#: Between the two port keys of a link label: ``gpu-0003/mlx5_2<->leaf-r2-000/p4``.
LINK_SEP = "<->"


def link_label(a: str, b: str) -> str:
    """A cable's name: its two port keys in sorted order, so either end names it alike."""
    lo, hi = sorted((a, b))
    return f"{lo}{LINK_SEP}{hi}"


def link_ends(label: str | None) -> list[str]:
    """The port keys of a link label; [] for anything else (None, a port key)."""
    if not label or LINK_SEP not in label:
        return []
    return [end for end in label.split(LINK_SEP, 1) if end]


def keys_named(name: str | None) -> list[str]:
    """The port keys a name stands for: a link label's two ends, else the name itself."""
    if not name:
        return []
    return link_ends(name) or [name]


_MAC_DIGITS = re.compile(r"[0-9a-f]{12}")


def normalize_mac(mac: str | None) -> str | None:
    """A MAC address as ``aa:bb:cc:dd:ee:ff`` from any usual spelling (``AA-BB-…``,
    ``aabb.ccdd.eeff``, bare hex); None when it is not 48 bits of hex, or all zeros."""
    if not mac:
        return None
    digits = re.sub(r"[:\-.\s]", "", mac.strip().lower())
    if not _MAC_DIGITS.fullmatch(digits) or digits == "0" * 12:
        return None
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def alias_keys(node: str, names: Iterable[str | None]) -> Iterator[str]:
    """The keys a port is known by besides its own: ``node/name`` for each of its other names
    (a netdev, a MAC) and each MAC bare, since an LLDP neighbour may send no system name."""
    for name in names:
        if not name:
            continue
        mac = normalize_mac(name)
        yield port_key(node, mac or name)
        if mac:
            yield mac


def by_alias(table: Mapping[str, T], key: str) -> T | None:
    """``key`` looked up in a table built from :func:`alias_keys`: as given, else by the MAC its
    port part spells (any node: the chassis id an unnamed neighbour is keyed by says nothing)."""
    if key in table:
        return table[key]
    mac = normalize_mac(label_of_key(key))
    return table.get(mac) if mac else None
