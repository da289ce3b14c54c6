"""Rendezvous hashing: every target has one owner, shares are even, and a change of members
moves only the targets it must."""

from __future__ import annotations

import numpy as np

from graywire.service.cluster.shard import Shards, assign, target_key

TARGETS = [target_key("snmp", f"leaf-{i:04d}@10.0.{i // 250}.{i % 250}:161") for i in range(3000)]


def test_each_target_has_one_owner_and_the_shares_are_even() -> None:
    owner = assign(TARGETS, ["gw-0", "gw-1", "gw-2"])
    counts = np.bincount(owner, minlength=3)
    assert counts.sum() == len(TARGETS)
    assert counts.min() > 0.9 * len(TARGETS) / 3 and counts.max() < 1.1 * len(TARGETS) / 3


def test_every_member_computes_the_same_assignment_in_any_order() -> None:
    a = Shards(TARGETS)
    b = Shards(TARGETS)
    names_a, owner_a = a.owners(["gw-2", "gw-0", "gw-1"])
    names_b, owner_b = b.owners(["gw-1", "gw-2", "gw-0", "gw-1"])
    assert names_a == names_b == ("gw-0", "gw-1", "gw-2")
    assert np.array_equal(owner_a, owner_b)
    shares = [set(a.share(names_a, m).tolist()) for m in names_a]
    assert set().union(*shares) == set(range(len(TARGETS))) and sum(map(len, shares)) == len(TARGETS)


def test_a_member_that_leaves_hands_over_only_its_own_targets() -> None:
    shards = Shards(TARGETS)
    before = {m: set(shards.share(["gw-0", "gw-1", "gw-2"], m).tolist()) for m in ("gw-0", "gw-1", "gw-2")}
    after = {m: set(shards.share(["gw-0", "gw-2"], m).tolist()) for m in ("gw-0", "gw-2")}
    for m in ("gw-0", "gw-2"):
        assert before[m] <= after[m]  # nothing of the survivors moved
    assert after["gw-0"] | after["gw-2"] == set(range(len(TARGETS)))
    assert (after["gw-0"] - before["gw-0"]) | (after["gw-2"] - before["gw-2"]) == before["gw-1"]


def test_a_member_that_joins_takes_about_its_share_and_only_from_others() -> None:
    shards = Shards(TARGETS)
    two = {m: set(shards.share(["gw-0", "gw-1"], m).tolist()) for m in ("gw-0", "gw-1")}
    three = {m: set(shards.share(["gw-0", "gw-1", "gw-2"], m).tolist()) for m in ("gw-0", "gw-1", "gw-2")}
    assert three["gw-0"] <= two["gw-0"] and three["gw-1"] <= two["gw-1"]
    assert 0.9 * len(TARGETS) / 3 < len(three["gw-2"]) < 1.1 * len(TARGETS) / 3


def test_no_members_no_owner_and_a_non_collecting_member_has_no_share() -> None:
    assert (assign(TARGETS[:5], []) == -1).all()
    assert Shards(TARGETS).share(["gw-0"], "gw-9").size == 0
