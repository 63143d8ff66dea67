"""Why the straggler is late: its time before the collectives it arrived late at, compared class by class with
the other ranks' time before the same collectives in the same steps (`jobs[].nccl.straggler.cause`, one of
the job sections).

- **Where**: per analysed step, the matched collective at which the straggler was latest (its start minus the
  median start of the other ranks). For every rank the *lead-up window* runs from the end of its last matched
  collective of the previous step (all ranks leave a collective together, so this is one logical instant on
  every rank; the first step, which has none, starts at the rank's own step start) to its own arrival at that
  collective. Every rank ran the same program between these two points, so what the straggler spends more
  time on there is why it arrives late.
- **Classes**: each rank's classifier partition (`classify.py`) clipped to its windows; excess = the
  straggler's time minus the median of the other ranks, per step, averaged over the steps. `communication`
  is the others' wait for earlier collectives, never a cause. Ranks without GPU
  activity (gloo on CPU) have no partition: their host time is split into `input`, `host_sync` and
  `host_busy` (everything else the host does: its ops and the code between them).
- **The host side** of the same windows, on the rank's program threads (those running ops): `input`
  (DataLoader), `host_sync` (blocking sync calls), `host_ops` (profiled ops, annotations, runtime calls),
  `python` (Python frames of a `with_stack` trace outside any op) and `untraced` (no profiled event on any of
  those threads). `cpu_launch` (the GPU
  idles because the host issued the next work late) is explained by it: *code outside any torch op*
  (`untraced` + `python`: a busy loop, logging, a checkpoint write, a Python-side data step), *more host ops*
  (work the others do not have), or *the same ops, each slower* (a slower or busier CPU — or uneven profiler
  overhead, which is what `nccl-wait` then says).
- **Syncs the others do not make**: when the winning class is `cpu_launch` and the straggler makes at least one
  more blocking sync per step than the others in its windows, the mechanism is `host_sync` (each sync drains the
  GPU's queue; the idle that follows is the syncs', not a slower host).
- **The GPU side**: kernels, copies and memsets started in the windows, per name: *extra kernels* (more of
  them than on the others), *the same kernels slower* (a slower GPU, lower clocks, contention) and a *late
  data copy* (memcpy time).

Plain data; times in µs per step.
"""

from __future__ import annotations

import polars as pl

from ..analyses.breakdown import DATALOADER_RE
from ..analyses.classify import sync_calls
from ..analyses.comm import rank_id
from ..analyses.intervals import merge, priority_sweep
from ..analyses.rowid import join_by_id
from ..model import STEP_RE, Trace

#: the others' waits, never the straggler's cause
WAIT_CLASSES = ("communication",)
#: host labels, highest priority first; anything else in a window is `untraced`
HOST_LABELS = ["input", "host_sync", "host_ops", "python"]
HOST_CODE = ("python", "untraced")  # code outside any torch op
TOP = 5

MECHANISM_TEXT = {
    "host_code": "its host runs code outside any profiled op (Python or C work no torch op covers: a busy loop, "
                 "logging, a checkpoint write, a Python-side data step)",
    "extra_host_ops": "its host runs ops the other ranks do not",
    "slower_host_ops": "its host runs the same ops as the others, each slower (a slower or busier CPU, or uneven "
                       "profiler overhead)",
    "input": "it waits for its input pipeline (DataLoader)",
    "host_sync": "its host blocks in syncs with the GPU the others do not make",
    "extra_kernels": "its GPU runs work the other ranks do not",
    "slower_kernels": "the same kernels run slower on its GPU (a slower GPU, lower clocks or contention)",
    "data_copy": "its data copies take longer",
    "other_idle": "its GPU idles with work queued, waiting for something the trace does not show",
}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.1f} ms"


def _lead_up(m: pl.DataFrame, strag: int, starts: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(windows [rank, step, lo, hi] absolute ns, late keys [step, key, family, late]): per step the collective
    the straggler was latest at, and every rank's lead-up window to it."""
    mm = m.filter(pl.col("step") >= 0)
    others = mm.filter(pl.col("rank") != strag).group_by("key").agg(pl.col("ts").median().alias("o_ts"))
    mine = mm.filter(pl.col("rank") == strag).select("key", "step", "family", "ts", "last").join(others, on="key")
    late = mine.with_columns(late=pl.col("ts") - pl.col("o_ts")).filter(pl.col("last") & (pl.col("late") > 0))
    star = (late.sort(["step", "late", "key"], descending=[False, True, False], maintain_order=True)
            .group_by("step", maintain_order=True).first().select("step", "key"))
    arr = mm.join(star, on=["step", "key"]).select("rank", "step", pl.col("ts").alias("hi"))
    # the end of each rank's last matched collective in the latest earlier step (steps: a handful per rank)
    prev = (mm.group_by("rank", "step").agg(pl.col("end").max().alias("prev_end"))
            .select("rank", pl.col("step").alias("pstep"), "prev_end"))
    prev = (arr.select("rank", "step").join(prev, on="rank").filter(pl.col("pstep") < pl.col("step"))
            .sort("pstep").group_by("rank", "step").agg(pl.col("prev_end").last()))
    win = (arr.join(prev, on=["rank", "step"], how="left")
           .join(starts, on=["rank", "step"], how="left")
           .with_columns(lo=pl.coalesce("prev_end", "start"))
           .filter(pl.col("lo").is_not_null() & (pl.col("hi") > pl.col("lo")))
           .select("rank", "step", "lo", "hi"))
    return win, late


def _program_host(t: Trace) -> pl.DataFrame:
    """The host events of the program's own threads (those that run ops or annotations), without the
    ProfilerStep#N ranges and the gloo worker ranges (the collectives themselves): what the rank's code did.
    Runtime calls of threads without ops (the NCCL watchdog polling `cudaEventQuery`) are not its work."""
    h = t.host
    tids = h.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]))["tid"].unique()
    return h.filter(pl.col("tid").is_in(tids.implode()) & ~pl.col("name").str.contains(STEP_RE)
                    & ~pl.col("name").str.starts_with("gloo:"))


def _host_intervals(t: Trace) -> pl.DataFrame:
    """[label, ts, end] of the host side (local ns), labels of HOST_LABELS."""
    h = _program_host(t)
    label = (pl.when(pl.col("name").str.contains(DATALOADER_RE)).then(pl.lit("input"))
             .when(pl.col("cat") == "python_function").then(pl.lit("python"))
             .otherwise(pl.lit("host_ops")))
    syncs = sync_calls(t).select(pl.lit("host_sync").alias("label"), "ts", "end") if t.has_gpu else None
    iv = h.select(label.alias("label"), "ts", "end")
    return pl.concat([iv, syncs]) if syncs is not None else iv


def _per_window(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames) if frames else pl.DataFrame(schema={"rank": pl.Int64, "step": pl.Int64,
                                                                  "cls": pl.String, "dur": pl.Int64})


def _class_times(traces: dict[int, Trace], parts: dict[int, pl.DataFrame], win: pl.DataFrame,
                 host_only: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """([rank, step, cls, dur] classifier classes, [rank, step, cls, dur] host labels) in each rank's windows."""
    cls_frames, host_frames = [], []
    for rank, t in traces.items():  # one pass per rank; the work inside is columnar
        off = t.meta.epoch_offset_ns
        w = win.filter(pl.col("rank") == rank).select("step", (pl.col("lo") - off).alias("ts"),
                                                      (pl.col("hi") - off).alias("end"))
        if w.height == 0:
            continue
        host = priority_sweep(_host_intervals(t), HOST_LABELS, w, other="untraced")
        host_frames.append(host.select(pl.lit(rank, pl.Int64).alias("rank"), "step", pl.col("label").alias("cls"),
                                       "dur"))
        part = parts.get(rank)
        if not host_only and part is not None and part.height:
            seg = (part.select("ts", "end", "cls").join(w.rename({"ts": "lo", "end": "hi"}), how="cross")
                   .with_columns(d=(pl.min_horizontal("end", "hi") - pl.max_horizontal("ts", "lo")).clip(lower_bound=0))
                   .group_by("step", "cls").agg(pl.col("d").sum().alias("dur")))
            cls_frames.append(seg.select(pl.lit(rank, pl.Int64).alias("rank"), "step", "cls", "dur"))
    host = _per_window(host_frames)
    if host_only:  # CPU ranks: input and host_sync as they are, the rest of the host's time is host_busy
        busy = pl.when(pl.col("cls").is_in(["input", "host_sync"])).then(pl.col("cls")).otherwise(pl.lit("host_busy"))
        return host.with_columns(cls=busy).group_by("rank", "step", "cls").agg(pl.col("dur").sum()), host
    return _per_window(cls_frames), host


def _excess(df: pl.DataFrame, key: str, vals: list[str], strag: int, ranks: list[int],
            steps: list[int]) -> pl.DataFrame:
    """Per `key`: the straggler's mean per step of each value, the others' (median over ranks, then mean over
    steps) and the excess (straggler − others). Absent rows count as 0."""
    if df.height == 0:
        return pl.DataFrame(schema={key: df.schema.get(key, pl.String), **{f"{v}_{s}": pl.Float64 for v in vals
                                                                            for s in ("s", "o", "x")}})
    grid = (pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int64})
            .join(pl.DataFrame({"step": steps}, schema={"step": pl.Int64}), how="cross")
            .join(df.select(key).unique(), how="cross"))
    full = grid.join(df, on=["rank", "step", key], how="left").with_columns(pl.col(vals).fill_null(0))
    o = full.filter(pl.col("rank") != strag).group_by("step", key).agg(
        [pl.col(v).median().alias(f"{v}_o") for v in vals])
    s = full.filter(pl.col("rank") == strag).select("step", key, *[pl.col(v).alias(f"{v}_s") for v in vals])
    j = s.join(o, on=["step", key]).with_columns([(pl.col(f"{v}_s") - pl.col(f"{v}_o")).alias(f"{v}_x") for v in vals])
    return j.group_by(key).agg(pl.col([f"{v}_{x}" for v in vals for x in ("s", "o", "x")]).mean())


def _in_windows(df: pl.DataFrame, win: pl.DataFrame, rank: int, t: Trace) -> pl.DataFrame:
    """The rows of `df` (local ns) that start in one of the rank's windows, with the window's `step` and end
    `_hi` (local ns)."""
    off = t.meta.epoch_offset_ns
    w = win.filter(pl.col("rank") == rank).select("step", (pl.col("lo") - off).alias("_lo"),
                                                  (pl.col("hi") - off).alias("_hi")).sort("_lo")
    return (df.sort("ts").join_asof(w, left_on="ts", right_on="_lo", strategy="backward")
            .filter(pl.col("ts") < pl.col("_hi")).drop("_lo"))


def _kernels(traces: dict[int, Trace], win: pl.DataFrame) -> pl.DataFrame:
    """[rank, step, name, kind, op, n, dur]: GPU work (not communication) started in each rank's windows."""
    frames = []
    for rank, t in traces.items():
        if not t.has_gpu:
            continue
        g = t.gpu.filter(pl.col("kind").is_in(["compute", "memcpy", "memset"])).select("name", "kind", "ts", "dur", "op")
        g = _in_windows(g, win, rank, t)
        g = join_by_id(g, "op", t.host, pl.col("name").alias("op_name"))
        frames.append(g.group_by("step", "name", "kind").agg(pl.len().alias("n"), pl.col("dur").sum(),
                                                           pl.col("op_name").drop_nulls().mode().sort().first().alias("op"))
                      .select(pl.lit(rank, pl.Int64).alias("rank"), "step", "name", "kind", "op",
                              pl.col("n").cast(pl.Int64), "dur"))
    return pl.concat(frames) if frames else pl.DataFrame()


def _top_ops(traces: dict[int, Trace], win: pl.DataFrame, pattern: str | None = None) -> pl.DataFrame:
    """[rank, step, name, n, dur]: the outermost host events (children of ProfilerStep#N or roots) in the windows,
    optionally only those matching `pattern`."""
    frames = []
    for rank, t in traces.items():
        h = t.host.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]))
        steps_i = h.filter(pl.col("name").str.contains(STEP_RE))["i"]
        top = h.filter(~pl.col("name").str.contains(STEP_RE) & ~pl.col("name").str.starts_with("gloo:")
                       & (pl.col("parent").is_null() | pl.col("parent").is_in(steps_i.implode())))
        if pattern:
            top = top.filter(pl.col("name").str.contains(pattern))
        top = _in_windows(top.select("name", "ts", "end"), win, rank, t).with_columns(
            dur=pl.min_horizontal("end", "_hi") - pl.col("ts"))
        frames.append(top.group_by("step", "name").agg(pl.len().cast(pl.Int64).alias("n"), pl.col("dur").sum())
                      .select(pl.lit(rank, pl.Int64).alias("rank"), "step", "name", "n", "dur"))
    return pl.concat(frames) if frames else pl.DataFrame()


def _python_frame(t: Trace, win: pl.DataFrame, others: dict[int, Trace], strag: int, ranks: list[int],
                  steps: list[int], need_ns: float) -> dict | None:
    """The innermost Python frame (`file.py(line): function`, traces recorded with stacks) whose extra time on the
    straggler covers at least half of `need_ns`: the source line that makes it late."""
    frames = []
    for rank, tr in {**others, strag: t}.items():
        py = tr.host.filter(pl.col("cat") == "python_function").select("name", "ts", "end", "depth")
        if py.height == 0:
            continue
        py = _in_windows(py, win, rank, tr).with_columns(dur=pl.min_horizontal("end", "_hi") - pl.col("ts"))
        frames.append(py.group_by("step", "name").agg(pl.col("dur").sum(), pl.col("depth").max())
                      .select(pl.lit(rank, pl.Int64).alias("rank"), "step", "name", "dur", "depth"))
    if not frames:
        return None
    df = pl.concat(frames)
    depth = df.group_by("name").agg(pl.col("depth").max())
    x = _excess(df.drop("depth"), "name", ["dur"], strag, ranks, steps).join(depth, on="name")
    hit = x.filter(pl.col("dur_x") >= 0.5 * need_ns).sort(["depth", "dur_x", "name"], descending=[True, True, False], maintain_order=True)
    if hit.height == 0:
        return None
    r = hit.row(0, named=True)
    return {"frame": r["name"], "excess_us_per_step": round(r["dur_x"] / 1000, 3)}


def _largest_gap(t: Trace, win: pl.DataFrame, rank: int) -> dict | None:
    """The straggler's longest stretch in its windows with no profiled host event on any thread, and the
    outermost ops around it (where in the program the untraced work sits, for traces without stacks)."""
    off = t.meta.epoch_offset_ns
    w = win.filter(pl.col("rank") == rank).select("step", (pl.col("lo") - off).alias("lo"),
                                                  (pl.col("hi") - off).alias("hi"))
    h = _program_host(t)
    cov = merge(h.select("ts", "end")).sort("ts")
    gaps = cov.select(pl.col("end").alias("g0"), pl.col("ts").shift(-1).alias("g1")).drop_nulls()
    gaps = (gaps.join(w, how="cross").with_columns(g0=pl.max_horizontal("g0", "lo"), g1=pl.min_horizontal("g1", "hi"))
            .filter(pl.col("g1") > pl.col("g0")).with_columns(len=pl.col("g1") - pl.col("g0")))
    if gaps.height == 0:
        return None
    g = gaps.sort(["len", "g0"], descending=[True, False], maintain_order=True).row(0, named=True)
    top = h.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]) & pl.col("depth").is_not_null())
    before = top.filter(pl.col("end") <= g["g0"]).sort(["end", "depth"], descending=[True, False], maintain_order=True).head(1)
    after = top.filter(pl.col("ts") >= g["g1"]).sort(["ts", "depth"], maintain_order=True).head(1)
    return {"step": g["step"], "us": round(g["len"] / 1000, 3),
            "after_op": before["name"].item() if before.height else None,
            "before_op": after["name"].item() if after.height else None}


def windows(traces: list[Trace], steps: dict[int, pl.DataFrame], m: pl.DataFrame, strag: int) -> tuple | None:
    """(traces by rank, lead-up windows, late keys, the compared steps, the ranks) of the straggler (`_lead_up`,
    on the steps where every rank has a window); None when there is nothing to compare."""
    if m.height == 0 or not any(k in steps and steps[k].height for k in range(len(traces))):
        return None
    by_rank = {rank_id(t, k): t for k, t in enumerate(traces)}
    starts = pl.concat([steps[k].select(pl.lit(rank_id(t, k), pl.Int64).alias("rank"), pl.col("step").cast(pl.Int64),
                                        (pl.col("ts") + t.meta.epoch_offset_ns).alias("start"))
                        for k, t in enumerate(traces) if k in steps and steps[k].height])
    win, late = _lead_up(m, strag, starts)
    ranks = sorted(by_rank)
    # only steps where every rank has a window: the comparison is between the same steps
    full = win.group_by("step").agg(pl.len()).filter(pl.col("len") == len(ranks))["step"].sort().to_list()
    win = win.filter(pl.col("step").is_in(full))
    if not full or strag not in by_rank:
        return None
    return by_rank, win, late, full, ranks


def cause(traces: list[Trace], steps: dict[int, pl.DataFrame], parts: dict[int, pl.DataFrame | None],
          m: pl.DataFrame, strag: int, klass: str | None = None) -> dict | None:
    """The straggler's cause (see the module doc); None when it was never late at a matched collective.
    `traces`, `steps`, `parts` by position in the job; `m` the matched collectives (`comm.match`). `klass`: the
    class of the change the job replay found saves the job most (`rank_changes.py`), else the largest excess."""
    w = windows(traces, steps, m, strag)
    if w is None:
        return None
    by_rank, win, late, full, ranks = w
    parts_r = {rank_id(t, k): parts.get(k) for k, t in enumerate(traces)}
    host_only = any(p is None or p.height == 0 for p in parts_r.values())
    cls, host = _class_times(by_rank, parts_r, win, host_only)
    cx = _excess(cls, "cls", ["dur"], strag, ranks, full).filter(~pl.col("cls").is_in(WAIT_CLASSES))
    hx = _excess(host, "cls", ["dur"], strag, ranks, full)
    classes = {r["cls"]: round(r["dur_x"] / 1000, 3) for r in cx.sort("cls").iter_rows(named=True)}
    host_x = {r["cls"]: round(r["dur_x"] / 1000, 3) for r in hx.sort("cls").iter_rows(named=True)}
    lateness = float(late.filter(pl.col("step").is_in(full)).group_by("step").agg(pl.col("late").max())["late"].mean())
    nlate = late.height
    fam = late.group_by("family").len().sort(["len", "family"], descending=[True, False], maintain_order=True)
    base = {"rank": strag, "steps": full, "lateness_us_per_step": round(lateness / 1000, 3),
            "late_at": nlate, "late_at_families": {r["family"]: r["len"] for r in fam.iter_rows(named=True)},
            "classes_excess_us_per_step": classes, "host_excess_us_per_step": host_x}
    best = cx.sort(["dur_x", "cls"], descending=[True, False], maintain_order=True).head(1)
    if klass is not None and klass in cx["cls"].to_list():
        best = cx.filter(pl.col("cls") == klass)
    elif klass is not None:  # a class it spends no time on in these windows: the change's own evidence says why
        best = pl.DataFrame({"cls": [klass], "dur_x": [0.0]})
    if best.height == 0 or (best["dur_x"].item() <= 0 and klass is None):
        return {**base, "class": None, "mechanism": None, "excess_us_per_step": 0.0, "evidence": {},
                "text": f"rank {strag} arrives {_ms(lateness)}/step late, but no class of its time before the "
                        "collectives exceeds the other ranks'"}
    klass, excess = best["cls"].item(), float(best["dur_x"].item())
    mech, ev = _mechanism(klass, excess, by_rank, win, strag, ranks, full, hx)
    text = (f"rank {strag} arrives {_ms(lateness)}/step late at the collectives because {MECHANISM_TEXT[mech]}: "
            f"{klass} +{_ms(excess)}/step")
    if ev.get("detail"):
        text += f" ({ev['detail']})"
    text += f"; the other ranks wait for it at {nlate} of {m['key'].n_unique()} matched collectives"
    return {**base, "class": klass, "mechanism": mech, "excess_us_per_step": round(excess / 1000, 3),
            "evidence": ev, "text": text}


def _host_steps(by_rank: dict[int, Trace], steps: list[int]) -> pl.DataFrame:
    """[rank, step, lo, hi]: each rank's host span of the compared steps (absolute ns). The host runs ahead of
    its GPU by a different amount on each rank, so ops are compared over whole steps, where every rank runs the
    same program."""
    return pl.concat([t.steps.filter(pl.col("step").is_in(steps)).select(
        pl.lit(r, pl.Int64).alias("rank"), pl.col("step").cast(pl.Int64),
        (pl.col("cpu_ts") + t.meta.epoch_offset_ns).alias("lo"), (pl.col("cpu_end") + t.meta.epoch_offset_ns).alias("hi"))
        for r, t in by_rank.items()])


def _syncs(by_rank: dict[int, Trace], win: pl.DataFrame) -> pl.DataFrame:
    """[rank, step, name, n, dur]: blocking sync calls in the windows, named by the op that made them."""
    frames = []
    for rank, t in by_rank.items():
        if not t.has_gpu:
            continue
        sc = join_by_id(sync_calls(t), "op", t.host, pl.col("name").alias("op_name"))
        sc = _in_windows(sc.with_columns(name=pl.coalesce("op_name", "name")).select("name", "ts", "end"), win, rank, t)
        frames.append(sc.group_by("step", "name").agg(pl.len().cast(pl.Int64).alias("n"),
                                                      (pl.col("end") - pl.col("ts")).sum().alias("dur"))
                      .select(pl.lit(rank, pl.Int64).alias("rank"), "step", "name", "n", "dur"))
    return pl.concat(frames) if frames else pl.DataFrame()


def _op_rows(x: pl.DataFrame) -> list[dict]:
    return [{"name": r["name"], "count_per_step": round(r["n_s"], 2), "others_count_per_step": round(r["n_o"], 2),
             "us_per_step": round(r["dur_s"] / 1000, 3), "others_us_per_step": round(r["dur_o"] / 1000, 3),
             "excess_us_per_step": round(r["dur_x"] / 1000, 3)} for r in x.head(TOP).iter_rows(named=True)]


def _mechanism(klass: str, excess: float, by_rank: dict[int, Trace], win: pl.DataFrame, strag: int,
               ranks: list[int], steps: list[int], hx: pl.DataFrame) -> tuple[str, dict]:
    """(mechanism, evidence) of the winning class."""
    hxd = {r["cls"]: r["dur_x"] for r in hx.iter_rows(named=True)}
    others = {r: t for r, t in by_rank.items() if r != strag}
    ev: dict = {}
    if klass in ("gpu_compute", "gpu_memory"):
        k = _kernels(by_rank, win)
        x = _excess(k.select("rank", "step", pl.format("{}\t{}", "name", "kind").alias("nk"), "n", "dur"), "nk",
                    ["n", "dur"], strag, ranks, steps) if k.height else pl.DataFrame()
        if x.height == 0:
            return "extra_kernels", ev
        x = x.with_columns(pl.col("nk").str.split("\t").list.get(0).alias("name"),
                           pl.col("nk").str.split("\t").list.get(1).alias("kind"))
        x = x.with_columns(
            extra=pl.when(pl.col("n_x") > 0).then(pl.col("n_x") * pl.col("dur_s") / pl.col("n_s").clip(lower_bound=1))
            .otherwise(0.0))
        x = x.with_columns(slower=pl.col("dur_x") - pl.col("extra"))
        copy = float(x.filter(pl.col("kind") == "memcpy")["dur_x"].clip(lower_bound=0).sum())
        extra = float(x.filter(pl.col("kind") != "memcpy")["extra"].clip(lower_bound=0).sum())
        slower = float(x.filter(pl.col("kind") != "memcpy")["slower"].clip(lower_bound=0).sum())
        mech = "data_copy" if copy > max(extra, slower) else "extra_kernels" if extra >= slower else "slower_kernels"
        ops = k.filter(pl.col("rank") == strag).group_by("name").agg(pl.col("op").drop_nulls().sort().first())  # (deterministic: steps may differ)
        top = x.join(ops, on="name", how="left").sort(["dur_x", "name"], descending=[True, False], maintain_order=True).head(TOP)
        ev["kernels"] = [{"name": r["name"], "kind": r["kind"], "op": r["op"],
                          "count_per_step": round(r["n_s"], 2), "others_count_per_step": round(r["n_o"], 2),
                          "us_per_step": round(r["dur_s"] / 1000, 3), "others_us_per_step": round(r["dur_o"] / 1000, 3),
                          "excess_us_per_step": round(r["dur_x"] / 1000, 3)} for r in top.iter_rows(named=True)]
        ev.update(extra_kernels_us_per_step=round(extra / 1000, 3), slower_kernels_us_per_step=round(slower / 1000, 3),
                  data_copy_us_per_step=round(copy / 1000, 3))
        if top.height:
            r = top.row(0, named=True)
            ev["detail"] = (f"`{r['name'][:80]}` {r['n_s']:.0f}× {_ms(r['dur_s'])} vs {r['n_o']:.0f}× {_ms(r['dur_o'])} "
                            f"on the others" + (f", launched by `{r['op']}`" if r["op"] else ""))
        return mech, ev
    hwin = _host_steps(by_rank, steps)
    if klass == "host_sync":
        sc = _syncs(by_rank, win)
        if sc.height:
            x = _excess(sc, "name", ["n", "dur"], strag, ranks, steps).sort(["dur_x", "name"], descending=[True, False], maintain_order=True)
            ev["syncs"] = _op_rows(x)
            r = ev["syncs"][0]
            ev["detail"] = (f"`{r['name'][:80]}` {r['count_per_step']:g} syncs/step vs "
                            f"{r['others_count_per_step']:g} on the others")
        return "host_sync", ev
    if klass == "cpu_launch":
        # syncs the others do not make: each one drains the GPU's queue, and the GPU then idles while the host
        # issues the next work (`cpu_launch`) — the cause is the syncs, not slower host ops
        sc = _syncs(by_rank, win)
        if sc.height:
            x = _excess(sc, "name", ["n", "dur"], strag, ranks, steps).sort(["dur_x", "name"], descending=[True, False], maintain_order=True)
            if float(x["n_x"].clip(lower_bound=0).sum()) >= 1.0 and float(x["dur_x"].clip(lower_bound=0).sum()) > 0:
                ev["syncs"] = _op_rows(x)
                r = ev["syncs"][0]
                ev["detail"] = (f"`{r['name'][:80]}` {r['count_per_step']:g} syncs/step vs "
                                f"{r['others_count_per_step']:g} on the others")
                return "host_sync", ev
    mech = {"input": "input", "other_idle": "other_idle"}.get(klass)
    if mech is None:  # cpu_launch (GPU ranks) or host_busy (CPU ranks): what the host did instead of issuing work
        code = sum(hxd.get(c, 0.0) for c in HOST_CODE)
        mech = "host_code" if code >= hxd.get("host_ops", 0.0) else "extra_host_ops"
    ops = _top_ops(by_rank, hwin, DATALOADER_RE if mech == "input" else None)
    if ops.height:
        x = _excess(ops, "name", ["n", "dur"], strag, ranks, steps).sort(["dur_x", "name"], descending=[True, False], maintain_order=True)
        ev["ops"] = _op_rows(x)
        n_s, n_o = float(x["n_s"].sum()), float(x["n_o"].sum())
        ev["ops_per_step"], ev["others_ops_per_step"] = round(n_s, 2), round(n_o, 2)
        if mech == "extra_host_ops" and n_o and n_s <= 1.02 * n_o:
            mech = "slower_host_ops"  # the same ops (counts within 2 %), each slower
    ev["host_excess_us_per_step"] = {c: round(v / 1000, 3) for c, v in sorted(hxd.items())}
    if mech == "host_code":
        frame = _python_frame(by_rank[strag], win, others, strag, ranks, steps, excess)
        gap = _largest_gap(by_rank[strag], win, strag)
        if frame:
            ev["python_frame"] = frame
            ev["detail"] = f"in `{frame['frame']}`"
        if gap:
            ev["largest_gap"] = gap
            if not frame:
                ev["detail"] = (f"no profiled op for {gap['us'] / 1000:,.1f} ms in step {gap['step']}, between "
                                f"`{gap['after_op']}` and `{gap['before_op']}`")
    elif ev.get("ops"):
        r = ev["ops"][0]
        ev["detail"] = (f"`{r['name'][:80]}` {r['count_per_step']:g}× {r['us_per_step'] / 1000:,.1f} ms vs "
                        f"{r['others_count_per_step']:g}× {r['others_us_per_step'] / 1000:,.1f} ms on the others")
    return mech, ev
