from __future__ import annotations

import collections

import numpy as np
import polars as pl
import pytest
from conftest import SAMPLES, load, raw_events

import traceview
from traceview.ingest.loader import GPU_CATS, HOST_CATS, OLD_CATS

CASES = [
    "gpu_h200/sync_item_nonzero_cpu.json.gz",
    "gpu_h200/train_tinygpt_modules.json.gz",
    "gpu_h200/cudagraph_reduce_overhead.json.gz",
    "hta/trace_filter/sampled_rank-0.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
    "kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "cpu_trace_example_torch2.13.json.gz",
]


@pytest.mark.parametrize("rel", CASES)
def test_every_slice_lands_in_its_frame(rel):
    """Host and GPU frames hold exactly the X events of their categories (independent json count)."""
    t = load(rel)
    c = collections.Counter(OLD_CATS.get(e.get("cat"), e.get("cat")) for e in raw_events(rel) if e.get("ph") == "X")
    assert t.host.height == sum(c[k] for k in HOST_CATS)
    assert t.gpu.height == sum(c[k] for k in GPU_CATS)
    assert t.host["depth"].null_count() == 0


def test_current_format_links_kernels_to_launching_ops():
    t = load("gpu_h200/sync_item_nonzero_cpu.json.gz")
    assert t.meta.format == "kineto" and t.meta.backend == "cuda"
    assert t.meta.device_name() == "NVIDIA H200"
    assert t.steps["step"].to_list() == [1, 2, 3]
    assert t.gpu["launch"].null_count() == 0 and t.gpu["op"].null_count() == 0
    # the independent way: External id on the kernel names the launching cpu_op (2.4+ traces)
    ev = raw_events("gpu_h200/sync_item_nonzero_cpu.json.gz")
    ext = {e["args"]["External id"]: e["name"] for e in ev if e.get("cat") == "cpu_op"}
    want = collections.Counter(ext[e["args"]["External id"]] for e in ev if e.get("cat") == "kernel")
    ops = t.host.select(pl.col("i").alias("op"), pl.col("name").alias("op_name"))
    got = collections.Counter(t.kernels.join(ops, on="op")["op_name"].to_list())
    assert got == want


def test_old_2021_format():
    t = load("kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert t.meta.format == "kineto-2021"
    assert t.steps["step"].to_list() == [5, 6, 7, 8, 9, 10]
    assert t.gpu.filter(pl.col("stream") == 7).height == t.gpu.height  # "stream 7" string tids
    # old traces: External id == correlation, so ops come from the call tree
    assert t.gpu["op"].null_count() == 0
    ops = t.host.select(pl.col("i").alias("op"), pl.col("name").alias("op_name"))
    memcpy = t.gpu.filter(pl.col("name") == "Memcpy HtoD (Pageable -> Device)").join(ops, on="op")
    assert memcpy.height == 12 and set(memcpy["op_name"]) == {"aten::copy_"}
    assert sorted(memcpy["bytes"].to_list()) == [256] * 6 + [19267584] * 6  # labels + the image batch, per step


def test_rocm_trace():
    t = load("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert t.meta.backend == "rocm"
    assert t.kernels.height == 14
    assert set(t.gpu["stream"]) == {0}
    assert t.runtime.filter(pl.col("name").str.starts_with("hip")).height == t.runtime.height


def test_nanosecond_timestamps_are_kept():
    rel = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    t = load(rel)
    k = [e for e in raw_events(rel) if e.get("cat") == "kernel"]
    t0 = t.meta.t0_us
    want = sorted(round((e["ts"] - t0) * 1000) for e in k)
    assert sorted(t.kernels["ts"].to_list()) == want
    assert any(w % 1000 for w in want)  # really sub-µs


def test_cpu_only_trace():
    t = load("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert not t.has_gpu and t.meta.backend == "cpu"
    assert t.meta.rank == 34 and t.meta.world_size == 300


def test_cuda_graph_launch_fans_out():
    rel = "hta/negative_queue_length_values_check/rank0.json.gz"
    t = load(rel)
    ev = raw_events(rel)
    graph_corr = {e["args"]["correlation"] for e in ev if e.get("name") == "cudaGraphLaunch"}
    want = sum(1 for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and e.get("args", {}).get("correlation") in graph_corr)
    assert len(graph_corr) == 70
    assert t.gpu.filter(pl.col("graph")).height == want > 70


def test_nccl_kernels_and_collective_args():
    t = load("hta/nccl_parser_config/nccl_data.json.gz")
    comm = t.gpu.filter(pl.col("kind") == "comm")
    assert comm.height == 21
    assert set(comm["collective"].drop_nulls()) >= {"allreduce", "broadcast"}
    assert t.meta.versions["nccl"]


def test_no_profiler_step_is_one_step():
    t = load("hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz")  # no annotation at all
    assert not t.meta.has_steps and t.steps.height == 1
    assert any("the whole trace is analyzed as one step" in w for w in t.meta.warnings)


def test_no_profiler_step_and_a_task_on_a_pool_of_threads_is_one_step():
    """HTA's MTIA inference trace has no ProfilerStep; its repeated top-level `Stage::PyTorchMRSGIFTask::run` spans
    run on five threads at once (a pool serving requests): no loop's steps, so the whole trace is one step."""
    rel = "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"
    tids = {e["tid"] for e in raw_events(rel)
            if e.get("cat") == "user_annotation" and e.get("name") == "Stage::PyTorchMRSGIFTask::run"}
    assert len(tids) == 5
    t = load(rel)
    assert not t.meta.has_steps and t.steps.height == 1
    assert any("the whole trace is analyzed as one step" in w for w in t.meta.warnings)


def test_directory_of_ranks(samples):
    job = traceview.load(samples / "hta/trace_filter")
    assert isinstance(job, traceview.Job) and job.ranks == [0, 1]


def test_legacy_autograd_array_format(tmp_path):
    """`torch.autograd.profiler.profile(use_kineto=False)`: a top-level array, pid "CPU functions"."""
    import json

    ev = [{"name": "aten::mm", "ph": "X", "ts": 10, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}},
          {"name": "aten::add", "ph": "X", "ts": 20, "dur": 3, "tid": 1, "pid": "CPU functions", "args": {}},
          {"name": "aten::empty", "ph": "X", "ts": 21, "dur": 1, "tid": 1, "pid": "CPU functions", "args": {}}]
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps(ev))
    t = traceview.load(p)
    assert t.meta.format == "legacy-autograd" and not t.has_gpu
    assert t.ops["name"].to_list() == ["aten::mm", "aten::add", "aten::empty"]
    assert t.ops["depth"].to_list() == [0, 0, 1]  # aten::empty runs inside aten::add


def test_string_ids_as_the_series_steps_give_them() -> None:
    """`_fix_ids` (one query) maps string pids/tids as the step-by-step Series computation does: a decimal
    string is its number, "stream N" is N, anything else a negative hash."""
    from traceview.ingest.loader import _fix_ids

    values = ["12", "-3", "stream 7", "stream  -2", "Spans", "", "0x10", "99999999999999999999", "Trace PyTorch Profiler"]
    strs = pl.Series(values, dtype=pl.String)
    num = strs.str.to_integer(strict=False)
    digits = strs.str.extract(r"^stream\s+(-?\d+)").str.to_integer(strict=False)
    other = -((strs.hash() % 1_000_000_000).cast(pl.Int64) + 10)
    want = pl.select(pl.coalesce(num, digits, other)).to_series()
    base = pl.Series("pid", range(100, 100 + len(values) + 2), dtype=pl.Int64)
    pos = pl.Series(range(1, len(values) + 1), dtype=pl.UInt32)
    got = _fix_ids(base.clone(), pos, values)
    assert got.gather(pos).to_list() == want.to_list()
    assert got.to_list()[:3] == [100, 12, -3] and got[0] == 100 and got[-1] == base[-1]
    assert got.gather(pos).to_list()[2:4] == [7, -2] and all(v < -9 for v in got.gather(pos).to_list()[4:])


@pytest.mark.parametrize("rel", ["gpu_h200/train_tinygpt_modules.json.gz",
                                 "kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"])
def test_first_set_is_coalesce_and_shares_a_lone_column(rel):
    """`loader._first_set` (coalesce without the parts that cannot matter) gives `pl.coalesce`'s column for
    parts all null, partly null, never null and of another type (a String column casts to nulls); with one part
    left, the frame holds that column's own buffer."""
    from itertools import permutations

    from traceview.ingest.loader import _first_set, _to_int_expr

    h = load(rel).host.with_columns(none=pl.lit(None, pl.Int64), name_i=pl.col("name"))
    kinds = {"none": 0, "correlation": 0, "pid": 0, "name_i": 0}
    for c in kinds:
        kinds[c] = h[c].null_count()
    assert kinds["none"] == h.height and 0 < kinds["correlation"] < h.height and kinds["pid"] == 0
    for k in range(1, 4):
        for parts in permutations(kinds, k):
            want = h.select(pl.coalesce([_to_int_expr(c) for c in parts]).alias("x"))["x"]
            got = h.with_columns(x=_first_set(h, *parts))["x"]  # (as the loader uses it)
            assert got.dtype == pl.Int64 and got.equals(want), parts
    alone = h.with_columns(x=_first_set(h, h["none"], "pid", "correlation"))["x"]
    assert np.shares_memory(alone.to_numpy(), h["pid"].to_numpy())  # (zero-copy views: no nulls)


def test_gpu_columns_equal_to_pid_tid_share_their_buffers():
    """A kernel's device/stream args repeat its pid/tid: the GPU frame holds one buffer for each pair (the values
    checked against the raw events); a column that differs somewhere, or by type, keeps its own."""
    from traceview.ingest.loader import _share_equal

    rel = "gpu_h200_compile/compile_recompile_every_step.json.gz"
    g = load(rel).gpu
    assert g.height >= 4096
    kernels = [e for e in raw_events(rel) if e.get("cat") == "kernel"]
    assert all(e["args"]["device"] == e["pid"] and e["args"]["stream"] == e["tid"] for e in kernels)
    g = traceview.load(SAMPLES / rel).gpu  # (a fresh load: reading a constant column through `g[c]` fills it)
    for c, other in (("device", "pid"), ("stream", "tid")):
        if g.select(other).estimated_size() < 1024:  # one device (or stream): both held as a constant, no buffer
            assert g.select(c).estimated_size() < 1024 and g[c].equals(g[other])
        else:
            assert np.shares_memory(g[c].to_numpy(), g[other].to_numpy())
    assert not np.shares_memory(g["external_id"].to_numpy(), g["correlation"].to_numpy())  # (2.4+: they differ)
    odd = g.with_columns(pl.col("pid").cast(pl.Int32).alias("p32"), (pl.col("pid") + (pl.int_range(pl.len()) == 7)).alias("p1"))
    out = _share_equal(odd, {"p32": "pid", "p1": "pid"})
    assert out.schema["p32"] == pl.Int32 and not np.shares_memory(out["p1"].to_numpy(), out["pid"].to_numpy())
    assert out.equals(odd)


def test_constant_columns_hold_no_buffer():
    """A column with one value on every row (all null: an args field the trace lacks; one number: a single-GPU
    trace's GPU pid and device) is a constant of the frame, no buffer of its height, and reads as the events'
    values; a column that varies keeps its buffer."""
    from traceview.ingest.loader import _null_constants

    rel = "gpu_h200_compile/compile_recompile_every_step.json.gz"
    g = traceview.load(SAMPLES / rel).gpu  # (a fresh load: reading a constant column through `g[c]` fills it)
    kernels = [e for e in raw_events(rel) if e.get("cat") == "kernel"]
    assert len({e["pid"] for e in kernels}) == 1 and g.height >= 4096
    assert g.select("pid", "device").estimated_size() < 1024
    for c in ("pid", "device"):
        assert g[c].to_list() == [kernels[0]["pid"]] * g.height
    assert g.select("ts").estimated_size() >= 8 * g.height  # varies: its own buffer
    df = pl.DataFrame({"a": np.arange(5000), "b": np.full(5000, 3), "c": pl.Series([None] * 5000, dtype=pl.Int64),
                       "f": np.full(5000, 1.5)})
    out = _null_constants(df)
    assert [out.select(c).estimated_size() < 1024 for c in "abcf"] == [False, True, True, False]
    assert out.equals(df) and out.schema == df.schema


_RAW_KEYS = {"input_dims": "Input Dims", "input_type": "Input type", "concrete": "Concrete Inputs",
             "strides": "Input Strides"}


@pytest.mark.parametrize("rel", ["gpu_h200_real/tv_resnet50_train_dataloader_nw0.json.gz",
                                 "kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
                                 "gpu_h200/train_tinygpt_modules.json.gz"])
@pytest.mark.parametrize("c_scanner", [True, False])
def test_raw_arg_columns_are_codes_of_the_events_text(rel, c_scanner, monkeypatch):
    """Input Dims / Input type / Concrete Inputs / Input Strides are held as Categorical codes (a few hundred
    distinct texts over a trace, 4 bytes a row instead of a 16-byte text view), and each row's text parses to
    the event's own value (stdlib json on the raw file), on both the C scanner's and the msgspec path."""
    import json

    monkeypatch.setenv("TRACEVIEW_NO_C", "0" if c_scanner else "1")
    t = traceview.load(SAMPLES / rel)  # (not conftest's cached load: each path loads here)
    events = raw_events(rel)
    checked = 0
    for col, key in _RAW_KEYS.items():
        assert t.host.schema[col] == pl.Categorical
        got = t.host.select("i", pl.col(col).cast(pl.String)).filter(pl.col(col).is_not_null() & (pl.col(col) != ""))
        for i, text in got.iter_rows():
            assert json.loads(text) == events[i]["args"][key], (col, i)
        if col in ("input_dims", "input_type"):  # every op's (the other two are kept only for conv/index ops)
            want = sum(1 for e in events if e.get("cat") in ("cpu_op", "Operator") and key in e.get("args", {}))
            assert got.height == want > 0, (col, got.height, want)
        checked += got.height
    assert checked > 1000
