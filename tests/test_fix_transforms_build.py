"""Every rule's `fix_transform` builds on real traces: the fix runner (analyses/fixes.py) turns a fix that raises
into "saves nothing" so one broken rule never stops a report, which also hides the bug — gemm-epilogue's fix cast
op names to row ids and priced every bundled epilogue at 0 µs. Here each rule's fix is built directly on traces of
several kinds (twins of every rule, compiled, CUDA-graph, CPU-only, multi-rank, old-format), and must either
return None or a Transform whose rows exist in the trace."""

from __future__ import annotations

import pytest
from conftest import SAMPLES
from traceview.rules import RULES

import traceview
from traceview.options import Options
from traceview.report import select_steps
from traceview.ruleapi import RuleContext

TRACES = sorted(
    [
        *(p for p in (SAMPLES / "collected5").glob("*/*.pt.trace.json.gz")),
        *(
            SAMPLES / "collected4" / r
            for r in ("decode_dynamic", "attn_eager_s2048", "conv_fp32", "alloc_churn_empty_cache")
        ),
        SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz",
        SAMPLES / "gpu_h200/cudagraph_reduce_overhead.json.gz",
        SAMPLES / "kineto_resnet50/resnet50_num_workers_0",
    ]
)


def _trace_file(p):
    return p if p.is_file() else next(p.rglob("*.pt.trace.json*"))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}"[:60])
def test_every_fix_builds(path):
    t = traceview.load(str(_trace_file(path)))
    ctx, _ = RuleContext.prepare(t, select_steps(t, None))
    opts = Options()
    host_ids = set(t.host["i"].to_list())
    gpu_ids = set(t.gpu["i"].to_list())
    for code, mod in RULES.items():
        fn = getattr(mod, "fix_transform", None)
        if fn is None:
            continue
        tf = fn(ctx.for_rule(mod, opts.options_for(mod)))  # raises here, with the rule's traceback
        if tf is None:
            continue
        assert set(tf.gpu_dur) <= gpu_ids, code
        assert (
            set(tf.host_removed) <= host_ids and set(tf.no_wait) <= host_ids and set(tf.host_cut) <= host_ids
        ), code


def test_a_fix_that_raises_is_said(monkeypatch):
    """The fix runner keeps the report going when a fix raises, and says so in the trace's warnings (as it does for
    a rule that fails): the finding stays, at info with no saving."""
    from traceview.rules import BY_NAME

    from traceview.report import analyze

    def boom(ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(BY_NAME["launch-bound"], "fix_transform", boom)
    (t,) = analyze([SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz"], Options()).to_dict()["traces"]
    assert "internal error building the fix of rule TV101 launch-bound: RuntimeError: boom; its saving reads 0" in (
        t["warnings"]
    )
    (f,) = [f for f in t["findings"] if f["rule"] == "launch-bound"]
    assert f["severity"] == "info" and f["savings_us"] == 0.0
