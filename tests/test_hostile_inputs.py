"""Issue 13, items 2-5: each defect of the adversarial run as a minimal generated reproducer, on the C
scanner and on the pure-Python (msgspec) path. A broken variant of `mini_trace` is compared with the
clean one, whose numbers are known by construction (3 steps of 100 µs, one 60 µs kernel each)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import polars as pl
import pytest
from conftest import SAMPLES
from hostile import (
    KERNEL_US,
    PATHS,
    analyze_json,
    dump,
    error_lines,
    ev,
    mini_trace,
    run_cli,
    use_path,
    write,
)

import traceview
from traceview.ingest import inputs


@pytest.fixture(params=PATHS)
def path_kind(request, monkeypatch):
    use_path(request.param, monkeypatch)
    return request.param


def _one(doc: dict) -> dict:
    assert doc is not None and not doc["errors"], doc and doc["errors"]
    assert len(doc["traces"]) == 1
    return doc["traces"][0]


def _clean_numbers(t: dict) -> None:
    """What the clean mini trace gives: 3 steps of 100 µs, GPU busy 60 %, the kernel launched by aten::mm."""
    assert t["summary"]["step_numbers"] == [0, 1, 2]
    assert t["summary"]["avg_step_us"] == 100.0
    assert t["summary"]["gpu_busy_pct"] == 60.0
    k = t["top_kernels"][0]
    assert (k["name"], k["count"], k["total_us"], k["op"]) == ("gemm_kernel", 3, 3 * KERNEL_US, "aten::mm")


def _warned(t: dict, *fragments: str) -> None:
    text = "\n".join(t["warnings"])
    for f in fragments:
        assert f in text, f"{f!r} not in warnings: {t['warnings']}"


def test_clean_mini_trace(tmp_path, capsys, path_kind):
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", mini_trace()))
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)
    assert t["warnings"] == []


# ---- item 2: internal errors ----------------------------------------------------------------------------

def test_gpu_kernels_without_cpu_ops(tmp_path, capsys, path_kind):
    evs = [ev(name="k", cat="kernel", pid=0, tid=7, ts=10 + 20 * i, dur=5, args={"device": 0, "stream": 7})
           for i in range(4)]
    rc, doc, err = analyze_json(capsys, write(tmp_path / "gpu_only.json", {"traceEvents": evs}))
    assert rc == 0, err
    t = _one(doc)
    # one synthetic step from the first kernel's start to the last one's end: 4 x 5 µs busy of 65 µs
    assert t["summary"]["avg_step_us"] == 65.0 and t["summary"]["gpu_busy_pct"] == round(100 * 20 / 65, 2)
    assert t["layers"]["layers"] == [] or all(r["gpu_us"] == 0 for r in t["layers"]["layers"]
                                              if r["layer"] != "(unattributed)")
    _warned(t, "no ProfilerStep#N annotations")


@pytest.mark.parametrize("events", [
    [{"ph": "i", "name": "x", "pid": 1, "tid": 1, "ts": 5, "s": "t"}],
    [ev(name="MessageLoop::RunTask", cat="toplevel", ts=5, dur=3)],
], ids=["instant-only", "chrome-browser"])
def test_no_profiler_events_is_one_line(tmp_path, capsys, path_kind, events):
    rc, doc, err = analyze_json(capsys, write(tmp_path / "x.json", {"traceEvents": events}))
    assert rc == 2 and len(error_lines(err)) == 1, err
    assert "no PyTorch profiler events" in err and "internal error" not in err


@pytest.mark.parametrize("ts,dur,warning", [
    (1e17, 1, "skipped 1 events whose timestamp lies over 7 days"),
    (-1e17, 1, "skipped 1 events whose timestamp lies over 7 days"),
    (9.3e18, 1, "skipped 1 events whose timestamp lies over 7 days"),
    (1000, 1e300, "skipped 1 events with a duration over 7 days"),  # dur x 1000 would overflow int64
])
def test_times_beyond_int64_are_skipped(tmp_path, capsys, path_kind, ts, dur, warning):
    d = mini_trace()
    d["traceEvents"].append(ev(name="aten::corrupt", ts=ts, dur=dur))
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)
    _warned(t, warning)


def test_profiler_step_number_of_20_digits(tmp_path, capsys, path_kind):
    d = mini_trace()
    d["traceEvents"].append(ev(name="ProfilerStep#12345678901234567890", cat="user_annotation", ts=1500, dur=10))
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)
    _warned(t, "ignored 1 ProfilerStep annotations whose step number does not fit in 64 bits")


def test_flow_ids_beyond_64_bits(tmp_path, capsys, path_kind):
    d = mini_trace()
    big = 2**64 + 5
    d["traceEvents"] += [{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": big, "pid": 1, "tid": 1, "ts": 1010},
                         {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": big, "pid": 0, "tid": 7, "ts": 1020,
                          "bp": "e"},
                         {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 1, "tid": 1, "ts": 1110}]
    p = write(tmp_path / "t.json", d)
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    _clean_numbers(_one(doc))
    _warned(_one(doc), "ignored 2 flow ids beyond 64 bits")
    assert traceview.load_file(p).flows["id"].to_list() == [None, None, 7]


def test_json_nested_deeper_than_the_decoder_goes(tmp_path, capsys, path_kind):
    body = '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"x": ' \
        + "[" * 5000 + "]" * 5000 + "}}]}"
    rc, doc, err = analyze_json(capsys, write(tmp_path / "deep.json", body.encode()))
    assert rc == 2 and len(error_lines(err)) == 1, err
    assert "nested too deeply" in err


@pytest.mark.parametrize("manifest", [
    '{"manifest_version": 1, "ranks": "x"}',
    '{"manifest_version": 1, "ranks": [1, 2]}',
    '{"manifest_version": 1, "ranks": [{"rank": 0, "unprofiled_step_ms_median": "x", "profiled_step_ms_median": 5}]}',
    '{"manifest_version": 1, "step_time": [1]}',
    '{"manifest_version": 1, "ranks": [{"rank": "zero", "traces": 3}]}',
])
def test_malformed_manifest_beside_rank_files(tmp_path, capsys, manifest):
    for r in (0, 1):
        write(tmp_path / f"rank{r}.pt.trace.json", mini_trace())
    (tmp_path / "manifest.json").write_text(manifest)
    rc, doc, err = analyze_json(capsys, tmp_path)
    assert rc == 0, err
    assert [t["rank"] for t in doc["traces"]] == [0, 1]
    for t in doc["traces"]:
        _clean_numbers(t)
        _warned(t, "manifest.json beside the trace has values of an unexpected type")


def test_manifest_that_is_not_json_is_ignored(tmp_path, capsys):
    write(tmp_path / "rank0.pt.trace.json", mini_trace())
    (tmp_path / "manifest.json").write_text("{bad")
    rc, doc, err = analyze_json(capsys, tmp_path)
    assert rc == 0, err
    prof = _one(doc)["profiling"]  # the trace's own estimate only: nothing read from the broken manifest
    assert prof["estimated_unprofiled_step_us"] is not None and prof.get("unprofiled_step_ms") is None
    assert any("manifest.json beside the trace is not valid JSON" in w for w in _one(doc)["warnings"])


# ---- item 3: hangs and unbounded memory ----------------------------------------------------------------

def _cli(*args, stdin=None, timeout=300):
    """A subprocess, for inputs that could block: the timeout guards the test run, it is not asserted."""
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], stdin=stdin,
                          capture_output=True, timeout=timeout)


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_device_is_refused_without_reading(dev):
    if not os.path.exists(dev):
        pytest.skip(f"no {dev}")
    r = _cli("analyze", dev)
    assert r.returncode == 2 and b"is a character device, not a regular file" in r.stderr, r.stderr


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    r = _cli("analyze", fifo)  # nobody writes to it: opening it for reading would block forever
    assert r.returncode == 2 and b"is a named pipe (FIFO)" in r.stderr, r.stderr
    assert len(error_lines(r.stderr.decode())) == 1


def test_dev_stdin_needs_dash(tmp_path):
    with open(os.devnull, "rb") as null:
        r = _cli("analyze", "/dev/stdin", stdin=null)
    assert r.returncode == 2 and b"pass '-'" in r.stderr, r.stderr


def test_stdin_dash_gives_the_file_result(tmp_path):
    p = write(tmp_path / "t.json.gz", mini_trace(), gz=True)
    for data in (p.read_bytes(), gzip.decompress(p.read_bytes())):
        r = subprocess.run([sys.executable, "-m", "traceview", "analyze", "-", "--format", "json"], input=data,
                           capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr
        t = json.loads(r.stdout)["traces"][0]
        assert t["path"] == "-"
        _clean_numbers(t)


def test_stdin_on_a_terminal_does_not_wait(tmp_path):
    import pty

    master, slave = pty.openpty()
    try:
        r = _cli("analyze", "-", stdin=slave)
    finally:
        os.close(master)
        os.close(slave)
    assert r.returncode == 2 and b"standard input is a terminal" in r.stderr, r.stderr


def test_stdin_of_zeros_stops_at_once():
    with open("/dev/zero", "rb") as zero:
        r = _cli("analyze", "-", stdin=zero)
    assert r.returncode == 2 and b"<stdin>: not a JSON trace" in r.stderr, r.stderr


def test_stdin_over_the_cap(tmp_path):
    data = dump(mini_trace(steps=50))
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", "-", "--max-bytes", "4k"], input=data,
                       capture_output=True, timeout=300)
    assert r.returncode == 2 and b"exceeds the input limit of 4 KiB" in r.stderr, r.stderr


def test_file_over_the_cap(tmp_path, capsys):
    p = write(tmp_path / "t.json", mini_trace(steps=50))
    rc, _, err = run_cli(capsys, "analyze", p, "--max-bytes", "4K")
    assert rc == 2 and "file size" in err and "exceeds the input limit of 4 KiB" in err


def test_max_bytes_must_be_a_size(capsys):
    with pytest.raises(SystemExit) as e:
        run_cli(capsys, "analyze", "x.json", "--max-bytes", "lots")
    assert e.value.code == 2


def _bomb(path, members: int, mib: int, prefix: bytes = b'{"traceEvents": [') -> None:
    """A gzip file inflating to members x mib MiB of blanks (the first member opens a trace): concatenated
    members let a few KB stand for a GiB without compressing a GiB here."""
    blank = gzip.compress(b" " * (mib << 20), compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(prefix + b" " * (mib << 20), compresslevel=9))
        for _ in range(members - 1):
            f.write(blank)


def test_gzip_bomb_of_zeros_stops_at_the_first_bytes(tmp_path, capsys):
    p = tmp_path / "zeros.json.gz"
    p.write_bytes(gzip.compress(b"\0" * (64 << 20), compresslevel=9))
    rc, _, err = run_cli(capsys, "analyze", p)
    assert rc == 2 and "not a JSON trace (the decompressed data does not start" in err, err


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_gzip_bomb_stops_at_the_cap_with_bounded_memory(tmp_path):
    """1 GiB of JSON blanks with --max-bytes 64M: exit 2 and the process never holds the GiB (peak RSS of the
    child process, which has polars and numpy imported, stays far below it)."""
    p = tmp_path / "bomb.json.gz"
    _bomb(p, members=64, mib=16)
    # VmHWM, not ru_maxrss: the latter keeps the forking parent's (pytest's) peak across exec
    code = ("import re, sys\nfrom traceview.cli.main import main\n"
            f"rc = main(['analyze', {str(p)!r}, '--max-bytes', '64M'])\n"
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())\n"
            "print(int(hwm.group(1)) // 1024)\nsys.exit(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "decompressed size exceeds the input limit of 64 MiB" in r.stderr, r.stderr
    assert int(r.stdout.strip()) < 512, f"peak RSS {r.stdout.strip()} MiB"


def test_symlink_loop_has_its_own_message(tmp_path, capsys):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    rc, _, err = run_cli(capsys, "analyze", tmp_path / "a.json")
    assert rc == 2 and "symbolic link loop" in err, err
    (tmp_path / "c.json").symlink_to(tmp_path / "nowhere.json")
    rc, _, err = run_cli(capsys, "analyze", tmp_path / "c.json")
    assert rc == 2 and "broken symbolic link" in err, err


def test_parse_size():
    assert inputs.parse_size("8G") == 8 * 2**30 == inputs.DEFAULT_MAX_BYTES
    assert inputs.parse_size("512MiB") == 512 * 2**20
    assert inputs.parse_size("1000") == 1000 and inputs.parse_size("1.5k") == 1536
    for bad in ("", "0", "-1", "1x", "G"):
        with pytest.raises(ValueError):
            inputs.parse_size(bad)


# ---- item 4: silent data loss --------------------------------------------------------------------------

@pytest.mark.parametrize("args,warning", [
    ({"registers per thread": 254.0}, "coerced 3 args value(s) of an unexpected type to the expected one: "
                                      "registers per thread (float) x3"),
    ({"grid": "4,32,1"}, "coerced 3 args value(s) of an unexpected type to the expected one: grid (str) x3"),
    ({"shared memory": "lots"}, "ignored 3 args value(s) of an unusable type or range: shared memory (str) x3"),
], ids=["regs-float", "grid-string", "shmem-string"])
def test_one_odd_arg_keeps_the_others(tmp_path, capsys, path_kind, args, warning):
    p = write(tmp_path / "t.json", mini_trace(kernel_args=args))
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)  # correlation kept: each kernel still linked to aten::mm
    _warned(t, warning)
    g = traceview.load_file(p).gpu
    assert g["correlation"].to_list() == [100, 101, 102] and g["launch"].null_count() == 0
    if "grid" in args:
        assert g.select("grid_x", "grid_y", "grid_z").row(0) == (4, 32, 1)
    if "registers per thread" in args:
        assert g["regs"].to_list() == [254, 254, 254]


def test_correlation_beyond_int64_is_counted(tmp_path, capsys, path_kind):
    d = mini_trace()
    d["traceEvents"][3]["args"]["correlation"] = 2**63 + 1  # the first kernel
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    _warned(t, "ignored 1 args value(s) of an unusable type or range: correlation (int beyond 64 bits) x1")
    k = t["top_kernels"][0]
    assert k["count"] == 3  # the kernel is kept; only its link is lost
    assert t["summary"]["gpu_busy_pct"] == 60.0


def test_args_that_are_not_an_object(tmp_path, capsys, path_kind):
    d = mini_trace()
    d["traceEvents"][3]["args"] = [1, 2]
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    _warned(t, "ignored 1 args value(s) of an unusable type or range: args (array) x1")
    assert t["top_kernels"][0]["count"] == 3


def test_missing_ts_is_skipped_not_zero(tmp_path, capsys, path_kind):
    d = mini_trace()
    del d["traceEvents"][7]["ts"]  # the second kernel
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    _warned(t, "skipped 1 events (ph X or i) without a usable 'ts'")
    assert t["top_kernels"][0]["count"] == 2
    assert t["summary"]["step_numbers"] == [0, 1, 2] and t["summary"]["avg_step_us"] == 100.0


def test_missing_and_negative_dur(tmp_path, capsys, path_kind):
    d = mini_trace()
    del d["traceEvents"][7]["dur"]
    d["traceEvents"][11]["dur"] = -5
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    _warned(t, "1 complete events (ph X) without a usable 'dur': taken as 0", "1 complete events (ph X) with a "
            "negative 'dur': taken as 0")
    assert t["top_kernels"][0]["total_us"] == KERNEL_US


def test_negative_ts_and_steps_out_of_time_order(tmp_path, capsys, path_kind):
    d = mini_trace()
    d["traceEvents"].append(ev(name="ProfilerStep#9", cat="user_annotation", ts=-500, dur=10))
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    # step 9 (first in time, at -500 µs) holds no event: a step away from its
    # work, ignored and said (issue 33: it used to become a 1500 µs step that moved the average)
    _warned(t, "1 events have a negative timestamp", "ignored 1 ProfilerStep annotations that enclose no other event, "
            "away from their work (e.g. 'ProfilerStep#9' at 0.0 µs into the trace")
    assert {s["step"]: s["dur_us"] for s in t["steps"]} == {0: 100.0, 1: 100.0, 2: 100.0}
    # with work inside it, the same step is kept: periods partition time in time order, so it runs until step 0
    d["traceEvents"].append(ev(name="aten::zero_", ts=-495, dur=2))
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    t = _one(doc)
    _warned(t, "ProfilerStep numbers are not in time order")
    assert {s["step"]: s["dur_us"] for s in t["steps"]} == {0: 100.0, 1: 100.0, 2: 100.0, 9: 1500.0}
    assert {s["step"]: s["tb_dur_us"] for s in t["steps"]}[9] == 10.0  # tb_plugin's window: its host span


def test_event_field_of_a_wrong_type(tmp_path, capsys, path_kind):
    d = mini_trace()
    d["traceEvents"][1]["ts"] = str(d["traceEvents"][1]["ts"])  # "1005.0"
    d["traceEvents"][1]["pid"] = 1.0
    d["traceEvents"].append(7)
    rc, doc, err = analyze_json(capsys, write(tmp_path / "t.json", d))
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)
    _warned(t, "coerced 2 event value(s) of an unexpected type to the expected one: pid (float) x1, ts (str) x1",
            "skipped 1 entries of 'traceEvents' that are not objects (1 int)")


# ---- item 5: repairs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,bare", [("dur", "NaN"), ("ts", "Infinity"), ("dur", "-Infinity"),
                                        ("ts", "1e999")])
def test_bare_non_finite_in_ts_and_dur(tmp_path, capsys, path_kind, field, bare):
    d = mini_trace()
    d["traceEvents"][7][field] = "@@"
    p = write(tmp_path / "t.json", json.dumps(d).replace('"@@"', bare).encode())
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = _one(doc)
    _warned(t, "repaired invalid JSON written by the profiler")
    if field == "ts":
        _warned(t, "skipped 1 events (ph X or i) without a usable 'ts'")
        assert t["top_kernels"][0]["count"] == 2
    else:
        _warned(t, "without a usable 'dur'")
        assert t["top_kernels"][0]["total_us"] == 2 * KERNEL_US


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_bom_and_utf16(tmp_path, capsys, path_kind, encoding):
    p = tmp_path / "t.json"
    p.write_bytes(json.dumps(mini_trace()).encode(encoding))
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)
    if encoding != "utf-8-sig":
        _warned(t, "re-encoded as UTF-8")
    else:
        assert t["warnings"] == []


def test_flipped_bit_in_gzip_keeps_what_precedes_it(tmp_path, capsys, path_kind):
    data = gzip.compress(dump(mini_trace(steps=400)), compresslevel=6, mtime=0)
    bad = bytearray(data)
    bad[len(bad) * 3 // 4] ^= 0x08
    p = tmp_path / "t.json.gz"
    p.write_bytes(bytes(bad))
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = _one(doc)
    _warned(t, "gzip data")
    n = t["summary"]["steps"]
    assert 100 < n < 400, n  # the steps before the damage
    assert t["summary"]["step_numbers"] == list(range(n))


def test_trailing_garbage_after_gzip_is_not_truncation(tmp_path, capsys, path_kind):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(dump(mini_trace())) + b"garbage after the stream")
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)
    assert t["warnings"] == ["ignored 24 bytes of trailing data after the end of the gzip stream"]


def test_gzip_zero_padding_is_silent(tmp_path, capsys, path_kind):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(dump(mini_trace())) + b"\0" * 512)
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    assert _one(doc)["warnings"] == []


def test_damage_inside_plain_json_keeps_the_events_before(tmp_path, capsys, path_kind):
    text = json.dumps(mini_trace(steps=20))
    at = text.index('"ProfilerStep#12"')
    p = write(tmp_path / "t.json", (text[:at] + "\x00garbage{{" + text[at:]).encode())
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = _one(doc)
    _warned(t, "invalid JSON at byte")
    assert t["summary"]["step_numbers"] == list(range(12))


def test_same_frames_on_both_paths_for_repaired_inputs(tmp_path, monkeypatch):
    """The hostile variants above load into identical frames on both paths (C refuses, msgspec repairs)."""
    d = mini_trace(kernel_args={"registers per thread": 254.0, "grid": "4,32,1"})
    d["traceEvents"].append(ev(name="aten::corrupt", ts=1e17, dur=1))
    del d["traceEvents"][7]["ts"]
    p = write(tmp_path / "t.json", d)
    frames = {}
    for kind in PATHS:
        use_path(kind, monkeypatch)
        frames[kind] = traceview.load_file(p)
    a, b = frames["c"], frames["py"]
    for f in ("host", "gpu", "flows", "steps", "threads", "memory"):
        assert getattr(a, f).equals(getattr(b, f)), f
    assert a.meta == b.meta


def test_sample_trace_loads_unchanged_with_new_checks():
    """Real traces take none of the new repair paths: no new warnings on a clean sample."""
    t = traceview.load_file(SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz")
    assert t.meta.warnings == []
    assert t.gpu.height > 0 and t.gpu.filter(pl.col("launch").is_null()).height == 0


def test_metadata_events_at_ts_0_are_kept_beside_epoch_timestamps(tmp_path, capsys, path_kind):
    """Kineto writes thread/process names with ts 0 next to events at epoch microseconds (the MTIA sample):
    metadata is not a corrupt clock."""
    d = mini_trace(t0=1.7e15)
    d["traceEvents"] += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0, "args": {"name": "main"}},
                         {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "ts": 0, "args": {"name": "stream 7"}}]
    p = write(tmp_path / "t.json", d)
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = _one(doc)
    _clean_numbers(t)
    assert t["warnings"] == []
    assert sorted(traceview.load_file(p).threads["name"].to_list()) == ["main", "stream 7"]
