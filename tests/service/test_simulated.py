"""The built-in synthetic source as the service runs it."""

from __future__ import annotations

import asyncio
import time

from graywire.service.simulated import FabricSimCollector, FabricSimSource


def test_a_fabricsim_step_leaves_the_event_loop_free() -> None:
    """A step of a big fabric is CPU work; the API must go on answering while it runs."""
    collector = FabricSimCollector(FabricSimSource(type="fabricsim", hosts=16, seed=1), 10.0)
    step = collector.sim.step

    def slow_step():  # type: ignore[no-untyped-def]
        time.sleep(0.5)  # stands for the CPU time of a large fabric's step
        return step()

    collector.sim.step = slow_step  # type: ignore[method-assign]

    async def run() -> tuple[int, bool]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        result = await collector.scrape()
        task.cancel()
        return ticks, result.ok

    ticks, ok = asyncio.run(run())
    assert ok
    assert ticks >= 20  # the loop ran all along (about 50 ticks in 0.5 s); blocked it would be 0
