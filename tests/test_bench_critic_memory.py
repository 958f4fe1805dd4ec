"""benchmarks/bench_critic_memory.py: the resident-memory reading it prints."""

from __future__ import annotations

import sys

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_critic_memory.py")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_resident_memory_grows_with_an_allocation_and_the_peak_keeps_it():
    now0, peak0 = bench.resident_gib()
    assert 0 < now0 <= peak0
    block = bytearray(64 * 2 ** 20)  # 64 MiB, every page written
    block[::4096] = b"\x01" * len(block[::4096])
    now1, peak1 = bench.resident_gib()
    assert now1 - now0 > 0.04 and peak1 >= now1
    del block
    # The kernel updates its high-water mark lazily (within a few pages), so the peak is read
    # to about a MiB; it keeps the 64 MiB after the block is gone.
    assert bench.resident_gib()[1] >= peak1 - 2 ** -10
