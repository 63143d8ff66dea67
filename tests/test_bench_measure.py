"""bench_load.run: a child's peak RSS is its own, not the benchmark's (Linux carries the exec'ing process's old
address-space high-water mark into the new program's; subprocess spawns by vfork, so a direct child of a large
benchmark reported the benchmark's peak)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_load import run  # noqa: E402


def test_child_peak_rss_is_its_own_not_the_parents():
    big = bytearray(400 * 1024 * 1024)
    big[::4096] = b"\x01" * len(big[::4096])  # touched: resident in this (the parent) process
    _, small = run([sys.executable, "-c", "pass"], False)
    _, grown = run([sys.executable, "-c", "b = bytearray(300 * 1024 * 1024); b[::4096] = b'1' * len(b[::4096])"],
                   False)
    assert len(big) and small < 100  # an interpreter that does nothing: ~10-20 MiB, not this process's 400+
    assert 300 <= grown < 400  # the child's own 300 MiB are seen


def test_inner_time_is_the_childs_last_line():
    secs, _ = run([sys.executable, "-c", "print('noise'); print(1.25)"], True)
    assert secs == 1.25
