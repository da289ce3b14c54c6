"""A replica's terms begin and end one at a time: an ending that waits on a slow judge neither
resets the term that began meanwhile nor cancels it, and a late ending of an earlier term
leaves the later one alone."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from graywire.service.cluster.fence import Fence
from graywire.service.cluster.lease import Takeover
from graywire.service.cluster.node import ClusterNode
from graywire.service.config import load_settings


class _State:
    def __init__(self) -> None:
        self.exported = False

    def reset(self) -> None:
        pass


class _Runner:
    """What a node asks of its runner in a change of term; ``new_term`` can be held up, as a
    judge still running on the database holds the real one up."""

    def __init__(self) -> None:
        self.targets: list[Any] = []
        self.state = _State()
        self.release = threading.Event()
        self.release.set()

    def new_term(self, pipeline: object) -> None:
        assert self.release.wait(10)


def node_for(tmp_path: Path) -> tuple[ClusterNode, _Runner, list[int]]:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url="postgresql+psycopg://gw@127.0.0.1:9/graywire",  # never connected to
        poll_interval="2s",  # the lease's watch looks every tick (a quarter of the lease's life)
        cluster={"nats_url": "nats://127.0.0.1:9", "member_id": "gw-0"},
    )
    runner = _Runner()
    node = ClusterNode(settings, runner, Fence(), lambda: None, lambda: None, None)  # type: ignore[arg-type]
    led: list[int] = []

    async def lead(taken: Takeover) -> None:  # a term's loop: runs until cancelled
        led.append(taken.token)
        await asyncio.Event().wait()

    node._lead = lead  # type: ignore[method-assign]
    node._loop = asyncio.get_running_loop()  # as start() sets it
    return node, runner, led


def takeover(node: ClusterNode, token: int) -> Takeover:
    node.fence.hold(token, time.monotonic() + 60)
    return Takeover(token, time.monotonic() + 60, None, None, None)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


def test_an_ending_held_up_by_a_judge_leaves_the_term_begun_meanwhile_running(tmp_path: Path) -> None:
    async def go() -> None:
        node, runner, led = node_for(tmp_path)
        node._begin_term(takeover(node, 1))
        await settle()
        assert (node._leading_token, led) == (1, [1])

        runner.release.clear()  # the old term's judge holds the runner
        node._lost("lease renewal refused")  # token 1 dropped; its ending waits on the runner
        await settle()
        node._begin_term(takeover(node, 2))  # the lease taken again meanwhile
        await settle()
        runner.release.set()
        await settle()
        await asyncio.sleep(0.2)
        assert node._leading_token == 2 and node._leading is not None and not node._leading.done()
        assert led == [1, 2]
        assert node.runner.state.exported is True and node.led_since is not None
        await node._end_term("test over")

    asyncio.run(go())


def test_a_late_ending_of_an_earlier_term_leaves_the_later_one_alone(tmp_path: Path) -> None:
    async def go() -> None:
        node, _runner, led = node_for(tmp_path)
        node._begin_term(takeover(node, 1))
        await settle()
        node.fence.drop()
        node._begin_term(takeover(node, 2))  # begins before term 1's ending came round
        await settle()
        await node._end_term("term 1's lease was lost", 1)
        assert node._leading_token == 2 and node._leading is not None and not node._leading.done()
        assert led == [1, 2] and node.runner.state.exported is True
        await node._end_term("test over")
        assert node._leading is None and node.runner.state.exported is False

    asyncio.run(go())


def test_a_lease_that_ran_out_unrenewed_ends_the_term_whatever_the_coordinator_does(tmp_path: Path) -> None:
    """The coordinator stuck in a renewal that never answers renews nothing; the loop's own
    watch steps down once the lease has been out here for a lease lifetime."""

    async def go() -> None:
        node, _runner, led = node_for(tmp_path)
        node._begin_term(takeover(node, 1))
        await settle()
        assert node._leading_token == 1
        # The last renewal that got through: its lease ran out here a lifetime ago.
        node.fence.extend(1, time.monotonic() - node.timing.lease_ttl + 0.2)
        watch = asyncio.create_task(node._watch_lease())
        try:
            for _ in range(100):
                if node._leading is None:
                    break
                await asyncio.sleep(0.05)
        finally:
            watch.cancel()
        assert node._leading is None and node.fence.token is None and node.stepdowns == 1
        assert led == [1]

    asyncio.run(go())
