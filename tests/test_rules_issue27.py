"""Issue 27's rules on real traces: TV205 materialized-attention, TV206 fp32-conv, TV207 small-grid, TV105
decode-loop.

Each measured twin's problem run fires its rule above `info` in the analyze document; its fixed run and the
negative controls raise nothing above `info` from these rules. The rule's replayed saving per step (the finding's
`savings_us`, unprofiled terms) is compared with the measured saving: the difference of the collector's
unprofiled CUDA-event step times of the two runs (labels.json). Within ±20 % passes; a miss is xfail(strict) with
its numbers. The rules' evidence is cross-checked against a stdlib-json reading of the trace (tests/ref_stats.py's
loader, no traceview code).
"""

from __future__ import annotations

import functools
import json
import math
import re

import polars as pl
import pytest
from conftest import ROOT
from ref_stats import load_events
from traceview.rules import decode_loop, launch_bound, small_grid

import traceview
from traceview.options import Options
from traceview.report import analyze, select_steps
from traceview.ruleapi import RuleContext

CODES = {"TV105", "TV205", "TV206", "TV207"}
BAND = 0.20
SETS = {s: ROOT / "sample_traces" / s for s in ("collected3", "collected4", "ab_traced")}


def _labels(s: str) -> dict:
    p = SETS[s] / "labels.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def _trace(s: str, run: str):
    return next((SETS[s] / run).glob("*.pt.trace.json*"))


@functools.cache
def doc(s: str, run: str) -> dict:
    return analyze([str(_trace(s, run))]).to_dict()["traces"][0]


def ours(s: str, run: str, code: str | None = None) -> list[dict]:
    return [f for f in doc(s, run)["findings"] if f["code"] in CODES and (code is None or f["code"] == code)]


def unprofiled_ms(s: str, run: str) -> float:
    lab = _labels(s)
    runs = lab.get("runs", lab)
    return float(runs[run]["unprofiled_step_ms"])


#: (set, problem run, fixed run, rule code, why a miss is a miss: None = within the band)
TWINS = [
    (
        "collected3",
        "gpt2_eager_attn",
        "gpt2_sdpa",
        "TV205",
        "the eager run's host is slower everywhere, not only in attention: ops both runs share take 1.3-1.5x longer "
        "(aten::addmm 208 vs 166 us, aten::pow 83 vs 56 us in a layer's MLP), and its unprofiled step (35.6 ms, "
        "26.7 ms of GPU work) is host-bound by more than the whole attention's host time could explain; a fix model "
        "cannot predict the other run's faster host: measured 11.99 ms, predicted 4.48 ms (-63 %; 6.82 against "
        "8.11 ms measured in the trace's own process, sample_traces/ab_traced)",
    ),
    (
        "collected3",
        "resnet18_fp32",
        "resnet18_bf16_cl",
        "TV206",
        "measured in two processes: 2.43 ms, predicted 1.64 (-33 %) once autocast's second dispatch of each "
        "convolution and the native batch norm's host time are priced; in the process that took its trace "
        "(sample_traces/ab_traced) 4.79 ms measured, 4.83 predicted",
    ),
    ("collected4", "attn_eager_s2048", "attn_flash_s2048", "TV205", None),
    ("collected4", "attn_math_s2048", "attn_flash_s2048", "TV205", None),
    ("collected4", "gpt2_eager_attn_s1024", "gpt2_sdpa_s1024", "TV205", None),
    ("collected4", "conv_fp32", "conv_bf16_cl", "TV206", None),
    (
        "collected4",
        "resnet50_fp32",
        "resnet50_bf16_cl",
        "TV206",
        "a negative twin: bf16 + channels_last measured 12.16 ms SLOWER (cuDNN heuristics with benchmark off, autocast's "
        "casts: the fixed run is launch-bound at 9 ms of GPU work in a 33 ms step) while the replay predicts 0.50 ms "
        "saved with autocast's casts on the host; the twin's host ran ~2x slower per unchanged op, the fix text says "
        "to measure and names cudnn.benchmark",
    ),
    ("collected4", "small_batch_c4_graph", "small_batch_c128_graph", "TV207", None),
    ("collected4", "decode_dynamic", "decode_static", "TV105", None),
    (
        "collected4",
        "hf_generate_dynamic",
        "hf_generate_static",
        "TV105",
        None,
    ),
]
#: rules of this issue that rightly fire on a fixed run: batch-1 decode replayed as a CUDA graph is the small-grid
#: case itself (median 2 blocks on 132 SMs, 99.7 % of its GPU-busy time): decode-loop is silent there, small-grid
#: says the next step (more sequences per step)
FIXED_ALSO = {"decode_static": {"TV207"}}
#: runs where these rules have nothing above info to say (fixed twins, a fused/compiled/bf16/large-batch step)
NEGATIVE = [
    ("collected3", r)
    for r in (
        "gpt2_sdpa",
        "gpt2_sdpa_compiled",
        "gpt2_sdpa_fused",
        "resnet18_bf16_cl",
        "gemm_bf16_n3072",
        "tinygpt_b16",
        "fp32_gemm_n4096_tf32",
    )
]
NEGATIVE += [
    ("collected4", r)
    for r in (
        "attn_flash_s2048",
        "gpt2_sdpa_s1024",
        "gpt2_sdpa_ref",
        "conv_bf16_cl",
        "resnet50_bf16_cl",
        "small_batch_c128_graph",
        "hf_generate_static",
        "alloc_churn",
        "input_workers_nw10",
        "ddp_accum4_nccl_nosync",
    )
]


#: problems whose rule fires only at info: a larger fix of another rule comes first and leaves it little (none
#: today: resnet18_fp32 left it when channels_last's removed transposes took their launch calls off the host too)
QUIET: dict[str, str] = {}


@pytest.mark.parametrize(
    ("s", "problem", "fixed", "code", "why"),
    [
        pytest.param(
            *t, marks=[pytest.mark.xfail(strict=True, reason=QUIET[t[1]])] if t[1] in QUIET else [], id=t[1]
        )
        for t in TWINS
    ],
)
def test_problem_fires_its_rule_and_fixed_twin_is_silent(s, problem, fixed, code, why):
    got = ours(s, problem, code)
    # a twin whose fix measured no saving (resnet50: bf16 + channels_last ran slower) may be priced small or at
    # nothing: it fires, and above info only where its measured fix saves
    twins = json.loads((SETS[s] / "labels.json").read_text())["twins"]
    measured = next(
        (t["measured_fix_saving_ms"] for t in twins if (t["problem"], t["fixed"]) == (problem, fixed)), None
    )
    loud = ("warning", "error") if measured is None or measured > 0 else ("info", "warning", "error")
    assert len(got) == 1 and got[0]["severity"] in loud, got
    # priced above zero wherever its measured fix saves (resnet50's slower twin may be priced at nothing)
    assert got[0]["savings_us"] > 0 or (measured is not None and measured <= 0)
    also = FIXED_ALSO.get(fixed, set())
    assert [
        (f["code"], f["severity"])
        for f in ours(s, fixed)
        if f["severity"] != "info" and f["code"] not in also
    ] == []


@pytest.mark.parametrize(("s", "run"), NEGATIVE, ids=[r for _, r in NEGATIVE])
def test_negative_controls_raise_nothing_above_info(s, run):
    assert [(f["code"], f["severity"]) for f in ours(s, run) if f["severity"] != "info"] == []


def _prediction_cases():
    out = []
    for s, problem, fixed, code, why in TWINS:
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(s, problem, fixed, code, marks=marks, id=problem))
    return out


@pytest.mark.parametrize(("s", "problem", "fixed", "code"), _prediction_cases())
def test_replayed_saving_matches_the_measured_fix(s, problem, fixed, code):
    measured = unprofiled_ms(s, problem) - unprofiled_ms(s, fixed)
    predicted = ours(s, problem, code)[0]["savings_us"] / 1000
    assert measured > 0
    assert abs(predicted / measured - 1) <= BAND, (predicted, measured)


def _step_spans(events: list[dict]) -> list[tuple[float, float]]:
    return [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X"
        and re.match(r"^ProfilerStep#\d+$", str(e.get("name")))
        and e.get("cat") != "gpu_user_annotation"
    ]


def _window(events: list[dict]) -> tuple[float, float]:
    """ref_stats' step span: earliest start to latest end of the ProfilerStep#N spans, host and GPU-side twins."""
    sp = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X" and re.match(r"^ProfilerStep#\d+$", str(e.get("name")))
    ]
    return min(a for a, _ in sp), max(b for _, b in sp)


def _inside(e: dict, spans: list[tuple[float, float]]) -> bool:
    return any(a <= e["ts"] < b for a, b in spans)


def test_attention_evidence_against_the_raw_trace():
    """6 GPT-2 layers: one forward and one backward softmax over [8, 12, 512, 512] FP32 scores per layer and step."""
    ev = load_events(_trace("collected3", "gpt2_eager_attn"))
    spans = _step_spans(ev)
    fwd = [
        e
        for e in ev
        if e.get("name") == "aten::_softmax" and _inside(e, spans) and len(e["args"]["Input Dims"][0]) == 4
    ]
    bwd = [e for e in ev if e.get("name") == "aten::_softmax_backward_data" and _inside(e, spans)]
    dims = fwd[0]["args"]["Input Dims"][0]
    f = ours("collected3", "gpt2_eager_attn", "TV205")[0]["evidence"]
    n = len(spans)
    assert (len(fwd) / n, len(bwd) / n) == (6, 6)
    assert f["attention_runs_per_step"] == (len(fwd) + len(bwd)) / n
    assert f["backward_runs_per_step"] == len(bwd) / n
    assert [f["score_shape"][k] for k in ("heads", "n_q", "n_kv")] == dims[1:]
    assert fwd[0]["args"]["Input type"][0] == "float"
    assert f["score_tensor_mib"] == pytest.approx(math.prod(dims) * 4 / 2**20)
    # the fix is SDPA, not torch.compile; no elementwise-chain finding claims a score kernel
    fix = ours("collected3", "gpt2_eager_attn", "TV205")[0]["fix"]
    assert "scaled_dot_product_attention" in fix and "torch.compile" not in fix
    for c in [x for x in doc("collected3", "gpt2_eager_attn")["findings"] if x["code"] == "TV201"]:
        assert not {"aten::_softmax", "aten::_softmax_backward_data", "aten::native_dropout"} & set(
            c["evidence"]["ops"]
        )


def _fix(s: str, run: str):
    from traceview.rules import BY_NAME

    trace = traceview.load(str(_trace(s, run)))
    ctx, _ = RuleContext.prepare(trace, select_steps(trace, None))
    mod = BY_NAME["materialized-attention"]
    return trace, ctx.steps.height, mod.fix_transform(ctx.for_rule(mod, Options().options_for(mod)))


def test_attention_fix_puts_one_fused_kernel_per_run():
    """Each run of score kernels keeps its fused time on its first kernel and, where the fused call outlasts that
    kernel (a transform never lengthens one), on the run's next longest kernels in turn; the others take none. On
    GPT-2 the forward run starts at Q·K^T's batched matmul (the raw trace's first aten::bmm after each layer's QKV
    projection), and the kept time per step is the evidence's predicted fused time."""
    trace, n, t = _fix("collected3", "gpt2_eager_attn")
    f = ours("collected3", "gpt2_eager_attn", "TV205")[0]["evidence"]
    kept = {i: d for i, d in t.gpu_dur.items() if d > 0}
    assert f["attention_runs_per_step"] * n == 36
    assert sum(kept.values()) / n / 1000 == pytest.approx(f["predicted_fused_time_per_step_us"], abs=0.01)
    ops = trace.gpu.filter(pl.col("i").cast(pl.Int64).is_in(list(kept))).join(
        trace.host.select(pl.col("i").alias("op"), pl.col("name").alias("op_name")), on="op", how="left"
    ).with_columns(new=pl.col("i").cast(pl.Int64).replace_strict(kept))
    # every run keeps its first GEMM, and at most one kernel per run keeps less than its own time (the last filled)
    assert ops.filter(pl.col("op_name") == "aten::bmm").height >= 36
    assert ops.filter(pl.col("new") < pl.col("dur")).height <= 36
    assert len(kept) < 3 * 36  # a few kernels per run, never the run's whole chain


def test_attention_fix_removes_the_eager_attention_host_work():
    """The fused call replaces all host work between the attention's first op and its last, on that thread: the
    raw trace's view ops and the autograd nodes of the backward (which launch nothing) start inside the removed
    spans, and no op of the rest of the layer (linear layers, layer norm, GELU) does."""
    trace, n, t = _fix("collected3", "gpt2_eager_attn")
    ev = load_events(_trace("collected3", "gpt2_eager_attn"))
    spans = t.host_spans
    # per step: 12 runs from their call's end to their last op, 6 backward runs from their first op (the node that
    # makes the incoming gradient contiguous) to their call, and the mask's 2 ops (its torch.where, the blocking
    # copy of its fill value)
    assert len(spans) == (12 + 6 + 2) * n
    t0 = trace.meta.t0_us  # the loader's clock origin (its times are ns from it)

    def inside(e: dict) -> bool:
        ts = round((e["ts"] - t0) * 1000)
        return any(tid == e.get("tid") and a < ts < b for tid, a, b in spans)

    ops = [e for e in ev if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    named = lambda name: [e for e in ops if e["name"] == name and inside(e)]  # noqa: E731
    assert len(named("aten::_unsafe_view")) >= 6 * n
    assert len(named("autograd::engine::evaluate_function: UnsafeViewBackward0")) >= 6 * n
    assert len(named("aten::_softmax")) == 6 * n and len(named("aten::_softmax_backward_data")) == 6 * n
    for other in ("aten::addmm", "aten::native_layer_norm", "aten::gelu", "AddmmBackward0"):
        assert named(other) == [], other


def test_attention_fix_takes_the_operand_copies_and_the_mask_sync():
    """What SDPA does not run besides the score kernels, against the raw trace: the copy aten::matmul makes of
    the transposed K for Q·K^T (one per raw Q·K^T matmul, [8, 12, 512, 64] x [8, 12, 64, 512]) and the copy that
    makes the backward's incoming gradient contiguous (under UnsafeViewBackward0) take no time; Hugging Face's
    eager mask copies its fill value to the device with a stream sync once per forward (the raw trace's only
    cudaStreamSynchronize in a step, under aten::to), which no longer waits."""
    trace, n, t = _fix("collected3", "gpt2_eager_attn")
    ev = load_events(_trace("collected3", "gpt2_eager_attn"))
    spans = _step_spans(ev)
    raw = [e for e in ev if e.get("ph") == "X" and any(a <= e["ts"] < b for a, b in spans)]
    qk = [e for e in raw if e["name"] == "aten::matmul" and e["args"].get("Input Dims") == [[8, 12, 512, 64],
                                                                                              [8, 12, 64, 512]]]
    syncs = [e for e in raw if e["name"] == "cudaStreamSynchronize"]
    # (each Q·K^T recorded twice: autocast dispatches aten::matmul to itself, nested)
    assert len(qk) == 2 * 6 * n and len(syncs) == n
    h = trace.host
    parent = dict(zip(h["i"].to_list(), h["parent"].to_list(), strict=True))
    name = dict(zip(h["i"].to_list(), h["name"].to_list(), strict=True))

    def ancestors(i):
        while i is not None:
            yield name.get(i)
            i = parent.get(i)

    gone = [i for i, d in t.gpu_dur.items() if d == 0]
    ops = trace.gpu.filter(pl.col("i").cast(pl.Int64).is_in(gone) & pl.col("op").is_not_null())["op"].to_list()
    copies = [list(ancestors(op)) for op in ops if name.get(op) == "aten::copy_"]
    assert sum("aten::matmul" in c for c in copies) >= len(qk) // 2
    assert sum("autograd::engine::evaluate_function: UnsafeViewBackward0" in c for c in copies) >= 6 * n
    rows = h.filter(pl.col("name") == "cudaStreamSynchronize")["i"].cast(pl.Int64).to_list()
    mask = [r for r in rows if "aten::to" in list(ancestors(r))]
    assert len(mask) >= len(syncs) and set(mask) <= set(t.no_wait)


def test_conv_evidence_against_the_raw_trace():
    """cuDNN's NCHW<->NHWC transposes in the FP32 ResNet-18, summed from the raw kernels in the recorded steps."""
    ev = load_events(_trace("collected3", "resnet18_fp32"))
    spans = _step_spans(ev)
    lay = [
        e
        for e in ev
        if e.get("cat") == "kernel" and re.search("nchwToNhwcKernel|nhwcToNchwKernel", e["name"])
    ]
    lo, hi = _window(ev)
    per_step = sum(e["dur"] for e in lay if lo <= e["ts"] < hi) / len(spans)
    f = ours("collected3", "resnet18_fp32", "TV206")[0]
    assert f["evidence"]["layout_transform_time_per_step_us"] == pytest.approx(per_step, rel=0.05)
    assert f["evidence"]["bf16_conv_kernels_per_step"] == 0
    assert "torch.autocast" in f["fix"] and "channels_last" in f["fix"]
    # the fixed twin's convolutions are bf16 and NHWC: no transposes left to advise
    assert ours("collected3", "resnet18_bf16_cl", "TV206") == []


@pytest.mark.parametrize("run", ["vit_fp32", "mobilenet_single"])
def test_conv_finding_points_at_the_convolutions(run):
    """TV206's place is the convolutions' layer, not the most common one of every kernel its fix changes: ViT-B/16's
    patch embedding is one convolution beside its FP32 attention kernels, MobileNet's single-tensor AdamW launches
    more kernels than its convolutions. The raw trace: forward convolution kernels launched under aten::conv2d."""
    ev = load_events(_trace("ab_traced", run))
    convs = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::conv2d"]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    under = [e for e in ev if e.get("cat") == "kernel" and (r := launch.get(e["args"].get("correlation")))
             and any(c["tid"] == r["tid"] and c["ts"] <= r["ts"] < c["ts"] + c["dur"] for c in convs)]
    assert under, "no kernel launched under aten::conv2d"
    f = ours("ab_traced", run, "TV206")
    assert [x["layer"] for x in f] == ["aten::conv2d"]
    assert f[0]["evidence"]["fp32_conv_kernels_per_step"] > 0


def test_small_grid_evidence_against_the_raw_trace():
    """The CUDA-graph tiny-op loop: every kernel has fewer blocks than the H200's 132 SMs (grid from the raw args)."""
    path = _trace("collected3", "tiny_ops_n128_cudagraph")
    raw = json.loads(__import__("gzip").decompress(path.read_bytes()))
    sms = raw["deviceProperties"][0]["numSms"]
    ev = raw["traceEvents"]
    spans = _step_spans(ev)
    lo, hi = _window(ev)
    k = [e for e in ev if e.get("cat") == "kernel" and lo <= e["ts"] < hi]
    small = [e for e in k if math.prod(e["args"]["grid"]) < sms and e["dur"] < 20]
    f = ours("collected3", "tiny_ops_n128_cudagraph", "TV207")[0]
    assert f["severity"] != "info" and sms == f["evidence"]["sms"] == 132
    assert f["evidence"]["small_grid_kernels_per_step"] == pytest.approx(len(small) / len(spans), rel=0.02)
    rng = f["evidence"]["savings_range_per_step_us"]
    lo_us, point_us, hi_us = (rng[x] for x in ("double_batch", "point", "fill_sms"))
    assert 0 < lo_us <= point_us <= hi_us <= f["evidence"]["small_grid_time_per_step_us"]
    # the point estimate's batch growth is the steps' own repeats: the greatest common divisor of each kernel's
    # (name, grid, block) launches per step, counted from the raw events
    dev = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("cat") == "gpu_user_annotation" and re.match(r"^ProfilerStep#\d+$", str(e.get("name")))
    )
    counts: dict = {}
    for e in k:
        step = sum(a <= e["ts"] for a, _ in dev)  # the device-side step it runs in
        key = (step, e["name"], tuple(e["args"]["grid"]), tuple(e["args"]["block"]))
        counts[key] = counts.get(key, 0) + 1
    assert rng["batch_factor"] == math.gcd(*counts.values()) > 1
    # the replayed saving: never more than the kernels and their gaps hold; the batched step is the host's (the loop's
    # graph launch and Python, 58 µs a step replayed alone: docs/replay.md, "The host's own pace"), so it saves less
    # than the kernels' point estimate (457 µs: the device ran through the host's 0.29 ms lead before)
    ks = sorted(k, key=lambda e: e["ts"])
    gaps = sum(max(b["ts"] - (a["ts"] + a["dur"]), 0) for a, b in zip(ks, ks[1:], strict=False)) / len(spans)
    assert f["savings_us"] <= f["evidence"]["small_grid_time_per_step_us"] + gaps
    assert f["savings_us"] == pytest.approx(438.9, abs=0.1) and point_us == pytest.approx(457.2, abs=0.1)
    # the same loop launched eagerly is launch-bound: idle SMs are not what limits it, so small-grid is info there
    assert all(x["severity"] == "info" for x in ours("collected3", "tiny_ops_n128_eager", "TV207"))


def test_small_grid_claim_within_both_measurements_of_the_larger_batch():
    """4 rows per call under a CUDA graph against 128 rows per call, measured two ways: in two processes (the
    collected4 labels' unprofiled steps, 1.673 ms) and in one process that also recorded the problem's trace
    (ab_traced: four ABBA rounds, 1.903-1.935 ms). The claim (the replayed point estimate) is within the band of
    both, and the stated range is ordered. The claim is not bounded by the two-process saving: the problem's
    replayed step sits at its device floor (1.84 ms, the kernels as traced) above the collector's 1.764 ms
    unprofiled step, so even the fixed run's own step (0.090 ms) would claim 1.75 ms."""
    f = ours("collected4", "small_batch_c4_graph", "TV207")[0]
    two = unprofiled_ms("collected4", "small_batch_c4_graph") - unprofiled_ms("collected4", "small_batch_c128_graph")
    ab = json.loads((ROOT / "sample_traces/ab_traced/labels.json").read_text())["twins"]
    one = next(t for t in ab if t["problem"] == "small_batch_c4_graph")
    assert one["fixed"] == "small_batch_c128_graph" and max(one["per_round_saving_ms"]) - min(
        one["per_round_saving_ms"]) < BAND * one["measured_fix_saving_ms"]
    claim = f["savings_us"] / 1000
    assert abs(claim / two - 1) <= BAND and abs(claim / one["measured_fix_saving_ms"] - 1) <= BAND, (claim, two, one)
    rng = f["evidence"]["savings_range_per_step_us"]
    assert (
        rng["double_batch"] <= rng["point"] <= rng["fill_sms"] <= f["evidence"]["small_grid_time_per_step_us"]
    )
    # the 128-row run fills the GPU: nothing to say there
    assert ours("collected4", "small_batch_c128_graph", "TV207") == []


def _decode_lengths(path) -> list[int]:
    """KV lengths of the one-query attention calls in the recorded steps (raw json: SDPA q [B, H, 1, d] against
    k [B, H, L, d], or a matmul [.., 1, d] x [.., d, L])."""
    ev = load_events(path)
    lo, hi = _window(ev)
    out = []
    for e in ev:
        if e.get("cat") != "cpu_op" or not lo <= e.get("ts", -1) < hi:
            continue
        dims = (e.get("args") or {}).get("Input Dims") or []
        if len(dims) < 2 or not all(isinstance(d, list) and len(d) == 4 for d in dims[:2]) or dims[0][2] != 1:
            continue
        if e["name"] == "aten::scaled_dot_product_attention" and dims[1][2] > 1:
            out.append(dims[1][2])
        elif e["name"] == "aten::matmul" and dims[1][2] == dims[0][3] and dims[1][3] > 1:
            out.append(dims[1][3])
    return out


@pytest.mark.parametrize("run", ["decode_dynamic", "hf_generate_dynamic"])
def test_decode_finding_names_the_static_cache_and_graphs(run):
    f = ours("collected4", run, "TV105")[0]
    assert f["evidence"]["batch"] == 1 and f["evidence"]["static_kv_cache"] is False
    assert 'cache_implementation="static"' in f["fix"] and "reduce-overhead" in f["fix"]
    # the fixed runs replay CUDA graphs: the decode rule has nothing to say there
    assert ours("collected4", run.replace("dynamic", "static"), "TV105") == []


def test_decode_evidence_against_the_raw_trace():
    """HF generate with SDPA: one call per layer and token (its backend op inside is not a second call)."""
    run = "hf_generate_dynamic"
    lengths = _decode_lengths(_trace("collected4", run))
    f = ours("collected4", run, "TV105")[0]
    n = len(doc("collected4", run)["steps"])
    kv = f["evidence"]["kv_lengths"]
    assert (kv["first"], kv["last"], kv["distinct"]) == (min(lengths), max(lengths), len(set(lengths)))
    assert f["evidence"]["decode_attention_calls_per_step"] == pytest.approx(len(lengths) / n)
    # 6 layers: one call per layer and generated token, each step generating the same 31 tokens again
    assert len(lengths) == 6 * len(set(lengths)) * n
    assert f["evidence"]["tokens_per_step"] == len(set(lengths))


def test_math_backend_fix_names_the_backend_switch():
    """SDPA's math fallback is told how to find why the fused backends refused, not to call SDPA."""
    fix = ours("collected4", "attn_math_s2048", "TV205")[0]["fix"]
    assert "math backend" in fix and "sdpa_kernel" in fix
    assert ours("collected4", "attn_math_s2048", "TV205")[0]["evidence"]["sdpa_math_backend"] is True
    assert ours("collected4", "attn_eager_s2048", "TV205")[0]["evidence"]["sdpa_math_backend"] is False
    # the math fallback's Q·K^T / P·V are FP32 CUDA-core GEMMs (named so in the raw trace), but it was called on
    # bf16 q/k/v (autocast) and upcast them itself: the fix does not tell to use autocast, and the fused kernel
    # is priced at the inputs' width; the attention rule explains the GEMMs, so fp32-gemm does not headline them
    ev = load_events(_trace("collected4", "attn_math_s2048"))
    assert any(e.get("cat") == "kernel" and "f32f32_f32f32" in e["name"] for e in ev)
    calls = [e for e in ev if e.get("name") == "aten::_scaled_dot_product_attention_math"]
    assert calls and {tuple(e["args"]["Input type"][:3]) for e in calls} == {("c10::BFloat16",) * 3}
    assert ours("collected4", "attn_math_s2048", "TV205")[0]["evidence"]["fp32_scores_gemms"] is True
    assert "autocast" not in fix and "16-bit" in fix
    assert ours("collected4", "attn_eager_s2048", "TV205")[0]["evidence"]["fp32_scores_gemms"] is False
    assert "TV202" not in {f["code"] for f in doc("collected4", "attn_math_s2048")["findings"]}


def _rule_ctx(s: str, run: str, mod):
    t = traceview.load(str(_trace(s, run)))
    ctx, _ = RuleContext.prepare(t, select_steps(t, None))
    return t, ctx.for_rule(mod, Options().options_for(mod))


def test_decode_graph_holds_each_forward_not_the_generate_loop():
    # HF generate's static-cache twin still runs its loop eagerly around the compiled forward (measured 70.6 ms saved,
    # not the 106 ms of every launch): the fix takes the launches inside the decode attention calls off the host
    # and leaves those of generate's stopping criteria (aten::isin) and greedy pick (aten::argmax)
    t, rctx = _rule_ctx("collected4", "hf_generate_dynamic", decode_loop)
    removed = pl.Series(list(decode_loop.fix_transform(rctx).host_removed), dtype=pl.Int64)
    launched = t.gpu["op"].drop_nulls().unique().cast(pl.Int64)
    h = t.host.filter((pl.col("ts") >= rctx.lo) & (pl.col("ts") < rctx.hi))
    rows = h.filter((pl.col("cat") == "cpu_op") & pl.col("i").cast(pl.Int64).is_in(launched.implode()))

    def under(sel: pl.Expr) -> pl.DataFrame:
        sp = h.filter(sel).select(pl.col("ts").alias("s"), pl.col("end").alias("e")).sort("s")
        got = rows.sort("ts").join_asof(sp, left_on="ts", right_on="s", strategy="backward")
        return got.filter(pl.col("ts") < pl.col("e"))

    # the decode calls: SDPA with one query position (q [1, 12, 1, 64]), not the prompt's prefill
    sdpa = (pl.col("name") == "aten::scaled_dot_product_attention") & pl.col("input_dims").cast(
        pl.String
    ).str.starts_with("[[1, 12, 1, 64]")
    attn, isin, argmax = (
        under(sdpa),
        under(pl.col("name") == "aten::isin"),
        under(pl.col("name") == "aten::argmax"),
    )
    assert attn.height > 500 and isin.height > 0 and argmax.height > 0
    assert attn["i"].cast(pl.Int64).is_in(removed.implode()).all()
    assert not isin["i"].cast(pl.Int64).is_in(removed.implode()).any()
    assert not argmax["i"].cast(pl.Int64).is_in(removed.implode()).any()
    # one model of what a CUDA graph holds: launch-bound's fix on the same decode loop is the same transform
    _, lctx = _rule_ctx("collected4", "hf_generate_dynamic", launch_bound)
    assert sorted(launch_bound.fix_transform(lctx).host_removed) == sorted(removed.to_list())


@pytest.mark.parametrize(("s", "run"), [("collected3", "resnet18_fp32"), ("collected4", "attn_eager_s2048")])
def test_resident_blocks_per_sm_match_kinetos_occupancy_calculator(s, run):
    """The wave model's blocks per SM (the occupancy calculator on threads, registers and shared memory) against
    Kineto's own: `est. achieved occupancy %` = min(grid / SMs, resident blocks) x threads / the SM's threads, so
    wherever the grid holds more blocks per SM than fit, Kineto's occupancy gives the resident count."""
    trace = traceview.load(str(_trace(s, run)))
    ctx, _ = RuleContext.prepare(trace, select_steps(trace, None))
    rctx = ctx.for_rule(small_grid, Options().options_for(small_grid))
    sm_threads = trace.meta.device_properties[0]["maxThreadsPerMultiprocessor"]
    threads = pl.col("block_x") * pl.col("block_y") * pl.col("block_z")
    g = trace.gpu.filter(pl.col("kind") == "compute").with_columns(r=small_grid.resident_blocks(rctx))
    # (Kineto reads 0 where its calculator failed: kernels that opt in to more shared memory than the default)
    g = g.filter((pl.col("occupancy") > 0) & (pl.col("blocks_per_sm") > pl.col("r") + 1))
    kineto = g["occupancy"] / 100 * sm_threads / g.select(threads).to_series()
    assert g.height > 100
    assert (g["r"] - kineto).abs().max() < 0.5


@pytest.mark.parametrize("s, run", [("collected2", "tiny_ops_n64_reduce_overhead"), ("collected3",
                                    "tiny_ops_n128_reduce_overhead"), ("collected2", "tiny_ops_n64_cudagraph"),
                                    ("collected2", "tiny_ops_n64_eager"), ("collected5", "resnet18_serve_c1_graph")])
def test_small_grid_advises_torch_compile_only_to_uncompiled_steps(s, run):
    """The fix never advises what the trace already does: a step whose raw trace runs Inductor's compiled graphs
    (`CompiledFxGraph` / `Torch-Compiled Region` spans) is not told to use torch.compile."""
    p = next((ROOT / "sample_traces" / s / run).glob("*.pt.trace.json*"))
    compiled = any(re.search(r"CompiledFxGraph|Torch-Compiled Region", e.get("name", "")) for e in load_events(p))
    fix = [f["fix"] for f in analyze([str(p)]).to_dict()["traces"][0]["findings"] if f["code"] == "TV207"]
    assert len(fix) == 1
    assert ("torch.compile" in fix[0]) is not compiled
    assert compiled is run.endswith("reduce_overhead")  # the recordings' own labels: mode="reduce-overhead"


@pytest.mark.parametrize("problem, bf16", [("resnet18_fp32", "resnet18_bf16_cl"), ("resnet50_fp32", "resnet50_bf16_cl")])
def test_conv_casts_are_priced_on_the_device_as_the_bf16_programs_trace_runs_them(problem, bf16):
    """fp32-conv's fix adds autocast's weight casts as copy kernels (`gpu_add`, `CASTS_PER_CONV` copies of each
    FP32 convolution's weight): within 25 % of what the same program's BF16 trace runs its casts in (every copy
    kernel under an `aten::_to_copy`: 144 µs a step on ResNet-18, 302 on ResNet-50)."""
    from traceview.rules import BY_NAME

    s = "collected3" if problem == "resnet18_fp32" else "collected4"
    trace = traceview.load(str(_trace(s, problem)))
    ctx, _ = RuleContext.prepare(trace, select_steps(trace, None))
    mod = BY_NAME["fp32-conv"]
    t = mod.fix_transform(ctx.for_rule(mod, Options().options_for(mod)))
    g = trace.gpu.filter((pl.col("ts") >= ctx.steps["ts"].min()) & (pl.col("ts") < ctx.steps["end"].max()))
    priced = sum(v for i, v in t.gpu_add.items() if i in set(g["i"].to_list())) / ctx.steps.height
    b = traceview.load(str(_trace(s, bf16)))
    steps = select_steps(b, None)
    k = b.gpu.filter((pl.col("ts") >= steps["ts"].min()) & (pl.col("ts") < steps["end"].max()))
    host = b.host.select("i", "name", "parent")
    k = k.join(host.rename({"i": "op", "name": "n0", "parent": "p"}), on="op").join(
        host.select(pl.col("i").alias("p"), pl.col("name").alias("n1")), on="p")
    measured = float(k.filter(pl.col("n1") == "aten::_to_copy")["dur"].sum()) / steps.height
    assert measured > 100_000 and priced == pytest.approx(measured, rel=0.25), (priced, measured)
