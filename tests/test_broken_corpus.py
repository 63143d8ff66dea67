"""Issue 13, item 10: a corpus of broken inputs, generated here from the spec table below, each with its
expected outcome, on the C scanner and on the pure-Python path.

Outcomes: ("error", fragment): exit 2 and exactly one stderr line holding `fragment`; ("warn", fragment):
exit 0 and a warning holding `fragment`; ("ok", None): exit 0 and no warning. Never a traceback or an
"internal error".
"""

from __future__ import annotations

import gzip
import json
import os
import random
from collections.abc import Callable

import pytest
from hostile import PATHS, analyze_json, dump, error_lines, ev, mini_trace, use_path

BASE = json.dumps(mini_trace())  # 3 steps, 12 events; event 3 is the first kernel


def tweak(fn: Callable[[dict], object]) -> bytes:
    """The mini trace after `fn` edits it in place (what fn returns is ignored)."""
    d = mini_trace()
    fn(d)
    return dump(d)


def sub(old: str, new: str, count: int = 1) -> bytes:
    assert old in BASE, old
    return BASE.replace(old, new, count).encode()


def kernel(**kw) -> Callable[[dict], None]:
    def f(d: dict) -> None:
        d["traceEvents"][3].update(kw)
    return f


def kargs(**kw) -> Callable[[dict], None]:
    def f(d: dict) -> None:
        d["traceEvents"][3]["args"].update({k.replace("_", " "): v for k, v in kw.items()})
    return f


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _rand(n: int, seed: int = 13) -> bytes:
    return random.Random(seed).randbytes(n)


def _flip(data: bytes, at: float) -> bytes:
    """One flipped bit at fraction `at` of the bytes."""
    b = bytearray(data)
    b[int(len(b) * at)] ^= 0x10
    return bytes(b)


def _split_members(data: bytes) -> bytes:
    half = len(data) // 2
    return gz(data[:half]) + gz(data[half:])


def _dimension_del(key: str, index: int = 7) -> Callable[[dict], None]:
    def f(d: dict) -> None:
        del d["traceEvents"][index][key]
    return f


BIG = dump(mini_trace(steps=300))

# name -> (bytes builder, file suffix, expected outcome)
CORPUS: dict[str, tuple[Callable[[], bytes], str, tuple[str, str | None]]] = {
    # ---- not a trace at all: exit 2, one line
    "empty": (lambda: b"", ".json", ("error", "empty file")),
    "blank": (lambda: b" \n\t " * 10, ".json", ("error", "empty file")),
    "text": (lambda: b"hello, I am not a trace", ".json", ("error", "not a JSON trace")),
    "json-string": (lambda: b'"traceEvents"', ".json", ("error", "not a JSON trace")),
    "json-number": (lambda: b"12345", ".json", ("error", "not a JSON trace")),
    "xml": (lambda: b'<?xml version="1.0"?><trace/>', ".json", ("error", "not a JSON trace")),
    "zip": (lambda: b"PK\x03\x04" + _rand(200), ".json", ("error", "not a JSON trace")),
    "bzip2": (lambda: b"BZh91AY&SY" + _rand(200), ".json", ("error", "not a JSON trace")),
    "zstd": (lambda: b"\x28\xb5\x2f\xfd" + _rand(200), ".json", ("error", "not a JSON trace")),
    "random-bytes": (lambda: _rand(4096, 1), ".json", ("error", "not a JSON trace")),
    "nul-bytes": (lambda: b"\0" * 4096, ".json", ("error", "not a JSON trace")),
    "empty-object": (lambda: b"{}", ".json", ("error", "no 'traceEvents' array")),
    "other-object": (lambda: b'{"schemaVersion": 1, "foo": []}', ".json", ("error", "no 'traceEvents' array")),
    "events-object": (lambda: b'{"traceEvents": {}}', ".json", ("error", "'traceEvents' is not an array")),
    "events-string": (lambda: b'{"traceEvents": "x"}', ".json", ("error", "'traceEvents' is not an array")),
    "events-null": (lambda: b'{"traceEvents": null}', ".json", ("error", "'traceEvents' is not an array")),
    "events-empty": (lambda: b'{"traceEvents": []}', ".json", ("error", "'traceEvents' is empty")),
    "legacy-empty": (lambda: b"[]", ".json", ("error", "'traceEvents' is empty")),
    "events-not-objects": (lambda: b'{"traceEvents": [1, "a", null]}', ".json", ("error", "'traceEvents' is empty")),
    "only-metadata": (lambda: dump({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                                                      "args": {"name": "t"}}]}), ".json",
                      ("error", "no timed events")),
    "no-ts-anywhere": (lambda: tweak(lambda d: [e.pop("ts") for e in d["traceEvents"]]), ".json",
                       ("error", "no timed events")),
    "only-instants": (lambda: dump({"traceEvents": [{"ph": "i", "name": "x", "pid": 1, "tid": 1, "ts": 5,
                                                      "s": "t"}]}), ".json",
                      ("error", "no PyTorch profiler events")),
    "chrome-browser": (lambda: dump({"traceEvents": [
        {"ph": "B", "pid": 1, "tid": 2, "ts": 100, "cat": "toplevel", "name": "RunTask"},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 200}, ev(name="Paint", cat="blink", ts=150, dur=10)]}), ".json",
        ("error", "not a PyTorch profiler trace")),
    "deep-nesting": (lambda: sub('"args": {"correlation": 100', '"args": {"x": ' + "[" * 3000 + "]" * 3000
                                 + ', "correlation": 100'), ".json", ("error", "nested too deeply")),
    "cut-in-header": (lambda: b'{"traceEv', ".json", ("error", "invalid JSON")),
    "cut-before-events": (lambda: b'{"traceEvents": [', ".json", ("error", "invalid JSON")),
    "utf16-odd-length": (lambda: b"\xff\xfe" + "{}".encode("utf-16-le") + b"\x00", ".json",
                         ("error", "not valid UTF-16")),
    "gzip-garbage": (lambda: b"\x1f\x8b" + b"\0" * 50, ".json.gz", ("error", "gzip")),
    "gzip-cut-header": (lambda: gz(dump(mini_trace()))[:12], ".json.gz", ("error", "truncated gzip")),
    "gzip-of-zeros": (lambda: gz(b"\0" * 100_000), ".json.gz", ("error", "not a JSON trace")),
    "gzip-of-text": (lambda: gz(b"hello world, not json"), ".json.gz", ("error", "not a JSON trace")),
    "gzip-of-empty": (lambda: gz(b""), ".json.gz", ("error", "empty file")),
    # ---- repaired or salvaged: exit 0 with a warning
    "bare-nan-dur": (lambda: sub('"dur": 60', '"dur": NaN'), ".json", ("warn", "repaired invalid JSON")),
    "bare-inf-ts": (lambda: sub('"ts": 1020.0', '"ts": Infinity'), ".json",
                    ("warn", "without a usable 'ts'")),
    "huge-exponent": (lambda: sub('"dur": 60', '"dur": 1e999'), ".json", ("warn", "out-of-range numbers")),
    "unescaped-quote": (lambda: sub('"name": "aten::mm"', '"name": "aten::m"m"'), ".json",
                        ("warn", "repaired invalid JSON")),
    "lone-surrogate": (lambda: sub('"name": "aten::mm"', '"name": "aten::\\ud800mm"'), ".json",
                       ("warn", "lone surrogate escapes")),
    "raw-control-char": (lambda: sub('"name": "aten::mm"', '"name": "aten::\x01mm"'), ".json",
                         ("warn", "raw control characters")),
    "invalid-utf8": (lambda: sub('"name": "aten::mm"', '"name": "aten::@@mm"').replace(b"@@", b"\xff"), ".json",
                     ("warn", "invalid UTF-8")),
    "truncated-json": (lambda: BIG[: int(len(BIG) * 0.7)], ".json", ("warn", "trace is truncated")),
    "truncated-gzip": (lambda: gz(BIG)[: int(len(gz(BIG)) * 0.6)], ".json.gz", ("warn", "gzip stream is truncated")),
    "damaged-gzip": (lambda: _flip(gz(BIG), 0.75), ".json.gz", ("warn", "gzip data")),
    "gzip-trailing-garbage": (lambda: gz(dump(mini_trace())) + b"not gzip", ".json.gz", ("warn", "trailing data")),
    "garbage-mid-json": (lambda: BIG.replace(b'"ProfilerStep#200"', b'\x00junk{"ProfilerStep#200"', 1), ".json",
                         ("warn", "invalid JSON at byte")),
    "utf16-le-bom": (lambda: BASE.encode("utf-16"), ".json", ("warn", "UTF-16-LE")),
    "utf16-be": (lambda: BASE.encode("utf-16-be"), ".json", ("warn", "UTF-16-BE")),
    "utf32": (lambda: BASE.encode("utf-32"), ".json", ("warn", "UTF-32")),
    "regs-float": (lambda: tweak(kargs(registers_per_thread=254.0)), ".json", ("warn", "registers per thread (float)")),
    "grid-string": (lambda: tweak(kargs(grid="4,32,1")), ".json", ("warn", "grid (str)")),
    "grid-not-numbers": (lambda: tweak(kargs(grid=[1, "a", 3])), ".json", ("warn", "ignored 1 args value(s)")),
    "correlation-2^63": (lambda: tweak(kargs(correlation=2**63 + 1)), ".json", ("warn", "int beyond 64 bits")),
    "correlation-string": (lambda: tweak(kargs(correlation="100")), ".json", ("warn", "correlation (str)")),
    "external-id-float": (lambda: tweak(kargs(**{"External id": 10.0})), ".json", ("warn", "External id (float)")),
    "args-array": (lambda: tweak(kernel(args=[1, 2])), ".json", ("warn", "args (array)")),
    "args-string": (lambda: tweak(kernel(args="x")), ".json", ("warn", "args (str)")),
    "ts-string": (lambda: tweak(kernel(ts="1020.0")), ".json", ("warn", "ts (str)")),
    "ts-bool": (lambda: tweak(kernel(ts=True)), ".json", ("warn", "ts (bool)")),
    "ts-null": (lambda: tweak(kernel(ts=None)), ".json", ("warn", "without a usable 'ts'")),
    "dur-string-junk": (lambda: tweak(kernel(dur="sixty")), ".json", ("warn", "dur (str)")),
    "name-number": (lambda: tweak(kernel(name=12)), ".json", ("warn", "name (int)")),
    "name-object": (lambda: tweak(kernel(name={"a": 1})), ".json", ("warn", "name (object)")),
    "pid-float": (lambda: tweak(kernel(pid=1.5)), ".json", ("warn", "pid (float)")),
    "pid-null": (lambda: tweak(kernel(pid=None)), ".json", ("warn", "pid (null)")),
    "ph-number": (lambda: tweak(kernel(ph=5)), ".json", ("warn", "ph (int)")),
    "event-array": (lambda: tweak(lambda d: d["traceEvents"].append([1, 2])), ".json",
                    ("warn", "skipped 1 entries of 'traceEvents' that are not objects")),
    "trace-name-int": (lambda: tweak(lambda d: d.update(traceName=5)), ".json", ("warn", "traceName (int)")),
    "base-time-string": (lambda: tweak(lambda d: d.update(baseTimeNanoseconds="x")), ".json",
                         ("warn", "baseTimeNanoseconds (str)")),
    "missing-ts": (lambda: tweak(_dimension_del("ts")), ".json", ("warn", "without a usable 'ts'")),
    "missing-dur": (lambda: tweak(_dimension_del("dur")), ".json", ("warn", "without a usable 'dur'")),
    "negative-dur": (lambda: tweak(kernel(dur=-5)), ".json", ("warn", "negative 'dur'")),
    "negative-ts": (lambda: tweak(lambda d: d["traceEvents"].append(ev(name="aten::x", ts=-3, dur=1))), ".json",
                    ("warn", "negative timestamp")),
    "ts-far-future": (lambda: tweak(lambda d: d["traceEvents"].append(ev(name="aten::x", ts=1e17, dur=1))),
                      ".json", ("warn", "over 7 days from the rest")),
    "ts-beyond-int64-ns": (lambda: tweak(lambda d: d["traceEvents"].append(ev(name="aten::x", ts=9.3e15, dur=1))),
                           ".json", ("warn", "over 7 days from the rest")),
    "dur-huge": (lambda: tweak(kernel(dur=1e300)), ".json", ("warn", "duration over 7 days")),
    "step-20-digits": (lambda: tweak(lambda d: d["traceEvents"].append(
        ev(name="ProfilerStep#12345678901234567890", cat="user_annotation", ts=1500, dur=5))), ".json",
        ("warn", "does not fit in 64 bits")),
    "flow-id-2^64": (lambda: tweak(lambda d: d["traceEvents"].append(
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 2**64, "pid": 1, "tid": 1, "ts": 1010})), ".json",
        ("warn", "flow ids beyond 64 bits")),
    "steps-out-of-order": (lambda: tweak(lambda d: d["traceEvents"].append(
        ev(name="ProfilerStep#99", cat="user_annotation", ts=500, dur=5))), ".json",
        ("warn", "away from their work")),  # (empty and out of order: ignored; with work inside, test_hostile_inputs)
    "no-profiler-steps": (lambda: tweak(lambda d: d.update(traceEvents=[e for e in d["traceEvents"]
                                                                          if "ProfilerStep" not in e["name"]])),
                          ".json", ("warn", "no ProfilerStep#N annotations")),
    "gpu-only": (lambda: dump({"traceEvents": [ev(name="k", cat="kernel", pid=0, tid=7, ts=10, dur=5,
                                                   args={"device": 0, "stream": 7})]}), ".json",
                 ("warn", "no ProfilerStep#N annotations")),
    # ---- odd but fine: exit 0, no warning
    "utf8-bom": (lambda: b"\xef\xbb\xbf" + BASE.encode(), ".json", ("ok", None)),
    "gzip-zero-padding": (lambda: gz(BASE.encode()) + b"\0" * 1024, ".json.gz", ("ok", None)),
    "gzip-two-members": (lambda: _split_members(BASE.encode()), ".json.gz", ("ok", None)),
    "plain-json-named-gz": (lambda: BASE.encode(), ".json.gz", ("ok", None)),
    "pid-beyond-int64": (lambda: tweak(lambda d: [e.update(pid=2**70) for e in d["traceEvents"] if e["pid"] == 1]),
                         ".json", ("ok", None)),
    "device-properties-string": (lambda: tweak(lambda d: d.update(deviceProperties="H200")), ".json", ("ok", None)),
    "distributed-info-list": (lambda: tweak(lambda d: d.update(distributedInfo=[1, 2])), ".json", ("ok", None)),
    "unknown-keys": (lambda: tweak(lambda d: d["traceEvents"][3].update(zzz={"deep": [1, {"x": None}]})), ".json",
                     ("ok", None)),
}


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 60
    kinds = {v[2][0] for v in CORPUS.values()}
    assert kinds == {"error", "warn", "ok"}


@pytest.mark.parametrize("kind", PATHS)
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_broken_input(name, kind, tmp_path, capsys, monkeypatch):
    use_path(kind, monkeypatch)
    build, suffix, (outcome, fragment) = CORPUS[name]
    p = tmp_path / f"{name}{suffix}"
    p.write_bytes(build())
    rc, doc, err = analyze_json(capsys, p)
    assert "Traceback" not in err and "internal error" not in err, err
    if outcome == "error":
        assert rc == 2, (rc, err, doc and doc["traces"] and doc["traces"][0]["warnings"])
        lines = error_lines(err)
        assert len(lines) == 1 and fragment in lines[0], lines
        return
    assert rc == 0, err
    (t,) = doc["traces"]
    if outcome == "ok":
        assert t["warnings"] == [], t["warnings"]
    else:
        assert any(fragment in w for w in t["warnings"]), t["warnings"]


@pytest.mark.parametrize("case", ["no-traces", "fifo-only", "symlink-loop", "dangling-link", "fifo", "over-cap"])
def test_broken_paths(case, tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    args: list = []
    if case == "no-traces":
        (d / "notes.txt").write_text("x")
        target, fragment = d, "no trace files"
    elif case == "fifo-only":
        os.mkfifo(d / "rank0.json")
        target, fragment = d, "no trace files"
    elif case == "symlink-loop":
        (d / "a.json").symlink_to(d / "b.json")
        (d / "b.json").symlink_to(d / "a.json")
        target, fragment = d / "a.json", "symbolic link loop"
    elif case == "dangling-link":
        (d / "a.json").symlink_to(d / "gone.json")
        target, fragment = d / "a.json", "broken symbolic link"
    elif case == "fifo":
        os.mkfifo(d / "t.json")
        target, fragment = d / "t.json", "named pipe"
    else:
        target, fragment = d / "t.json", "exceeds the input limit"
        (d / "t.json").write_bytes(BIG)
        args = ["--max-bytes", "64K"]
    rc, doc, err = analyze_json(capsys, target, *args)
    lines = error_lines(err)
    assert rc == 2 and len(lines) == 1 and fragment in lines[0], lines


def test_a_good_file_beside_broken_ones_is_still_reported(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(BASE)
    bad = [tmp_path / f"{n}.json" for n in ("empty-object", "text", "events-empty")]
    for p in bad:
        p.write_bytes(CORPUS[p.stem][0]())
    rc, doc, err = analyze_json(capsys, good, *bad)
    assert rc == 2
    assert [t["path"] for t in doc["traces"]] == [str(good)]
    assert sorted(e["path"] for e in doc["errors"]) == sorted(map(str, bad))
    assert len(error_lines(err)) == 3
