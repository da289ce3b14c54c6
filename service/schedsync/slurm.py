"""Slurm: drain and resume nodes with ``scontrol`` to match the drain list.

A node graywire drains carries a reason starting with ``graywire:``. Only such nodes are ever
resumed, so a drain set by a person (any other reason) is never undone, and a node a person
already drained or took down is left alone.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from graywire.service.schedsync.drainlist import DrainList
from graywire.service.schedsync.plan import TAG, Action, Plan, SchedulerError, tagged_reason

_FIELD_START = re.compile(r"(?:^|\s)(?=[A-Z][A-Za-z_]*=)")
_REASON_STAMP = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str
    reason: str = ""

    @property
    def flags(self) -> set[str]:
        return {f.rstrip("*~#!%$@^-") for f in self.state.upper().split("+") if f}

    @property
    def drained(self) -> bool:
        return bool({"DRAIN", "DRAINED", "DRAINING"} & self.flags)

    @property
    def down(self) -> bool:
        return "DOWN" in self.flags

    @property
    def ours(self) -> bool:
        return self.reason.startswith(TAG)


def parse_fields(line: str) -> dict[str, str]:
    """One ``scontrol -o`` line into its ``Key=value`` fields (values may contain spaces)."""
    fields: dict[str, str] = {}
    for part in _FIELD_START.split(line.strip()):
        key, sep, value = part.partition("=")
        if sep:
            fields[key] = value.strip()
    return fields


def parse_show_node(text: str) -> list[SlurmNode]:
    """``scontrol --oneliner show node`` output; the reason loses its ``[user@time]`` stamp."""
    nodes = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = parse_fields(line)
        reason = _REASON_STAMP.sub("", f.get("Reason", ""))
        if reason == "(null)":
            reason = ""
        nodes.append(SlurmNode(name=f["NodeName"], state=f.get("State", ""), reason=reason))
    return nodes


def parse_hostlist(expr: str) -> NodeSet:
    """A hostlist expression (``gpu-00[01-16],login1``) as a set, tested for membership without
    expanding it. Groups (``@name``) are not resolved: no answer or config value makes graywire
    run a group command."""
    try:
        return NodeSet(expr, resolver=RESOLVER_NOGROUP)
    except NodeSetException as e:
        raise ValueError(f"{expr!r} is not a hostlist: {e}") from None


#: Job ids squeue takes: ``1234``, an array task ``1234_5``, a heterogeneous component ``1234+1``.
JOB_ID = re.compile(r"^[0-9]{1,10}(?:_[0-9]{1,10})?(?:\+[0-9]{1,4})?$")
#: States in which a job holds its nodes and its ranks may still push.
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING"})


def run_command(cmd: Sequence[str], timeout: float) -> str:
    """stdout of a Slurm command; not found, timed out or failed as a SchedulerError saying so."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as e:
        raise SchedulerError(f"{cmd[0]} not found: is Slurm installed and on PATH?") from e
    except subprocess.TimeoutExpired as e:
        raise SchedulerError(f"{' '.join(cmd)} timed out after {timeout:.0f} s") from e
    if done.returncode != 0:
        msg = (done.stderr or done.stdout).strip().replace("\n", " ")
        raise SchedulerError(f"{' '.join(cmd)} failed ({done.returncode}): {msg}")
    return done.stdout


def job_hosts(job: str, squeue: str = "squeue", timeout: float = 10.0) -> NodeSet | None:
    """The nodes a running job holds (``squeue -h -j <job> -o '%T %N'``), every array task's or
    heterogeneous component's together; None when Slurm knows no such job, an empty set when it
    is not running (pending, or ended). An unreachable controller is a SchedulerError."""
    if not JOB_ID.match(job):
        return None
    try:
        out = run_command([squeue, "--noheader", f"--jobs={job}", "--format=%T %N"], timeout)
    except SchedulerError as e:
        if "Invalid job id" in str(e):
            return None
        raise
    hosts = NodeSet(resolver=RESOLVER_NOGROUP)
    for line in out.splitlines():
        state, _, nodes = line.strip().partition(" ")
        if state in ACTIVE_STATES and nodes.strip():
            try:
                hosts.update(parse_hostlist(nodes.strip()))
            except ValueError as e:
                raise SchedulerError(f"squeue gave job {job} an unreadable node list: {e}") from None
    return hosts


def plan_slurm(drain_list: DrainList, nodes: Iterable[SlurmNode]) -> Plan:
    """Drain listed nodes that are up and undrained; resume graywire's drains no longer listed."""
    plan = Plan()
    by_name = {n.name: n for n in nodes}
    want = drain_list.drain()
    for name, entry in sorted(want.items()):
        node = by_name.get(name)
        if node is None:
            plan.notes.append(f"{name}: on the drain list but not a Slurm node")
        elif node.drained and node.ours:
            continue
        elif node.drained or node.down:
            why = f"reason {node.reason!r}" if node.reason else "no reason"
            plan.notes.append(f"{name}: already {node.state} ({why}), not graywire's; left alone")
        else:
            plan.actions.append(Action(name, "drain", tagged_reason(entry.reason)))
    keep = set(want) | drain_list.held()
    for name, node in sorted(by_name.items()):
        if node.drained and node.ours and name not in keep:
            plan.actions.append(Action(name, "resume"))
    return plan


class ScontrolBackend:
    """Reads and changes node state through the ``scontrol`` command (``SLURM_CONF`` applies)."""

    name = "slurm"

    def __init__(self, scontrol: str = "scontrol", timeout: float = 30.0) -> None:
        self.scontrol = scontrol
        self.timeout = timeout

    def _run(self, args: Sequence[str]) -> str:
        return run_command([self.scontrol, *args], self.timeout)

    def nodes(self, names: Sequence[str] = ()) -> list[SlurmNode]:
        """All nodes, or the named ones (an unknown name is simply absent)."""
        try:
            out = self._run(["--oneliner", "show", "node", *([",".join(names)] if names else [])])
        except SchedulerError as e:
            if names and "not found" in str(e):
                return []
            raise
        return parse_show_node(out)

    def plan(self, drain_list: DrainList) -> Plan:
        return plan_slurm(drain_list, self.nodes())

    def apply(self, action: Action) -> str | None:
        """Do one action; a string says why it was skipped instead.

        The node is read again first: a person may have drained it (a drain would overwrite
        their reason and later resume their node) or re-drained it (a resume would undo theirs).
        """
        current = self.nodes([action.node])
        if not current:
            return "no longer a Slurm node"
        node = current[0]
        if action.verb == "drain":
            if node.drained or node.down:
                return f"now {node.state} ({node.reason or 'no reason'})"
            self._run(["update", f"NodeName={action.node}", "State=DRAIN", f"Reason={action.reason}"])
        else:
            if not (node.drained and node.ours):
                return "no longer drained by graywire"
            self._run(["update", f"NodeName={action.node}", "State=RESUME"])
        return None
