"""`traceview annotate TRACE -o OUT.json.gz`: the trace written back with traceview's analysis as added tracks —
the classifier's class at every instant and each finding as a slice — for Perfetto and chrome://tracing.

The added events follow the Trace Event Format (complete `X` events with `ts`/`dur` in µs on the trace's own
clock, `M` metadata naming a process and its threads); they sit in a process of their own whose id the trace
does not use, one thread per track, so no added slice overlaps another on its thread (Perfetto nests slices
of one thread and would mis-nest overlapping ones). Nothing of the original events changes.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ..errors import TraceError
from ..ingest.inputs import DEFAULT_MAX_BYTES, read_input
from ..options import Options

TRACK_PROCESS = "traceview analysis"
CLASS_THREAD = "traceview: bottleneck class"
CLASS_CAT = "traceview_class"
FINDING_CAT = "traceview_finding"


def _free_pid(events: list) -> int:
    """A process id no event of the trace uses (integer pids; string ones cannot collide with it)."""
    used = {e.get("pid") for e in events if isinstance(e, dict)}
    pid = 2_000_000_000
    while pid in used:
        pid += 1
    return pid


def _meta(pid: int, tid: int, key: str, name: str) -> dict:
    return {"ph": "M", "name": key, "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}}


def class_events(part: pl.DataFrame | None, t0_us: float, pid: int, tid: int = 1) -> list[dict]:
    """One `X` slice per run of one class: the classifier's segments [step, ts, end, cls] (ns from the trace's
    start), neighbours of one class in one step merged."""
    if part is None or part.height == 0:
        return []
    runs = (
        part.sort("ts")
        .with_columns(
            _new=(pl.col("cls") != pl.col("cls").shift(1))
            | (pl.col("step") != pl.col("step").shift(1))
            | (pl.col("ts") != pl.col("end").shift(1))
        )
        .with_columns(_run=pl.col("_new").fill_null(True).cum_sum())
        .group_by("_run", maintain_order=True)
        .agg(pl.col("step").first(), pl.col("cls").first(), pl.col("ts").min(), pl.col("end").max())
    )
    return [
        {
            "ph": "X",
            "cat": CLASS_CAT,
            "name": cls,
            "pid": pid,
            "tid": tid,
            **_span(ts / 1000, end / 1000, t0_us),
            "args": {"step": step, "class": cls},
        }
        for step, cls, ts, end in runs.select("step", "cls", "ts", "end").iter_rows()
    ]


def _span(lo_us: float, hi_us: float, t0_us: float) -> dict[str, float]:
    """`ts` and `dur` on the trace's clock, both ends rounded alike (µs since the epoch-like origin of Kineto
    leave a float about 1 ns of precision: a slice's end and the next one's start must round together)."""
    ts, end = round(lo_us + t0_us, 3), round(hi_us + t0_us, 3)
    return {"ts": ts, "dur": round(end - ts, 3)}


def finding_range_us(finding: dict, steps: list[dict]) -> tuple[float, float] | None:
    """[start, end) in µs from the trace's start of a finding: the span of the analysed steps it names (all of
    them when it names none); None without steps."""
    named = set(finding.get("steps") or [])
    rows = [s for s in steps if not named or s["step"] in named] or steps
    if not rows:
        return None
    return min(s["start_us"] for s in rows), max(s["end_us"] for s in rows)


def finding_events(
    findings: list[dict], steps: list[dict], t0_us: float, pid: int, first_tid: int = 2
) -> list[dict]:
    """Each finding as one slice on a thread of its own (findings overlap in time): rule, severity, saving, fix
    in its args."""
    out: list[dict] = []
    for k, f in enumerate(findings):
        span = finding_range_us(f, steps)
        if span is None:
            continue
        tid = first_tid + k
        name = f"{f['code']} {f['rule']}"
        out.append(_meta(pid, tid, "thread_name", f"traceview finding: {name} ({f['severity']})"))
        out.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "ts": 0,
                "args": {"sort_index": tid},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": FINDING_CAT,
                "name": name,
                "pid": pid,
                "tid": tid,
                **_span(span[0], span[1], t0_us),
                "args": {
                    "rule": f["rule"],
                    "code": f["code"],
                    "severity": f["severity"],
                    "title": f["title"],
                    "savings_us": f.get("savings_us"),
                    "savings_pct": f.get("savings_pct"),
                    "steps": f.get("steps") or [],
                    "fix": f.get("fix"),
                },
            }
        )
    return out


def annotated(
    path: str | Path, options: Options | None = None, max_bytes: int = DEFAULT_MAX_BYTES, trace: Any = None
) -> tuple[bytes, dict[str, Any]]:
    """(the JSON of `path` with the added tracks, {class_slices, finding_slices, pid}). `trace`: the loaded
    trace when the caller holds it (the app)."""
    from ..ingest.loader import load_file
    from ..report import analyze_trace_parts

    options = options or Options()
    path = Path(path)
    trace = trace if trace is not None else load_file(path, max_bytes=max_bytes)
    entry, _, part = analyze_trace_parts(trace, options)
    data, _ = read_input(path, max_bytes)
    try:
        doc = msgspec.json.decode(data)  # plain JSON values: nothing is executed
    except msgspec.DecodeError as e:
        raise TraceError(f"{path}: not valid JSON ({e})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents array")
    pid = _free_pid(events)
    t0 = trace.meta.t0_us
    added = [
        _meta(pid, 0, "process_name", TRACK_PROCESS),
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": -1}},
        _meta(pid, 1, "thread_name", CLASS_THREAD),
    ]
    classes = class_events(part, t0, pid)
    found = finding_events(entry["findings"], entry["steps"], t0, pid)
    events.extend(added + classes + found)
    return msgspec.json.encode(doc), {
        "pid": pid,
        "class_slices": len(classes),
        "finding_slices": sum(1 for e in found if e["ph"] == "X"),
    }


def annotate(
    path: str | Path, out: str | Path, options: Options | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[str, Any]:
    """Write `path` with the added tracks to `out` (gzip when it ends in .gz). Returns {class_slices,
    finding_slices, pid} of what was added."""
    blob, info = annotated(path, options, max_bytes)
    out = Path(out)
    try:
        if out.name.endswith(".gz"):
            with gzip.open(out, "wb", compresslevel=6) as fh:
                fh.write(blob)
        else:
            out.write_bytes(blob)
    except OSError as e:
        raise TraceError(f"{out}: {e.strerror or e}") from None
    return info


def add_parser(sub: Any) -> None:
    """`traceview annotate` (registered by cli.make_parser)."""
    from .rules import add_rule_options

    a = sub.add_parser(
        "annotate",
        help="write the trace back with traceview's classes and findings as added tracks",
        description="Write TRACE with added tracks (the bottleneck class per instant, each finding as "
        "a slice with rule, severity, saving and fix in its args) that Perfetto "
        "(ui.perfetto.dev) and chrome://tracing open as is.",
    )
    a.add_argument("trace", help="a trace file (.json / .json.gz)")
    a.add_argument(
        "-o", "--output", required=True, help="the annotated trace (.json, or .json.gz to gzip it)"
    )
    a.add_argument("--step", type=int, default=None, help="analyze only ProfilerStep#N")
    add_rule_options(a)
    a.set_defaults(func=_cmd)


def _cmd(args: Any) -> int:
    import sys

    from .rules import build_options

    got = annotate(args.trace, args.output, build_options(args))
    print(
        f"traceview: wrote {args.output}: {got['class_slices']} class slices, {got['finding_slices']} finding "
        f"slices (process '{TRACK_PROCESS}', pid {got['pid']}); open it in https://ui.perfetto.dev",
        file=sys.stderr,
    )
    return 0
