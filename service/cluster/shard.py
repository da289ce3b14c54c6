"""Which member scrapes which target: rendezvous (highest random weight) hashing.

Each (member, target) pair gets a pseudo-random weight from a hash of both names, and a target
goes to the live collecting member with the highest weight. Every member computes the same
answer from the same member list with no coordination, and when a member joins or leaves only
the targets it wins or held move (about 1/n of them); a consistent-hash ring needs virtual
nodes to spread as evenly, rendezvous hashing does by construction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np


def target_key(source: str, target: str) -> str:
    """A target's identity across members: its source kind and what it names."""
    return f"{source}|{target}"


def _weights(names: Iterable[str], salt: str) -> np.ndarray:
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(f"{salt}\0{n}".encode(), digest_size=8).digest(), "big")
            for n in names
        ],
        dtype=np.uint64,
    )


def assign(targets: Sequence[str], members: Sequence[str]) -> np.ndarray:
    """For each target, the index in ``members`` of the member that scrapes it (-1 if none)."""
    if not members:
        return np.full(len(targets), -1, dtype=np.int64)
    weights = np.stack([_weights(targets, m) for m in members])  # members x targets
    return weights.argmax(axis=0).astype(np.int64)


class Shards:
    """The assignment for one member list, kept until the list changes (members change rarely;
    targets are hashed once per change, not per poll)."""

    def __init__(self, targets: Sequence[str]) -> None:
        self.targets = list(targets)
        self._members: tuple[str, ...] | None = None
        self._owner: np.ndarray = np.full(len(self.targets), -1, dtype=np.int64)

    def owners(self, members: Iterable[str]) -> tuple[tuple[str, ...], np.ndarray]:
        """The collecting members (sorted) and, per target, the index of its owner among them."""
        key = tuple(sorted(set(members)))
        if key != self._members:
            self._members, self._owner = key, assign(self.targets, key)
        return key, self._owner

    def share(self, members: Iterable[str], me: str) -> np.ndarray:
        """Indices of the targets ``me`` scrapes (none if ``me`` is not a collecting member)."""
        names, owner = self.owners(members)
        if me not in names:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(owner == names.index(me))
