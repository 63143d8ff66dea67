"""What a rule is, sees and builds: the `Rule` contract of a rule module, `Option` and its shared threshold
presets, `RuleContext` (one trace), `JobContext` (the ranks of one job) and `Finding`. Everything a rule may
read is computed once per trace here, so rules stay pure and short.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import field, replace
from types import MappingProxyType, ModuleType
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import msgspec
import numpy as np
import polars as pl

from .analyses import classify
from .analyses import overhead as _overhead
from .analyses.features import Features, detect
from .analyses.layers import attribution, gpu_codes
from .analyses.rowid import by_id
from .analyses.specs import Spec, trace_spec
from .analyses.windows import complete_steps
from .engine import CHAIN
from .evidence import field_problems
from .finding_model import Finding, severity_for
from .frames import dropnull, filled, isnull, members, pick
from .ingest.manifest import rank_step_times, step_overhead_ms
from .memo import once_in
from .model import Job, Trace
from .parallel import run_all
from .records import record

__all__ = ["XPROF_SEVERITY", "Finding", "JobContext", "Option", "Rule", "RuleContext", "min_savings",
           "xprof_severity"]

T = TypeVar("T")


@record(frozen=True)
class Option:
    """A rule threshold: its default and where the number comes from (shown in `traceview rule CODE`)."""

    default: Any
    doc: str


def xprof_severity(scope: str = "", moderate: float = 3.0, high: float = 15.0) -> dict[str, Option]:
    """The severity thresholds of a rule whose cost is a share of step time: XProf's overview-page
    recommendation levels (moderate 3 %, high 15 %; `scope` names XProf's own category, e.g. "kernel-launch")."""
    what = f"{scope} " if scope else ""
    return {"moderate_pct": Option(moderate, f"XProf {what}moderate threshold (% of step time)"),
            "high_pct": Option(high, f"XProf {what}high threshold (% of step time)")}


#: the XProf thresholds most rules share (`OPTIONS = {..., **XPROF_SEVERITY}`)
XPROF_SEVERITY = xprof_severity()


def min_savings(pct: float) -> dict[str, Option]:
    """The smallest savings, as % of step time, a rule reports (below it a fix is not worth a finding)."""
    return {"min_savings_pct": Option(pct, "smallest savings (% of step time) worth a finding")}


@runtime_checkable
class Rule(Protocol):
    """The contract of a rule module (`rules/<slug>.py`, listed once in `traceview.rules.RULES`).

    Its docstring is its user documentation: `TVnnn slug: summary`, then the sections What it detects / Why it
    is slow / How to fix / Evidence / Options / References (docs/rules.md is generated from them). `Evidence` is
    the `msgspec.Struct` its findings carry (one described field per JSON key: traceview.evidence; docs/rules.md's
    field tables and docs/json-schema.md's evidence part are generated from it). Optional
    module attributes: `FIX` (the fix text of its findings, when one text fits them all), `CPU = True` (also runs on traces without GPU activity, `ctx.cpu` set),
    `check_job(ctx: JobContext) -> list[Finding]` (judges the ranks of one job; its findings carry `JobEvidence`,
    another struct, when their keys differ from `Evidence`'s), `removes(ctx, finding)` (the
    intervals its fix removes from the timeline, for the projection), `FIX_REMOVES_CLASS = True` (its fix
    removes every instant of `CLASS`: the projection's model when it has no `removes`), `JUDGES_STRAGGLER =
    True` (its job finding names the straggler rank: the job's per-rank verdicts and the app read it)."""

    CODE: ClassVar[str]  # TVnnn, never reused: TV1 host/launch, TV2 kernels, TV3 data movement, TV4 input, TV5 distributed
    NAME: ClassVar[str]  # the slug: the module's name with dashes
    CLASS: ClassVar[str]  # the classifier class whose time a fix of its findings removes
    SEVERITY: ClassVar[str]  # the severity of a finding between its moderate and high thresholds
    TITLE: ClassVar[str]
    OPTIONS: ClassVar[Mapping[str, Option]]
    Evidence: ClassVar[type[msgspec.Struct]]  # what its findings' `evidence` holds

    def check(self, ctx: RuleContext) -> list[Finding]: ...


#: optional attributes of a rule module and their types (see `Rule`)
OPTIONAL: dict[str, type] = {"FIX": str, "CPU": bool, "FIX_REMOVES_CLASS": bool, "JUDGES_STRAGGLER": bool}
OPTIONAL_FUNCTIONS = ("check_job", "removes")


def contract_problems(mod: ModuleType) -> list[str]:
    """What a rule module lacks of the `Rule` contract (empty: it fulfils it)."""
    from .analyses.classify import CLASSES
    from .finding_model import SEVERITIES

    code = getattr(mod, "CODE", mod.__name__)
    out = [f"{code}: no {a}" for a in ("CODE", "NAME", "CLASS", "SEVERITY", "TITLE", "OPTIONS", "Evidence", "check")
           if not hasattr(mod, a)]
    if out:
        return out
    if not isinstance(mod, Rule):
        out.append(f"{code}: does not fulfil ruleapi.Rule")
    if not (isinstance(mod.CODE, str) and len(mod.CODE) == 5 and mod.CODE.startswith("TV") and mod.CODE[2:].isdigit()):
        out.append(f"{code}: CODE is not TVnnn")
    if mod.NAME.replace("-", "_") != mod.__name__.rsplit(".", 1)[-1]:
        out.append(f"{code}: NAME {mod.NAME!r} is not the module's name with dashes")
    if mod.CLASS not in CLASSES:
        out.append(f"{code}: CLASS {mod.CLASS!r} is not a classifier class")
    if mod.SEVERITY not in SEVERITIES:
        out.append(f"{code}: SEVERITY {mod.SEVERITY!r} is not one of {SEVERITIES}")
    if not all(isinstance(o, Option) for o in mod.OPTIONS.values()):
        out.append(f"{code}: OPTIONS values must be ruleapi.Option")
    out += [f"{code}: {a} must be a {t.__name__}" for a, t in OPTIONAL.items()
            if hasattr(mod, a) and not isinstance(getattr(mod, a), t)]
    out += [f"{code}: {f} must be a function" for f in OPTIONAL_FUNCTIONS if hasattr(mod, f) and not callable(getattr(mod, f))]
    out += field_problems(mod.Evidence, f"{code}: Evidence")
    if hasattr(mod, "JobEvidence"):
        out += field_problems(mod.JobEvidence, f"{code}: JobEvidence")
    return out


# (eq=False: it holds frames/arrays, whose field-wise == and hash raise; it is compared and keyed by identity,
# and the generated __eq__/__hash__ cost start-up time at import)
@record(frozen=True, eq=False)
class RuleContext:
    """Everything a rule may read about one trace, computed once: the analysed steps (complete steps only),
    the device, the roofline bound of every kernel, the classifier's partition of the steps into classes."""

    trace: Trace
    steps: pl.DataFrame  # [step, ts, end, cpu_ts, cpu_end, ...]: analysed step windows (ns)
    window_ns: int  # their summed length
    spec: Spec  # the device's datasheet peaks
    kb: pl.DataFrame  # per compute kernel: [i, op, flops, bytes, bound, ...] (classify.kernel_bound)
    part: pl.DataFrame  # [step, ts, end, cls (classify.CLASS_ENUM)]: the classifier's segments, tiling every step
    rule: ModuleType | None = None  # the rule being run (set by the runner)
    options: Mapping[str, Any] = field(default_factory=dict)  # that rule's thresholds
    features: Features = field(default_factory=Features)  # what the trace already does (CUDA graphs, compile, ...)
    profiler: Mapping[str, Any] = field(default_factory=dict)  # profiler overhead per step (see `profiler_cost`)
    # a trace without GPU activity: the host analyses (sections/cpu.prepare); only rules with CPU = True run then
    cpu: Mapping[str, Any] | None = None
    # results computed once per analysed trace, shared by every rule's copy of the context (`once`)
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def for_host(cls, trace: Trace, steps: pl.DataFrame, cpu: Mapping[str, Any],
                 unprofiled_ms: float | None = None) -> RuleContext:
        """The context of a trace without GPU activity: no kernels, no classifier partition; `cpu` holds the
        host-side analyses (step split, totals) the CPU rules read. The profiler's cost is estimated as for any
        trace (`profiler_cost`: on a CPU-only step, the cost of each recorded op, `overhead.LONG_OP_FLOORS`)."""
        part = pl.DataFrame(schema={"step": pl.Int64, "ts": pl.Int64, "end": pl.Int64, "cls": pl.String})
        window = int((steps["end"] - steps["ts"]).sum()) if steps.height else 0
        return cls(trace=trace, steps=steps, window_ns=window, spec=trace_spec(trace.meta),
                   kb=(kb := classify.kernel_bound(trace)), part=part, features=detect(trace, kb),
                   profiler=profiler_cost(trace, complete_steps(trace, steps)[0], unprofiled_ms),
                   cpu=MappingProxyType(dict(cpu)))

    @classmethod
    def prepare(cls, trace: Trace, steps: pl.DataFrame,
                unprofiled_ms: float | None = None) -> tuple[RuleContext, list[str]]:
        """The context of the given steps; a last step cut off by the end of the recording is left out
        (tb_plugin's rule) and the returned warnings say so. `unprofiled_ms`: the step the user measured without
        the profiler (`profiler_cost`)."""
        kept, warns = complete_steps(trace, steps)
        # the layer attribution first (every report reads it: the findings' layers, the layer table): its
        # temporaries, the analysis's largest, then stack on the loaded trace alone, not on the partition and
        # a rule's frames (10 M tiny events: -600 MB at the peak)
        gpu_codes(trace)

        def classified() -> tuple[pl.DataFrame, pl.DataFrame, Features]:
            kb = classify.kernel_bound(trace)
            return kb, classify.partition(trace, kept, kb, enum=True), detect(trace, kb)

        # the classification and the profiler's cost (its replay graph) read neither one another: concurrent.
        # The profiler's cost first: the replay graph's build and its replay, the run's largest temporaries, then
        # stack on the loaded trace alone, not on the partition and the kernels' bounds (10 M tiny events: ~240 MiB)
        profiler, (kb, part, features) = run_all([lambda: profiler_cost(trace, kept, unprofiled_ms), classified])
        window = int((kept["end"] - kept["ts"]).sum()) if kept.height else 0
        return cls(trace=trace, steps=kept, window_ns=window, spec=trace_spec(trace.meta), kb=kb, part=part,
                   features=features, profiler=profiler), warns

    def for_rule(self, rule: ModuleType, options: Mapping[str, Any]) -> RuleContext:
        return replace(self, rule=rule, options=MappingProxyType(dict(options)))

    def once(self, key: Hashable, fn: Callable[[], T]) -> T:
        """`fn()`, computed once per analysed trace and the running rule's options: a rule's check and the
        projection (which asks each rule what its fix removes) share one result."""
        try:
            k = (key, getattr(self.rule, "NAME", None), tuple(sorted(self.options.items())))
            hash(k)
        except TypeError:  # an unhashable option value: no caching
            return fn()
        return once_in(self.memo, k, fn)

    def shared(self, key: Hashable, fn: Callable[[], T]) -> T:
        """`fn()`, computed once per analysed trace for every rule: a result that reads no rule's options (the
        decode loop's attention calls, read by two rules)."""
        return once_in(self.memo, ("shared", key), fn)

    def forget_rule(self, name: str) -> None:
        """Drop what rule `name` shared through `once` (a later call computes it again): run_rules calls it for a
        rule whose check found nothing, as no fix or projection then asks for that rule's results, which would
        otherwise stay under every later step's peak (at 10 M tiny events small-grid's kernel table alone is
        hundreds of MB)."""
        for k in [k for k in list(self.memo) if k[1] == name]:  # (a snapshot: other rules' checks may run beside)
            self.memo.pop(k, None)

    @property
    def lo(self) -> int:
        return int(self.steps["ts"].min())

    @property
    def hi(self) -> int:
        return int(self.steps["end"].max())

    def class_time(self, cls: str) -> pl.DataFrame:
        """The partition's segments of one class."""
        return self.part.filter(pl.col("cls") == cls)

    def pct(self, ns: float) -> float:
        """`ns` as a share (%) of the analysed window."""
        return 100.0 * ns / self.window_ns if self.window_ns else 0.0

    def layer_of(self, kernel_ids: list[int] | pl.Series | None = None,
                 op_ids: list[int] | pl.Series | None = None) -> str | None:
        """The most common layer of a finding's kernels (or of the kernels its ops launched). Ids may come as a
        Series (no Python list of every kernel)."""
        parts = []
        if kernel_ids is not None and len(kernel_ids):
            parts.append(pl.Series("i", kernel_ids).cast(pl.Int64))
        if op_ids is not None and len(op_ids):
            ops = pl.Series("op", op_ids).cast(pl.Int64)
            g = pick(self.trace.gpu, "i", "op")
            parts.append(g.filter(pl.col("op").cast(pl.Int64).is_in(members(ops)))["i"].cast(pl.Int64))
        if not parts:
            return None
        # each kernel once, its layer by id (not a filter over every GPU activity per finding); counted by layer
        # code (no text per kernel: a host-bound trace's finding names millions of kernels), then the most common
        # named layer, the first by name of those tied
        names = attribution(self.trace).names["layer"]
        lc = dropnull(by_id(gpu_codes(self.trace), pl.concat(parts).unique(), "lc")["lc"]).to_numpy()
        n = np.bincount(lc.astype(np.int64), minlength=names.len())[:names.len()]
        n[(isnull(names) | filled(names.str.starts_with("("), True)).to_numpy()] = 0
        if not n.any():
            return None
        by_name = pl.DataFrame({"layer": names, "n": n}).lazy().filter(pl.col("n") > 0).group_by("layer").agg(
            pl.col("n").sum())  # (one query)
        return str(by_name.filter(pl.col("n") == pl.col("n").max()).select(pl.col("layer").sort().first())
                   .collect(**CHAIN).item())

    def finding(self, *, cost_ns: float, count: int, steps: list[int], evidence: msgspec.Struct,
                savings_ns: float | None = None, severity_pct: float | None = None, severity: str | None = None,
                title: str | None = None, fix: str | None = None, kernel_ids: list[int] | pl.Series | None = None,
                op_ids: list[int] | pl.Series | None = None) -> Finding:
        """A finding of the running rule. Savings default to the cost; the severity follows the rule's
        `moderate_pct`/`high_pct` thresholds on `severity_pct` (default: the savings' share of the window)."""
        _check_evidence(self.rule, evidence)
        return _finding(self.rule, self.options, cost_ns=cost_ns, savings_ns=savings_ns, window_ns=self.window_ns,
                        count=count, steps=steps, evidence=evidence, severity_pct=severity_pct, severity=severity,
                        title=title, fix=fix, layer=self.layer_of(kernel_ids, op_ids))


def profiler_cost(trace: Trace, steps: pl.DataFrame, unprofiled_ms: float | None = None) -> dict[str, Any]:
    """The profiler's cost per step: the model's estimate from the recorded events (analyses.overhead) and, for a
    `traceview collect` run, the measured one (profiled − unprofiled CUDA-event step). `overhead_ns` and
    `unprofiled_step_ns` are the measured numbers when there are, else the estimate; `source` says which;
    `profiled_step_ns` is the collector's profiled CUDA-event step (with a manifest only). `unprofiled_ms`, the
    step the user measured without the profiler (`--unprofiled-ms`), wins over both (`source` `user`): it is what
    the user's own loop does, and the overhead is the traced step less it."""
    est = _overhead.estimate(trace, steps) if steps.height else {}
    out: dict[str, Any] = {"estimate": est, "source": "estimate",
                           "overhead_ns": 1000 * float(est.get("overhead_per_step_us") or 0.0),
                           "unprofiled_step_ns": 1000 * float(est.get("estimated_unprofiled_step_us") or 0.0)}
    doc = trace.meta.manifest
    if doc is not None:
        from pathlib import Path

        unprof, prof, _ = rank_step_times(doc, Path(trace.meta.path).name, trace.meta.rank)
        if unprof and prof:
            out.update(source="manifest", overhead_ns=max(0.0, (prof - unprof) * 1e6), unprofiled_step_ns=unprof * 1e6,
                       profiled_step_ns=prof * 1e6)
    if unprofiled_ms and steps.height:
        traced = float((steps["end"] - steps["ts"]).mean())
        out.update(source="user", overhead_ns=max(0.0, traced - unprofiled_ms * 1e6),
                   unprofiled_step_ns=unprofiled_ms * 1e6)
        out.pop("profiled_step_ns", None)
    return out


#: where `profiler_cost`'s measured numbers come from, in words (findings' profiler notes)
PROFILER_SOURCE_TEXT = {"manifest": "measured by the collector", "user": "measured by you (--unprofiled-ms)"}


def gpu_busy_per_step_ns(prof: Mapping[str, Any]) -> float:
    """The GPU's busy time per analysed step of `profiler_cost` (ns; 0.0 where the estimate has none): the device's
    own work, which the profiler does not slow, beside `unprofiled_step_ns`."""
    return 1000 * float((prof.get("estimate") or {}).get("gpu_busy_per_step_us") or 0.0)


def profiler_source_text(prof: Mapping[str, Any]) -> str:
    """How the profiler's cost of `profiler_cost` was found, for a finding's note."""
    return PROFILER_SOURCE_TEXT.get(prof.get("source") or "", "estimated from the recorded events")


# (eq=False: it holds frames/arrays, whose field-wise == and hash raise; it is compared and keyed by identity,
# and the generated __eq__/__hash__ cost start-up time at import)
@record(frozen=True, eq=False)
class JobContext:
    """The ranks of one job: each rank's analysed steps and the cross-rank collective matching."""

    job: Job
    steps: dict[int, pl.DataFrame]  # position in job.traces -> analysed step windows
    comm: dict[str, Any]  # the job's `nccl` section (analyses.comm.summary)
    entries: tuple[dict[str, Any], ...] = ()  # the ranks' trace entries (same order as job.traces)
    rule: ModuleType | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def for_rule(self, rule: ModuleType, options: Mapping[str, Any]) -> JobContext:
        return replace(self, rule=rule, options=MappingProxyType(dict(options)))

    @property
    def window_ns(self) -> float:
        """The mean analysed window over the ranks."""
        w = [int((st["end"] - st["ts"]).sum()) for st in self.steps.values() if st.height]
        return sum(w) / len(w) if w else 0.0

    @property
    def overhead_ms(self) -> float | None:
        """Profiled minus unprofiled step time of a `traceview collect` run (its manifest), else None."""
        man = self._manifest_overhead_ms
        return man if man is not None else self.estimated_overhead_ms

    @property
    def _manifest_overhead_ms(self) -> float | None:
        return next((o for o in (step_overhead_ms(t.meta.manifest) for t in self.job.traces) if o is not None), None)

    @property
    def overhead_source(self) -> str:
        """Where `overhead_ms` comes from, in words."""
        if self._manifest_overhead_ms is not None:
            return "collector manifest: profiled vs unprofiled step time"
        return "estimated unprofiled step time of the trace's profiling section"

    @property
    def estimated_overhead_ms(self) -> float | None:
        """Without a manifest: the largest traced minus estimated unprofiled step time of a rank (the trace
        entries' `profiling.estimated_unprofiled_step_us`, where the profiling section estimates it)."""
        got = []
        for e in self.entries:
            est = (e.get("profiling") or {}).get("estimated_unprofiled_step_us")
            traced = (e.get("summary") or {}).get("avg_step_us")
            if isinstance(est, (int, float)) and isinstance(traced, (int, float)):
                got.append(max(traced - est, 0.0) / 1000)
        return max(got) if got else None

    def finding(self, *, cost_ns: float, savings_ns: float, count: int, evidence: msgspec.Struct,
                severity: str | None = None, title: str | None = None, fix: str | None = None) -> Finding:
        _check_evidence(self.rule, evidence, "JobEvidence")
        return _finding(self.rule, self.options, cost_ns=cost_ns, savings_ns=savings_ns, window_ns=self.window_ns,
                        count=count, steps=[], evidence=evidence, severity=severity, title=title, fix=fix)


def _finding(rule: ModuleType | None, options: Mapping[str, Any], *, cost_ns: float, savings_ns: float | None,
             window_ns: float, count: int, steps: list[int], evidence: msgspec.Struct,
             severity_pct: float | None = None, severity: str | None = None, title: str | None = None,
             fix: str | None = None, layer: str | None = None) -> Finding:
    if rule is None:
        raise RuntimeError("finding() outside a rule: use ctx.for_rule(module, options)")
    savings = cost_ns if savings_ns is None else savings_ns
    pct = 100.0 * savings / window_ns if window_ns else 0.0
    explicit = severity is not None
    if severity is None:
        sev_pct = pct if severity_pct is None else severity_pct
        severity = severity_for(sev_pct, options["moderate_pct"], options["high_pct"], rule.SEVERITY)
    return Finding(rule=rule.NAME, code=rule.CODE, severity=severity, title=title or rule.TITLE,
                   steps=[int(s) for s in steps], count=int(count), cost_us=cost_ns / 1000, savings_us=savings / 1000,
                   savings_pct=pct, evidence=evidence, fix=fix if fix is not None else getattr(rule, "FIX", ""),
                   layer=layer, cls=getattr(rule, "CLASS", None), explicit_severity=explicit)


def _check_evidence(rule: ModuleType | None, evidence: object, kind: str = "Evidence") -> None:
    """A finding's evidence is its rule's declared struct (a job finding's: `JobEvidence`, when declared)."""
    cls = getattr(rule, kind, None) or getattr(rule, "Evidence", None)
    if rule is not None and not (cls is not None and isinstance(evidence, cls)):
        raise TypeError(f"{getattr(rule, 'CODE', rule)}: evidence must be the rule's {kind} struct, "
                        f"not {type(evidence).__name__}")
