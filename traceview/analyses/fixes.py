"""Each rule's fix replayed: the transforms the rules declare (`fix_transform(ctx)` in their modules) and their
per-step savings with the profiler's cost removed and on the trace as recorded (issue 25). traceview/sections/fixrunner.py
gives the findings these savings."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import numpy as np
import polars as pl

from ..ingest.manifest import rank_step_samples
from ..parallel import run_all
from .overhead import ERROR_BAND, SHARE_MAX, measured_transform, profiler_transform, share_transform
from .replay import Transform, drains_every_step, floored, paces, replay, steady_mean

#: a fix saving less than this share of the step is "nothing the rules know to fix"
FEW_PCT = 3.0


def transforms(ctx, options, rules: Sequence[ModuleType], errors: list[str] | None = None) -> dict[str, Transform]:
    """rule name -> its fix as a Transform, for the rules that declare one (None or an error: no transform; an
    error is appended to `errors` when given).
    A rule may also declare `fix_bound_us(ctx) -> float | None`: the most its fix can save per step (what the
    fix removes, where the replay alone would let the host run further ahead than the fix allows); it is kept
    as the Transform's `bound_us`."""
    def build(mod: ModuleType) -> tuple[Transform | None, str | None]:
        fn = getattr(mod, "fix_transform", None)
        if fn is None:
            return None, None
        try:
            rctx = ctx.for_rule(mod, options.options_for(mod))
            t = fn(rctx)
            bound = getattr(mod, "fix_bound_us", None)
            if t is not None and bound is not None:
                b = bound(rctx)
                t = replace(t, bound_us=None if b is None else max(float(b), 0.0))
        except Exception as e:  # noqa: BLE001 - a fix that cannot be built saves nothing; the finding stays
            # said, as a rule that fails is (report warnings), never silent
            return None, (f"internal error building the fix of rule {mod.CODE} {mod.NAME}: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; its saving reads 0")
        return t, None

    # each rule's fix reads the shared context alone: built concurrently, kept in the rules' order
    out: dict[str, Transform] = {}
    for mod, (t, err) in zip(rules, run_all([functools.partial(build, m) for m in rules]), strict=True):
        if err is not None and errors is not None:
            errors.append(err)
        if t is not None:
            out[mod.NAME] = t
    return out


def mean_saving_us(base: np.ndarray, fixed: np.ndarray) -> float:
    """Mean per-step saving (µs) of the replayed periods `fixed` against `base` (ns), within [0, mean base]. The
    means, not the steps, are compared: a fix that lets the host run ahead shortens the first steps' periods
    and lengthens the last one (its device work still drains), so per-step differences clipped at zero would
    count the run-ahead and never the drain."""
    if base.size == 0:
        return 0.0
    b = float(base.mean())
    return min(max(b - float(fixed.mean()), 0.0), b) / 1000


def steady(trace, steps: pl.DataFrame, ts: Sequence[Transform]) -> bool:
    """Whether fixes `ts` are priced on the steps after the first (`replay.steady_mean`): where they take away a
    device drain the loop makes every step (`replay.drains_every_step`). The first step of the recorded window
    then starts from the drain of the step before it, which the fixed loop does not make: replayed with the fix,
    that step starts on an idle device and pays a start-up (the host launching with nothing queued ahead, the
    lead before its first GPU work read from the drained trace) that the fixed loop's steps never pay, while the
    problem's own first step is one like the others (its loop drains every step)."""
    return drains_every_step(trace, steps, ts)


def saving_us(trace, steps: pl.DataFrame, base: list[Transform], ts: Sequence[Transform],
              b: np.ndarray | None = None, fixed: np.ndarray | None = None) -> float:
    """Mean per-step saving (µs) of `ts` over `base` (`mean_saving_us` of their replayed periods; `b`, `fixed`
    when already known), or of the means of the steps after the first where they (or fixes in `base`) take away a drain
    every step (`steady`)."""
    if steady(trace, steps, [*base, *ts]):
        bm, fm = steady_mean(trace, steps, base), steady_mean(trace, steps, [*base, *ts])
        return min(max(bm - fm, 0.0), bm) / 1000
    b = replay(trace, steps, base) if b is None else b
    fixed = replay(trace, steps, [*base, *ts]) if fixed is None else fixed
    lead = led_mean(trace, steps, base, ts)
    if lead is not None and fixed.size and lead < float(fixed.mean()):
        fixed = fixed + (lead - float(fixed.mean()))  # (each step an equal part: savings compare means)
    return mean_saving_us(b, fixed)


def led_mean(trace, steps: pl.DataFrame, base: Sequence[Transform], ts: Sequence[Transform]) -> float | None:
    """The fixed loop's mean period (ns) where a fix that takes away the problem's host-bound drain (`Transform.leads`)
    lets the host lead the device, else None: the problem's device waits for its host (the host's own pace at least the device's, `replay.paces`: each of its steps starts
    on a device the step before drained, as the window's first one does) and, with the fix, the host's own pace is
    faster than the device's and no call in the steps waits for the device. The fixed loop's host then gains a queue
    on the device step after step and its device never waits: its period is the device's own pace. The window's
    replay starts from the problem's drained device instead, the host with no queue ahead, and holds that start-up
    in its mean (GPT-2's fused AdamW on the H100: 23.8, 22.9 and 33.5 ms replayed, the device's pace 25.4, the
    fixed twin measured 25.2). A device-held problem keeps its replayed mean: its window opens on the profiler's
    start-up as the fix's does, and comparing every step keeps both (docs/replay.md, "A fix that lets the host
    lead"). Never below the pace of the DataLoader's workers (`replay.floored`)."""
    if not any(t.leads for t in ts):
        return None
    got = paces(trace, steps, base)
    if got is None or got[0] < got[1]:
        return None
    host, device, waits = paces(trace, steps, [*base, *ts]) or (0.0, 0.0, True)
    if waits or host >= device:
        return None
    return float(floored(np.asarray([device]), [*base, *ts])[0])  # (the DataLoader workers' pace still holds it)


def per_step_us(trace, steps: pl.DataFrame, t: Sequence[Transform] | Transform, base: list[Transform],
                b: np.ndarray | None = None) -> float:
    """Mean per-step saving (µs) of `t` over `base`, within [0, the base's mean replayed step], over the steps
    that price it (`saving_us`); `b`: the base's replayed periods when already known."""
    ts = [t] if isinstance(t, Transform) else list(t)
    got = saving_us(trace, steps, base, ts, b)
    bounds = [x.bound_us for x in ts if x.bound_us is not None]
    if not bounds:
        return got
    # a bounded fix adds at most its bound to what the others save together (the host-sync ceiling holds in the
    # all-fixes projection and a what-if too, not only alone)
    free = [x for x in ts if x.bound_us is None]
    rest = saving_us(trace, steps, base, free, b) if free else 0.0
    return min(got, rest + sum(bounds))


#: a replayed slowdown worth telling the user (% of the traced step): below it, a fix costs about nothing either way
SLOWER_PCT = 1.0


def slower_by_us(ctx, ts: Sequence[Transform]) -> float:
    """How much a fix lengthens the mean replayed step (µs, unprofiled terms; 0 where it does not): the host work it
    adds (autocast's casts: an eager op each) on a step the host sets the pace of, which the savings clip at zero.
    Measured the same way on the bundled twins: every fix this prices as slower ran slower (autocast on batch-1 BERT,
    GPT-2 and ViT-B/16 steps, Swin-T, EfficientNet-B0 and ResNet-50 in BF16 + channels_last: 0.4-7.7 ms)."""
    base = [pricing_transform(ctx)]
    b = float(replay(ctx.trace, ctx.steps, base).mean())
    return max(float(replay(ctx.trace, ctx.steps, [*base, *ts]).mean()) - b, 0.0) / 1000


def pricing_transform(ctx) -> Transform:
    """The profiler-cost transform every saving is priced against: solved to the collector's measured unprofiled
    step where there is one (`ctx.profiler` source `manifest`, or `user`: `--unprofiled-ms`), else the fitted model
    (analyses.overhead). Where
    the DataLoader's worker processes hold the measured step (`input_floor_ns`), the fitted model with that pace
    as its floor: the loop's host share cannot be solved to a step the workers set."""
    floor = input_floor_ns(ctx)
    if floor is not None:
        return replace(profiler_transform(ctx.trace), floor_ns=floor)
    prof = ctx.profiler or {}
    manifest = prof.get("source") == "manifest"
    measured = prof.get("unprofiled_step_ns") if prof.get("source") in ("manifest", "user") else None
    return measured_transform(ctx.trace, ctx.steps, measured, prof.get("profiled_step_ns") if manifest else None)


def input_floor_ns(ctx) -> float | None:
    """The step period the DataLoader's worker processes allow (ns), where the collector measured the unprofiled
    steps of a trace whose loader runs workers: other processes, which the profiler does not slow, so a profiled
    loop may run at their pace without waiting (the trace shows no wait) while the unprofiled loop waits for them.
    The measured step is then the slower of the loop and the workers: the mean of the second half of the measured
    steps (the prefetch buffer drains over the first ones, and N workers deliver in bursts of N: a mean, not the
    median). It is the workers' pace, not the loop's, when it exceeds the loop's own measured pace — the fastest
    step of the first half, while the buffer still held batches — by more than the profiling estimate's error
    band (overhead.ERROR_BAND): the fitted model then prices the loop, and the floor holds every fix that does
    not feed the loop faster (`Transform.input_ready`). None without workers, measured steps, or such a wait."""
    trace = ctx.trace
    doc = trace.meta.manifest
    if doc is None or ctx.steps.height == 0 or not getattr(ctx.features, "dataloader_workers", False):
        return None
    xs = rank_step_samples(doc, Path(trace.meta.path or "").name, trace.meta.rank)
    if len(xs) < 2:
        return None
    pace, own = float(np.mean(xs[len(xs) // 2:])), min(xs[: len(xs) // 2])
    return pace * 1e6 if pace > (1 + ERROR_BAND) * own else None


def rule_savings(ctx, tf: dict[str, Transform]) -> dict[str, dict[str, float]]:
    """rule -> {unprofiled_us, traced_us}: each fix's per-step saving with the profiler's cost removed, and on
    the trace as recorded (each base replayed once)."""
    if not tf:
        return {}
    base = [pricing_transform(ctx)]
    b_un, b_tr = replay(ctx.trace, ctx.steps, base), replay(ctx.trace, ctx.steps, [])
    # each fix's replays are its own (the graph and the bases are shared, computed once): concurrent
    got = run_all([functools.partial(per_step_us, ctx.trace, ctx.steps, t, b, bb)
                   for t in tf.values() for b, bb in ((base, b_un), ([], b_tr))])
    return {r: {"unprofiled_us": got[2 * k], "traced_us": got[2 * k + 1]} for k, r in enumerate(tf)}


#: the GPU's busy share of the (unprofiled, replayed) step at and above which the device holds the step: its measured
#: or estimated time then says little of how fast the host runs without the profiler (at most the rest of the step)
DEVICE_HELD = 0.9
#: a fix whose replayed step ends this much above the same fix with the host as fast as the model allows is priced
#: host-bound: its saving is the host's unprofiled speed's, which a device-held trace does not show
HOST_BOUND_AFTER = 0.05


def if_host_keeps_up_us(ctx, tf: dict[str, Transform], base_us: float, busy_us: float | None,
                        saved: dict[str, float]) -> dict[str, float]:
    """rule -> its fix's per-step saving if the host keeps up (µs): replayed with the host as fast as the profiler
    model allows (`overhead.SHARE_MAX` of every host interval taken off), for the fixes the replay leaves host-bound on
    a step the device holds (GPU busy >= `DEVICE_HELD` of `base_us`, the priced unprofiled step; `saved`: each
    fix's priced saving). On such a trace the fitted profiler cost, not a measurement, sets the host's speed after
    the fix: the H100's device-held twins ran their fixed steps 12.5 ms (ResNet-18 BF16, 14.95 priced), 44.5 (BERT
    BF16, 24.9 priced) and 25.6 (Llama SDPA, 36.4 priced): the priced saving is the fitted host's; a faster host
    saves up to this bound, a slower one less (twelve bundled twins get one, ten of them measured at most the
    bound: docs/predictions.md). Empty where the device does
    not hold the step."""
    if not tf or not busy_us or base_us <= 0 or busy_us < DEVICE_HELD * base_us:
        return {}
    fast = [share_transform(ctx.trace, SHARE_MAX)]
    f0 = replay(ctx.trace, ctx.steps, fast)
    f0_us = float(f0.mean()) / 1000 if f0.size else 0.0
    out = {}
    for rule, t in tf.items():
        got = saved.get(rule)
        if got is None:
            continue
        bound = per_step_us(ctx.trace, ctx.steps, t, fast, f0)
        fixed, fixed_fast = base_us - got, f0_us - bound
        if fixed > (1 + HOST_BOUND_AFTER) * fixed_fast and bound > (1 + HOST_BOUND_AFTER) * got:
            out[rule] = bound
    return out
