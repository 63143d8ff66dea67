"""The streamed load (traceview/ingest/stream.py feeding _scan.Scanner in pieces): the same frames as the whole
document gives, from files and from stdin, gzip or plain, whatever the piece size; odd inputs go back to the
old whole-document path with its warnings (which args the scanner parses: tests/test_fastscan.py)."""

from __future__ import annotations

import gzip
import os
import sys
import threading

import pytest
from conftest import SAMPLES
from hostile import mini_trace, write
from polars.testing import assert_frame_equal

from traceview.errors import TraceError
from traceview.ingest import decode as d
from traceview.ingest import fastscan, inputs, loader
from traceview.ingest import stream as instream

pytestmark = pytest.mark.skipif(fastscan._scan is None, reason="C extension traceview.ingest._scan not built")

FRAMES = ("host", "gpu", "gpu_annotations", "memory", "flows", "steps", "threads")
GPT2 = SAMPLES / "gpu_h200_real/hf_gpt2_train_bf16.json.gz"  # 1.1 MB gz, ~28 MB of JSON


def _same(a, b) -> None:
    for f in FRAMES:
        assert_frame_equal(getattr(a, f), getattr(b, f))
    assert a.meta.warnings == b.meta.warnings and a.meta.event_counts == b.meta.event_counts


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of a few KiB: every piece boundary cuts an event (or a key, a number, a string escape)."""
    monkeypatch.setattr(instream, "PIECE", 3001)
    monkeypatch.setattr(instream, "_RAW_PIECE", 1013)


@pytest.fixture(scope="module")
def msgspec_gpt2():
    os.environ["TRACEVIEW_NO_C"] = "1"
    try:
        return loader.load_file(GPT2)
    finally:
        del os.environ["TRACEVIEW_NO_C"]


def test_streamed_pieces_give_the_msgspec_frames(msgspec_gpt2, monkeypatch, tmp_path):
    monkeypatch.setattr(instream, "PIECE", 65_537)  # ~430 pieces of the 28 MB document
    monkeypatch.setattr(instream, "_RAW_PIECE", 4099)
    _same(loader.load_file(GPT2), msgspec_gpt2)
    plain = tmp_path / "gpt2.json"
    plain.write_bytes(gzip.decompress(GPT2.read_bytes()))
    t = loader.load_file(plain)
    assert t.host.height == msgspec_gpt2.host.height == 36_976
    _same(t, msgspec_gpt2)


def _stdin(monkeypatch, data: bytes) -> None:
    """Point sys.stdin at a pipe that a thread fills with `data`."""
    r, w = os.pipe()

    def fill() -> None:
        with os.fdopen(w, "wb") as f:
            try:
                f.write(data)
            except BrokenPipeError:
                pass

    threading.Thread(target=fill, daemon=True).start()
    monkeypatch.setattr(sys, "stdin", os.fdopen(r, "r"))


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_stdin_streams_in_pieces(tmp_path, monkeypatch, small_pieces, gz):
    p = write(tmp_path / "t.json", mini_trace(steps=40), gz=gz)
    want = loader.load_file(p)
    _stdin(monkeypatch, p.read_bytes())
    got = loader.load_file("-")
    _same(got, want)
    assert got.steps.height == 40


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_stdin_that_needs_repairs_is_read_again_from_what_was_kept(tmp_path, monkeypatch, small_pieces, gz):
    """A trace cut short: the stream gets through most of it before the scanner refuses; the old path
    salvages the events from the bytes kept plus the rest of the pipe, as it does for the file."""
    text = gzip.decompress(write(tmp_path / "x.json.gz", mini_trace(steps=40), gz=True).read_bytes())
    cut = text[: len(text) * 3 // 4]
    p = tmp_path / "cut.json"
    p.write_bytes(gzip.compress(cut) if gz else cut)
    want = loader.load_file(p)
    assert any("truncated" in w for w in want.meta.warnings)
    _stdin(monkeypatch, p.read_bytes())
    got = loader.load_file("-")
    _same(got, want)


def test_multi_member_gzip_and_zero_padding_stream_whole(tmp_path, monkeypatch, small_pieces):
    text = gzip.decompress(write(tmp_path / "x.json.gz", mini_trace(steps=30), gz=True).read_bytes())
    half = len(text) // 2
    p = tmp_path / "two.json.gz"
    p.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + b"\0" * 5000)
    s = instream.Stream(p, inputs.DEFAULT_MAX_BYTES)
    assert b"".join(s) == text and s.complete
    _same(loader.load_file(p), loader.load_file(tmp_path / "x.json.gz"))


@pytest.mark.parametrize("tail, complete", [(b"", True), (b"junk", False)])
def test_what_the_stream_gives_up_on(tmp_path, small_pieces, tail, complete):
    text = gzip.decompress(write(tmp_path / "x.json.gz", mini_trace(), gz=True).read_bytes())
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text) + tail)
    s = instream.Stream(p, inputs.DEFAULT_MAX_BYTES)
    got = b"".join(s)
    assert s.complete is complete and (got == text if complete else len(got) <= len(text))
    s.close()
    for odd in (text.decode().encode("utf-16"), b"[" + text + b"]", gzip.compress(text)[:-30]):
        p.write_bytes(odd)
        s = instream.Stream(p, inputs.DEFAULT_MAX_BYTES)
        list(s)
        assert not s.complete
        s.close()


def test_the_cap_applies_as_bytes_arrive(tmp_path, small_pieces):
    p = write(tmp_path / "t.json.gz", mini_trace(steps=200), gz=True)
    with pytest.raises(TraceError, match="decompressed size exceeds the input limit of 20 KiB"):
        list(instream.Stream(p, 20 * 1024))


def test_prefetched_scan_gives_the_same_trace(tmp_path, small_pieces):
    """The CLI's prefetch scans in threads while it imports (instream.Scan); the loader takes its result,
    or reads the input again when the scanner refused it."""
    good = write(tmp_path / "good.json.gz", mini_trace(steps=30), gz=True)
    text = gzip.decompress(good.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) * 2 // 3])
    for p in (good, cut):
        want = loader.load_file(p)
        d.prefetch(p, inputs.DEFAULT_MAX_BYTES)
        job = d._PREFETCH[(str(p.resolve()), inputs.DEFAULT_MAX_BYTES)]
        assert isinstance(job, instream.Scan)
        _same(loader.load_file(p), want)
        assert not d._PREFETCH
    assert any("truncated" in w for w in want.meta.warnings)
