"""The run history: CI runs' key numbers per job in an embedded DuckDB file, and their trend checks.

One `add` stores one run (a `traceview batch --out rows.json` document) with its labels: commit, branch, CI run
id and date (from the CI's environment variables unless given). Per job it keeps the status and, as points,
the step time (ms, with its per-step spread and step count), each class's time per step (`<class>_ms` = share x
step) and the error/warning counts.

`check` compares, per job and metric, the **recent window** (the last `recent` points) with the **baseline
window** (the `baseline` points before it), as PyTorch's benchmark dashboards do. A point *violates* when it
exceeds the baseline window's median by more than both `max-regression` % of the baseline median step and
`noise-sigmas` times the noise, sqrt(sd_window² + sd_point² / n_point) (the run-to-run spread of the baseline
window and the point's own standard error from its per-step spread). Labels: `regression` when the last two
or more points violate, `suspicious` when a recent point violates but not the last two, `insufficient_data`
when the baseline window has fewer than `min_baseline` points or the recent window fewer than 2, else `ok`.
Only the step time gates (exit 1), classes where asked, as in the baseline gate (baseline.py).

Parallel CI jobs may `add` at once: writers take an exclusive lock on a `<db>.lock` file beside the database
(readers a shared one), and DuckDB's own file lock is retried, so no row is lost.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..analyses.classify import CLASSES
from ..errors import TraceError
from .jsonfile import read_json

KIND = "traceview-history"
SCHEMA_VERSION = 1
DEFAULT_DB = ".traceview/history.duckdb"
LOCK_TIMEOUT_S = 120.0
LABELS = ("commit", "branch", "run", "date")
# CI environment variables per label, first set wins (GitHub Actions, GitLab CI, Buildkite, Jenkins)
CI_ENV = {
    "commit": ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT"),
    "branch": ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH", "GIT_BRANCH"),
    "run": ("GITHUB_RUN_ID", "CI_PIPELINE_ID", "BUILDKITE_BUILD_ID", "BUILD_ID"),
    "date": ("CI_PIPELINE_CREATED_AT",),
}
GATED = "step_ms"
TREND_METRICS = [GATED, *(f"{c}_ms" for c in CLASSES)]

_DDL = [
    "CREATE TABLE tv_meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE TABLE runs (run_id BIGINT PRIMARY KEY, run_date TIMESTAMP NOT NULL, added_at TIMESTAMP NOT NULL, "
    "commit_sha VARCHAR, branch VARCHAR, ci_run VARCHAR, labels VARCHAR NOT NULL, source VARCHAR)",
    "CREATE TABLE jobs (run_id BIGINT NOT NULL, job VARCHAR NOT NULL, status VARCHAR, primary_class VARCHAR, "
    "error VARCHAR)",
    "CREATE TABLE points (run_id BIGINT NOT NULL, job VARCHAR NOT NULL, metric VARCHAR NOT NULL, "
    "value DOUBLE NOT NULL, sd DOUBLE, n INTEGER)",
]


@dataclass
class TrendSettings:
    baseline: int = 10  # points in the baseline window
    recent: int = 3  # points in the recent window
    min_baseline: int = 3  # fewer baseline points: insufficient_data
    max_regression_pct: float = 5.0
    noise_sigmas: float = 2.0
    gate_classes: bool = False


def _duckdb():
    try:
        import duckdb
    except ImportError:
        raise TraceError("traceview history needs DuckDB: pip install 'traceview[history]'") from None
    return duckdb


@contextmanager
def _file_lock(db: Path, exclusive: bool) -> Iterator[None]:
    """Serialize writers (and keep readers off a half-written file) across processes."""
    try:
        import fcntl
    except ImportError:  # not POSIX: DuckDB's own file lock, retried in _connect, is all there is
        yield
        return
    with open(db.with_name(db.name + ".lock"), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _connect(db: Path, read_only: bool):
    duckdb = _duckdb()
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    while True:
        try:
            return duckdb.connect(str(db), read_only=read_only)
        except duckdb.IOException as e:
            msg = str(e)
            if "lock" in msg.lower() and time.monotonic() < deadline:  # another process holds the file
                time.sleep(0.05)
                continue
            raise TraceError(f"history {db}: not a DuckDB database ({_first_line(msg)})") from None
        except duckdb.Error as e:
            raise TraceError(f"history {db}: not a DuckDB database ({_first_line(str(e))})") from None


def _first_line(s: str) -> str:
    return (s.strip().splitlines() or [""])[0][:200]


def _check_schema(con, db: Path, create: bool) -> None:
    """A traceview history database, or a new empty file to set up; anything else is one clear error."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not tables and create:
        for stmt in _DDL:
            con.execute(stmt)
        con.executemany(
            "INSERT INTO tv_meta VALUES (?, ?)", [("kind", KIND), ("schema_version", str(SCHEMA_VERSION))]
        )
        return
    meta = dict(con.execute("SELECT key, value FROM tv_meta").fetchall()) if "tv_meta" in tables else {}
    if meta.get("kind") != KIND or not {"runs", "jobs", "points"} <= tables:
        raise TraceError(
            f"history {db}: a DuckDB database, but not a traceview history (tables: "
            f"{', '.join(sorted(tables)) or 'none'})"
        )
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        raise TraceError(
            f"history {db}: schema_version {meta.get('schema_version')} (this traceview reads "
            f"{SCHEMA_VERSION})"
        )


def _magic(db: Path) -> bytes:
    """DuckDB's file header: an 8-byte checksum, then the magic `DUCK`."""
    with open(db, "rb") as fh:
        return fh.read(12)[8:12]


@contextmanager
def open_db(path: str | Path, write: bool) -> Iterator[Any]:
    """A connection to the history at `path`: created on the first write, locked against other processes."""
    db = Path(path)
    if not write and not db.is_file():
        raise TraceError(f"history {db}: no such file (store runs with `traceview history add`)")
    if write:
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TraceError(f"history {db}: {e.strerror or e}") from None
    if db.is_file() and db.stat().st_size and _magic(db) != b"DUCK":
        raise TraceError(f"history {db}: not a DuckDB database (no DuckDB header)")
    with _file_lock(db, exclusive=write):
        con = _connect(db, read_only=not write)
        try:
            try:
                _check_schema(con, db, create=write)
            except _duckdb().Error as e:
                raise TraceError(f"history {db}: unreadable ({_first_line(str(e))})") from None
            yield con
        finally:
            con.close()


def ci_labels(given: dict[str, str], env: dict[str, str] | None = None) -> dict[str, str]:
    """The run's labels: those given (`--label k=v`) win over the CI's environment variables."""
    env = dict(os.environ) if env is None else env
    out = dict(given)
    for k, names in CI_ENV.items():
        if k not in out:
            v = next((env[n] for n in names if env.get(n)), None)
            if v:
                out[k] = v
    return out


def _date(v: str | None) -> datetime:
    if not v:
        return datetime.now(UTC).replace(tzinfo=None)
    try:
        d = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise TraceError(f"--label date={v}: not an ISO date (2026-01-31 or 2026-01-31T12:00:00Z)") from None
    return d.astimezone(UTC).replace(tzinfo=None) if d.tzinfo else d


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a `traceview batch --out rows.json` document."""
    p = Path(path)
    doc = read_json(p, "batch rows")
    if (
        not isinstance(doc, dict)
        or doc.get("kind") != "traceview-batch"
        or not isinstance(doc.get("rows"), list)
    ):
        raise TraceError(
            f"{p}: not a traceview batch document (write one with `traceview batch … --out rows.json`)"
        )
    return doc["rows"]


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _points(row: dict) -> list[tuple[str, float, float | None, int | None]]:
    """(metric, value, sd, n) of one batch row: step time, class times per step, finding counts."""
    step = _num(row.get("step_ms"))
    out: list[tuple[str, float, float | None, int | None]] = []
    steps = row.get("steps") if isinstance(row.get("steps"), int) else None
    if step is not None:
        out.append((GATED, step, _num(row.get("step_sd_ms")), steps))
        shares = row.get("shares") if isinstance(row.get("shares"), dict) else {}
        for c in CLASSES:
            s = _num(shares.get(c))
            if s is not None:
                out.append((f"{c}_ms", s / 100 * step, None, steps))
    counts = row.get("findings") if isinstance(row.get("findings"), dict) else {}
    for s in ("error", "warning"):
        v = _num(counts.get(s))
        if v is not None:
            out.append((f"n_{s}", v, None, None))
    return out


def add(db: str | Path, rows: list[dict], labels: dict[str, str], source: str | None = None) -> int:
    """Store one run; returns its run id."""
    jobs, points = [], []
    for r in rows:
        if not isinstance(r, dict) or not isinstance(r.get("input"), str):
            raise TraceError("a batch row without an `input` label")
        jobs.append((r["input"], *(_text(r.get(k)) for k in ("status", "primary", "error"))))
        points += [(r["input"], *p) for p in _points(r)]
    run_date = _date(labels.get("date"))
    with open_db(db, write=True) as con:
        con.execute("BEGIN TRANSACTION")
        run_id = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchone()[0]
        con.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                run_date,
                datetime.now(UTC).replace(tzinfo=None),
                labels.get("commit"),
                labels.get("branch"),
                labels.get("run"),
                json.dumps(labels, sort_keys=True),
                source,
            ],
        )
        if jobs:
            con.executemany("INSERT INTO jobs VALUES (?, ?, ?, ?, ?)", [(run_id, *j) for j in jobs])
        if points:
            con.executemany("INSERT INTO points VALUES (?, ?, ?, ?, ?, ?)", [(run_id, *p) for p in points])
        con.execute("COMMIT")
    return int(run_id)


def series(
    con, metrics: list[str], last: int, branch: str | None = None
) -> dict[tuple[str, str], list[dict]]:
    """The last `last` points of each (job, metric), oldest first (runs ordered by date, then id)."""
    q = f"""
        SELECT p.job, p.metric, p.value, p.sd, p.n, r.run_id, r.run_date, r.commit_sha, r.branch
        FROM points p JOIN runs r USING (run_id)
        WHERE p.metric IN ({", ".join("?" for _ in metrics)}) {"AND r.branch = ?" if branch else ""}
        QUALIFY row_number() OVER (PARTITION BY p.job, p.metric ORDER BY r.run_date DESC, r.run_id DESC) <= ?
        ORDER BY p.job, p.metric, r.run_date, r.run_id"""
    params: list[Any] = [*metrics, *([branch] if branch else []), last]
    out: dict[tuple[str, str], list[dict]] = {}
    for job, metric, value, sd, n, run_id, date, commit, br in con.execute(q, params).fetchall():
        out.setdefault((job, metric), []).append(
            {
                "value": value,
                "sd": sd,
                "n": n,
                "run_id": run_id,
                "date": date.isoformat(),
                "commit": commit,
                "branch": br,
            }
        )
    return out


def trend(points: list[dict], ref_step: float | None, st: TrendSettings) -> dict:
    """The label of one series (oldest first); `ref_step` is the baseline window's median step (the scale of
    the % threshold for class metrics), None for the step itself."""
    recent = points[-st.recent :]
    base = points[: len(points) - len(recent)][-st.baseline :]
    out: dict[str, Any] = {
        "baseline_n": len(base),
        "recent_n": len(recent),
        "violations": [],
        "ref": None,
        "allowed": None,
        "last": points[-1]["value"] if points else None,
    }
    if len(base) < st.min_baseline or len(recent) < 2:
        return {**out, "label": "insufficient_data"}
    vals = [p["value"] for p in base]
    ref = statistics.median(vals)
    spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
    allowed = st.max_regression_pct / 100 * (ref if ref_step is None else ref_step)
    marks = []
    for p in recent:
        se = (p["sd"] or 0.0) / math.sqrt(p["n"]) if p.get("n") else 0.0
        noise = st.noise_sigmas * math.sqrt(spread**2 + se**2)
        marks.append(p["value"] - ref > max(allowed, noise))
    label = "regression" if all(marks[-2:]) else "suspicious" if any(marks) else "ok"
    return {
        **out,
        "label": label,
        "ref": ref,
        "spread": spread,
        "allowed": allowed,
        "delta_pct": 100 * (points[-1]["value"] - ref) / ref if ref else None,
        "violations": [p["run_id"] for p, m in zip(recent, marks, strict=True) if m],
    }


def check(
    db: str | Path, st: TrendSettings, metrics: list[str] | None = None, branch: str | None = None
) -> dict:
    """Every (job, metric) series labelled; `regressed` when a gated metric is a `regression`."""
    metrics = metrics or TREND_METRICS
    with open_db(db, write=False) as con:
        got = series(con, sorted({*metrics, GATED}), st.baseline + st.recent, branch)
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    ref_steps: dict[str, float | None] = {}
    for (job, metric), pts in got.items():
        if metric == GATED:
            t = trend(pts, None, st)
            ref_steps[job] = t["ref"]
    rows = []
    for (job, metric), pts in sorted(got.items()):
        if metric not in metrics:
            continue
        t = trend(pts, None if metric == GATED else ref_steps.get(job), st)
        gated = metric == GATED or st.gate_classes
        rows.append(
            {
                "job": job,
                "metric": metric,
                "gated": gated,
                **t,
                "points": [{k: p[k] for k in ("run_id", "date", "commit", "value")} for p in pts],
            }
        )
    regressed = any(r["label"] == "regression" and r["gated"] for r in rows)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "traceview-history-check",
        "db": str(db),
        "runs": runs,
        "settings": vars(st),
        "branch": branch,
        "series": rows,
        "regressed": regressed,
    }
