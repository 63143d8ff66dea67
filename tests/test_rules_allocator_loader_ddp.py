"""TV303 allocator-churn, TV402 loader-workers and TV502 accumulation-sync (issue 27) on bundled real traces:
each problem run fires its rule, each fixed run / negative control raises nothing above info from them, and
the numbers in the findings are checked against the raw events (stdlib json) and the runs' labels."""

from __future__ import annotations

import functools
import gzip
import json
import math
import shutil
import statistics
from pathlib import Path

import polars as pl
import pytest
from conftest import SAMPLES, ab_twins, raw_events

import traceview
from traceview.options import Options
from traceview.report import analyze_trace

OURS = ("allocator-churn", "loader-workers", "accumulation-sync")


@functools.cache
def _entry(path: str, sets: tuple[tuple[str, str, object], ...] = ()) -> dict:
    p = Path(path)
    f = next(p.glob("*.pt.trace.json*")) if p.is_dir() else p
    opts = {}
    for rule, opt, val in sets:
        opts.setdefault(rule, {})[opt] = val
    return analyze_trace(traceview.load(f), Options(rule_options=opts))


def _ours(entry: dict, rule: str | None = None) -> list[dict]:
    return [f for f in entry["findings"] if f["rule"] in OURS and (rule is None or f["rule"] == rule)]


def _above_info(entry: dict) -> list[tuple[str, str]]:
    return [(f["rule"], f["severity"]) for f in _ours(entry) if f["severity"] != "info"]


# ---- TV303 allocator-churn ------------------------------------------------------------------------------------

EMPTY_CACHE = (
    "gpu_h200_memory/memory_pressure_empty_cache.json.gz"  # empty_cache() after every step (make_trace.py)
)


def _raw_driver_calls(rel: str) -> tuple[list[dict], list[dict]]:
    """(driver allocation calls inside the complete steps, cpu_ops), from the raw events."""
    ev = raw_events(rel)
    steps = sorted(
        (e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    # ProfilerStep#4 is cut off by the end of the recording: left out (tb_plugin's rule)
    assert [s["name"] for s in steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    spans = [(s["ts"], s["ts"] + s["dur"]) for s in steps[:-1]]
    calls = [
        e
        for e in ev
        if e.get("cat") == "cuda_runtime"
        and e["name"] in ("cudaMalloc", "cudaFree")
        and any(a <= e["ts"] < b for a, b in spans)
    ]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    return calls, ops


def test_empty_cache_every_step_fires_allocator_churn():
    e = _entry(str(SAMPLES / EMPTY_CACHE))
    (f,) = _ours(e, "allocator-churn")
    ev = f["evidence"]
    calls, ops = _raw_driver_calls(EMPTY_CACHE)
    # independent: the runtime calls in the analysed steps, and the frees no cpu_op on their thread encloses
    outside = [
        c
        for c in calls
        if c["name"] == "cudaFree"
        and not any(o["tid"] == c["tid"] and o["ts"] <= c["ts"] < o["ts"] + o["dur"] for o in ops)
    ]
    assert ev["driver_alloc_calls"] == len(calls) == 14
    assert ev["empty_cache_frees"] == len(outside) == 7 and ev["empty_cache_steps"] == [2, 3]
    assert ev["cases"][0] == "empty_cache" and ev["retry_ops"] == []
    assert ev["driver_alloc_us"] == pytest.approx(sum(c["dur"] for c in calls), abs=0.01)
    assert f["severity"] in ("warning", "error") and 0 < f["savings_us"] <= ev["driver_alloc_us"]
    assert "Remove torch.cuda.empty_cache()" in f["fix"] and "expandable_segments:True" in f["fix"]
    # memory-pressure keeps only the fill level: info, no saving, no driver-call case
    (mp,) = [x for x in e["findings"] if x["rule"] == "memory-pressure"]
    assert mp["evidence"]["cases"] == ["near_capacity"] and mp["severity"] == "info"


STEADY = "gpu_h200/train_tinygpt_modules.json.gz"  # profile_memory=True, 344 allocations a step, all cached


def test_steady_memory_is_quiet_and_fragmentation_is_info():
    assert _ours(_entry(str(SAMPLES / STEADY)), "allocator-churn") == []
    # the same trace against lower fragmentation thresholds: 2.07 GiB reserved, 1.15x the 1.80 GiB allocated peak
    e = _entry(
        str(SAMPLES / STEADY),
        (("allocator-churn", "fragmentation_ratio", 1.1), ("allocator-churn", "min_gap_gib", 0.2)),
    )
    (f,) = _ours(e, "allocator-churn")
    (d,) = f["evidence"]["fragmented_devices"]
    assert f["evidence"]["cases"] == ["fragmentation"] and f["severity"] == "info" and f["savings_us"] == 0
    assert d["peak_allocated_gib"] == 1.801 and d["reserved_over_allocated"] == pytest.approx(1.15, abs=0.01)
    assert "expandable_segments:True" in f["fix"]


# ---- TV402 loader-workers -------------------------------------------------------------------------------------

NW2 = SAMPLES / "collected3/cnn_input_nw2"  # 2 workers for ~275 ms of PIL augmentation per batch
C2 = json.loads((SAMPLES / "collected2/labels.json").read_text())


def _step_ms(run: Path) -> float:
    f = next(run.glob("*.pt.trace.json.gz"))
    with gzip.open(f, "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    d = [e["dur"] for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    return sum(d) / len(d) / 1000


def test_too_few_workers_fire_loader_workers_not_input_bound():
    e = _entry(str(NW2))
    (f,) = _ours(e, "loader-workers")
    assert [x for x in e["findings"] if x["rule"] == "input-bound"] == []  # the two never both fire
    ev = f["evidence"]
    assert f["severity"] == "error" and ev["steps_waited"] == 3
    # independent: the mean ProfilerStep duration of the raw trace is the workers' pace
    assert ev["step_period_us"] / 1000 == pytest.approx(_step_ms(NW2), rel=1e-3)
    assert (
        "num_workers" in f["fix"] and "persistent_workers=True" in f["fix"] and "use workers" not in f["fix"]
    )
    assert "pin_memory=True" in f["fix"]  # the copies are pageable (the script runs pin_memory=False)


def test_known_worker_count_gives_the_number_and_the_per_batch_cpu_time():
    e = _entry(str(NW2), (("loader-workers", "num_workers", 2),))
    (f,) = _ours(e, "loader-workers")
    ev = f["evidence"]
    want = math.ceil(2 * ev["step_period_us"] / ev["step_without_wait_us"])
    assert ev["workers_needed"] == want and f"About {want} DataLoader workers (now 2)" in f["fix"]
    assert f"num_workers={want}" in f["fix"]
    assert f"each batch costs about {round(ev['per_batch_cpu_us'] / 1000)} ms of CPU" in f["fix"]
    # independent: the same pipeline in the main process (collected2 cnn_input_nw0) costs ~275 ms per batch
    label = float(C2["cnn_input_nw0"]["injected"]["cpu_ms_per_batch"].strip("~"))
    assert ev["per_batch_cpu_us"] / 1000 == pytest.approx(label, rel=0.1)


@pytest.mark.parametrize("rel", ["collected2/cnn_input_nw8", "kineto_resnet50/resnet50_num_workers_4"])
def test_enough_workers_raise_nothing_above_info(rel):
    assert _above_info(_entry(str(SAMPLES / rel))) == []


def test_no_workers_is_input_bound_not_loader_workers():
    e = _entry(str(SAMPLES / "collected2/cnn_input_nw0"))
    assert _ours(e, "loader-workers") == []
    assert [x["severity"] for x in e["findings"] if x["rule"] == "input-bound"] == ["error"]


NW2_C4 = SAMPLES / "collected4/input_workers_nw2"  # 2 workers, 16 samples x 2 ms of CPU a batch; no cores recorded


def _with_cpus(tmp_path: Path, cpus: int | None) -> Path:
    """The run folder with its manifest's rank recording `cpus` CPUs for the process (None: as collected)."""
    run = tmp_path / f"nw2_{cpus}"
    shutil.copytree(NW2_C4, run)
    if cpus is not None:
        doc = json.loads((run / "manifest.json").read_text())
        doc["ranks"][0].update(cpu_count=64, cpu_affinity=cpus)
        (run / "manifest.json").write_text(json.dumps(doc))
    return run


def _raw_loop_threads(run: Path) -> int:
    """Independent: threads that run ops inside the ProfilerSteps of the raw trace (stdlib json)."""
    with gzip.open(next(run.glob("*.pt.trace.json.gz")), "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    st = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    lo, hi = min(e["ts"] for e in st), max(e["ts"] + e["dur"] for e in st)
    return len({e["tid"] for e in ev if e.get("cat") == "cpu_op" and lo <= e["ts"] < hi})


@pytest.mark.parametrize("cpus", [None, 5, 4])
def test_free_cores_bound_the_workers_and_the_saving(tmp_path, cpus):
    run = _with_cpus(tmp_path, cpus)
    (f,) = _ours(_entry(str(run)), "loader-workers")
    ev = f["evidence"]
    xs = json.loads((run / "manifest.json").read_text())["ranks"][0]["unprofiled_step_ms"]
    pace = statistics.mean(xs[len(xs) // 2 :])  # the workers' pace: the collector's steady unprofiled steps
    k = _raw_loop_threads(run)
    assert k == 2 and ev["loop_threads"] == k and ev["num_workers"] == 2 and ev["host_cpus"] == cpus
    per_batch = 2 * pace  # ms of worker CPU a batch
    if cpus is None:  # not recorded: the saving assumes free cores, and says how many
        assert ev["cores_needed"] == pytest.approx(per_batch / (ev["step_without_wait_us"] / 1000) + k, abs=0.06)
        assert f"The saving assumes about {math.ceil(ev['cores_needed'])} free cores" in f["fix"]
        assert f["savings_us"] / 1000 == pytest.approx(pace - ev["step_without_wait_us"] / 1000, rel=0.01)
    elif cpus == 5:  # 3 free cores: 3 workers at most, a batch every per_batch / 3
        assert ev["workers_needed"] == 3 and "num_workers=3" in f["fix"] and "at most 3 workers" in f["fix"]
        assert f["savings_us"] / 1000 == pytest.approx(pace - per_batch / 3, rel=0.01)
    else:  # 2 free cores, 2 workers already: more workers cannot run, nothing to save by adding them
        assert ev["workers_needed"] == 2 and f["savings_us"] == 0 and f["severity"] == "info"
        assert f["fix"].startswith("More DataLoader workers do not help") and "num_workers=" not in f["fix"]


# ---- TV502 accumulation-sync ----------------------------------------------------------------------------------

DDP = "nccl_h200x2/ddp_balanced"  # one forward/backward per optimizer step, 8 bucket all-reduces each


def _rank0(rel: str) -> Path:
    return next((SAMPLES / rel).glob("rank0.*.pt.trace.json.gz"))


def test_one_micro_batch_per_step_is_quiet():
    assert _ours(_entry(str(_rank0(DDP)))) == []


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory) -> Path:
    """The DDP trace with its three ProfilerSteps merged into one: three micro-batches (forward + backward +
    all-reduces each) accumulated into one step, none under no_sync()."""
    with gzip.open(_rank0(DDP), "rt") as fh:
        d = json.load(fh)
    steps = sorted(
        (
            e
            for e in d["traceEvents"]
            if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"
        ),
        key=lambda e: e["ts"],
    )
    steps[0]["dur"] = steps[-1]["ts"] + steps[-1]["dur"] - steps[0]["ts"]
    drop = {s["name"] for s in steps[1:]}
    d["traceEvents"] = [
        e
        for e in d["traceEvents"]
        if not (e.get("name") in drop and e.get("cat") in ("user_annotation", "gpu_user_annotation"))
    ]
    out = tmp_path_factory.mktemp("ddp") / "rank0.merged.pt.trace.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(d, fh)
    return out


def test_all_reduce_every_micro_batch_fires_accumulation_sync(accumulated):
    (f,) = _ours(_entry(str(accumulated)), "accumulation-sync")
    ev = f["evidence"]
    raw = raw_events(str(_rank0(DDP).relative_to(SAMPLES)))
    fwd = [
        e for e in raw if e.get("cat") == "user_annotation" and e["name"] == "DistributedDataParallel.forward"
    ]
    ar = [e for e in raw if e.get("cat") == "user_annotation" and e["name"] == "nccl:all_reduce"]
    assert ev["micro_batches_per_step"] == len(fwd) == 3 and ev["allreduce_sets_per_step"] == 3
    assert ev["allreduces_per_step"] == len(ar) == 24 and ev["avoidable_allreduces_per_step"] == 16
    assert "model.no_sync()" in f["fix"] and "first 2 micro-batches" in f["fix"]
    # the avoidable NCCL kernels overlap the backward on their own stream: the replayed saving is small
    assert 0 < f["savings_us"] < ev["avoidable_nccl_kernel_us_per_step"]


@pytest.fixture(scope="module")
def retried(tmp_path_factory) -> Path:
    """The empty_cache trace with one in-op cudaMalloc of step 3 split into a cudaFree followed by the cudaMalloc:
    the allocator's retry path (no cached block: release the cache, allocate again) inside that op."""
    with gzip.open(SAMPLES / EMPTY_CACHE, "rt") as fh:
        d = json.load(fh)
    ev = d["traceEvents"]
    step3 = next(e for e in ev if e.get("name") == "ProfilerStep#3" and e.get("cat") == "user_annotation")
    m = min(
        (
            e
            for e in ev
            if e.get("name") == "cudaMalloc" and step3["ts"] <= e["ts"] < step3["ts"] + step3["dur"]
        ),
        key=lambda e: e["ts"],
    )
    half = m["dur"] / 2
    free = {**m, "name": "cudaFree", "dur": half, "args": {**m.get("args", {}), "correlation": 10**9}}
    m["ts"], m["dur"] = m["ts"] + half, half
    ev.append(free)
    out = tmp_path_factory.mktemp("retry") / "retry.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(d, fh)
    return out


def test_a_free_then_malloc_inside_one_op_is_a_retry(retried):
    (f,) = _ours(_entry(str(retried)), "allocator-churn")
    ev = f["evidence"]
    assert [(r["step"], r["frees"]) for r in ev["retry_ops"]] == [(3, 1)] and ev["retry_ops"][0][
        "op"
    ].startswith("aten::")
    assert ev["cases"][:2] == ["empty_cache", "retries"] and ev["empty_cache_frees"] == 7
    assert "1 allocation retry (aten::" in f["fix"] and "lower the peak" in f["fix"]


# ---- collected4: measured twins (labels.json; the lead's slugs mapped to these rules) -----------------------------

C4 = SAMPLES / "collected4"
C4_LABELS = json.loads((C4 / "labels.json").read_text())
SLUG = {  # the labels name each twin's rule by its slug
    "allocator-churn": "allocator-churn",
    "loader-workers": "loader-workers",
    "accumulation-sync": "accumulation-sync",
}
TWINS = [t for t in C4_LABELS["twins"] if t["rule"] in SLUG]
BAND = 0.20  # the bar: predicted within ±20 % of the measured saving
#: (problem, what fails) -> why, with the numbers: xfail(strict)
NOT_DETECTED = {
    "ddp_accum4_nccl": "fires at info only: TV502 prices 4.36 ms/step (measured 5.37) but is lowered because after "
    "launch-bound's fix (28.5 ms/step, an overclaim: the replay estimates 58.3 ms unprofiled where the collector "
    "measured 48.2) it would save 0.9 % of the step",
}
#: the synthetic transformer's empty_cache twin: its fix saves less than the driver calls' recorded time
ALLOC_CHURN_MISS = (
    "7.94 predicted vs 5.23 ms measured (+52 %): the driver's memory calls are replayed whole (6.7 ms a step as "
    "recorded: the profiler does not stretch the driver's work), and the fix measured 5.2 ms, the only allocator "
    "twin to save less than its recorded driver calls (the other six 1.05-2.1x); the fixed loop replays at 11.3 ms "
    "against 13.8 measured (docs/predictions.md)")
MISSES = {
    "input_workers_nw2": "8.45 predicted vs 5.62 ms measured (+50 %): the workers' pace (17.0 ms, the collector's "
    "steady unprofiled steps) less the loop's own replayed step (8.5 ms; 7.2-7.7 ms measured while the prefetch "
    "buffer lasted), but the fixed twin's loop runs 11.4 ms: the problem run's main thread ran its forward ops "
    "~35 % faster than every other run of the program (aten::linear median 32 vs 48-58 µs, collected5's nw0 "
    "without worker processes included), so the loop priced from its trace is a faster host's (docs/predictions.md)",
    "alloc_churn_empty_cache": ALLOC_CHURN_MISS,
}


def _c4(run: str) -> str:
    return str(sorted((C4 / run).glob("rank0.*.pt.trace.json.gz"))[0])


def _mark(run: str, table: dict):
    return [pytest.mark.xfail(strict=True, reason=table[run])] if run in table else []


@pytest.mark.parametrize(
    "t", [pytest.param(t, marks=_mark(t["problem"], NOT_DETECTED), id=t["problem"]) for t in TWINS]
)
def test_collected4_problem_fires_its_rule(t):
    got = [f["severity"] for f in _ours(_entry(_c4(t["problem"])), SLUG[t["rule"]])]
    assert got and got[0] in ("warning", "error"), got


@pytest.mark.parametrize("run", sorted({t["fixed"] for t in TWINS}))
def test_collected4_fixed_twin_raises_nothing_above_info(run):
    assert _above_info(_entry(_c4(run))) == []


@pytest.mark.parametrize(
    "t", [pytest.param(t, marks=_mark(t["problem"], MISSES), id=t["problem"]) for t in TWINS]
)
def test_collected4_predicted_within_20_pct_of_measured(t):
    """The finding's replayed saving per step (unprofiled terms) against the labels' measured saving
    (unprofiled problem - unprofiled fixed step, the collector's CUDA events in steady state)."""
    # the twin measures the fix alone: a finding whose time a larger fix also saves reports the remainder, and
    # its saving alone in evidence.after_larger_fixes
    got = [(f["evidence"].get("after_larger_fixes") or {}).get("alone_savings_us", f["savings_us"]) / 1000
           for f in _ours(_entry(_c4(t["problem"])), SLUG[t["rule"]])]
    m = t["measured_fix_saving_ms"]
    assert got, "no finding"
    assert abs(got[0] / m - 1) <= BAND, f"{got[0]:.3f} predicted vs {m:.3f} ms measured"


def test_collected4_text_names_the_concrete_api():
    (a,) = _ours(_entry(_c4("alloc_churn_empty_cache")), "allocator-churn")
    # alloc_churn.py --empty-cache calls torch.cuda.empty_cache() after every step: frees outside any op in each
    assert "Remove torch.cuda.empty_cache() from the loop" in a["fix"]
    assert a["evidence"]["empty_cache_steps"] == a["steps"] and len(a["steps"]) >= 2
    (d,) = _ours(_entry(_c4("ddp_accum4_nccl")), "accumulation-sync")
    # ddp_accum.py --accum 4: four DDP forwards per optimizer step, all-reducing after each
    assert d["evidence"]["micro_batches_per_step"] == 4 and d["evidence"]["allreduce_sets_per_step"] == 4
    assert "Wrap the first 3 micro-batches in model.no_sync()" in d["fix"]
    (w,) = _ours(_entry(_c4("cnn_input_nw3"), (("loader-workers", "num_workers", 3),)), "loader-workers")
    ev = w["evidence"]
    assert ev["workers_needed"] == math.ceil(3 * ev["step_period_us"] / ev["step_without_wait_us"])
    # the twin that fixed it runs 12 workers (its label), and its unprofiled step (17.7 ms) is the loop's own
    fixed = next(t for t in TWINS if t["problem"] == "cnn_input_nw3")
    assert "num_workers=12" in fixed["fix"] and ev["workers_needed"] == 12
    assert "About 12 DataLoader workers (now 3)" in w["fix"]
    assert "DataLoader(num_workers=12, persistent_workers=True, pin_memory=True" in w["fix"]


def test_cpu_trace_with_workers_is_not_told_to_use_workers(tmp_path):
    """The CPU-only input-bound run with its DataLoader renamed to the multi-process iterator: the host-side
    finding (TV401 judges CPU traces) then asks for more or cheaper workers, never for workers."""
    src = next((SAMPLES / "cpu_collected/tinygpt_input_bound").glob("*.pt.trace.json.gz"))
    with gzip.open(src, "rt") as fh:
        text = fh.read()
    assert text.count("_SingleProcessDataLoaderIter") == 3
    out = tmp_path / "workers.pt.trace.json.gz"
    with gzip.open(out, "wt") as fh:
        fh.write(text.replace("_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter"))
    single = [f for f in _entry(str(src))["findings"] if f["rule"] == "input-bound"]
    multi = [f for f in _entry(str(out))["findings"] if f["rule"] == "input-bound"]
    assert len(single) == len(multi) == 1 and single[0]["cost_us"] == multi[0]["cost_us"]
    assert "num_workers > 0" in single[0]["fix"]
    assert "already runs worker processes" in multi[0]["fix"] and "num_workers > 0" not in multi[0]["fix"]


def test_burst_period_reads_the_worker_count_from_the_long_waits():
    from traceview.rules.loader_workers import burst_period

    # 4 workers in phase: one long wait (the burst's first batch), then 3 batches at once
    assert burst_period([5.0, 5.0] + [60.0, 5.0, 5.0, 5.0] * 4) == (4, [2, 6, 10, 14])
    assert burst_period([20.0, 21.0, 19.0, 20.0, 22.0, 20.0, 21.0, 19.0]) is None  # out of phase: every step alike
    assert burst_period([60.0, 5.0, 5.0, 60.0, 5.0]) is None  # too few steps to see three bursts


@pytest.mark.parametrize(("run", "workers"), [("input_workers_nw2", 2), ("cnn_input_nw3", 3)])
def test_worker_count_from_the_collectors_steps_without_the_option(run, workers):
    # Kineto records no worker count; the collector's unprofiled steps (manifest beside the trace) wait long once
    # every N steps. Independent: the run's command in labels.json (`--workers N`) and its raw step list
    assert f"--workers {workers}" in C4_LABELS["runs"][run]["command"]
    (w,) = _ours(_entry(_c4(run)), "loader-workers")
    ev = w["evidence"]
    assert ev["num_workers"] == workers and ev["num_workers_from"] == "collector"
    steps = json.loads((SAMPLES / "collected4" / run / "rank0.collect.json").read_text())["unprofiled_step_ms"]
    # independent (stdlib): the steps above the midpoint of the lower quartile and the longest, and their spacing
    q1 = statistics.quantiles(steps, n=4, method="inclusive")[0]
    long = [i + 1 for i, x in enumerate(steps) if x > (q1 + max(steps)) / 2]
    assert ev["long_wait_steps"] == long and max(steps) > 2 * q1
    assert statistics.mode(b - a for a, b in zip(long, long[1:], strict=False)) == workers
    assert ev["workers_needed"] == max(workers + 1, math.ceil(workers * ev["step_period_us"] / ev["step_without_wait_us"]))
    assert f"now {workers}: the collector's unprofiled steps wait long every {workers} steps" in w["fix"]


def test_unknown_worker_count_is_said_not_guessed():
    # collected3's run has 4 unprofiled steps and 3 traced ones: too few to see a burst period
    (f,) = _ours(_entry(str(NW2)), "loader-workers")
    ev = f["evidence"]
    assert ev["num_workers"] is None and ev["num_workers_from"] is None and ev["workers_factor"] > 1
    assert "The trace does not say how many workers there are" in f["fix"]
    assert "--set loader-workers.num_workers=N" in f["fix"]


EMPTY_CACHE_TWINS = [t for t in TWINS if t["rule"] == "allocator-churn"]


@pytest.mark.parametrize("t", [pytest.param(t, marks=_mark(t["problem"], {"alloc_churn_empty_cache": ALLOC_CHURN_MISS}),
                                            id=t["problem"]) for t in EMPTY_CACHE_TWINS])
def test_empty_cache_fix_is_priced_on_the_steps_after_the_drained_start(t):
    """`torch.cuda.empty_cache()` drains the device every step, so also in the step before the recorded window: the
    window's first step starts on an idle GPU. Replayed with the fix, that step pays a start-up the fixed loop never
    pays (the host launching the forward with nothing queued, the lead before its first GPU work read from the
    drained trace); the later steps are the fixed loop's own, checked against the fixed twin's measured unprofiled
    step (labels.json, the collector's CUDA events). The saving is priced on those steps (fixes.steady, replay.steady_mean)."""
    from traceview.rules import BY_NAME

    from traceview.analyses import fixes
    from traceview.analyses.replay import Transform, drains_every_step, replay, steady_mean
    from traceview.report import select_steps
    from traceview.ruleapi import RuleContext

    trace = traceview.load(_c4(t["problem"]))
    ctx, _ = RuleContext.prepare(trace, select_steps(trace, None))
    fix = fixes.transforms(ctx, Options(), [BY_NAME["allocator-churn"]])["allocator-churn"]
    base = [fixes.pricing_transform(ctx)]
    steps = ctx.steps
    assert steps.height == 3 and drains_every_step(trace, steps, [fix])
    assert not drains_every_step(trace, steps, base)  # (no call that stops waiting)
    # the same calls in the first step only: the loop no longer drains every step, so every step prices the fix
    host = trace.host.filter(pl.col("i").is_in(list(fix.no_wait)))
    first = host.filter(pl.col("ts") < steps["cpu_ts"][1])["i"].to_list()
    assert first and not drains_every_step(trace, steps, [Transform("first step", no_wait=first)])

    b, f = replay(trace, steps, base), replay(trace, steps, [*base, fix])
    fixed_ms = C4_LABELS["runs"][t["fixed"]]["unprofiled_step_ms"]
    # the fixed loop's steps replay at the fixed twin's measured step; the first one does not
    for period in f[1:]:
        assert abs(period / 1e6 / fixed_ms - 1) <= 0.10, (period / 1e6, fixed_ms)
    assert f[0] / 1e6 > (1 + BAND) * fixed_ms
    # the problem's own first step is one like the others (its loop drains every step)
    assert abs(b[0] / b[1:].mean() - 1) <= 0.10
    got = fixes.per_step_us(trace, steps, fix, base, b)
    assert got == pytest.approx((steady_mean(trace, steps, base) - steady_mean(trace, steps, [*base, fix])) / 1000)
    # (the fixed loop keeps its device busy from step to step here: the steady mean is the later steps' periods)
    assert steady_mean(trace, steps, [*base, fix]) == pytest.approx(f[1:].mean(), rel=0.01)
    m = t["measured_fix_saving_ms"]
    assert abs(got / 1000 / m - 1) <= BAND, f"{got / 1000:.3f} predicted vs {m:.3f} ms measured"


def test_a_host_bound_loops_empty_cache_is_priced_at_its_recorded_driver_time():
    """The driver's memory calls keep their time under the profiler-cost transform (replay._driver_work): on a
    host-bound loop (ResNet-50 on an H100, GPU busy 14 %) removing them saves about what they take as recorded —
    the profiler's callbacks do not stretch the driver's work — and the fix measured in the trace's own process
    (labels.json, ABBA rounds without the profiler) agrees within 20 %. Scaled as dispatch it was 5.3 ms (−56 %)."""
    run = "ab_traced/resnet50_empty_cache_h100"
    (path,) = (SAMPLES / run).glob("*.pt.trace.json.gz")
    e = _entry(str(path))
    (f,) = _ours(e, "allocator-churn")
    steps = len(f["evidence"]["per_step"])
    recorded_ms = f["evidence"]["driver_alloc_us"] / steps / 1000  # the steps' cudaMalloc + cudaFree, as recorded
    assert f["evidence"]["empty_cache_frees"] / steps > 50 and recorded_ms > 10
    saved_ms = f["savings_us"] / 1000
    assert 0.85 * recorded_ms <= saved_ms <= 1.05 * recorded_ms, (saved_ms, recorded_ms)
    label = ab_twins()["resnet50_empty_cache_h100"]
    assert abs(saved_ms / label["measured_fix_saving_ms"] - 1) <= 0.20
    # what the churn costs beyond its driver calls is not in the trace: the text calls the saving a floor
    assert "a floor" in f["fix"] and "other host work" in f["fix"]


def test_the_profiler_stretches_dispatch_not_the_drivers_memory_calls():
    """Measured on an H100 (collectors/examples/driver_call_cost.py, sample_traces/ab_traced/driver_call_cost_h100.ndjson):
    the host time of a cache-missing `torch.empty` (its cudaMalloc) and of `empty_cache()`'s cudaFree per segment,
    without the profiler and under it, interleaved. The frees take the same time traced (ratio ~1.0) and the
    mallocs barely more, while a small op's dispatch runs ~1.3x slower traced: the basis of replaying the driver's
    memory calls whole (replay._driver_work) where the profiler-cost transform takes its share off dispatch."""
    from traceview.analyses.overhead import HOST_SHARE

    rows = [json.loads(line.split(" ", 1)[1]) for line in
            (SAMPLES / "ab_traced/driver_call_cost_h100.ndjson").read_text().splitlines() if line.startswith("DRV ")]
    assert len(rows) == 16 and {r["mib"] for r in rows} == {2, 20, 64, 256}

    def ratio(key: str) -> float:  # traced over unprofiled, pooled over the segments of 20 MiB and more
        big = [r for r in rows if r["mib"] >= 20]
        return (statistics.median(r[key] for r in big if r["profiled"])
                / statistics.median(r[key] for r in big if not r["profiled"]))

    stretch = 1 / (1 - HOST_SHARE)  # what the dispatch share would make of a call's time
    assert ratio("free_us") <= 1.15 and ratio("malloc_us") <= 1.35
    assert ratio("small_op_us") >= 1.15 and ratio("small_op_us") > ratio("free_us")
    assert max(ratio("free_us"), ratio("malloc_us")) < 0.75 * stretch


def test_the_replay_keeps_whole_exactly_the_synchronous_driver_memory_calls():
    """replay._driver_work marks the graph's anchors that are cudaMalloc/cudaFree (the trace's own runtime rows, an
    independent count) and nothing else; the stream-ordered allocator's calls are not among them."""
    import re

    import numpy as np

    from traceview.analyses import replay_graph
    from traceview.analyses.memory import DRIVER_ALLOC_RE, DRIVER_WORK_RE
    from traceview.analyses.replay import _driver_work

    (path,) = (SAMPLES / "ab_traced/resnet50_empty_cache_h100").glob("*.pt.trace.json.gz")
    trace = traceview.load(str(path))
    g = replay_graph.build(trace)
    mask = _driver_work(g)
    ids = set(np.asarray(g.a_i)[mask].astype(np.int64).tolist())
    rows = trace.host.filter(pl.col("name").is_in(["cudaMalloc", "cudaFree"]))
    assert len(ids) > 100 and ids == set(rows["i"].cast(pl.Int64).to_list())
    assert re.match(DRIVER_ALLOC_RE, "cudaMallocAsync") and not re.match(DRIVER_WORK_RE, "cudaMallocAsync")
    assert not re.match(DRIVER_WORK_RE, "cudaFreeAsync") and re.match(DRIVER_WORK_RE, "cuMemCreate")
