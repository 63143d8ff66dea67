"""The C scanner (traceview/ingest/_scan.c via traceview/ingest/fastscan.py) builds exactly the frames of the msgspec path,
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
from conftest import SAMPLES, bundled
from polars.testing import assert_frame_equal

from traceview.ingest import argtables as at
from traceview.ingest import decode as d
from traceview.ingest import fastscan, loader
from traceview.ingest.categories import GPU_CATS, HOST_CATS, OLD_CATS, RARE_NAMES, RUNTIME_CATS

pytestmark = pytest.mark.skipif(fastscan._scan is None, reason="C extension traceview.ingest._scan not built")

FRAMES = ("host", "gpu", "gpu_annotations", "memory", "flows", "steps", "threads")
TRACES = bundled()


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


def test_args_left_to_msgspec_when_it_would_differ():
    """An args object with a value the scanner cannot vouch for is kept as text, its row decoded by msgspec;
    the others are parsed as they are scanned and not kept."""
    objs = [b'{"External id": "5"}', b'{"External id": 1.0}', b'{"External id": 3, "External id": 4}',
            b'{"\\u0045xternal id": 6}', b'{"Sequence number": 9223372036854775808}', b'{"External id": 7}',
            b"{}"]
    evs = b",".join(b'{"ph": "X", "cat": "cpu_op", "name": "a", "args": %s}' % o for o in objs)
    ev = fastscan.scan(b'{"traceEvents": [' + evs + b"]}")
    rows, got, bad, raws = ev.table(at.OP)
    assert rows.to_list() == list(range(7)) and bad.tolist() == [0, 1, 2, 3, 4] and raws == objs[:5]
    assert got["external_id"].to_list() == [None] * 5 + [7, None]
    with pytest.raises(TypeError):  # handed over once
        ev.table(at.OP)
    assert ev.table(at.GPU)[0].len() == 0


def _crafted_odd() -> str:
    """Args values of other types than the structs declare (coerced or dropped, with warnings), escaped and
    duplicate keys, ints beyond 64 bits, a name the Python regex would take as rare but polars' does not."""
    evs = [
        _ev(name="ProfilerStep#1", cat="user_annotation", ts=1, dur=100, args={"External id": 1}),
        _ev(name="aten::mm", ts=2, dur=3, args={"External id": "7", "Input Dims": [[2, 2]], "Sequence number": 1.5}),
        _ev(name="aten::gather\n", ts=3, dur=1, args={"External id": 8, "Concrete Inputs": ["", "1"]}),
        _ev(name="aten::gather", ts=4, dur=1, args={"External id": 9, "Concrete Inputs": ["", "1"], "Seq": "x"}),
        _ev(name="nccl:all_reduce", ts=5, dur=1, args={"External id": 10, "In msg nelems": 2**70,
                                                       "Collective name": 5, "kind": "k", "size": 3}),
        _ev(name="cudaLaunchKernel", cat="cuda_runtime", ts=6, dur=1, args={"correlation": "11"}),
        _ev(name="kern", cat="kernel", pid=0, tid=7, ts=7, dur=1,
            args={"correlation": 11, "device": 0, "stream": "7", "grid": [1, 2], "block": [1, "x", 1],
                  "blocks per SM": "0,5", "est. achieved occupancy %": "HUGE", "Process Group Ranks": [0, 2**70]}),
        _ev(name="kern", cat="kernel", pid=0, tid=7, ts=8, dur=1,
            args={"correlation": 12, "device": 0, "stream": 7, "grid": None, "bytes": 2**64}),
        {"ph": "i", "name": "[memory]", "pid": 7, "tid": 7, "ts": 9, "s": "t", "args": {"Bytes": "512", "Addr": 2**63}},
        {"ph": "i", "name": "[memory]", "pid": 7, "tid": 7, "ts": 9, "s": "t"},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": 7}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8},
        _ev(name="ann", cat="gpu_user_annotation", pid=0, tid=7, ts=7, dur=1),
    ]
    text = json.dumps({"traceEvents": evs})
    text = text.replace('"HUGE"', "1e400")  # beyond float64 (json.dumps would write Infinity)
    return text.replace('"kind": "k"', '"kind": "k", "k\\u0069nd": 1').replace('"size": 3', '"size": 3, "size": 4')


def test_odd_args_identical(tmp_path, monkeypatch):
    path = tmp_path / "odd.json"
    path.write_text(_crafted_odd(), encoding="utf-8")
    ev = fastscan.scan(path.read_bytes())
    assert ev is not None and ev.table(at.OP)[2].size > 0
    _assert_same(path, monkeypatch)
    t = _load(path, monkeypatch, True)
    assert t.host.filter(pl.col("name") == "aten::gather\n")["concrete"][0] is None
    assert t.host.filter(pl.col("name") == "aten::gather")["concrete"][0] is not None
    assert any("args" in w for w in t.meta.warnings)


def test_args_before_the_name_identical(tmp_path, monkeypatch):
    """An args object that comes before ph / cat / name in its event is parsed once those are known: the same
    frames as with args last (where the scanner parses it as it walks the event)."""
    doc = json.loads(_crafted_odd().replace("1e400", '"HUGE"'))
    doc["traceEvents"] = [dict(reversed(list(e.items()))) for e in doc["traceEvents"]]
    assert list(doc["traceEvents"][1])[0] == "args"
    path = tmp_path / "rev.json"
    path.write_text(json.dumps(doc).replace('"HUGE"', "1e400"), encoding="utf-8")
    _assert_same(path, monkeypatch)
    fwd = tmp_path / "fwd.json"
    fwd.write_text(_crafted_odd(), encoding="utf-8")
    a, b = _load(path, monkeypatch, True), _load(fwd, monkeypatch, True)
    for f in FRAMES:
        assert_frame_equal(getattr(a, f), getattr(b, f))


def test_tables_hold_the_loaders_rows():
    """The rows the scanner parses for each args table are exactly those the loader's polars selections
    (category rewrite, `str.contains(RARE_NAMES)`...) take from a real trace, and only their objects."""
    data, _ = d.read_bytes(SAMPLES / "gpu_h200_real/hf_gpt2_train_bf16.json.gz")
    ev = fastscan.scan(data)
    base = pl.DataFrame({"ph": ev.ph, "cat": ev.cat, "name": ev.name, "nargs": ev.nargs}).with_row_index("i")
    base = base.with_columns(cat=pl.when((pl.col("cat") == "") & (pl.col("ph") == "X")).then(pl.lit("cpu_op"))
                             .otherwise(pl.col("cat").replace(OLD_CATS)))
    x, has = pl.col("ph") == "X", pl.col("nargs") > 0
    want = {
        at.PY: x & (pl.col("cat") == "python_function") & pl.col("name").str.starts_with("nn.Module:"),
        at.OP: x & pl.col("cat").is_in(["cpu_op", "user_annotation"]),
        at.RT: x & pl.col("cat").is_in(RUNTIME_CATS),
        at.RARE: x & pl.col("cat").is_in(HOST_CATS) & pl.col("name").str.contains(RARE_NAMES),
        at.GPU: x & pl.col("cat").is_in(GPU_CATS), at.GANN: x & (pl.col("cat") == "gpu_user_annotation"),
        at.MEM: (pl.col("ph") == "i") & (pl.col("name") == "[memory]"),
        at.META: (pl.col("ph") == "M") & pl.col("name").is_in(["thread_name", "process_name", "process_labels"]),
    }
    counts = {}
    for k, sel in want.items():
        rows, got, bad, _ = ev.table(k)
        assert rows.to_list() == base.filter(sel & has)["i"].to_list(), k
        assert bad.size == 0
        counts[k] = rows.len()
    assert counts[at.OP] == 18_711 and counts[at.GPU] == 3_639 and counts[at.RARE] > 0 and counts[at.RT] > 0, counts
    assert memoryview(ev._odd).nbytes == 0  # no args text kept


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
    import polars as pl
    from traceview.ingest import argtables as at, decode as d, fastscan
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
            s = fastscan.scanner()
            cuts = sorted(rng.sample(range(1, len(data)), min(6, len(data) - 1)))
            for lo, hi in zip([0, *cuts], [*cuts, len(data)]):
                s.feed(data[lo:hi])
            r = s.finish()
            whole = fastscan.scan(data)
            assert (r is None) == (whole is None), path
            if r is None:
                continue
            # whatever the scanner accepts, msgspec must accept too, with the same events
            doc = msgspec.json.decode(data, type=d.Doc)
            assert r["n"] == whole.n == len(doc.traceEvents), path
            assert bytes(r["nargs"]) == whole.nargs.to_numpy().tobytes(), path
            ev = fastscan.events(r)
            assert bytes(ev._odd) == bytes(whole._odd), path
            for k in range(len(at.TABLES)):
                rows, got, bad, raws = ev.table(k)
                rows2, got2, bad2, raws2 = whole.table(k)
                assert rows.to_list() == rows2.to_list() and bad.tolist() == bad2.tolist() and raws == raws2
                for a, v in got.items():
                    assert (v.to_list() if isinstance(v, pl.Series) else v) == (
                        got2[a].to_list() if isinstance(got2[a], pl.Series) else got2[a]), (path, a)
            n_ok += 1
    print("ok", n_ok)
""")


def test_fuzz_never_crashes():
    small = [SAMPLES / "gpu_h200/compute_bound_gemm.json.gz", SAMPLES / "hta/cpu_only/"
             "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"]
    r = subprocess.run([sys.executable, "-c", FUZZ, *map(str, small)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"fuzz process died ({r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.startswith("ok")


@pytest.mark.parametrize("n", [0, 1, 70_000])
def test_constant_columns_equal_repeat(n: int) -> None:
    """The absent columns of the args tables (a value repeated, built without a query) equal `pl.repeat`."""
    for value, dtype in ((b"", pl.Binary), (None, pl.Int64), (None, pl.Null)):
        got = fastscan._constant("c", value, dtype, n)
        want = pl.repeat(value, n, dtype=dtype, eager=True).alias("c")
        assert got.dtype == dtype and got.len() == n and got.equals(want)
        assert got.null_count() == (n if value is None else 0)


def _inspect_bits(t: msgspec.inspect.Type) -> int:
    """The JSON types a field accepts, from msgspec's own type description (independent of the annotations)."""
    mi = msgspec.inspect
    if isinstance(t, mi.UnionType):
        bits = 0
        for u in t.types:
            bits |= _inspect_bits(u)
        return bits
    return {mi.NoneType: at.T_NULL, mi.IntType: at.T_INT, mi.FloatType: at.T_INT | at.T_FLOAT, mi.StrType: at.T_STR,
            mi.RawType: at._ANY, mi.AnyType: at._ANY}.get(type(t)) or (
        at.T_ARR_INT if isinstance(t, mi.ListType) and isinstance(t.item_type, mi.IntType) else None)


def test_scanner_spec_matches_msgspecs_description_of_the_structs() -> None:
    """The type bits the scanner checks, derived from the structs' annotations, equal those msgspec.inspect gives
    (the decoder the scanner must agree with), for every field of every args struct."""
    for typ in dict.fromkeys(t.typ for t in at.TABLES):
        info = msgspec.inspect.type_info(typ).fields
        got = at._struct_fields(typ)
        assert [(f.name, f.encode_name.encode()) for f in info] == [(a, k) for a, k, *_ in got]
        for f, (_, _, bits, dim3, _) in zip(info, got, strict=True):
            assert dim3 == isinstance(f.type, msgspec.inspect.StructType)
            assert bits == (at.T_ARR_INT | at.T_ARR if dim3 else _inspect_bits(f.type)), f.name
    assert any(b & at.T_FLOAT for typ in (d.GpuArgs,) for _, _, b, _, _ in at._struct_fields(typ))
