"""The straggler's cause as a change to its own trace (`replay.Transform`, on its rows in the lead-up windows of
`straggler.py`), for the job replay to price: what the job's step becomes once that rank's cause is fixed.

Per mechanism (`straggler.MECHANISM_TEXT`):
- `host_code`: the stretches of its lead-up windows where none of its program threads records an event (the
  busy loop, the untraced Python), longest first, up to its excess of such time over the others;
- `input`: its DataLoader spans in the windows leave the host path;
- `host_sync`: its blocking syncs in the windows no longer wait for the device;
- `extra_kernels`, `slower_kernels`, `data_copy`: its GPU work in the windows of each name it spends more on
  than the others takes the others' time (count and duration together);
- `extra_host_ops`, `slower_host_ops`: its host is sped up by its excess share of host-op time.
`other_idle` (the GPU waits for something the trace does not show) has no change: None.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..analyses.breakdown import DATALOADER_RE
from ..analyses.classify import sync_calls
from ..analyses.intervals import merge
from ..analyses.replay import Transform
from ..model import Trace
from . import straggler as sg


def _local(win: pl.DataFrame, rank: int, t: Trace) -> pl.DataFrame:
    off = t.meta.epoch_offset_ns
    return win.filter(pl.col("rank") == rank).select("step", (pl.col("lo") - off).alias("lo"),
                                                      (pl.col("hi") - off).alias("hi"))


def _untraced_spans(t: Trace, w: pl.DataFrame, need_ns: float) -> list[tuple[int, int, int]]:
    """Per window, its stretches without any program-thread event, longest first, until `need_ns` of them."""
    h = sg._program_host(t)
    cov = merge(h.select("ts", "end")).sort("ts")
    gaps = cov.select(pl.col("end").alias("g0"), pl.col("ts").shift(-1).alias("g1")).drop_nulls()
    gaps = (gaps.join(w, how="cross").with_columns(g0=pl.max_horizontal("g0", "lo"), g1=pl.min_horizontal("g1", "hi"))
            .filter(pl.col("g1") > pl.col("g0")).with_columns(len=pl.col("g1") - pl.col("g0"))
            .sort(["step", "len"], descending=[False, True], maintain_order=True)
            .with_columns(before=pl.col("len").cum_sum().over("step") - pl.col("len"))
            .filter(pl.col("before") < need_ns))
    # every thread: in these stretches no program thread records anything, and a helper thread (autograd's)
    # idle in them is waiting for the program thread (`replay_graph._joins`)
    tids = t.host["tid"].unique().drop_nulls().to_list()
    return [(int(tid), int(a), int(b)) for a, b in gaps.select("g0", "g1").rows() for tid in tids]


def _in(df: pl.DataFrame, w: pl.DataFrame) -> pl.DataFrame:
    """Rows of `df` (ts) starting inside one of the windows `w` [step, lo, hi]."""
    ws = w.sort("lo")
    return (df.sort("ts").join_asof(ws, left_on="ts", right_on="lo", strategy="backward")
            .filter(pl.col("ts") < pl.col("hi")))


def fix_transform(traces: list[Trace], steps: dict[int, pl.DataFrame], m: pl.DataFrame, strag: int,
                  cause: dict | None) -> Transform | None:
    """The straggler's cause (`straggler.cause`) as a change to its trace; None when it has none."""
    mech = (cause or {}).get("mechanism")
    got = sg.windows(traces, steps, m, strag) if mech else None
    if got is None:
        return None
    by_rank, win, _, full, ranks = got
    t = by_rank[strag]
    w = _local(win, strag, t)
    name = f"rank {strag}: {mech}"
    if mech == "host_code":
        hx = cause.get("host_excess_us_per_step") or {}
        need = 1000 * sum(max(hx.get(c, 0.0), 0.0) for c in sg.HOST_CODE)
        spans = _untraced_spans(t, w, need)
        return Transform(name, host_spans=spans) if spans else None
    if mech == "input":
        h = sg._program_host(t).filter(pl.col("name").str.contains(DATALOADER_RE)).select("tid", "ts", "end")
        rows = _in(h, w)
        return Transform(name, host_spans=[tuple(r) for r in rows.select("tid", "ts", "end").rows()]) \
            if rows.height else None
    if mech == "host_sync" and t.has_gpu:
        sc = _in(sync_calls(t).select("i", "ts"), w)
        return Transform(name, no_wait=sc["i"].cast(pl.Int64).to_list()) if sc.height else None
    if mech in ("extra_kernels", "slower_kernels", "data_copy"):
        k = sg._kernels(by_rank, win)
        if k.height == 0:
            return None
        x = sg._excess(k.select("rank", "step", "name", "n", "dur"), "name", ["n", "dur"], strag, ranks, full)
        x = x.filter((pl.col("dur_x") > 0) & (pl.col("dur_s") > 0)).select(
            "name", (pl.col("dur_o") / pl.col("dur_s")).alias("f"))
        g = _in(t.gpu.filter(pl.col("kind").is_in(["compute", "memcpy", "memset"])).select("i", "name", "ts", "dur"), w)
        g = g.join(x, on="name")
        new = (g["dur"].cast(pl.Float64) * g["f"]).round().cast(pl.Int64)
        return Transform(name, gpu_dur=dict(zip(g["i"].cast(pl.Int64).to_list(), new.to_list(), strict=True))) \
            if g.height else None
    if mech in ("extra_host_ops", "slower_host_ops"):
        hx = cause.get("host_excess_us_per_step") or {}
        span = float((w["hi"] - w["lo"]).mean())
        share = float(np.clip(1000 * hx.get("host_ops", 0.0) / span, 0.0, 0.9)) if span > 0 else 0.0
        return Transform(name, host_share=share) if share > 0 else None
    return None
