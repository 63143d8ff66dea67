"""TV303 allocator-churn: the caching allocator goes to the driver inside steady-state steps, or holds far more than it uses.

## What it detects
Signals of allocator trouble, whatever share of the device is reserved: (1) `cudaMalloc`/`cudaFree` (or the
`cuMem*` calls of expandable segments) inside the analysed steps after the first — a steady loop reuses its
cached blocks, so these are cache misses every step; (2) `cudaFree` called outside any op (its parent is the
step or a user annotation, not an `aten::` op): `torch.cuda.empty_cache()` in the loop, which hands every
cached block back so the next step reserves them again; (3) allocation retries: a `cudaFree` inside an op that
then calls `cudaMalloc` again — the allocator found no block, freed its cache and retried (the
`num_alloc_retries` of `torch.cuda.memory_stats()`); (4) from the `[memory]` events (`profile_memory=True`):
peak reserved at least `fragmentation_ratio` times the peak allocated and `min_gap_gib` above it
(fragmentation). How full the device is belongs to TV302 memory-pressure.

## Why it is slow
`cudaMalloc` costs tens of µs to ms of host time; `cudaFree` synchronises the device, so the host stops
launching until the GPU drains and the GPU then idles until the next launch. A loop that empties the cache
pays both every step. A retry frees the whole cache in the middle of an op. Fragmentation wastes capacity:
the free memory is split into blocks too small for the requests, which leads to retries and out-of-memory.

## How to fix
Remove `torch.cuda.empty_cache()` from the loop. Set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (unless
the trace already shows its `cuMem*` calls) so segments grow in place instead of new `cudaMalloc`s, and keep
tensor shapes stable across steps (pad or bucket variable lengths; `drop_last=True`). Retries: lower the peak
(activation checkpointing, a smaller micro-batch) — see TV302.

## Evidence
Per analysed step, the driver allocation calls (mallocs, frees, their host time), the frees outside any op
(`empty_cache`) and the ops that freed and retried, the fragmentation per device (peak reserved vs peak
allocated), whether expandable segments are in use. Savings (per step, unprofiled) are replayed:
`fix_transform` takes the driver calls inside the steps off the host path and no longer lets them wait for the
device, with the host time the churn adds around them, read off the trace (`_churn_host`): the caching
allocator's miss path in each op that called cudaMalloc (its self time above the same op's cache hits on its
thread: ~6 µs a miss) and the first launch after a driver call (its time above its name's median launch there).
Where they drain the device in every step (`empty_cache()`), the saving is priced on the steps after
the first: the recorded window starts on the drain of the step before it, which the fixed loop does not make
(docs/replay.md, "A fix that removes a drain every step"). Fragmentation alone is a risk, not a measured cost:
`info`.
The driver calls are replayed at their own time as recorded: the profiler does not stretch the driver's work (a
cudaFree takes the same time traced, a cache-missing malloc ~1.2x). Measured fixes of `empty_cache()` saved
1.05-2.8x that (median 1.5x, eleven loops on an H200 and an H100); the step after the fix replays within the host's
speed between the traced steps and the rounds, both ways (median error ~0, `tests/test_allocator_churn_twins.py`):
the shortfall is the churning loop's pace, which runs its other host work slower than the fixed program's (1.3-2x
on the two ResNet-50 pairs traced on one machine), which its trace alone does not tell from a slow process, so
the fix text calls the saving a floor.

## Options
- `fragmentation_ratio` (1.5): reserved / peak allocated at which the cache counts as fragmented.
- `min_gap_gib` (1.0): smallest reserved-minus-allocated gap (GiB) worth reporting as fragmentation.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, "CUDA semantics: memory management" (caching allocator, `expandable_segments`, `empty_cache`,
  `memory_stats()['num_alloc_retries']`) — https://pytorch.org/docs/stable/notes/cuda.html.
- PyTorch `c10/cuda/CUDACachingAllocator.cpp` (release_cached_blocks and retry on a failed cudaMalloc).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses import memory as M
from traceview.analyses.replay import Transform
from traceview.analyses.replay_graph import LAUNCH_CALL_RE
from traceview.analyses.whatif import EMPTY, gpu_idle_within, removed_per_step
from traceview.evidence import Meta
from traceview.frames import pick
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext
from traceview.units import per_step

CODE = "TV303"
NAME = "allocator-churn"
SEVERITY = "warning"
CLASS = "host_sync"  # cudaFree synchronises the device: the GPU idles while the host waits in it
TITLE = "The caching allocator calls cudaMalloc/cudaFree inside the steps"
OPTIONS = {
    "fragmentation_ratio": Option(1.5, "reserved / peak allocated counted as fragmentation"),
    "min_gap_gib": Option(1.0, "smallest reserved-minus-allocated gap (GiB) reported as fragmentation"),
    **XPROF_SEVERITY,
}


class StepAllocs(msgspec.Struct, kw_only=True):
    """One step's driver allocator calls."""

    step: Annotated[int, Meta(description="the step")]
    mallocs: Annotated[int, Meta(description="cudaMalloc-like calls")]
    frees: Annotated[int, Meta(description="cudaFree-like calls")]
    host_us: Annotated[float, Meta(description="their host time (µs)")]


class RetryOp(msgspec.Struct, kw_only=True):
    """An op that freed the cache and called cudaMalloc again (the allocator's retry after an OOM)."""

    op: Annotated[str | None, Meta(description="the op")]
    step: Annotated[int, Meta(description="its step")]
    frees: Annotated[int, Meta(description="the frees inside it")]


class Fragmented(msgspec.Struct, kw_only=True):
    """A GPU whose allocator reserves much more than tensors use."""

    device: Annotated[int, Meta(description="the device index")]
    peak_allocated_gib: Annotated[float, Meta(description="peak memory allocated by tensors (GiB)")]
    peak_reserved_gib: Annotated[
        float, Meta(description="peak memory reserved by the caching allocator (GiB)")
    ]
    reserved_over_allocated: Annotated[float | None, Meta(description="reserved / allocated at their peaks")]


class Evidence(msgspec.Struct, kw_only=True):
    cases: Annotated[
        list[str], Meta(description="what fired: `empty_cache`, `retries`, `driver_calls`, `fragmentation`")
    ]
    driver_alloc_calls: Annotated[int, Meta(description="driver allocator calls in the steady steps")]
    driver_alloc_us: Annotated[float, Meta(description="their host time (µs)")]
    per_step: Annotated[list[StepAllocs], Meta(description="those calls per step")]
    empty_cache_frees: Annotated[int, Meta(description="frees outside any op (torch.cuda.empty_cache)")]
    empty_cache_steps: Annotated[list[int], Meta(description="the steps with such frees")]
    retry_ops: Annotated[list[RetryOp], Meta(description="ops that freed the cache and allocated again")]
    expandable_segments: Annotated[bool, Meta(description="the allocator maps expandable segments")]
    fragmented_devices: Annotated[
        list[Fragmented], Meta(description="GPUs whose reserved memory far exceeds allocated")
    ]


GIB = 2**30
FREE_RE = r"^(cudaFree|cudaFreeAsync|cuMemFree|cuMemRelease|cuMemUnmap|hipFree)(_v\d+)?$"
EXPANDABLE_RE = r"^cuMem(Create|Map|Release|Unmap)(_v\d+)?$"  # expandable segments map physical pages
FIX = (
    "The allocator reaches the driver inside the steps instead of reusing its cached blocks; cudaFree waits for "
    "the GPU. Keep tensor shapes stable across steps, do not call torch.cuda.empty_cache() in the loop, and set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
)


def _calls(ctx: RuleContext) -> pl.DataFrame:
    """The driver allocation calls inside the steps with their parent's category and name:
    [i, name, ts, end, step, free, outside_op, parent]."""

    def build() -> pl.DataFrame:
        drv = M.driver_calls(ctx.trace, ctx.steps)
        if drv.height == 0:  # no driver allocation call (most traces): the columns the joins below add, no rows
            hs = ctx.trace.host.schema
            return drv.hstack([pl.Series("parent", [], hs["parent"]), pl.Series("_pcat", [], hs["cat"]),
                               pl.Series("op", [], hs["name"]), pl.Series("free", [], pl.Boolean),
                               pl.Series("outside_op", [], pl.Boolean)])
        par = ctx.trace.host.select(
            pl.col("i").alias("parent"), pl.col("cat").alias("_pcat"), pl.col("name").alias("_pname")
        )
        h = pick(ctx.trace.host, "i", "parent")
        d = drv.join(h, on="i", how="left").join(par, on="parent", how="left")
        return d.with_columns(
            free=pl.col("name").str.contains(FREE_RE), outside_op=pl.col("_pcat").fill_null("") != "cpu_op"
        ).rename({"_pname": "op"})

    return ctx.once("allocator-calls", build)


def _steady(ctx: RuleContext, calls: pl.DataFrame) -> pl.DataFrame:
    """The calls of a steady loop: none when only the first analysed step calls the driver (warm-up)."""
    first = int(ctx.steps["step"].min())
    return calls if calls.filter(pl.col("step") != first).height else calls.clear()


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The GPU idle time during the steady-state driver allocation calls."""
    drv = _steady(ctx, _calls(ctx))
    return gpu_idle_within(ctx.trace, pick(drv, "ts", "end"), ctx.lo, ctx.hi) if drv.height else EMPTY


def _fragmentation(ctx: RuleContext) -> list[Fragmented]:
    ev = M.gpu_events(ctx.trace, ctx.steps)
    if ev.height == 0:
        return []
    o, out = ctx.options, []
    per = M.step_summary(ctx.trace, ctx.steps)
    for dev in sorted(per["device"].unique().to_list()):  # one per GPU
        p = per.filter(pl.col("device") == dev)
        pa, pr = int(p["peak_allocated"].max() or 0), p["peak_reserved"].max()
        if pr is not None and pr >= o["fragmentation_ratio"] * pa and (pr - pa) >= o["min_gap_gib"] * GIB:
            out.append(
                Fragmented(
                    device=dev,
                    peak_allocated_gib=round(pa / GIB, 3),
                    peak_reserved_gib=round(pr / GIB, 3),
                    reserved_over_allocated=round(pr / pa, 2) if pa else None,
                )
            )
    return out


def _retries(calls: pl.DataFrame) -> pl.DataFrame:
    """Ops that freed the cache and then called cudaMalloc again: [parent, op, step, frees]."""
    inside = calls.filter(~pl.col("outside_op"))
    first_free = pl.col("ts").filter(pl.col("free")).min()
    return (
        inside.group_by("parent")
        .agg(
            pl.col("op").first(),
            pl.col("step").first(),
            pl.col("free").sum().alias("frees"),
            (~pl.col("free") & (pl.col("ts") > first_free)).any().alias("_retry"),
        )
        .filter(pl.col("_retry"))
        .drop("_retry")
        .sort("step", "parent", maintain_order=True)
    )


def check(ctx: RuleContext) -> list[Finding]:
    calls = _steady(ctx, _calls(ctx))
    frag = _fragmentation(ctx)
    if calls.height == 0 and not frag:
        return []
    n_steps = ctx.steps.height
    empty = calls.filter(pl.col("free") & pl.col("outside_op"))
    retries = _retries(calls)
    expandable = bool(calls["name"].str.contains(EXPANDABLE_RE).any()) if calls.height else False
    per = (
        calls.group_by("step")
        .agg(
            (~pl.col("free")).sum().alias("mallocs"),
            pl.col("free").sum().alias("frees"),
            ((pl.col("end") - pl.col("ts")).sum() / 1000).round(3).alias("host_us"),
        )
        .sort("step")
    )
    rem = removed_per_step(removes(ctx), ctx.steps) if calls.height else None
    savings = int(rem["removed"].sum()) if rem is not None else 0
    host_ns = int((calls["end"] - calls["ts"]).sum()) if calls.height else 0
    cases = [
        c
        for c, on in (
            ("empty_cache", empty.height > 0),
            ("retries", retries.height > 0),
            ("driver_calls", calls.height > 0),
            ("fragmentation", bool(frag)),
        )
        if on
    ]
    evidence = Evidence(
        cases=cases,
        driver_alloc_calls=calls.height,
        driver_alloc_us=round(host_ns / 1000, 3),
        per_step=[StepAllocs(**r) for r in per.to_dicts()],
        empty_cache_frees=empty.height,
        empty_cache_steps=sorted(empty["step"].unique().to_list()),
        retry_ops=[RetryOp(**r) for r in pick(retries, "op", "step", "frees").to_dicts()],
        expandable_segments=expandable,
        fragmented_devices=frag,
    )
    host_ms = host_ns / 1e6 / max(n_steps, 1)
    fix = []
    if empty.height:
        fix.append(
            f"Remove torch.cuda.empty_cache() from the loop: {per_step(empty.height / n_steps)} cudaFree call(s) per "
            "step run outside any op, each waiting for the GPU, and the next step reserves the blocks again "
            f"with cudaMalloc ({host_ms:.2f} ms of host time per step in the driver calls). The saving shown is "
            "those calls' own time and the allocator's miss path around them, a floor: removing empty_cache() measured 1.05-2.8x it on eleven loops of two "
            "GPUs (median 1.5x), as the loop's other host work also runs faster without the churn."
        )
    if retries.height:
        top = (
            retries["op"].drop_nulls().mode().sort().first() if retries["op"].drop_nulls().len() else "an op"
        )
        fix.append(
            f"{retries.height} allocation retr{'y' if retries.height == 1 else 'ies'} ({top}): the allocator "
            "found no free block, released its cache and called cudaMalloc again; lower the peak (activation "
            "checkpointing, a smaller micro-batch, see TV302)"
            + ("." if expandable else " and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
        )
    mallocs = calls.filter(~pl.col("free")).height
    if mallocs and not empty.height and not retries.height:
        fix.append(
            f"{per_step(mallocs / n_steps)} cudaMalloc call(s) per step after warm-up: the cache misses every step "
            "because tensor shapes change (pad or bucket variable lengths, drop_last=True)"
            + (
                ": expandable segments are already on (cuMem* calls)."
                if expandable
                else "; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so segments grow in place."
            )
        )
    elif calls.height and not expandable and "expandable_segments" not in " ".join(fix):
        fix.append(
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and keep tensor shapes stable across steps."
        )
    if frag:
        d = frag[0]
        fix.append(
            f"Reserved memory is {d.reserved_over_allocated}x the allocated peak ({d.peak_reserved_gib} vs "
            f"{d.peak_allocated_gib} GiB): the cache is fragmented"
            + (
                ". Keep shapes stable across steps."
                if expandable
                else "; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow in place."
            )
        )
    severity = "info" if not calls.height or ctx.pct(savings) < ctx.options["moderate_pct"] else None
    titles = {
        "empty_cache": "torch.cuda.empty_cache() in the loop (cudaFree outside any op)",
        "retries": "allocation retries (cache freed inside an op)",
        "driver_calls": "cudaMalloc/cudaFree inside steady-state steps",
        "fragmentation": "GPU memory fragmented (reserved >> allocated)",
    }
    title = titles[cases[0]] + (
        f"; {titles['fragmentation']}" if frag and cases[0] != "fragmentation" else ""
    )
    return [
        ctx.finding(
            cost_ns=host_ns,
            savings_ns=savings,
            count=calls.height or len(frag),
            steps=sorted(calls["step"].unique().to_list()) if calls.height else ctx.steps["step"].to_list(),
            evidence=evidence,
            severity=severity,
            title=title,
            fix=" ".join(fix),
        )
    ]


def _excess(rows: pl.DataFrame, churned: pl.Expr, keys: list[str]) -> dict[int, int]:
    """row i -> ns of the `churned` rows' time (`_t`) beyond the median of the other rows of their `keys`."""
    usual = rows.filter(~churned).group_by(keys).agg(pl.col("_t").median().alias("_usual"))
    got = (rows.filter(churned).join(usual, on=keys, how="inner")
           .select("i", (pl.col("_t") - pl.col("_usual")).round(0).cast(pl.Int64).alias("_cut"))
           .filter(pl.col("_cut") > 0))
    return dict(zip(got["i"].cast(pl.Int64).to_list(), got["_cut"].to_list(), strict=True))


def _churn_host(ctx: RuleContext, drv: pl.DataFrame) -> dict[int, int]:
    """The host time the churn adds around the driver calls, which a warm cache does not spend (row i -> ns):
    (1) the caching allocator's miss path in each op that called cudaMalloc: the op's self time beyond the median
    self time of the ops of its name on its thread that reached no driver call (a miss searches the pools, fails,
    books a new segment; a hit returns a cached block); (2) the first launch after a driver call on its thread:
    its time beyond the median launch of its name there (the driver makes the changed address space visible to
    the device with the next submission)."""
    h = pick(ctx.trace.host, "i", "name", "tid", "ts", "end", "parent", "cat")
    h = h.filter((pl.col("ts") >= ctx.lo) & (pl.col("end") <= ctx.hi))
    every = M.driver_calls(ctx.trace, ctx.steps)["i"]  # (an op that reached any driver call is no cache hit)
    called = h.filter(pl.col("i").is_in(every.implode()))["parent"].drop_nulls()
    missed = drv.filter(~pl.col("free") & ~pl.col("outside_op"))["parent"].drop_nulls()
    kids = h.group_by("parent").agg((pl.col("end") - pl.col("ts")).sum().alias("_kids"))
    ops = (h.filter((pl.col("cat") == "cpu_op") & ~(pl.col("i").is_in(called.implode()) & ~pl.col("i").is_in(missed.implode())))
           .join(kids, left_on="i", right_on="parent", how="left")
           .with_columns(_t=pl.col("end") - pl.col("ts") - pl.col("_kids").fill_null(0)))
    cut = _excess(ops, pl.col("i").is_in(missed.implode()), ["name", "tid"])
    calls = (h.filter(pl.col("cat").cast(pl.String).is_in(["cuda_runtime", "cuda_driver"])).sort("tid", "ts", maintain_order=True)
             .with_columns(_after=pl.col("i").shift(1).over("tid").is_in(drv["i"].implode()),
                           _t=pl.col("end") - pl.col("ts"))
             .filter(pl.col("name").str.contains(LAUNCH_CALL_RE)))
    return {**cut, **_excess(calls, pl.col("_after"), ["name", "tid"])}


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: the steady-state driver allocation calls leave the host path and no
    longer wait for the device (the cache serves the blocks), and the ops that missed the cache take the hit
    path and the launches after them no longer pay the driver's update (`_churn_host`). Fragmentation alone has nothing to replay."""
    drv = _steady(ctx, _calls(ctx))
    if drv.height == 0:
        return None
    ids = drv["i"].cast(pl.Int64).to_list()
    return Transform(NAME, host_removed=ids, no_wait=ids, host_cut=_churn_host(ctx, drv))
