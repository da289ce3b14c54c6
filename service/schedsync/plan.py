"""What a sync pass decided: actions to take and notes on what it deliberately left alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TAG = "graywire:"
"""Prefix of every Slurm reason graywire writes; the only drains it will ever undo."""

MAX_REASON_CHARS = 200


class SchedulerError(RuntimeError):
    """The scheduler could not be read or refused a change."""


@dataclass(frozen=True)
class Action:
    node: str
    verb: Literal["drain", "resume"]
    reason: str = ""


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def drains(self) -> list[Action]:
        return [a for a in self.actions if a.verb == "drain"]

    def resumes(self) -> list[Action]:
        return [a for a in self.actions if a.verb == "resume"]


def tagged_reason(reason: str) -> str:
    """``graywire: <reason>`` on one line, without quotes or ``=`` (scontrol's key=value syntax)."""
    text = " ".join(reason.replace('"', "'").replace("=", ":").split())
    return f"{TAG} {text}"[:MAX_REASON_CHARS].rstrip()


def hold_new_drains(plan: Plan, why: str) -> Plan:
    """The same plan without new drains (resumes stay): used while the circuit breaker is tripped."""
    held = plan.drains()
    notes = [*plan.notes, *(f"{a.node}: not drained, {why}" for a in held)]
    return Plan(actions=plan.resumes(), notes=notes)
