"""Slurm planning as a pure function, and parsing ``scontrol --oneliner show node``."""

from __future__ import annotations

from datetime import UTC, datetime

from graywire.service.schedsync.drainlist import DrainEntry, DrainList, DrainState
from graywire.service.schedsync.plan import Action, hold_new_drains, tagged_reason
from graywire.service.schedsync.slurm import SlurmNode, parse_show_node, plan_slurm

# Two nodes as scontrol 22.05 prints them (-o): values with spaces, '=' inside values, a reason stamp.
SHOW_NODE = (
    "NodeName=gpu-0001 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.12 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm "
    "Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 AllocMem=0 FreeMem=18045 "
    "Sockets=1 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=debug  BootTime=2026-11-29T20:54:31 SlurmdStartTime=2026-11-29T20:59:45 "
    "LastBusyTime=2026-11-29T20:59:45 CfgTRES=cpu=1,mem=1M,billing=1 AllocTRES= CapWatts=n/a "
    "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "Reason=graywire: link gpu-0001/mlx5_2 at 400G [root@2026-11-29T20:59:49]\n"
    "NodeName=gpu-0002 Arch=x86_64 CPUTot=1 State=DOWN+NOT_RESPONDING ThreadsPerCore=1 "
    "Reason=Not responding [slurm@2026-11-29T21:00:00]\n"
    "NodeName=gpu-0003 State=MIXED CfgTRES=cpu=1\n"
)


def test_parse_show_node() -> None:
    a, b, c = parse_show_node(SHOW_NODE)
    assert (a.name, a.state, a.reason) == ("gpu-0001", "IDLE+DRAIN", "graywire: link gpu-0001/mlx5_2 at 400G")
    assert a.drained and a.ours and not a.down
    assert (b.reason, b.down, b.drained, b.ours) == ("Not responding", True, False, False)
    assert (c.state, c.reason, c.drained) == ("MIXED", "", False)
    assert parse_show_node("No nodes in the system\n") == []


def entry(node: str, action: str = "drain", shadow: bool = False) -> DrainEntry:
    since = datetime(2026, 11, 29, tzinfo=UTC)
    return DrainEntry(node, action, f"fault on {node}", since, (1,), "", shadow)  # type: ignore[arg-type]


def listing(*entries: DrainEntry) -> DrainList:
    return DrainList(entries, DrainState(shadow=False, breaker_tripped=False))


def test_plan_drains_only_schedulable_nodes_and_resumes_only_its_own() -> None:
    nodes = [
        SlurmNode("n1", "IDLE"),
        SlurmNode("n2", "ALLOCATED+DRAIN", "graywire: old fault"),
        SlurmNode("n3", "IDLE+DRAIN", "graywire: gone"),
        SlurmNode("n4", "IDLE+DRAIN", "bad DIMM"),
        SlurmNode("n5", "DOWN", "Not responding"),
        SlurmNode("n6", "MIXED"),
        SlurmNode("n7", "IDLE+DRAIN", "graywire: held"),
    ]
    dl = listing(
        entry("n1"), entry("n2"), entry("n4"), entry("n5"), entry("n6", "watch"), entry("n7", shadow=True)
    )
    dl = DrainList((*dl.entries, entry("ghost")), dl.state)
    plan = plan_slurm(dl, nodes)
    assert plan.actions == [Action("n1", "drain", "graywire: fault on n1"), Action("n3", "resume")]
    assert any(n.startswith("n4: already IDLE+DRAIN (reason 'bad DIMM')") for n in plan.notes)
    assert any(n.startswith("n5: already DOWN") for n in plan.notes)
    assert "ghost: on the drain list but not a Slurm node" in plan.notes


def test_breaker_holds_new_drains_but_not_resumes() -> None:
    plan = plan_slurm(
        listing(entry("n1")), [SlurmNode("n1", "IDLE"), SlurmNode("n2", "IDLE+DRAIN", "graywire: x")]
    )
    held = hold_new_drains(plan, "breaker tripped")
    assert held.actions == [Action("n2", "resume")]
    assert "n1: not drained, breaker tripped" in held.notes


def test_tagged_reason_is_one_scontrol_safe_line() -> None:
    assert tagged_reason('speed="400G"\n  expected 800G') == "graywire: speed:'400G' expected 800G"
    assert len(tagged_reason("x" * 500)) == 200
