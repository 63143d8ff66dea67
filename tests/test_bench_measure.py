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


def test_same_work_as_hta_runs_traceviews_breakdowns():
    # bench_load.TV_SAME: traceview's load and the two breakdowns HTA's row computes, its time on the last line
    from bench_load import TV_SAME

    trace = Path(__file__).resolve().parents[1] / "sample_traces/gpu_h200/seed_single_gemm_eager.json.gz"
    secs, rss = run([sys.executable, "-c", TV_SAME, str(trace)], True)
    assert secs > 0 and rss > 0


def test_peer_table_compares_hta_with_the_median_of_traceviews_runs(monkeypatch):
    import run as bench  # bench/run.py

    times = iter([(0.5, 200.0), (0.4, 190.0), (0.7, 210.0)])
    monkeypatch.setattr(bench, "same_work", lambda p: next(times))
    monkeypatch.setattr(bench, "hta_run", lambda p: (20.0, 800.0))
    rows, hs, hr, ts = bench.peer_table(Path("t.json.gz"), 3)
    assert (hs, hr, ts) == (20.0, 800.0, 0.5)  # the median of one run before HTA's and two after
    assert rows[1].endswith("| 0.500 | 200 | HTA 40.0x slower |")
