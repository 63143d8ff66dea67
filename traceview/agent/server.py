"""`traceview mcp`: the Model Context Protocol server — tools over the analyze document, bounded and checkable.

The server holds no analysis of its own: every number comes from the API the CLI calls
(`report.analyze`, `sections.timeline.timeline`, `layer_detail.layer_detail`, `ci.compare.diff_paths` over
`diff.diff`) and is passed on unchanged; findings' `savings_per_step_us` is the document's own
`savings_us` (per step, unprofiled: a replay of the rule's fix, docs/replay.md). Every answer names its `source`: the analysis id and the JSON
pointer into the `traceview analyze --format json` document it was read from (`document` returns any of it).
Answers are fitted to the token budget (mcp_bounds) and paged by `offset`. Paths are confined to the roots.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from .. import __version__
from ..errors import TraceError
from ..finding_model import SEVERITIES, severity_rank
from ..model import Trace
from ..options import Options
from .bounds import fit, shown, size, text
from .roots import Refused, Roots, input_id

MAX_ANALYSES = 16  # analysis documents kept (a later call with an evicted id asks to analyze again)
MAX_TRACES = 4  # loaded traces kept for timeline / layer detail (reloaded from the file when evicted)
MAX_TIMELINES = 4  # step timelines kept (paging through one step's slices computes it once)
PAGE = 20  # findings / slices per page by default
TOP = 10  # layers, kernels, ops by default
RESERVE = 32  # bytes of the budget kept for `next_offset`, added once the page is fitted
FIRST_FINDINGS = 5  # findings on the first screen (the text report's TOP_FINDINGS)
SLIM_FINDING = tuple(
    "code rule severity title steps count cost_us savings_us savings_pct class layer".split()
)
SLIM_LAYER = tuple(
    (
        "layer class depth calls gpu_us self_gpu_us gpu_pct kernels flops bytes achieved_tflops "
        "achieved_tbps peak_flops_pct peak_bw_pct bound dominant finding_codes"
    ).split()
)
TOOLS = ("analyze", "job", "findings", "explain", "layers", "kernels", "ops", "timeline", "diff", "what_if",
         "document")
_FINDING_ID = re.compile(r"^([tj])(\d+)\.f(\d+)$")


@dataclass
class Analysis:
    """One analysis: its document (as `traceview analyze --format json` prints it) and how to reload its traces."""

    id: str
    paths: list[Path]
    step: int | None
    doc: dict
    files: list[str] = field(default_factory=list)  # the trace path of each entry of doc["traces"]
    unprofiled_ms: float | None = None  # the step the user timed without the profiler (`--unprofiled-ms`)


def _n_steps(entry: dict) -> int:
    """The analysed steps of a trace entry."""
    return (
        len((entry.get("classification") or {}).get("analyzed_steps") or [])
        or (entry.get("summary") or {}).get("steps")
        or 1
    )


def _slim_finding(f: dict, fid: str, n_steps: int) -> dict:
    out: dict[str, Any] = {"id": fid}
    out.update({k: f.get(k) for k in SLIM_FINDING})
    out["savings_per_step_us"] = f["savings_us"]  # the document's savings are per step (replayed, unprofiled)
    return out


class Server:
    """The tools' logic over the traceview API (no MCP types here but errors): each returns a dict answer."""

    def __init__(self, roots: Roots, budget_tokens: int, max_bytes: int | None):
        self.roots, self.budget, self.max_bytes = roots, budget_tokens, max_bytes
        self.analyses: OrderedDict[str, Analysis] = OrderedDict()
        self.traces: OrderedDict[str, Trace] = OrderedDict()
        self.timelines: OrderedDict[tuple[str, int, int], dict] = OrderedDict()
        self.lock = threading.RLock()  # the SDK runs sync tools in threads: one analysis at a time

    # ---- state ----------------------------------------------------------------------------------------------
    def _options(self, step: int | None, unprofiled_ms: float | None = None) -> Options:
        return Options(step=step, max_bytes=self.max_bytes, unprofiled_ms=unprofiled_ms)

    def _load(self, f: Path) -> Trace:
        from ..ingest.loader import load_file

        st = f.stat()
        key = f"{f}\0{st.st_size}\0{st.st_mtime_ns}"  # a rewritten file is loaded again
        t = self.traces.pop(key, None)
        if t is None:
            t = load_file(f) if self.max_bytes is None else load_file(f, max_bytes=self.max_bytes)
        self.traces[key] = t
        while len(self.traces) > MAX_TRACES:
            self.traces.popitem(last=False)
        return t

    def _run(self, kind: str, path: str, step: int | None, unprofiled_ms: float | None = None) -> Analysis:
        from ..report import analyze

        p = self.roots.resolve(path)
        with self.lock:
            try:
                opts = self._options(step, unprofiled_ms)  # (a bad measured step is refused here)
                self.roots.check_files(p)
                aid = input_id(kind, [p], f"step={step}" + (f",unprofiled_ms={opts.unprofiled_ms!r}"
                                                             if opts.unprofiled_ms else ""))
            except TraceError as e:
                raise Refused(str(e)) from None
            if aid in self.analyses:
                self.analyses.move_to_end(aid)
                return self.analyses[aid]
            files: list[str] = []

            def seen(f: str) -> None:
                files.append(f)

            rep = analyze([p], opts, on_trace=seen, load=self._load)
            doc = rep.to_dict()
            if not doc["traces"]:
                raise Refused(doc["errors"][0]["error"] if doc["errors"] else f"{path}: nothing analysed")
            done = {e["path"] for e in doc["errors"]}
            a = Analysis(id=aid, paths=[p], step=step, doc=doc, files=[f for f in files if f not in done],
                         unprofiled_ms=opts.unprofiled_ms)
            self.analyses[aid] = a
            while len(self.analyses) > MAX_ANALYSES:
                self.analyses.popitem(last=False)
            return a

    def _get(self, analysis: str) -> Analysis:
        with self.lock:
            a = self.analyses.get(analysis)
        if a is None:
            raise Refused(
                f"unknown analysis {analysis!r}: call analyze (or job) first; ids are stable, "
                "so analyzing the same file again gives the same id"
            )
        return a

    def _entry(self, a: Analysis, trace: int) -> dict:
        ts = a.doc["traces"]
        if not 0 <= trace < len(ts):
            raise Refused(f"trace {trace}: the analysis {a.id} has traces 0..{len(ts) - 1}")
        return ts[trace]

    def _trace(self, a: Analysis, trace: int) -> Trace:
        with self.lock:
            return self._load(Path(a.files[trace]))

    def _answer(self, answer: dict) -> dict:
        try:
            return fit(answer, self.budget, reserve=RESERVE)
        except ValueError as e:
            raise Refused(str(e)) from None

    # ---- tools ----------------------------------------------------------------------------------------------
    def analyze(self, path: str, step: int | None = None, unprofiled_ms: float | None = None) -> dict:
        """Analyze a trace file (.json / .json.gz) or a folder of rank traces: per trace the verdict, what to fix
        first, the top findings with savings per step, the projected step time and warnings; an `analysis` id for
        the other tools. `step`: only ProfilerStep#N. `unprofiled_ms`: the step time the user measured without the
        profiler (ms; every saving is priced against it, as `traceview analyze --unprofiled-ms`). Paths are
        relative to the server's first root."""
        a = self._run("a", path, step, unprofiled_ms)
        doc = a.doc
        traces = [self._first_screen(a, i, t) for i, t in enumerate(doc["traces"])]
        return self._answer(
            {
                "analysis": a.id,
                "source": {
                    "api": "traceview.report.analyze",
                    "schema_version": doc["schema_version"],
                    "traceview": doc["tool"]["version"],
                    "document": "traceview analyze PATH --format json",
                },
                "traces": traces,
                "jobs": [self._job_screen(a, k, j) for k, j in enumerate(doc["jobs"])],
                "errors": doc["errors"],
                "next": "findings(analysis, trace) pages every finding; explain(finding=ID) gives its evidence and fix; "
                "layers / kernels / ops / timeline drill in; document(analysis, pointer) returns any part",
            }
        )

    def _first_screen(self, a: Analysis, i: int, t: dict) -> dict:
        s, c = t.get("summary") or {}, t.get("classification") or {}
        n = _n_steps(t)
        findings = t.get("findings") or []
        primary = c.get("primary")
        first = (
            next((k for k, f in enumerate(findings) if f.get("class") == primary), None) if primary else None
        )
        proj = t.get("projection")
        return {
            "trace": i,
            "pointer": f"/traces/{i}",
            "path": t["path"],
            "rank": t.get("rank"),
            "device": (t.get("metadata") or {}).get("device"),
            "steps": s.get("step_numbers"),
            "analyzed_steps": c.get("analyzed_steps"),
            "avg_step_us": s.get("avg_step_us"),
            "gpu_busy_pct": s.get("gpu_busy_pct"),
            "verdict_text": t.get("verdict_text"),
            "classification": {k: c.get(k) for k in ("primary", "primary_basis", "dominant", "shares")}
            if c
            else None,
            "fix_first": None
            if first is None
            else {**_slim_finding(findings[first], f"t{i}.f{first}", n), "fix": findings[first].get("fix")},
            "findings_total": len(findings),
            "top_findings": [
                _slim_finding(f, f"t{i}.f{k}", n) for k, f in enumerate(findings[:FIRST_FINDINGS])
            ],
            "projection": proj,
            "warnings": t.get("warnings") or [],
        }

    def _job_screen(self, a: Analysis, k: int, j: dict) -> dict:
        sp = j.get("step_period") or {}
        nccl = j.get("nccl") or {}
        return {
            "job": k,
            "pointer": f"/jobs/{k}",
            "path": j["path"],
            "ranks": j.get("ranks"),
            "step_period_us": sp.get("period_us"),
            "step_period_method": sp.get("method"),
            "nccl": {
                key: nccl.get(key)
                for key in ("collectives", "method", "source", "backend", "steps", "transfer_us")
            }
            if nccl
            else None,
            "findings_total": len(j.get("findings") or []),
            "findings": [
                _slim_finding(f, f"j{k}.f{m}", 1) | {"savings_per_step_us": None}
                for m, f in enumerate((j.get("findings") or [])[:FIRST_FINDINGS])
            ],
            "ranks_classification": [
                {
                    key: r.get(key)
                    for key in ("rank", "dominant", "primary", "straggler", "straggler_wait_pct")
                }
                for r in j.get("classification") or []
            ],
            "ranks_step_period": sp.get("ranks"),
        }

    def job(self, path: str, step: int | None = None) -> dict:
        """Analyze a folder of rank traces of one run: step period, straggler, NCCL matching, per-rank classes and
        the job findings; plus each rank's verdict. The `analysis` id works with the other tools (trace = rank's
        index, or findings(job=0))."""
        a = self._run("a", path, step)
        if not a.doc["jobs"]:
            raise Refused(f"{path}: not a job (a folder with two or more rank traces); use analyze")
        return self._answer(
            {
                "analysis": a.id,
                "source": {"api": "traceview.report.analyze", "pointer": "/jobs"},
                "jobs": [self._job_screen(a, k, j) for k, j in enumerate(a.doc["jobs"])],
                "traces": [
                    {
                        "trace": i,
                        "path": t["path"],
                        "rank": t.get("rank"),
                        "verdict_text": t.get("verdict_text"),
                        "avg_step_us": (t.get("summary") or {}).get("avg_step_us"),
                    }
                    for i, t in enumerate(a.doc["traces"])
                ],
                "errors": a.doc["errors"],
            }
        )

    def findings(
        self,
        analysis: str,
        trace: int = 0,
        job: int | None = None,
        rule: str | None = None,
        severity: str | None = None,
        offset: int = 0,
        limit: int = PAGE,
    ) -> dict:
        """One page of the findings of a trace (or of a job with `job`), sorted by savings: id, rule, severity,
        title, savings_us (over the analysed steps) and savings_per_step_us. Filter by `rule` (code or slug) and
        `severity` (at or above: info, warning, error); `next_offset` pages on."""
        a = self._get(analysis)
        if job is not None:
            jobs = a.doc["jobs"]
            if not 0 <= job < len(jobs):
                raise Refused(f"job {job}: the analysis {a.id} has {len(jobs)} job(s)")
            rows, prefix, n, pointer = jobs[job].get("findings") or [], f"j{job}", 1, f"/jobs/{job}/findings"
        else:
            t = self._entry(a, trace)
            rows, prefix, n, pointer = (
                t.get("findings") or [],
                f"t{trace}",
                _n_steps(t),
                f"/traces/{trace}/findings",
            )
        if severity is not None and severity not in SEVERITIES:
            raise Refused(f"severity {severity!r}: one of {', '.join(SEVERITIES)}")
        code = _rule_module(rule).CODE if rule else None
        sel = [
            (k, f)
            for k, f in enumerate(rows)
            if (code is None or f["code"] == code)
            and (severity is None or severity_rank(f["severity"]) >= severity_rank(severity))
        ]
        offset, limit = max(0, offset), max(1, min(limit, 200))
        page = [
            (
                _slim_finding(f, f"{prefix}.f{k}", n)
                | ({"savings_per_step_us": None} if job is not None else {})
            )
            for k, f in sel[offset : offset + limit]
        ]
        ans = self._answer(
            {
                "analysis": a.id,
                "source": {"pointer": pointer},
                "total": len(sel),
                "offset": offset,
                "findings": page,
            }
        )
        got = shown(ans, "findings", len(page))
        ans["next_offset"] = offset + got if offset + got < len(sel) else None
        return ans

    def explain(
        self, rule: str | None = None, finding: str | None = None, analysis: str | None = None
    ) -> dict:
        """Explain a rule (code like TV102 or slug like host-sync: what it detects, the mechanism, how to fix,
        options) or a finding (`finding` id like t0.f2 with its `analysis`: mechanism, the fix for this trace, its
        evidence and the Python source line when the trace has stacks)."""
        if finding:
            return self._explain_finding(finding, analysis)
        if not rule:
            raise Refused(
                "give a rule (code or slug, e.g. TV102 or host-sync) or a finding id with its analysis"
            )
        mod = _rule_module(rule)
        doc = rule_sections(mod)
        return self._answer(
            {
                "rule": mod.NAME,
                "code": mod.CODE,
                "severity": mod.SEVERITY,
                "title": mod.TITLE,
                **{("options_doc" if k == "options" else k): v for k, v in doc.items()},
                "options": {k: o.default for k, o in mod.OPTIONS.items()},
                "resource": f"traceview://rules/{mod.CODE}",
            }
        )

    def _explain_finding(self, finding: str, analysis: str | None) -> dict:
        if not analysis:
            raise Refused("a finding id needs its analysis id (explain(finding=..., analysis=...))")
        a = self._get(analysis)
        m = _FINDING_ID.match(finding.strip())
        if not m:
            raise Refused(
                f"finding {finding!r}: ids look like t0.f3 (trace 0, finding 3) or j0.f0 (job findings)"
            )
        where, idx, k = m.group(1), int(m.group(2)), int(m.group(3))
        if where == "t":
            entry = self._entry(a, idx)
            rows, pointer = entry.get("findings") or [], f"/traces/{idx}/findings/{k}"
        else:
            jobs = a.doc["jobs"]
            if not idx < len(jobs):
                raise Refused(f"job {idx}: the analysis {a.id} has {len(jobs)} job(s)")
            rows, pointer = jobs[idx].get("findings") or [], f"/jobs/{idx}/findings/{k}"
        if not k < len(rows):
            raise Refused(f"finding {finding}: there are {len(rows)} finding(s) there")
        f = rows[k]
        mod = _rule_module(f["code"])
        sec = rule_sections(mod)
        ev = f.get("evidence") or {}
        return self._answer(
            {
                "analysis": a.id,
                "id": finding,
                "source": {"pointer": pointer},
                **{key: f.get(key) for key in SLIM_FINDING},
                "mechanism": sec.get("why_it_is_slow"),
                "fix": f.get("fix"),
                "source_line": ev.get("source") if isinstance(ev.get("source"), str) else None,
                "evidence": ev,
                "rule_doc": f"traceview://rules/{mod.CODE}",
            }
        )

    def layers(
        self, analysis: str, trace: int = 0, top: int = TOP, layer: str | None = None, step: int | None = None
    ) -> dict:
        """GPU time per nn.Module layer: the `top` layers by GPU time with roofline numbers and repeated blocks;
        with `layer` (a layer path from that list) the kernels, ops and findings inside that layer."""
        a = self._get(analysis)
        t = self._entry(a, trace)
        top = max(1, min(top, 100))
        if layer:
            from ..layer_detail import layer_detail

            names = [r["layer"] for r in (t.get("layers") or {}).get("layers") or []]
            if layer not in names:
                raise Refused(
                    f"no layer {layer!r} in trace {trace} ({len(names)} layers; "
                    f"the roots: {', '.join(n for n in names if '/' not in n)[:300] or 'none'})"
                )

            tr = self._trace(a, trace)
            try:
                d = layer_detail(
                    tr, layer, step=step if step is not None else a.step, findings=t.get("findings"), top=top
                )
            except TraceError as e:
                raise Refused(str(e)) from None
            ids = {id(f): k for k, f in enumerate(t.get("findings") or [])}
            d["findings"] = [_slim_finding(f, f"t{trace}.f{ids[id(f)]}", _n_steps(t)) for f in d["findings"]]
            return self._answer(
                {"analysis": a.id, "source": {"api": "traceview.layer_detail.layer_detail"}, **d}
            )
        sec = t.get("layers") or {}
        rows = sorted(sec.get("layers") or [], key=lambda r: (-(r.get("gpu_us") or 0), r["layer"]))
        head = {"attribution": sec.get("source")}  # the section's `source` (modules / ops), not the pointer
        head |= {
            k: sec.get(k)
            for k in (
                "steps",
                "total_gpu_us",
                "attributed_gpu_us",
                "unattributed_gpu_us",
                "coverage_pct",
                "phases_gpu_us",
            )
        }
        return self._answer(
            {
                "analysis": a.id,
                "source": {"pointer": f"/traces/{trace}/layers", "order": "gpu_us, largest first"},
                **head,
                "layers_total": len(rows),
                "layers": [{k: r.get(k) for k in SLIM_LAYER} for r in rows[:top]],
                "repeats": [
                    {
                        k: r.get(k)
                        for k in (
                            "kind",
                            "class",
                            "count",
                            "mean_gpu_us",
                            "min_gpu_us",
                            "max_gpu_us",
                            "cv_pct",
                            "outliers",
                        )
                    }
                    for r in (sec.get("repeats") or [])[:top]
                ],
            }
        )

    def kernels(self, analysis: str, trace: int = 0, top: int = TOP) -> dict:
        """The top GPU kernels by total time (count, total/mean/min/max µs, share, launching op)."""
        return self.table("top_kernels", analysis, trace, top)

    def ops(self, analysis: str, trace: int = 0, top: int = TOP) -> dict:
        """The top ATen ops by GPU time (calls, kernels, GPU µs, CPU µs, share)."""
        return self.table("top_ops", analysis, trace, top)

    def table(self, which: str, analysis: str, trace: int = 0, top: int = TOP) -> dict:
        a = self._get(analysis)
        t = self._entry(a, trace)
        rows = t.get(which) or []
        top = max(1, top)
        ans: dict[str, Any] = {
            "analysis": a.id,
            "source": {"pointer": f"/traces/{trace}/{which}"},
            "rows_in_document": len(rows),
            which: rows[:top],
        }
        if top > len(rows):
            ans["note"] = f"the document holds the top {len(rows)} rows (the analyze default)"
        return self._answer(ans)

    def timeline(
        self,
        analysis: str,
        step: int,
        t0_us: float | None = None,
        t1_us: float | None = None,
        trace: int = 0,
        lane: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> dict:
        """A window [t0_us, t1_us) of ProfilerStep#`step` (µs from the step start; default the whole step) as
        slices (CPU ops and GPU kernels, by start time), with the classifier's segments, syncs, elementwise
        chains and NCCL waits in it. `lane` keeps one lane; `next_offset` pages on."""
        from ..sections.timeline import timeline

        a = self._get(analysis)
        self._entry(a, trace)
        key = (a.id, trace, step)
        with self.lock:
            tl = self.timelines.pop(key, None)
            if tl is None:
                try:
                    tl = timeline(self._trace(a, trace), step)
                except TraceError as e:
                    raise Refused(str(e)) from None
            self.timelines[key] = tl
            while len(self.timelines) > MAX_TIMELINES:
                self.timelines.popitem(last=False)
        lo = 0.0 if t0_us is None else float(t0_us)
        hi = tl["dur_us"] if t1_us is None else float(t1_us)
        if hi <= lo:
            raise Refused(f"empty window: t1_us ({hi}) must be after t0_us ({lo})")

        def inside(r: dict, a_: str = "ts_us", b: str | None = None) -> bool:
            end = r[b] if b else r[a_] + r.get("dur_us", 0.0)
            return r[a_] < hi and end > lo

        items = [r for r in tl["items"] if inside(r) and (lane is None or r["lane"] == lane)]
        items.sort(key=lambda r: (r["ts_us"], r["lane"], -r["dur_us"], r["name"]))
        in_window = {r["lane"] for r in items}
        offset, limit = max(0, offset), max(1, min(limit, 1000))
        page = items[offset : offset + limit]
        ans = self._answer(
            {
                "analysis": a.id,
                "source": {"api": "traceview.sections.timeline.timeline", "times": "µs from the step start"},
                "step": tl["step"],
                "start_us": tl["start_us"],
                "dur_us": tl["dur_us"],
                "window": [lo, hi],
                "class_us": tl["class_us"],
                "counts": tl["counts"],
                "items_in_window": len(items),
                "offset": offset,
                "items": page,
                "segments": [r for r in tl["segments"] if inside(r, "ts_us", "end_us")],
                "syncs": [r for r in tl["syncs"] if inside(r, "ts_us", "end_us")],
                "chains": [r for r in tl["chains"] if inside(r, "ts_us", "end_us")],
                "nccl_waits": [r for r in tl["nccl_waits"] if inside(r, "ts_us", "end_us")],
                "lanes": [r for r in tl["lanes"] if r["id"] in in_window],  # those with slices in the window
            }
        )
        got = shown(ans, "items", len(page))
        ans["next_offset"] = offset + got if offset + got < len(items) else None
        return ans

    def what_if(self, analysis: str, fixes: list[str], trace: int = 0) -> dict:
        """The replay model's step with only the chosen fixes applied together (rule slugs or codes, e.g.
        ["host-sync", "fp32-gemm"]; "fp32-gemm:autocast" for one way to fix where a rule prices several): the
        unprofiled step replayed without and with them and the saving per step, never a sum of the fixes' own
        savings. The same numbers as `traceview analyze PATH --what-if RULES` (JSON projection.what_if)."""
        from ..report import analyze

        a = self._get(analysis)
        self._entry(a, trace)
        if not fixes:
            raise Refused("fixes: name at least one rule (a slug such as host-sync or a code such as TV102)")
        try:
            opts = Options.build(step=a.step, max_bytes=self.max_bytes, what_if=[str(f) for f in fixes],
                                 unprofiled_ms=a.unprofiled_ms)
        except TraceError as e:
            raise Refused(str(e)) from None
        with self.lock:
            rep = analyze([a.files[trace]], opts)
        if rep.errors or not rep.traces:
            raise Refused(rep.errors[0]["error"] if rep.errors else "the trace could not be analyzed")
        wi = (rep.traces[0].get("projection") or {}).get("what_if")
        if wi is None:
            raise Refused(f"trace {trace} has no projection (no GPU activity to replay)")
        return self._answer(
            {
                "analysis": a.id,
                "trace": trace,
                "what_if": wi,
                "source": {
                    "api": "traceview.report.analyze",
                    "document": f"traceview analyze PATH --what-if {','.join(map(str, fixes))} --format json",
                    "pointer": "/traces/0/projection/what_if",
                },
            }
        )

    def diff(self, a: str, b: str) -> dict:
        """Compare two traces or run folders (before A, after B): step time, the class shift per step, layers and
        kernels that changed most, findings appeared / disappeared / changed severity."""
        from ..ci.compare import diff_paths

        pa, pb = self.roots.resolve(a), self.roots.resolve(b)
        with self.lock:
            try:
                self.roots.check_files(pa)
                self.roots.check_files(pb)
                d = diff_paths(str(pa), str(pb), self._options(None))
                did = input_id("d", [pa, pb], "")
            except TraceError as e:
                raise Refused(str(e)) from None
        if not d["pairs"] and not d["errors"]:
            raise Refused("no trace of A matches a trace of B")
        pairs = [
            {
                k: p[k]
                for k in (
                    "key",
                    "a",
                    "b",
                    "rank",
                    "step",
                    "primary",
                    "shift_text",
                    "classes",
                    "kernels_source",
                    "findings",
                )
            }
            | {
                "layers": [r for r in p["layers"] if r["status"] != "same"][:TOP],
                "kernels": [r for r in p["kernels"] if r["status"] != "same"][:TOP],
                "layers_changed": sum(r["status"] != "same" for r in p["layers"]),
                "kernels_changed": sum(r["status"] != "same" for r in p["kernels"]),
            }
            for p in d["pairs"]
        ]
        return self._answer(
            {
                "diff": did,
                "source": {
                    "api": "traceview.ci.diff.diff",
                    "document": "traceview diff A B --format json",
                    "order": "layers/kernels: largest change first, 'same' left out",
                },
                "pairs": pairs,
                "unmatched_a": d["unmatched_a"],
                "unmatched_b": d["unmatched_b"],
                "job_findings": d["job_findings"],
                "errors": d["errors"],
            }
        )

    def document(self, analysis: str, pointer: str = "", offset: int = 0, limit: int = 50) -> dict:
        """Any part of the analysis's JSON document (`traceview analyze --format json`, docs/json-schema.md) by
        JSON pointer, e.g. /traces/0/summary or /traces/0/findings/0/evidence; lists are paged."""
        a = self._get(analysis)
        node: Any = a.doc
        if pointer and not pointer.startswith("/"):
            raise Refused(f"pointer {pointer!r}: a JSON pointer starts with '/' (e.g. /traces/0/summary)")
        for raw in pointer.split("/")[1:] if pointer else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise Refused(f"pointer {pointer!r}: no {part!r} there")
        ans: dict[str, Any] = {"analysis": a.id, "pointer": pointer}
        if isinstance(node, list):
            offset, limit = max(0, offset), max(1, min(limit, 500))
            page = node[offset : offset + limit]
            ans.update(total=len(node), offset=offset, value=page)
            ans = self._answer(ans)
            got = shown(ans, "value", len(page))
            ans["next_offset"] = offset + got if offset + got < len(node) else None
            return ans
        if isinstance(node, dict):
            ans["keys"] = list(node)
        ans["value"] = node
        try:
            return fit(ans, self.budget, reserve=RESERVE)
        except ValueError:  # an object too large even cut: its keys with their sizes, to ask for one of them
            return self._answer(
                {
                    **ans,
                    "value": None,
                    "keys": {k: size(v) for k, v in node.items()},
                    "note": "too large for one answer: the keys with their size in bytes of JSON; "
                    "ask for one of them (pointer + '/KEY')",
                }
            )


# ---- rule documentation -------------------------------------------------------------------------------------
def _rule_module(key: str):
    from traceview.rules import BY_NAME, RULES

    mod = RULES.get(str(key).upper()) or BY_NAME.get(str(key))
    if mod is None:
        raise Refused(f"unknown rule {key!r} (codes: {', '.join(sorted(RULES))})")
    return mod


def rule_sections(mod) -> dict[str, str]:
    """A rule's docstring by section: `what_it_detects`, `why_it_is_slow` (the mechanism), `how_to_fix`,
    `evidence`, `options`, `references`."""
    out: dict[str, str] = {}
    for block in mod.__doc__.split("\n## ")[1:]:
        head, _, body = block.partition("\n")
        out[re.sub(r"\W+", "_", head.strip().lower()).strip("_")] = body.strip()
    return out


def rule_markdown(mod) -> str:
    return f"# {mod.CODE} {mod.NAME}\n\n{mod.__doc__.strip()}\n"


def schema_markdown() -> str:
    """docs/json-schema.md of the source tree (the document the tools read from)."""
    p = Path(__file__).resolve().parents[2] / "docs" / "json-schema.md"
    if not p.is_file():
        raise ResourceError(
            "docs/json-schema.md is not installed with this copy of traceview; see the "
            "project's docs/json-schema.md"
        )
    return p.read_text(encoding="utf-8")


# ---- the MCP server -----------------------------------------------------------------------------------------
INSTRUCTIONS = """traceview analyzes PyTorch profiler (Kineto) traces. Start with analyze(path) (or job(folder) for
the rank files of one run): verdict, what to fix first, top findings with savings per step, projected step time,
and an analysis id. Drill in with findings / explain / layers / kernels / ops / timeline / document, compare two
runs with diff. Every number is read from the `traceview analyze --format json` document (each answer names the
JSON pointer); answers are bounded (`left_out` says what was cut; page with `offset`). Times are µs."""


def _tool(fn):
    """An MCP tool around a Server method: the answer as compact JSON text plus structured content; a refusal
    or any failure as one line (is_error), never a traceback."""
    import functools

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            ans = fn(*args, **kwargs)
        except ToolError:
            raise
        except TraceError as e:
            raise Refused(str(e)) from None
        except Exception as e:  # noqa: BLE001 - one line for the client, never a traceback
            first = (str(e).strip().splitlines() or [""])[0]
            raise Refused(f"internal error ({type(e).__name__}: {first})") from None
        return CallToolResult(content=[TextContent(type="text", text=text(ans))], structured_content=ans)

    return run


class _OneLineErrors(MCPServer):
    """The SDK's server, with its argument-validation errors (pydantic's, several lines) cut to one line."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        from pydantic import ValidationError

        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            cause = e.__cause__
            if isinstance(cause, ValidationError):
                bad = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in cause.errors())
                raise ToolError(f"Error executing tool {name}: bad arguments ({bad})") from None
            lines = str(e).strip().splitlines()
            if len(lines) > 1:
                raise ToolError(lines[0]) from None
            raise


def build(
    roots: list[str | Path], budget_tokens: int, max_bytes: int | None = None
) -> tuple[MCPServer, Server]:
    """The MCP server (tools and resources) over a `Server` confined to `roots`."""
    s = Server(Roots(roots), budget_tokens, max_bytes)
    app = _OneLineErrors("traceview", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    ro = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )

    for name in (
        TOOLS
    ):  # each a Server method: its signature is the tool's input schema, its docstring the description
        app.tool(name=name, annotations=ro, structured_output=False)(_tool(getattr(s, name)))

    @app.resource(
        "traceview://schema",
        name="json-schema",
        mime_type="text/markdown",
        description="The layout of the analyze document every tool reads from (docs/json-schema.md)",
    )
    def schema() -> str:
        return schema_markdown()

    from traceview.rules import RULES

    for code, mod in sorted(RULES.items()):
        app.resource(
            f"traceview://rules/{code}",
            name=f"{code} {mod.NAME}",
            mime_type="text/markdown",
            description=mod.TITLE,
        )(_reader(mod))
    return app, s


def _reader(mod) -> Any:
    """The zero-argument read function of one rule's resource."""

    def read() -> str:
        return rule_markdown(mod)

    return read
