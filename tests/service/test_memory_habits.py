"""The allocator thresholds apply on glibc, and a poll's arrays then come back warm."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graywire.service.memory_habits import keep_freed_memory

PROBE = """
import resource, sys
import numpy as np
from graywire.service.memory_habits import keep_freed_memory
if sys.argv[1] == "on":
    assert keep_freed_memory()
a = np.arange(100_000, dtype=np.uint64); b = a // np.uint64(2); c = np.full(a.size, 0.1)
def poll():
    for _ in range(20):  # a poll's columns: temporaries of a few sizes in flight together
        r = np.subtract(a, b) * c
        m = (r <= 1e9) & (r >= 0)
        np.flatnonzero(~m)
for _ in range(3):
    poll()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    poll()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_freed_arrays_are_reused_without_page_faults() -> None:
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
        return int(out.stdout)

    off, on = faults("off"), faults("on")
    # Without it glibc hands the poll's temporaries back and faults them in again (about 6,500
    # page faults over these ten polls); with it they are reused warm.
    assert on < 100 < 1000 < off


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_keep_freed_memory_applies_on_glibc_and_again() -> None:
    assert keep_freed_memory() and keep_freed_memory()


FREEZE_PROBE = """
import gc
from graywire.service.memory_habits import freeze_long_lived
model = [[i] for i in range(50_000)]  # start-up's long-lived containers
cycle = [[]]; cycle[0].append(cycle); del cycle  # garbage from start-up: collected, not frozen
frozen = freeze_long_lived()
later = [[i] for i in range(100)]
swept = {id(o) for o in gc.get_objects()}
print(frozen, sum(id(o) in swept for o in model), sum(id(o) in swept for o in later), gc.collect())
"""


def test_long_lived_objects_leave_the_collectors_sweeps() -> None:
    out = subprocess.run([sys.executable, "-c", FREEZE_PROBE], capture_output=True, text=True, check=True)
    frozen, model_swept, later_swept, collected = map(int, out.stdout.split())
    assert frozen >= 50_000 and model_swept == 0  # a full collection no longer walks them
    assert later_swept == 100  # what is made afterwards is collected as ever
    assert collected == 0  # the start-up cycle was freed before freezing, not kept forever
