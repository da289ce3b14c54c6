"""One sync pass, or a loop of them, with the rules every scheduler backend shares.

- The drain list cannot be read: nothing is done (exit 1), never "resume everything".
- Shadow mode (from the API) or ``--dry-run``: report what would be done, change nothing.
- The circuit breaker is tripped: no new drains; graywire's own drains may still be resumed.
- A scheduler error on one node does not stop the others; the pass then exits 3.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from graywire.service.schedsync.drainlist import DrainList, DrainListClient, DrainListUnavailable
from graywire.service.schedsync.plan import Action, Plan, SchedulerError, hold_new_drains

log = logging.getLogger("graywire.schedsync")

EXIT_OK = 0
EXIT_NO_DRAIN_LIST = 1
EXIT_SCHEDULER_ERROR = 3


class Backend(Protocol):
    name: str

    def plan(self, drain_list: DrainList) -> Plan: ...

    def apply(self, action: Action) -> str | None: ...


def _describe(action: Action) -> str:
    return f"{action.verb} {action.node}" + (f" ({action.reason})" if action.reason else "")


def run_pass(client: DrainListClient, backend: Backend, dry_run: bool = False) -> int:
    """Fetch, plan, act (unless shadow or dry run); an exit code."""
    try:
        drain_list = client.fetch()
    except DrainListUnavailable as e:
        log.error("%s: drain list unavailable, not acting: %s", backend.name, e)
        return EXIT_NO_DRAIN_LIST
    try:
        plan = backend.plan(drain_list)
    except SchedulerError as e:
        log.error("%s: cannot read the scheduler's nodes: %s", backend.name, e)
        return EXIT_SCHEDULER_ERROR
    if drain_list.state.breaker_tripped:
        plan = hold_new_drains(plan, "the drain circuit breaker is tripped")
    for note in plan.notes:
        log.info("%s: %s", backend.name, note)
    report_only = "shadow mode" if drain_list.state.shadow else "dry run" if dry_run else ""
    if report_only:
        for action in plan.actions:
            log.info("%s: %s, would %s", backend.name, report_only, _describe(action))
        log.info("%s: %s, %d action(s) not taken", backend.name, report_only, len(plan.actions))
        return EXIT_OK
    failed = 0
    for action in plan.actions:
        try:
            skipped = backend.apply(action)
        except SchedulerError as e:
            failed += 1
            log.error("%s: %s failed: %s", backend.name, _describe(action), e)
            continue
        if skipped:
            log.warning("%s: %s skipped: %s", backend.name, _describe(action), skipped)
        else:
            log.info("%s: %s", backend.name, _describe(action))
    drains, resumes = len(plan.drains()), len(plan.resumes())
    log.info(
        "%s: %d drain(s), %d resume(s), %d failed, %d node(s) on the list",
        backend.name, drains, resumes, failed, len(drain_list.drain()),
    )  # fmt: skip
    return EXIT_SCHEDULER_ERROR if failed else EXIT_OK


def run(
    client: DrainListClient,
    backend: Backend,
    *,
    once: bool,
    interval_s: float,
    dry_run: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """One pass (its exit code) or passes every ``interval_s`` until interrupted."""
    if once:
        return run_pass(client, backend, dry_run)
    log.info("%s: syncing with %s every %.0f s", backend.name, client.base_url, interval_s)
    while True:
        started = time.monotonic()
        run_pass(client, backend, dry_run)
        sleep(max(0.0, interval_s - (time.monotonic() - started)))
