"""The overview sections of a trace entry: which file it is, what the trace says about itself, the analysed
steps and their totals, the devices, the top kernels and ops (the numbers HTA and tb_plugin also give)."""

from __future__ import annotations

import polars as pl

from ..analyses import breakdown, timeline
from ..analyses.intervals import clip
from ..frames import pick
from ..model import Trace
from ..units import pct, us
from .section import Section

IDENTITY = Section(
    keys=("path", "rank", "world_size"), computes="which file and which rank of its job the entry is",
    json_type="str, int\\|null, int\\|null",
    json_doc="rank from `distributedInfo`, else a `rank<N>` in the file name", text="header",
)
METADATA = Section(
    keys=("metadata",), computes="what the trace says about itself", json_type="object", text="header",
    app_page="overview",
    json_doc=("`format` (`kineto`, `kineto-2021`, `legacy-autograd`), `backend` (`cuda`, `rocm`, `mtia`, `cpu`), "
              "`trace_name`, `base_time_ns`, `device` (name of device 0), `devices` (the trace's `deviceProperties`), "
              "`distributed` (`distributedInfo`), `versions` (CUPTI/CUDA/HIP/NCCL), `options` (`record_shapes`, "
              "`profile_memory`, `with_stack`, `with_modules`, `with_flops`), `has_profiler_steps`, `event_counts` "
              "(per category)"),
)
WARNINGS = Section(
    keys=("warnings",), computes="what was skipped or repaired, one line per kind", json_type="[str]",
    text="header", app_page="overview",
    json_doc="what was skipped or repaired (truncated file, no ProfilerStep, steps left out, ...)",
)
SUMMARY = Section(
    keys=("summary",), computes="the analysed steps' totals", json_type="object", text="header",
    app_page="overview",
    json_doc=("`steps` (count), `step_numbers`, `window_us` (sum of the step periods), `avg_step_us` (mean step "
              "period: compares with a CUDA-event step time), `gpu_busy_pct`, `tb_window_us`, `tb_avg_step_us` (the "
              "same over tb_plugin's step windows, for comparison with the plugin), `breakdown_pct` (the step "
              "breakdown below, over all tb windows), `excluded_us` and `excluded` {`before_us`, `after_us`, `notes`} "
              "(recording edges left out of every step: GPU work queued before the first step, activity after the "
              "last one — `notes` say why; they are not `warnings`)"),
)
STEPS = Section(
    keys=("steps",), computes="each analysed step's period, GPU busy time and tb_plugin breakdown",
    json_type="[STEP]", text="steps", app_page="overview",
    json_doc="one per analyzed `ProfilerStep#N` (or one `(whole trace)` step)",
)
DEVICES = Section(
    keys=("devices",), computes="per GPU: busy time, HTA's temporal breakdown and idle causes per stream",
    json_type="[DEVICE]", text="devices", app_page="kernels", json_doc="one per GPU with activity",
)
TOP_KERNELS = Section(
    keys=("top_kernels",), computes="the kernels with the most GPU time in the analysed steps",
    json_type="[{`name`, `kind`, `count`, `total_us`, `mean_us`, `min_us`, `max_us`, `share_pct`, `op`}]",
    text="kernels", app_page="kernels",
    json_doc=("by GPU time; `kind` ∈ compute, comm, memcpy, memset; `op` = the op that launched it most "
              "often"),
)
TOP_OPS = Section(
    keys=("top_ops",), computes="GPU time per launching op", text="ops", app_page="kernels",
    json_type="[{`op`, `calls`, `kernels`, `gpu_us`, `cpu_us`, `share_pct`}]",
    json_doc="GPU time per launching op name",
)


def device_section(trace: Trace, steps: pl.DataFrame, busy: pl.DataFrame) -> list[dict]:
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    # the columns the breakdowns read (their fallback for null devices or streams too): a clip copies every column
    gpu = clip(pick(trace.gpu, "i", "name", "op", "kind", "device", "stream", "ts", "end", "launch_ts"), lo, hi)
    total = int((steps["end"] - steps["ts"]).sum())
    tb = timeline.temporal_breakdown(timeline.gpu_work(gpu))
    idle = timeline.idle_breakdown(gpu)
    busy_by: dict[int, int] = {}
    for dev, b in pick(busy, "device", "busy").iter_rows():  # devices x steps: small
        busy_by[dev] = busy_by.get(dev, 0) + b
    idle_by: dict[int, list[dict]] = {}
    for r in idle.iter_rows(named=True):  # one row per stream, by device and stream
        idle_by.setdefault(r["device"], []).append(r)
    out = []
    for row in tb.iter_rows(named=True):  # one row per device: a handful
        dev = row["device"]
        b = busy_by.get(dev, 0)
        streams = [
            {"stream": r["stream"], "host_wait_us": us(r["host_wait"]), "kernel_wait_us": us(r["kernel_wait"]),
             "other_us": us(r["other"]), "idle_us": us(r["idle"]), "host_wait_pct": pct(r["host_wait"], r["idle"])}
            for r in idle_by.get(dev, [])
        ]
        out.append({
            "device": dev, "name": trace.meta.device_name(dev), "busy_us": us(b), "busy_pct": pct(b, total),
            "temporal": {"span_us": us(row["span"]), "idle_us": us(row["idle"]), "compute_us": us(row["compute"]),
                         "non_compute_us": us(row["non_compute"]), "idle_pct": pct(row["idle"], row["span"]),
                         "compute_pct": pct(row["compute"], row["span"]),
                         "non_compute_pct": pct(row["non_compute"], row["span"])},
            "idle_by_stream": streams,
        })
    return out


def steps_section(trace: Trace, steps: pl.DataFrame, busy: pl.DataFrame) -> tuple[list[dict], dict]:
    """Per step: its period [start, end) (periods partition time) with the GPU busy time in it, and the
    tb_plugin-style breakdown over the plugin's own window (tb_*), kept for comparison with the plugin."""
    roles = [*breakdown.ROLES, "other"]
    rows = []
    steps_rows = _step_rows(trace, steps, busy)
    for r in steps_rows:
        rows.append({
            "step": r["step"], "start_us": us(r["ts"]), "end_us": us(r["end"]), "dur_us": us(r["dur"]),
            "gpu_busy_us": us(r["busy"]), "gpu_busy_pct": pct(r["busy"], r["dur"]),
            "tb_start_us": us(r["tb_ts"]), "tb_end_us": us(r["tb_end"]), "tb_dur_us": us(r["tb_dur"]),
            "breakdown_us": {k: us(r[k]) for k in roles},
            "breakdown_pct": {k: pct(r[k], r["tb_dur"]) for k in roles},
        })
    tot = {c: sum(r[c] for r in steps_rows) for c in ("dur", "tb_dur", "busy", *roles)}  # ints: exact
    n = len(steps_rows)
    summary = {
        "steps": n, "step_numbers": [r["step"] for r in steps_rows], "window_us": us(tot["dur"]),
        "avg_step_us": us(tot["dur"] / n) if n else None,
        "gpu_busy_pct": pct(tot["busy"], tot["dur"]),
        "tb_window_us": us(tot["tb_dur"]), "tb_avg_step_us": us(tot["tb_dur"] / n) if n else None,
        "breakdown_pct": {k: pct(tot[k], tot["tb_dur"]) for k in roles},
    }
    return rows, summary


def _step_rows(trace: Trace, steps: pl.DataFrame, busy: pl.DataFrame) -> list[dict]:
    """One dict per step, by step: [step, ts, end, dur] of its period, the breakdown over the plugin's window
    (tb_ts, tb_end, tb_dur, roles) and its busiest device's busy ns. Joined in Python (steps are few; five
    polars calls cost more than the rows on a small trace), by frames when step numbers repeat or are null."""
    bd = breakdown.step_breakdown(trace, steps).rename({"ts": "tb_ts", "end": "tb_end", "dur": "tb_dur"})
    if steps["step"].is_duplicated().any() or any(steps[c].null_count() for c in ("step", "ts", "end")):
        busy = busy.group_by("step").agg(pl.col("busy").max())
        return list(steps.select("step", "ts", "end", (pl.col("end") - pl.col("ts")).alias("dur"))
                    .join(bd, on="step").join(busy, on="step", how="left")
                    .with_columns(pl.col("busy").fill_null(0)).sort("step").iter_rows(named=True))
    most: dict[int, int] = {}
    for s, b in pick(busy, "step", "busy").iter_rows():  # devices x steps
        if b is not None and (s not in most or b > most[s]):
            most[s] = b
    tb = {r["step"]: r for r in bd.iter_rows(named=True)}
    out = [{"step": s, "ts": a, "end": e, "dur": e - a, **{k: v for k, v in tb[s].items() if k != "step"},
            "busy": most.get(s, 0)} for s, a, e in pick(steps, "step", "ts", "end").iter_rows() if s in tb]
    return sorted(out, key=lambda r: r["step"])


def kernel_rows(df: pl.DataFrame) -> list[dict]:
    return [{"name": r["name"], "kind": r["kind"], "count": r["count"], "total_us": us(r["total"]),
             "mean_us": us(r["mean"]), "min_us": us(r["min"]), "max_us": us(r["max"]),
             "share_pct": round(100 * r["share"], 2), "op": r["op_name"]} for r in df.iter_rows(named=True)]


def op_rows(df: pl.DataFrame) -> list[dict]:
    return [{"op": r["op_name"], "calls": r["calls"], "kernels": r["kernels"], "gpu_us": us(r["gpu_total"]),
             "cpu_us": us(r["cpu_total"]), "share_pct": round(100 * r["share"], 2)} for r in df.iter_rows(named=True)]


def metadata(trace: Trace) -> dict:
    m = trace.meta
    return {
        "format": m.format, "backend": m.backend, "trace_name": m.trace_name, "base_time_ns": m.base_time_ns,
        "device": m.device_name(), "devices": m.device_properties, "distributed": m.distributed,
        "versions": m.versions, "options": m.options, "has_profiler_steps": m.has_steps,
        "event_counts": m.event_counts,
    }
