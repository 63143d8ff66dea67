"""CLI of the CI gates: `traceview diff A B` and `traceview batch PATH…` (baselines, Ray)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import TraceError
from ..options import Options

DIFF_FORMATS = ("text", "json", "markdown")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from .rules import add_rule_options

    d = sub.add_parser("diff", help="compare two traces or run folders: step time, class shift, layers, kernels, findings")
    d.add_argument("a", help="the before trace file or run folder")
    d.add_argument("b", help="the after trace file or run folder")
    d.add_argument("--format", choices=DIFF_FORMATS, default="text",
                   help="text: terminal tables (default); json: the diff document; markdown: a PR comment")
    d.add_argument("--step", type=int, default=None, help="compare only ProfilerStep#N")
    d.add_argument("-o", "--output", default=None, help="write the diff to a file instead of stdout")
    d.add_argument("--config", metavar="FILE", help="TOML file with [tool.traceview] settings")
    d.set_defaults(func=cmd_diff)

    b = sub.add_parser("batch", help="analyze many traces or run folders: one summary row each, CI gates")
    b.add_argument("paths", nargs="+", help="trace files or directories (searched recursively)")
    b.add_argument("--jobs", "-j", type=int, default=None, help="parallel jobs (default: all cores)")
    b.add_argument("--step", type=int, default=None, help="analyze only ProfilerStep#N")
    b.add_argument("--out", action="append", default=[], metavar="FILE",
                   help="write the summary to FILE.json, .csv, .parquet or .md (repeatable)")
    b.add_argument("--sarif", metavar="FILE", help="write every finding as SARIF 2.1.0 (code scanning)")
    b.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    b.add_argument("--save-baseline", metavar="FILE", help="write a baseline of these traces")
    b.add_argument("--baseline", metavar="FILE", help="compare with a baseline; exit 1 on a regression")
    b.add_argument("--max-regression", action="append", metavar="PCT|METRIC=PCT",
                   help="allowed growth in %% of the baseline step (default 5); METRIC is step_time or a class")
    b.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local process pool (default) or a Ray cluster")
    b.add_argument("--address", default=None, help="Ray address ('auto' or host:port; default: start a local Ray)")
    add_rule_options(b)
    b.set_defaults(func=cmd_batch)


# ---- diff ---------------------------------------------------------------------------------------------------
def _side(path: str, options: Options | None) -> tuple[dict, list[str], dict[str, list[dict]]]:
    """One side of a diff: its merged analyze document, the keys of its traces, their full kernel tables."""
    from ..ci.diff import kernel_rows
    from ..ci.digest import file_label, job_keys
    from ..ci.discover import discover
    from ..ci.jobrun import analyze_job

    disc = discover([path])
    if disc.errors:
        raise TraceError(disc.errors[0]["error"])
    p = Path(path)
    root = p.name if p.is_dir() else file_label(p.name)
    doc: dict = {"traces": [], "jobs": [], "errors": []}
    keys: list[str] = []
    kernels: dict[str, list[dict]] = {}
    for spec in disc.jobs:
        keep: dict = {}
        d = analyze_job(spec, options, keep)
        for k in ("traces", "jobs", "errors"):
            doc[k] += d[k]
        keys += job_keys(d, "" if spec.label == root else spec.label)
        for t in d["traces"]:
            if t["path"] in keep:
                kernels[t["path"]] = kernel_rows(keep[t["path"]], t)
    return doc, keys, kernels


def diff_paths(a: str, b: str, options: Options | None = None) -> dict:
    """The diff document of two traces or run folders (with the full kernel tables)."""
    from ..ci.diff import diff

    doc_a, keys_a, ka = _side(a, options)
    doc_b, keys_b, kb = _side(b, options)
    return diff(doc_a, doc_b, keys_a, keys_b, {**ka, **kb})


def cmd_diff(args: argparse.Namespace) -> int:
    from ..ci.diff_render import markdown, text
    from .rules import build_options

    out = diff_paths(args.a, args.b, build_options(args))
    fh = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        if args.format == "json":
            fh.write(json.dumps(out, indent=1) + "\n")
        else:
            (markdown if args.format == "markdown" else text)(out, fh)
    finally:
        if args.output:
            fh.close()
    for e in out["errors"]:
        print(f"traceview: error: {e['error']}", file=sys.stderr)
    if not out["pairs"] and not out["errors"]:
        print("traceview: error: no trace of A matches a trace of B", file=sys.stderr)
        return 2
    return 2 if out["errors"] else 0


# ---- batch --------------------------------------------------------------------------------------------------
def _progress(total: int) -> tuple[Callable[[dict], None] | None, Callable[[], None]]:
    """A progress bar on stderr when it is a terminal; nothing when piped (CI logs)."""
    if not sys.stderr.isatty() or total < 1:
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)
    task = prog.add_task("analyzing", total=total)
    prog.start()

    def tick(res: dict) -> None:
        prog.update(task, advance=1, description=f"analyzed {res['spec']['label']}")

    return tick, prog.stop


def _write_doc(path: str, fmt: str, doc: dict) -> None:
    import importlib

    mod = importlib.import_module(f"..formatters.{fmt}", __package__)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            mod.render(doc, fh)
    except OSError as e:
        raise TraceError(f"--{fmt} {path}: {e.strerror or e}") from None


def batch_exit_code(rows: list[dict], regressed: bool, exit_zero: bool) -> int:
    """2 when an input failed; else 1 for findings at or above --fail-on or a baseline regression (unless
    --exit-zero); else 0."""
    if any(r["status"] == "failed" for r in rows):
        return 2
    if exit_zero:
        return 0
    return 1 if regressed or any(r["status"] == "findings" for r in rows) else 0


def cmd_batch(args: argparse.Namespace) -> int:
    from .. import config
    from ..ci import baseline, batch, batch_out
    from ..ci.discover import discover
    from .rules import build_options

    for p in args.out:
        if Path(p).suffix.lower() not in batch_out.OUT_FORMATS:
            raise TraceError(f"--out {p}: unknown format (use FILE.json, FILE.csv, FILE.parquet or FILE.md)")
    if args.jobs is not None and args.jobs < 1:
        raise TraceError("--jobs must be 1 or more")
    options = build_options(args)  # also resolves --fail-on from the config
    th = baseline.thresholds(config.load(args.config)["baseline"], args.max_regression)
    base = baseline.load(args.baseline) if args.baseline else None
    disc = discover(args.paths)
    if disc.skipped:
        names = ", ".join(Path(s["path"]).name for s in disc.skipped[:5]) + (" …" if len(disc.skipped) > 5 else "")
        print(f"traceview: skipped {len(disc.skipped)} JSON file(s) that are not traces: {names}", file=sys.stderr)
    tick, stop = _progress(len(disc.jobs))
    try:
        results = batch.run(disc.jobs, options, args.jobs, args.engine, args.address, on_done=tick)
    finally:
        stop()
    rows = [batch.row(r, args.fail_on) for r in results] + [batch.failed_row(e["path"], e["error"]) for e in disc.errors]
    digests = [d for r in results for d in r["digests"]]
    cmp = None
    if base is not None:
        cmp = baseline.compare(base, digests, th)
        batch.attach_baseline(rows, cmp)
    if args.save_baseline:
        baseline.save(digests, args.save_baseline, args.step)
    code = batch_exit_code(rows, bool(cmp and cmp["regressed"]), args.exit_zero)
    doc = batch_out.document(rows, digests, disc.skipped, cmp, code)
    batch_out.terminal(doc, sys.stdout)
    for p in args.out:
        batch_out.write(p, rows, doc)
    if args.sarif or args.junit:
        merged = batch.merged_doc(results, disc.errors)
        if args.sarif:
            _write_doc(args.sarif, "sarif", merged)
        if args.junit:
            _write_doc(args.junit, "junit", merged)
    for r in rows:
        if r["error"]:
            print(f"traceview: error: {r['error']}", file=sys.stderr)
    if cmp:
        for t in cmp["traces"]:
            for c in t["checks"]:
                if c["regressed"]:
                    print(f"traceview: regression: {t['key']}: {c['metric']} {c['delta_pct']:+.1f} % of the baseline "
                          f"step ({c['base_us'] / 1000:,.3f} → {c['now_us'] / 1000:,.3f} ms)", file=sys.stderr)
            for f in t["new_findings"]:
                print(f"traceview: regression: {t['key']}: new {f['severity']} finding {f['code']} {f['title']}",
                      file=sys.stderr)
        if cmp["missing"]:
            print(f"traceview: baseline entries without a current trace: {', '.join(cmp['missing'])}", file=sys.stderr)
    return code
