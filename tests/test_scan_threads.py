"""The C scanner in threads (traceview/ingest/_scan.c: byte ranges of `traceEvents` parsed by workers and joined):
the same frames as one thread and as the msgspec path, on bundled traces, escapes and odd layouts; the same
verdict on damaged inputs; a range whose candidate start was not an event start is parsed again, not taken."""

from __future__ import annotations

import functools
import gzip
import json

import polars as pl
import pytest
from conftest import SAMPLES
from polars.testing import assert_frame_equal

from traceview.ingest import cores, fastscan, loader

pytestmark = pytest.mark.skipif(fastscan._scan is None, reason="C extension traceview.ingest._scan not built")

FRAMES = ("host", "gpu", "gpu_annotations", "memory", "flows", "steps", "threads")
TRACES = [
    SAMPLES / p
    for p in (
        "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "hta/rank_non_gpu/rank_non_gpu.json.gz",
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        "layouts/dynolog/libkineto_trace_456.json.gz",
        "layouts/lightning/fit-perf-[Strategy]SingleDeviceStrategy.training_step.1796173320794905391.pt.trace.json.gz",
        "layouts/megatron/tensorboard/vm_14659.1796114837904795216.pt.trace.json.gz",
        "layouts/torchtitan/profiling/traces/iteration_10/rank0_trace.json.gz",
    )
]
RESNET = (
    SAMPLES / "kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
)  # 35 MB JSON


def _scan(data: bytes, threads: int, slice_: int = 1024, piece: int | None = None) -> dict | None:
    """The scanner's raw result (`ranges` popped: (ranges joined, parsed again) is not a column)."""
    s = fastscan.scanner(threads=threads, slice=slice_)
    piece = piece or len(data) or 1
    for i in range(0, len(data), piece):
        if not s.feed(data[i : i + piece]):
            return None
    return s.finish()


class _Col:
    """An Arrow column of a scan, compared by value (nulls equal)."""

    def __init__(self, s: pl.Series) -> None:
        self.s = s

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Col)
            and self.s.dtype == other.s.dtype
            and self.s.equals(other.s, null_equal=True)
        )

    def __repr__(self) -> str:
        return repr(self.s)


def _plain(r: dict | None) -> object:
    """A scan result as plain values (buffers as bytes, Arrow columns as Series) to compare two scans."""

    def conv(x: object) -> object:
        kind = type(x).__name__
        if kind == "Block":
            return bytes(memoryview(x))
        if kind == "ArrowCol":
            return _Col(pl.Series(x))
        if isinstance(x, dict):
            return [(k, conv(v)) for k, v in x.items()]
        if isinstance(x, list | tuple):
            return [conv(v) for v in x]
        return x

    if r is None:
        return None
    r = dict(r)
    r.pop("ranges")
    return conv(r)


def _frames(path, monkeypatch, threads: int | None):
    """The loader's frames: the C scanner in `threads` threads (batches of 4 KiB a thread, so that even a small
    trace is cut into many ranges), or (None) the msgspec path."""
    monkeypatch.setenv("TRACEVIEW_NO_C", "1" if threads is None else "0")
    if threads:
        monkeypatch.setattr(fastscan, "scanner", functools.partial(_SCANNER, threads=threads, slice=4096))
    try:
        return loader.load_file(path)
    finally:
        monkeypatch.setattr(fastscan, "scanner", _SCANNER)


_SCANNER = fastscan.scanner


def _assert_same(a, b, what: str) -> None:
    for f in FRAMES:
        try:
            assert_frame_equal(getattr(a, f), getattr(b, f))
        except AssertionError as e:
            raise AssertionError(f"{what}: frame {f!r} differs: {e}") from None
    assert a.meta == b.meta


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(SAMPLES)).split("/")[1])
def test_four_threads_give_the_frames_of_one(path, monkeypatch):
    data = gzip.decompress(path.read_bytes())
    joined, redone = _scan(data, 4)["ranges"]
    assert (
        joined > len(data) // (4 * 1024) // 2 and redone == 0
    )  # every batch split, every candidate an event
    one = _frames(path, monkeypatch, 1)
    _assert_same(_frames(path, monkeypatch, 4), one, "4 threads vs 1")
    _assert_same(one, _frames(path, monkeypatch, None), "C vs msgspec")


def test_a_large_trace_in_pieces_scans_alike_in_threads():
    """ResNet-50 (35 MB of JSON, 2 MiB pieces as the reader hands them over): the default batches (4 MiB a
    thread), every column and args table byte for byte."""
    data = gzip.decompress(RESNET.read_bytes())
    one = _scan(data, 1, 4 << 20, 1 << 21)
    four = _scan(data, 4, 4 << 20, 1 << 21)
    assert four["ranges"][0] >= 4 and four["n"] == one["n"] == data.count(
        b'"ph":'
    )  # every event has one "ph"
    assert _plain(four) == _plain(one)


def _odd_doc(path) -> bytes:
    """A bundled trace rewritten: names with escapes (the same name spelled two ways: two dictionary entries),
    quotes, backslashes and `},{` / `}, {"ph"` inside strings (false range starts), nested objects in args
    arrays, non-ASCII as \\u escapes, string pids; compact separators and no newline between events."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    evs = doc["traceEvents"]
    for i, e in enumerate(evs):
        if "name" in e and i % 7 == 0:
            e["name"] = e["name"] + ['},{"ph": "X"}', '"}, {"', "\\", "é}, {", "\U0001f600"][i % 5]
        if "args" in e and i % 11 == 0:
            e["args"]["nested"] = [{"a": "}, {"}, {"b": [1, {"c": None}]}]
        if i % 13 == 0 and "pid" in e:
            e["pid"] = f"host {e['pid']}"
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True)
    return text.replace('"name":"aten::', '"name":"aten\\u003a:', 50).encode()


@pytest.mark.parametrize("path", TRACES[:3], ids=lambda p: str(p.relative_to(SAMPLES)).split("/")[1])
def test_escapes_and_false_range_starts(path, tmp_path, monkeypatch):
    data = _odd_doc(path)
    one = _scan(data, 1)
    assert one is not None and b"\\u003a" in data
    one = _plain(one)
    for threads, slice_, piece in ((4, 1024, None), (3, 2048, 4099), (7, 1500, 65536)):
        r = _scan(data, threads, slice_, piece)
        assert r["ranges"][1] > 0, "a string holding '},{' should have been a candidate, then parsed again"
        assert _plain(r) == one
    p = tmp_path / "odd.json"
    p.write_bytes(data)
    four = _frames(p, monkeypatch, 4)
    _assert_same(four, _frames(p, monkeypatch, 1), "4 threads vs 1")
    _assert_same(four, _frames(p, monkeypatch, None), "4 threads vs msgspec")


def test_damaged_inputs_get_the_verdict_of_one_thread():
    """Cut anywhere, a byte changed or removed anywhere: refused (None) or the same columns as one thread."""
    data = gzip.decompress(TRACES[0].read_bytes())[:60_000]
    data = data[: data.rindex(b"},") + 1] + b"]}"  # a whole document: its first events
    assert _scan(data, 1) is not None
    damaged = [data[:k] for k in range(0, len(data), 1999)]
    for k in range(5, len(data), 2999):
        damaged += [data[:k] + bytes([b]) + data[k + 1 :] for b in b'"{}],\\x'] + [data[:k] + data[k + 1 :]]
    taken = 0
    for doc in damaged:
        one = _plain(_scan(doc, 1))
        taken += one is not None
        for threads, piece in ((4, None), (3, 3001)):
            assert _plain(_scan(doc, threads, 1024, piece)) == one
    assert 0 < taken < len(damaged)


def test_thread_count_knob(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_THREADS", "3")
    assert cores.scan_threads() == 3
    monkeypatch.setenv("TRACEVIEW_THREADS", "100000")
    assert cores.scan_threads() == cores.MAX_THREADS
    import os

    for bad in ("0", "-2", "many", ""):
        monkeypatch.setenv("TRACEVIEW_THREADS", bad)
        n = len(os.sched_getaffinity(0))
        assert cores.scan_threads() == (n if n >= cores.MIN_CORES else 1)
    with pytest.raises(ValueError):
        fastscan._scan.Scanner(threads=0)
