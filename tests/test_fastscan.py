"""The C scanner (traceview/_scan.c via traceview/fastscan.py) builds exactly the frames of the msgspec path,
refuses what it cannot vouch for, and never crashes on malformed bytes."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import msgspec
import polars as pl
import pytest
from conftest import SAMPLES
from polars.testing import assert_frame_equal

from traceview import decode as d
from traceview import fastscan, loader

pytestmark = pytest.mark.skipif(fastscan._scan is None, reason="C extension traceview._scan not built")

FRAMES = ("host", "gpu", "gpu_annotations", "memory", "flows", "steps", "threads")
TRACES = sorted(SAMPLES.rglob("*.json.gz"))


def _load(path, monkeypatch, c: bool):
    monkeypatch.setenv("TRACEVIEW_NO_C", "0" if c else "1")
    return loader.load_file(path)


def _assert_same(path, monkeypatch):
    fast = _load(path, monkeypatch, True)
    slow = _load(path, monkeypatch, False)
    for f in FRAMES:
        try:
            assert_frame_equal(getattr(fast, f), getattr(slow, f))
        except AssertionError as e:
            raise AssertionError(f"{path.name}: frame {f!r} differs: {e}") from None
    assert fast.meta == slow.meta


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_sample_trace_frames_identical(path, monkeypatch):
    data, _ = d.read_bytes(path)
    assert fastscan.scan(data) is not None, "the C scanner should take every sample trace"
    _assert_same(path, monkeypatch)


def _ev(**kw):
    return {"ph": "X", "cat": "cpu_op", "pid": 7, "tid": 7, "ts": 10.0, "dur": 1.0, **kw}


def _crafted() -> str:
    """Escapes, unicode, string pids/tids/ids, nulls, odd numbers, keys after traceEvents."""
    evs = [
        _ev(name="ProfilerStep#1", cat="user_annotation", ts=1e1, dur=100, args={"External id": 1}),
        _ev(name='aten::"q\\uote" \t\u00e9\U0001F600/', ts=12.5, dur=3.25,
            args={"External id": 2, "Input Dims": [[4, 5], []], "Input type": ["float", ""],
                  "Sequence number": None, "Ev Idx": 3, "nested": {"a": [1, {"b": "}"}]}}),
        _ev(name="cudaLaunchKernel", cat="cuda_runtime", ts=13, dur=0.5,
            args={"correlation": 9, "External id": 2, "cbid": 211}),
        _ev(name="cudaLaunchKernel", cat="cuda_runtime", ts=14, dur=0.5, args={"correlation": 10}),
        _ev(name="kern", cat="kernel", pid=0, tid="stream 7", ts=15.123456789, dur=2,
            args={"correlation": 9, "device": 0, "stream": 7, "grid": [1, 2, 3], "block": [128, 1, 1],
                  "blocks per SM": 0.5, "est. achieved occupancy %": 12, "bytes": "1024"}),
        _ev(name="kern2", cat="kernel", pid=0, tid=7, ts=17, dur=2,
            args={"correlation": 10, "device": "0", "stream": 7, "grid": [1, None, 3],
                  "Process Group Ranks": [0, 1], "Collective name": "allreduce"}),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 7, "tid": 7, "ts": 13},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": "0x1a", "pid": 0, "tid": 7, "ts": 15, "bp": "e"},
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": None, "pid": 7, "tid": 7, "ts": 13},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 7, "ts": 16, "s": "t",
         "args": {"Bytes": -512, "Total Allocated": 2048, "Addr": 9223372036854775807}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "thread 7 (python3)"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 1e1, "dur": 1e2, "args": {"Op count": 0}},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 110},
    ]
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU \\ \u00e9"}]}
    body = json.dumps(evs, ensure_ascii=False, indent=1).replace("15.123456789", "1.5123456789E+1")
    tail = {"traceName": "x.json", "baseTimeNanoseconds": 1700000000000000000, "distributedInfo": {"rank": 3}}
    return json.dumps(head)[:-1] + ', "traceEvents": ' + body + ", " + json.dumps(tail)[1:]


def test_crafted_trace_identical(tmp_path, monkeypatch):
    path = tmp_path / "crafted.json"
    path.write_text(_crafted(), encoding="utf-8")
    assert fastscan.scan(path.read_bytes()) is not None
    _assert_same(path, monkeypatch)
    t = _load(path, monkeypatch, True)
    assert t.meta.rank == 3 and t.meta.trace_name == "x.json"
    assert t.flows["id"].to_list() == [9, 26, None]
    assert t.host.filter(pl.col("name").str.starts_with("aten::"))["name"][0] == 'aten::"q\\uote" \t\u00e9\U0001F600/'


@pytest.mark.parametrize("bad", [
    b"", b"[]", b'[{"ph": "X"}]', b"{}", b'{"traceEvents": []', b'{"traceEvents": [{"ts": NaN}]}',
    b'{"traceEvents": [{"ts": inf}]}', b'{"traceEvents": [{"name": "a"b"}]}', b'{"traceEvents": [{"ts": 1e999}]}',
    b'{"traceEvents": [{"pid": 1.5}]}', b'{"traceEvents": [{"pid": null}]}', b'{"traceEvents": [{"ts": "1"}]}',
    b'{"traceEvents": [{"ph": "X", "ph": "X"}]}', b'{"traceEvents": [], "traceEvents": []}',
    b'{"traceEvents": [{"args": null}]}', b'{"traceEvents": [{"name": "\\ud800"}]}', b'{"traceEvents": [1]}',
    b'{"traceEvents": [{"name": "\xff"}]}', b'{"traceEvents": [{"id": 18446744073709551615}]}',
    b'{"traceEvents": []} x', b'{"traceEvents": [{"ts": 01}]}', b'{"traceEvents": [{"x": tru}]}',
    b'{"traceEvents": [{"name": "a\x01"}]}', b'{"traceEvents": [{"x": [' * 100 + b"]" * 100 + b"}]}",
    b'{"traceEvents": [], "baseTimeNanoseconds": "x"}',
])
def test_refuses(bad):
    assert fastscan.scan(bad) is None


def test_args_refused_when_msgspec_would_differ():
    data = b'{"traceEvents": [{"args": {"External id": "5"}}, {"args": {"External id": 1.0}}, {"args": {}}]}'
    ev = fastscan.scan(data)
    for row in (0, 1):
        assert ev.args_values(pl.Series([row], dtype=pl.UInt32), d.HostArgs, ["external_id"], {"external_id"}) is None
    got = ev.args_values(pl.Series([2], dtype=pl.UInt32), d.HostArgs, ["external_id"], {"external_id"})
    assert got["external_id"].to_list() == [None]


def test_no_c_env_and_fallback(monkeypatch):
    data = gzip.decompress((SAMPLES / "gpu_h200/compute_bound_gemm.json.gz").read_bytes())
    monkeypatch.setenv("TRACEVIEW_NO_C", "1")
    assert fastscan.scan(data) is None
    monkeypatch.delenv("TRACEVIEW_NO_C")
    ev = fastscan.scan(data)
    assert ev is not None and ev.n == len(msgspec.json.decode(data, type=d.Doc).traceEvents)


FUZZ = textwrap.dedent("""
    import gzip, random, sys
    import msgspec
    from traceview import _scan, decode as d, fastscan
    rng = random.Random(1234)
    n_ok = 0
    for path in sys.argv[1:]:
        good = gzip.decompress(open(path, "rb").read())
        for k in range(100):
            b = bytearray(good)
            op = k % 4
            if op == 0:
                b = b[: rng.randrange(len(b))]
            else:
                for _ in range(rng.randint(1, 4)):
                    pos = rng.randrange(len(b))
                    if op == 1:
                        b[pos] = rng.randrange(256)
                    elif op == 2:
                        b[pos:pos] = rng.choice([b'"', b"\\\\", b"{", b"]", b",", b"\\x00", b"\\xff", b"\\\\u12"])
                    else:
                        del b[pos: pos + rng.randint(1, 40)]
            data = bytes(b)
            # fed in random pieces: a cut inside any token must give what one piece gives
            s = _scan.Scanner()
            cuts = sorted(rng.sample(range(1, len(data)), min(6, len(data) - 1)))
            for lo, hi in zip([0, *cuts], [*cuts, len(data)]):
                s.feed(data[lo:hi])
            r = s.finish()
            whole = fastscan.scan(data)
            assert (r is None) == (whole is None), path
            if r is None:
                continue
            assert r["n"] == whole.n and bytes(r["args"][1]) == bytes(whole._bufs[1]), path
            # whatever the scanner accepts, msgspec must accept too, with the same events
            doc = msgspec.json.decode(data, type=d.Doc)
            assert r["n"] == len(doc.traceEvents), path
            ev = fastscan.scan(data)
            if ev is None:
                continue
            rows = (ev.nargs > 0).arg_true()
            for typ in (d.HostArgs, d.GpuArgs, d.MemArgs, d.MetaArgs):
                attrs = [f.name for f in msgspec.structs.fields(typ) if f.name not in ("grid", "block")]
                ev.args_values(rows, typ, attrs, set(attrs))
            n_ok += 1
    print("ok", n_ok)
""")


def test_fuzz_never_crashes():
    small = [SAMPLES / "gpu_h200/compute_bound_gemm.json.gz", SAMPLES / "hta/cpu_only/"
             "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"]
    r = subprocess.run([sys.executable, "-c", FUZZ, *map(str, small)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"fuzz process died ({r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.startswith("ok")
