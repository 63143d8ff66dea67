import json

import polars as pl
import pytest
import rulekit as k

from traceview.analyses.attention import FUSED_ATTN_KERNEL_RE

LABELS = json.loads((k.SAMPLES / "gpu_h200_compile/labels.json").read_text())


def test_fires_on_fp32_gemm_without_tf32():
    assert LABELS["fp32_gemm_no_tf32"]["expected"] == "fp32-gemm"
    (f,) = k.findings("gpu_h200_compile/fp32_gemm_no_tf32.json.gz", "TV202")
    ev = f["evidence"]
    assert f["rule"] == "fp32-gemm" and f["severity"] == "error" and f["count"] == 3
    # an 8192^3 GEMM = 2 * 8192^3 FLOP in ~21.5 ms: ~51 TFLOP/s, 77 % of the H200's 67 TFLOP/s FP32 peak
    assert ev["achieved_tflops"] == pytest.approx(2 * 8192**3 / 21.55e-3 / 1e12, rel=0.02)
    assert ev["tf32_peak_tflops"] == 494.5 and ev["fp32_peak_tflops"] == 67.0
    # predicted TF32 time 21.5 ms * 67 / 494.5 = 2.92 ms per GEMM; the TF32 twin measures 2.66 ms per GEMM
    twin = k.trace("gpu_h200_compile/fp32_gemm_tf32.json.gz")
    tf32 = float(twin.gpu.filter(pl.col("kind") == "compute")["dur"].mean()) / 1000
    predicted = ev["predicted_tf32_time_us"] / 3
    assert abs(predicted - tf32) / tf32 < 0.15
    assert "set_float32_matmul_precision" in f["fix"] and "autocast" in f["fix"]


def test_silent_on_tf32_twin():
    assert LABELS["fp32_gemm_tf32"]["expected"] == "none"
    assert k.findings("gpu_h200_compile/fp32_gemm_tf32.json.gz", "TV202") == []


def test_tiny_latency_bound_fp32_gemms_save_nothing():
    # the optimizer traces' Linear layers are FP32 SIMT GEMMs too, but they reach ~2 % of the FP32 peak and the
    # host launches late: TF32 would not shorten the step
    for n in ("optimizer_single_tensor", "optimizer_fused"):
        assert k.findings(f"gpu_h200_compile/{n}.json.gz", "TV202") == []


def _ctx(rel: str):
    from traceview.rules import BY_NAME

    from traceview.options import Options
    from traceview.report import select_steps
    from traceview.ruleapi import RuleContext

    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*")))
    ctx, _ = RuleContext.prepare(t, select_steps(t, None))
    mod = BY_NAME["fp32-gemm"]
    return t, ctx, mod, ctx.for_rule(mod, Options().options_for(mod))


def test_autocast_variant_prices_what_bf16_changes_on_gpt2():
    # HF GPT-2 (6 layers, batch 8 x 512) in FP32 with SDPA: autocast runs its GEMMs in BF16, its FP32
    # memory-efficient attention as 16-bit flash, and the LM head's [4096, 768] x [768, 50257] GEMMs on cuBLAS's
    # fallback kernel (a BF16 row of 50257 elements is not a multiple of 16 bytes; in FP32 the CUDA-core kernel
    # does not care)
    t, ctx, mod, rc = _ctx("ab_traced/gpt2_fp32")
    v = mod.fix_variants(rc)
    assert set(v) == {"tf32", "autocast"}
    tf32, ac = v["tf32"], v["autocast"]
    g = t.gpu.select("i", "name", "dur", "op")
    attn = g.filter(pl.col("name").str.contains("fmha_cutlass") & pl.col("i").is_in(list(ac.gpu_dur)))
    assert attn.height == 12 * ctx.steps.height  # 6 layers, forward and backward
    # the same program's BF16 trace (collected3/gpt2_sdpa: cuDNN's SDPA) is the independent measure of what its
    # fused attention takes in 16 bits: 0.63 ms a step against 3.6 ms of FP32 memory-efficient kernels here
    t2, ctx2, _, _ = _ctx("collected3/gpt2_sdpa")
    bf16 = t2.gpu.filter(pl.col("name").str.contains(FUSED_ATTN_KERNEL_RE) & (pl.col("ts") >= ctx2.lo)
                         & (pl.col("ts") < ctx2.hi))["dur"].sum() / ctx2.steps.height
    predicted = sum(ac.gpu_dur[i] for i in attn["i"]) / ctx.steps.height
    assert predicted == pytest.approx(bf16, rel=0.25)
    assert predicted < 0.25 * attn["dur"].sum() / ctx.steps.height
    assert not set(attn["i"]) & set(tf32.gpu_dur)  # TF32 leaves the attention kernels alone
    # the LM head's GEMMs (the ops with a 50257-long dimension): slower than an aligned BF16 GEMM in the autocast
    # variant, never longer than they took in FP32
    head_ops = t.host.filter(pl.col("input_dims").cast(pl.String).str.contains("50257"))["i"]
    head = g.filter(pl.col("op").is_in(head_ops.implode()) & pl.col("i").is_in(list(ac.gpu_dur)))
    assert head.height == 3 * ctx.steps.height  # the forward and its two gradients
    fp32 = mod._kernels(rc).filter(pl.col("i").is_in(head["i"].implode()))
    for i, d, b in fp32.select("i", "dur", "bf16_dur").iter_rows():
        assert b < ac.gpu_dur[i] <= d
        assert ac.gpu_dur[i] >= 5 * b  # the fallback kernel: 5.7-7.6x an aligned one on the H200
    # the host casts: each forward GEMM op's weight and bias (24 addmm x 2, the tied LM head's weight) at the trace's
    # eager-op time, and each cast's gradient back in the backward at its autograd nodes' time; the BF16 twin's trace
    # casts at least that many under its GEMMs (66 under addmm and 2 under linear a step: activations from layer
    # norms too)
    from traceview.analyses.overhead import backward_node_host_ns, eager_op_host_ns

    added = -sum(ac.host_cut.values()) / ctx.steps.height
    # (and 19 activations a step: test_autocast_activation_casts_match_the_bf16_programs_trace)
    casts = 24 * 2 + 1 + 19
    assert added == pytest.approx(casts * (eager_op_host_ns(t) + backward_node_host_ns(t)), rel=0.01)
    assert tf32.host_cut == {}


def test_the_finding_saves_what_its_advice_gives():
    # no 16-bit GEMM in the trace: the advice is TF32 first, and the finding's saving is TF32's
    _, _, mod, rc = _ctx("ab_traced/gpt2_fp32")
    assert mod.fix_transform(rc).gpu_dur == mod.fix_variants(rc)["tf32"].gpu_dur
    # ... and its text says the LM head would then fall back, and to what to pad it
    rel = next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / "ab_traced/gpt2_fp32").glob("*.pt.trace.json*"))
    (f,) = k.findings(rel, "TV202")
    assert "rows of 50257 elements" in f["fix"] and "pad to 50304" in f["fix"]
    # a GEMM-only trace with aligned shapes says nothing of it
    (g,) = k.findings("gpu_h200_compile/fp32_gemm_no_tf32.json.gz", "TV202")
    assert "pad to" not in g["fix"]


def _lm_head(t, ctx) -> pl.DataFrame:
    # the LM head's GEMM kernels in the analysed steps: [4096, 768] x [768, 50257] and its two gradients
    ops = t.host.filter(pl.col("input_dims").cast(pl.String).str.contains("50257")
                        & pl.col("name").is_in(["aten::mm", "aten::addmm", "aten::linear", "aten::matmul"]))["i"]
    return t.gpu.filter(pl.col("op").is_in(ops.implode()) & (pl.col("kind") == "compute")
                        & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))


def test_a_gemm_misaligned_at_the_fixs_width_is_priced_on_the_fallback_kernel():
    # GPT-2's LM head in FP32 runs on the CUDA cores, where 50257 columns cost nothing; TF32 (4 elements per 16
    # bytes) and BF16 (8) both put it on cuBLAS's fallback kernel. The prediction from the FP32 trace against the
    # head's kernels as the same program ran them in TF32 and in BF16 (their own traces, another process each)
    t, ctx, mod, rc = _ctx("ab_traced/gpt2_fp32")
    v = mod.fix_variants(rc)
    head = _lm_head(t, ctx)
    assert head.height == 3 * ctx.steps.height
    for variant, twin, kernel in (("tf32", "gpt2_tf32_vocab", "s1688gemm"), ("autocast", "gpt2_vocab", "bf16_s1688gemm")):
        predicted = sum(v[variant].gpu_dur[i] for i in head["i"]) / ctx.steps.height
        t2, c2, _, _ = _ctx(f"ab_traced/{twin}")
        h2 = _lm_head(t2, c2)
        assert h2["name"].str.contains(kernel).all()  # the fallback kernels (`align1`, sm75/sm80 cutlass)
        measured = h2["dur"].sum() / c2.steps.height
        assert predicted == pytest.approx(measured, rel=0.1), (variant, predicted, measured)
        assert predicted < 0.5 * head["dur"].sum() / ctx.steps.height  # still faster than the FP32 CUDA cores


def test_what_if_prices_the_variant_the_user_names():
    # `--what-if fp32-gemm:autocast` replays the autocast variant (the same number tools/predictions.py scores
    # against the measured BF16 twin), `fp32-gemm` the advised TF32 one, and a variant the rule does not price is
    # listed as not applied, with the ones it does
    import subprocess
    import sys

    d = k.SAMPLES / "ab_traced/vit_fp32"

    def what_if(spec: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(d), "--format", "json", "--what-if",
                              spec], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["traces"][0]["projection"]["what_if"]

    tf32, ac, both, bad = (what_if(s) for s in ("fp32-gemm", "fp32-gemm:autocast", "fp32-gemm:autocast,fp32-conv",
                                                  "fp32-gemm:bogus"))
    _, _, mod, rc = _ctx("ab_traced/vit_fp32")
    assert tf32["fixes"] == ["fp32-gemm"] and ac["fixes"] == ["fp32-gemm:autocast"]
    assert ac["savings_us"] > tf32["savings_us"] + 10_000  # BF16 GEMMs and flash attention: ~19 ms a step more
    labels = json.loads((k.SAMPLES / "ab_traced/labels.json").read_text())
    (t,) = [t for t in labels["twins"] if t["problem"] == "vit_fp32"]
    assert t["fix_variant"] == "autocast"
    assert both["savings_us"] / 1000 == pytest.approx(t["measured_fix_saving_ms"], rel=0.2)
    assert bad["fixes"] == [] and bad["unknown"] == ["fp32-gemm:bogus (priced here: autocast, tf32)"]
    assert set(mod.fix_variants(rc)) == {"autocast", "tf32"}


def test_what_if_without_a_rule_name_is_one_error_line():
    # ":autocast" would otherwise select every rule (an empty selector prefixes every code)
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "traceview", "analyze",
                        str(k.SAMPLES / "gpu_h200/seed_single_gemm_eager.json.gz"), "--what-if", ":autocast"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["traceview: error: --what-if: ':autocast' names no rule (a rule name "
                                             "or code, e.g. fp32-gemm:autocast)"]


def test_autocast_activation_casts_match_the_bf16_programs_trace():
    """The autocast variant prices a cast for each FP32 activation an autocast op reads (a layer norm's output, the
    FP32 result of GPT-2's pow-based GELU); counted from the FP32 trace, they equal the casts the same program's
    BF16 trace records: `aten::to` under an autocast op, on that op's activation input."""
    import numpy as np

    from traceview.analyses.opshapes import decode
    from traceview.analyses.tree import ancestor_ids

    t, ctx, mod, rc = _ctx("ab_traced/gpt2_fp32")
    h = t.host
    back = (h["name"].str.starts_with("autograd::engine::evaluate_function") | h["name"].str.ends_with("Backward0"))
    outer = h.filter(pl.col("name").is_in(mod.AUTOCAST_OPS) & (pl.col("ts") >= ctx.steps["cpu_ts"].min())
                     & (pl.col("ts") < ctx.steps["cpu_end"].max()))
    up = h.select(pl.col("i").alias("parent"), pl.col("name").alias("pn"))
    outer = outer.join(up, on="parent", how="left").filter(~pl.col("pn").is_in(mod.AUTOCAST_OPS).fill_null(False))
    fwd = outer.filter(pl.Series(ancestor_ids(h, outer["i"], back.fill_null(False).to_numpy(),
                                              include_self=True) < 0))["i"].cast(pl.UInt32)
    predicted = sum(len(e) for e in mod._activation_casts(rc, fwd).values()) / ctx.steps.height

    t2, ctx2, _, _ = _ctx("collected3/gpt2_sdpa")  # the same program under autocast
    h2 = t2.host.filter((pl.col("ts") >= ctx2.steps["cpu_ts"].min()) & (pl.col("ts") < ctx2.steps["cpu_end"].max()))
    casts = h2.filter(pl.col("name") == "aten::to").join(
        t2.host.select(pl.col("i").alias("parent"), pl.col("name").alias("pn"), pl.col("input_dims").alias("pd"),
                       pl.col("input_type").alias("pt")), on="parent")
    casts = casts.filter(pl.col("pn").is_in(list(mod.ACTIVATION_INPUTS)))
    n = 0
    for d, ty, pn, pd, pt in casts.select("input_dims", "input_type", "pn", "pd", "pt").iter_rows():
        mine, parent = decode(d, ty), decode(pd, pt)
        acts = [parent[j][0] for j in mod.ACTIVATION_INPUTS[pn] if j < len(parent)]
        n += bool(mine) and mine[0][0] in acts
    measured = n / ctx2.steps.height
    assert measured == 19 and np.isclose(predicted, measured)  # 6 layers x 3 (ln_1, ln_2, GELU) + the LM head


def _in_steps(t, ctx, frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter((pl.col("ts") >= ctx.steps["ts"].min()) & (pl.col("ts") < ctx.steps["end"].max()))


def test_autocast_casts_are_priced_on_the_device_as_the_bf16_programs_trace_runs_them():
    """autocast's casts are copy kernels: the autocast variant adds each one's device time (`cast_ns`) beside the
    GEMM that reads it (`Transform.gpu_add`). Checked against the same program's BF16 trace (collected3/gpt2_sdpa,
    another recording): its copy kernels of the same casts — the forward ones under an autocast op, and for each
    of them the gradient's `ToCopyBackward0` of as many elements — and its device time per step, which the fixed
    FP32 trace's now reaches within 5 % (8 % short when the casts cost the device nothing)."""
    import math

    from traceview.analyses.opshapes import decode

    t, ctx, mod, rc = _ctx("collected3/gpt2_fp32")
    tf = mod.fix_variants(rc)["autocast"]
    g = _in_steps(t, ctx, t.gpu.select("i", "ts", "dur"))
    n = ctx.steps.height
    new = pl.DataFrame({"i": list(tf.gpu_dur), "new": list(tf.gpu_dur.values())}, schema={"i": pl.UInt32, "new": pl.Int64})
    add = pl.DataFrame({"i": list(tf.gpu_add), "add": list(tf.gpu_add.values())}, schema={"i": pl.UInt32, "add": pl.Int64})
    g = g.join(new, on="i", how="left").join(add, on="i", how="left")
    shortened = float(g.select(pl.min_horizontal("dur", pl.col("new").fill_null(pl.col("dur")))).sum().item()) / n
    casts = float(g["add"].sum()) / n

    t2, ctx2, _, _ = _ctx("collected3/gpt2_sdpa")  # the same program under autocast
    n2 = ctx2.steps.height
    busy = float(_in_steps(t2, ctx2, t2.gpu)["dur"].sum()) / n2
    assert abs((shortened + casts) / busy - 1) < 0.05
    assert shortened / busy - 1 < -0.06  # without the casts' device time the fixed step's device work falls short

    # the BF16 trace's cast kernels: `aten::copy_` under `aten::_to_copy` under `aten::to`, by what calls the cast
    h = t2.host.select("i", "name", "parent", "input_dims", "input_type")
    k2 = _in_steps(t2, ctx2, t2.gpu.select("i", "ts", "dur", "op"))
    up = [h.rename({c: f"{c}{j}" for c in h.columns}) for j in range(4)]
    k2 = (k2.join(up[0], left_on="op", right_on="i0").join(up[1], left_on="parent0", right_on="i1")
          .join(up[2], left_on="parent1", right_on="i2").join(up[3], left_on="parent2", right_on="i3"))
    k2 = k2.filter((pl.col("name0") == "aten::copy_") & (pl.col("name1") == "aten::_to_copy")
                   & (pl.col("name2") == "aten::to"))
    elems = [decode(d, ty)[0][0] for d, ty in k2.select("input_dims1", "input_type1").iter_rows()]
    k2 = k2.with_columns(e=pl.Series([int(math.prod(x)) if x else 0 for x in elems]))
    fwd = k2.filter(pl.col("name3").is_in(mod.AUTOCAST_OPS))
    bwd = k2.filter(pl.col("name3") == "ToCopyBackward0")
    # each forward cast's gradient is cast back: as many `ToCopyBackward0` kernels of its elements, at their mean
    per_e = fwd.group_by("e").agg(pl.len().alias("k")).join(
        bwd.group_by("e").agg(pl.col("dur").mean().alias("mean")), on="e")
    measured = (float(fwd["dur"].sum()) + float((per_e["k"] * per_e["mean"]).sum())) / n2
    assert fwd.height / n2 == 68  # 24 addmm x (weight, bias), 19 activations, the LM head's (tied) weight
    assert casts == pytest.approx(measured, rel=0.15), (casts, measured)


@pytest.mark.parametrize("bf16", ["collected3/gpt2_sdpa", "collected3/resnet18_bf16_cl", "collected4/resnet50_bf16_cl"])
def test_a_gradient_cast_costs_the_host_an_autograd_node_not_an_eager_op(bf16):
    """Autocast's gradient casts (`ToCopyBackward0`) are priced as the trace's own autograd nodes that launch one
    elementwise kernel (`overhead.backward_node_host_ns`), not as a forward eager op: in each BF16 twin's own trace
    the `ToCopyBackward0` nodes took what its other one-kernel nodes took (within 15 %), 1.9-2.4x an eager op."""
    from traceview.analyses.overhead import backward_node_host_ns, eager_op_host_ns, host_share

    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / bf16).glob("*.pt.trace.json*")))
    d = t.host.filter(pl.col("name").str.starts_with("autograd::engine::evaluate_function: ToCopyBackward0"))["dur"]
    casts = float(d.median()) * (1 - host_share(t))  # unprofiled, as the pricing is
    node, op = backward_node_host_ns(t), eager_op_host_ns(t)
    assert d.len() >= 60 and casts == pytest.approx(node, rel=0.15)
    assert 1.8 < node / op < 2.5
