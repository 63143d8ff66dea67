"""CLI of the run history: `traceview history add | check | show` (store in history.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO

from ..ci.history import DEFAULT_DB, GATED, TREND_METRICS, TrendSettings
from ..errors import TraceError

FORMATS = ("text", "json", "markdown")
MARKER = "<!-- traceview-history -->"  # lets a workflow find its PR comment and update it in place
LABEL_ORDER = {"regression": 0, "suspicious": 1, "insufficient_data": 2, "ok": 3}


def add_parsers(sub: argparse._SubParsersAction) -> None:
    h = sub.add_parser(
        "history", help="runs over time in a DuckDB file: add batch results, check trends, show"
    )
    hs = h.add_subparsers(dest="history_command", metavar="{add,check,show}", required=True)

    def db(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--db", default=DEFAULT_DB, metavar="PATH", help=f"history database (default {DEFAULT_DB})"
        )

    a = hs.add_parser("add", help="store a run: the rows of `traceview batch --out rows.json`")
    db(a)
    a.add_argument("rows", help="a `traceview batch --out FILE.json` document")
    a.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="commit=, branch=, run=, date= (ISO) or any other; default: the CI's environment",
    )
    a.set_defaults(func=cmd_add)

    for name, what in (
        (
            "check",
            "label each job's metrics: regression / suspicious / insufficient_data / ok; "
            "exit 1 on a step-time regression",
        ),
        ("show", "a table of each job's recent runs and trend (--format markdown: a PR comment)"),
    ):
        c = hs.add_parser(name, help=what)
        db(c)
        c.add_argument(
            "--baseline-window", type=int, default=10, metavar="N", help="baseline points (default 10)"
        )
        c.add_argument("--recent-window", type=int, default=3, metavar="N", help="recent points (default 3)")
        c.add_argument(
            "--min-baseline",
            type=int,
            default=3,
            metavar="N",
            help="fewer baseline points: insufficient_data (default 3)",
        )
        c.add_argument(
            "--max-regression",
            type=float,
            default=5.0,
            metavar="PCT",
            help="allowed growth in %% of the baseline median step (default 5)",
        )
        c.add_argument(
            "--noise-sigmas", type=float, default=2.0, metavar="K", help="noise multiple (default 2)"
        )
        c.add_argument(
            "--metric",
            action="append",
            default=None,
            choices=TREND_METRICS,
            help=f"metrics to check (repeatable; default all: {GATED} and <class>_ms)",
        )
        c.add_argument("--branch", default=None, help="only runs of this branch")
        c.add_argument("--gate-classes", action="store_true", help="exit 1 on a class regression too")
        c.add_argument("--format", choices=FORMATS, default="text", help="text (a table) or markdown (a PR comment)")
        c.add_argument("-o", "--output", default=None, help="write to a file instead of stdout")
        c.add_argument(
            "--width",
            type=int,
            default=None,
            metavar="COLS",
            help="text: line width (default: the terminal's; $COLUMNS or 100 when piped)",
        )
        c.set_defaults(func=cmd_check if name == "check" else cmd_show)


def _labels(items: list[str]) -> dict[str, str]:
    out = {}
    for s in items:
        k, sep, v = s.partition("=")
        if not sep or not k.strip():
            raise TraceError(f"--label {s}: expected KEY=VALUE")
        out[k.strip()] = v.strip()
    return out


def cmd_add(args: argparse.Namespace) -> int:
    from ..ci import history

    rows = history.read_rows(args.rows)
    labels = history.ci_labels(_labels(args.label))
    run_id = history.add(args.db, rows, labels, source=args.rows)
    where = ", ".join(f"{k} {labels[k]}" for k in history.LABELS if labels.get(k))
    print(
        f"traceview: history {args.db}: run {run_id} added ({len(rows)} job(s){'; ' + where if where else ''})",
        file=sys.stderr,
    )
    return 0


def _settings(args: argparse.Namespace) -> TrendSettings:
    for k in ("baseline_window", "recent_window", "min_baseline"):
        if getattr(args, k) < 1:
            raise TraceError(f"--{k.replace('_', '-')} must be 1 or more")
    if args.recent_window < 2:
        raise TraceError("--recent-window must be 2 or more (a regression needs two points)")
    if args.max_regression < 0 or args.noise_sigmas < 0:
        raise TraceError("--max-regression and --noise-sigmas must be >= 0")
    return TrendSettings(
        baseline=args.baseline_window,
        recent=args.recent_window,
        min_baseline=args.min_baseline,
        max_regression_pct=args.max_regression,
        noise_sigmas=args.noise_sigmas,
        gate_classes=args.gate_classes,
    )


def _result(args: argparse.Namespace) -> dict:
    from ..ci import history

    return history.check(args.db, _settings(args), args.metric, args.branch)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} %"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.3f}"


def _interesting(res: dict) -> list[dict]:
    """Series worth a line: every step series, and the class series labelled regression or suspicious."""
    rows = [s for s in res["series"] if s["metric"] == GATED or s["label"] in ("regression", "suspicious")]
    return sorted(rows, key=lambda s: (LABEL_ORDER[s["label"]], s["job"], s["metric"] != GATED, s["metric"]))


def _check_rows(res: dict) -> list[list[str]]:
    return [
        [
            s["job"],
            s["metric"],
            s["label"] + ("" if s["gated"] or s["label"] == "ok" else " (not gated)"),
            _ms(s["ref"]),
            _ms(s["last"]),
            _pct(s.get("delta_pct")),
            f"{s['baseline_n']}+{s['recent_n']}",
        ]
        for s in _interesting(res)
    ]


CHECK_COLS = [
    ("job", "left"),
    ("metric", "left"),
    ("label", "left"),
    ("baseline ms", "right"),
    ("last ms", "right"),
    ("change", "right"),
    ("points", "right", 1),
]


def _show_rows(res: dict, last: int = 6) -> list[list[str]]:
    by_job: dict[str, list[dict]] = {}
    for s in res["series"]:
        by_job.setdefault(s["job"], []).append(s)
    out = []
    for job, ss in sorted(by_job.items()):
        step = next((s for s in ss if s["metric"] == GATED), None)
        flagged = (
            ", ".join(
                f"{s['metric']} {s['label']}"
                for s in ss
                if s["metric"] != GATED and s["label"] in ("regression", "suspicious")
            )
            or "-"
        )
        recent = " ".join(_ms(p["value"]) for p in step["points"][-last:]) if step else "-"
        out.append(
            [
                job,
                str(len(step["points"])) if step else "0",
                step["label"] if step else "-",
                _ms(step["ref"]) if step else "-",
                _ms(step["last"]) if step else "-",
                _pct(step.get("delta_pct")) if step else "-",
                recent,
                flagged,
            ]
        )
    return out


SHOW_COLS = [
    ("job", "left"),
    ("runs", "right", 2),
    ("step trend", "left"),
    ("baseline ms", "right"),
    ("last ms", "right"),
    ("change", "right"),
    ("recent step ms", "left", 1),
    ("classes", "left", 3),
]


def _markdown(res: dict, title: str, cols: list[tuple], rows: list[list[str]], out: IO[str]) -> None:
    from ..safe_text import md_text as _cell

    w = out.write
    w(f"{MARKER}\n## traceview history: {title}\n\n")
    st = res["settings"]
    w(
        f"{res['runs']} run(s) in the history; recent window {st['recent']} vs baseline window {st['baseline']} "
        f"(at least {st['min_baseline']}); a point violates beyond {st['max_regression_pct']:g} % of the baseline "
        f"median and {st['noise_sigmas']:g}× its noise; `regression` = the last two points violate.\n\n"
    )
    w("| " + " | ".join(c[0] for c in cols) + " |\n")
    w("|" + "|".join("---:" if c[1] == "right" else "---" for c in cols) + "|\n")
    for r in rows:
        w("| " + " | ".join(_cell(v) for v in r) + " |\n")
    w("\n")


def _write(args: argparse.Namespace, res: dict, title: str, cols: list[tuple], rows: list[list[str]]) -> None:
    from ..formatters import term

    fh = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        if args.format == "json":
            fh.write(json.dumps(res, indent=1, default=str) + "\n")
        elif args.format == "markdown":
            _markdown(res, title, cols, rows, fh)
        else:
            con = term.console(fh, args.width)
            term.rule(con, f"traceview history: {title} ({res['runs']} runs)")
            con.print(term.table(con, None, cols, rows) if rows else "no runs stored yet")
    finally:
        if args.output:
            fh.close()


def cmd_check(args: argparse.Namespace) -> int:
    res = _result(args)
    _write(args, res, "check", CHECK_COLS, _check_rows(res))
    for s in res["series"]:
        if s["label"] == "regression" and s["gated"]:
            print(
                f"traceview: regression: {s['job']}: {s['metric']} {_ms(s['ref'])} → {_ms(s['last'])} "
                f"({_pct(s['delta_pct'])}; the last {len(s['violations'])} run(s) beyond the threshold)",
                file=sys.stderr,
            )
    return 1 if res["regressed"] else 0


def cmd_show(args: argparse.Namespace) -> int:
    res = _result(args)
    _write(args, res, "show", SHOW_COLS, _show_rows(res))
    return 0
