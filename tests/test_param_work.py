"""Parameter-sized kernels (traceview/analyses/param_work.py): those launched inside torch.optim's step and
zero_grad annotations and DDP's reducer ops, checked against the raw trace, and the rules that leave them out."""

from __future__ import annotations

import re

import pytest
from conftest import load, raw_events

from traceview.analyses.param_work import OPT_STEP_RE, REDUCER_RE, ZERO_GRAD_RE, param_sized
from traceview.report import analyze

CASES = {  # trace -> the span pattern its parameter-sized kernels run under
    "gpu_h200_compile/optimizer_single_tensor.json.gz": OPT_STEP_RE,
    "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz": ZERO_GRAD_RE,
    "nccl_h200x2/ddp_balanced/rank0.1795959685011564177.pt.trace.json.gz": REDUCER_RE,
}


def _raw_count(rel: str, zero_grad: bool) -> int:
    """Kernels whose launching runtime call starts inside an optimizer step (or zero_grad) annotation, or inside a
    DDP reducer op on the same thread: plain loops over the stdlib-decoded events."""
    ev = raw_events(rel)
    spans_re = re.compile(f"{OPT_STEP_RE}|{ZERO_GRAD_RE}" if zero_grad else OPT_STEP_RE)
    ann = [(e["ts"], e["ts"] + e["dur"]) for e in ev
           if e.get("cat") == "user_annotation" and spans_re.match(e.get("name", "")) and "dur" in e]
    red = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in ev
           if e.get("cat") == "cpu_op" and re.match(REDUCER_RE, e.get("name", "")) and "dur" in e]
    launch = {e["args"]["correlation"]: e for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    n = 0
    for e in ev:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        r = launch.get(e.get("args", {}).get("correlation"))
        if r is None:
            continue
        if any(a <= r["ts"] < b for a, b in ann) or any(t == r["tid"] and a <= r["ts"] < b for t, a, b in red):
            n += 1
    return n


@pytest.mark.parametrize("rel", sorted(CASES))
@pytest.mark.parametrize("zero_grad", [False, True])
def test_param_sized_kernels_match_the_raw_trace(rel, zero_grad):
    t = load(rel)
    g = t.gpu.select("launch_ts", "launch_tid")
    got = int(param_sized(t, g, zero_grad=zero_grad).sum())
    assert got == _raw_count(rel, zero_grad)
    if zero_grad or CASES[rel] != ZERO_GRAD_RE:
        assert got > 0, rel  # each trace has some under its own pattern


@pytest.mark.parametrize("rel", ["gpu_h200_compile/optimizer_single_tensor.json.gz",
                                 "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz"])
def test_small_grid_leaves_the_parameter_sized_kernels_out(rel):
    """The single-tensor AdamW step's and SGD zero_grad's kernels have small grids, but a larger batch leaves them
    as they are: small-grid (TV207) stays silent; the optimizer's own rule prices the step."""
    codes = {f["code"] for f in analyze([str(load(rel).path)]).to_dict()["traces"][0]["findings"]}
    assert "TV207" not in codes
    if "optimizer" in rel:
        assert "TV203" in codes
