"""`traceview history`: the DuckDB run store, trend labels on synthetic series and on bundled twin traces,
parallel adds, bad databases."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import statistics

import pytest
from conftest import SAMPLES

from traceview.cli.main import main

duckdb = pytest.importorskip("duckdb")

from traceview.ci import history  # noqa: E402 - after the skip: history needs duckdb
from traceview.ci.history import TrendSettings, trend  # noqa: E402

TWINS = SAMPLES / "collected2"


def _pts(values, sd=None, n=None):
    return [{"value": v, "sd": sd, "n": n, "run_id": i + 1} for i, v in enumerate(values)]


# ---- trend labels on synthetic series ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "recent, label",
    [
        ([104.0, 106.0, 106.0], "regression"),  # the last two beyond 100 + 5 %
        ([106.0, 106.0, 106.0], "regression"),
        ([106.0, 104.0, 104.0], "suspicious"),  # one scattered violation
        ([104.0, 106.0, 104.0], "suspicious"),  # the last point alone is not enough either
        ([104.0, 104.0, 106.0], "suspicious"),
        ([104.9, 104.9, 104.9], "ok"),  # within 5 %
        ([90.0, 80.0, 70.0], "ok"),  # faster
    ],
)
def test_trend_labels_flat_baseline(recent, label):
    t = trend(_pts([100.0] * 5 + recent), None, TrendSettings())
    assert t["label"] == label
    assert (t["ref"], t["allowed"], t["baseline_n"], t["recent_n"]) == (100.0, 5.0, 5, 3)


def test_trend_noise_of_the_window_and_of_the_point():
    # a baseline window spread by run-to-run noise: sd of [90, 110, 95, 105, 100] = 7.906; 2 sd = 15.8 > 5 %
    base = [90.0, 110.0, 95.0, 105.0, 100.0]
    sd = statistics.stdev(base)
    t = trend(_pts(base + [100.0, 115.0, 115.0]), None, TrendSettings())
    assert t["label"] == "ok" and t["spread"] == pytest.approx(sd)
    assert (
        trend(_pts(base + [100.0, 116.0, 116.0]), None, TrendSettings())["label"] == "regression"
    )  # 16 > 15.81
    # the point's own per-step spread: sd 10 over 4 steps is a standard error of 5, noise 2 x 5 = 10
    flat = _pts([100.0] * 5) + _pts([109.0, 109.0], sd=10.0, n=4)
    assert trend(flat, None, TrendSettings())["label"] == "ok"
    flat = _pts([100.0] * 5) + _pts([111.0, 111.0], sd=10.0, n=4)
    assert trend(flat, None, TrendSettings())["label"] == "regression"


def test_trend_windows_and_insufficient_data():
    st = TrendSettings(baseline=4, recent=2, min_baseline=3)
    assert (
        trend(_pts([100.0, 100.0, 106.0, 106.0]), None, st)["label"] == "insufficient_data"
    )  # 2 baseline points
    assert trend(_pts([100.0] * 3 + [106.0, 106.0]), None, st)["label"] == "regression"
    assert trend(_pts([100.0]), None, st)["label"] == "insufficient_data"
    assert trend([], None, st)["label"] == "insufficient_data"
    # only the last `baseline` points before the recent window count: an old slow era does not hide a regression
    t = trend(_pts([200.0] * 6 + [100.0] * 4 + [106.0, 106.0]), None, st)
    assert (t["label"], t["ref"], t["baseline_n"]) == ("regression", 100.0, 4)
    # a class metric is judged in points of the baseline step: 5 % of a 100 ms step allows 5 ms of growth
    cls = _pts([10.0] * 5 + [15.5, 15.5])
    assert trend(cls, 100.0, TrendSettings())["label"] == "regression"
    assert trend(cls, 200.0, TrendSettings())["label"] == "ok"


# ---- the store, on synthetic batch rows ---------------------------------------------------------------------
def _row(job: str, step_ms: float | None, shares: dict | None = None, status: str = "ok") -> dict:
    return {
        "input": job,
        "status": status,
        "steps": 3,
        "step_ms": step_ms,
        "step_sd_ms": 0.0,
        "primary": None,
        "shares": shares or {},
        "findings": {"error": 0, "warning": 1, "info": 0},
        "error": None,
    }


def _batch_doc(path, rows):
    path.write_text(json.dumps({"kind": "traceview-batch", "schema_version": 2, "rows": rows}))
    return path


def run(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["history", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_add_check_show_synthetic(tmp_path, capsys, monkeypatch):
    db = tmp_path / "h" / "history.duckdb"
    # a job that regresses, one that is flat, one that fails; dates given out of insertion order
    steps = {"a": [10.0, 10.0, 10.0, 10.0, 11.0, 11.0], "b": [5.0] * 6}
    order = [5, 0, 1, 2, 3, 4]
    for i in order:
        rows = [
            _row("a", steps["a"][i], {"gpu_compute": 50.0, "cpu_launch": 50.0}),
            _row("b", steps["b"][i]),
            _row("c", None, status="failed"),
        ]
        f = _batch_doc(tmp_path / f"r{i}.json", rows)
        code, _, err = run(
            capsys,
            "add",
            "--db",
            db,
            f,
            "--label",
            f"commit=c{i}",
            "--label",
            f"date=2026-01-0{i + 1}T00:00:00Z",
        )
        assert code == 0 and "added (3 job(s); commit c" in err
    code, out, err = run(capsys, "check", "--db", db, "--format", "json")
    assert code == 1
    res = json.loads(out)
    assert res["runs"] == 6
    by = {(s["job"], s["metric"]): s for s in res["series"]}
    a = by[("a", "step_ms")]
    assert [p["value"] for p in a["points"]] == steps["a"]  # ordered by date, not by insertion
    assert a["label"] == "regression" and a["ref"] == 10.0 and a["delta_pct"] == pytest.approx(10.0)
    assert by[("b", "step_ms")]["label"] == "ok"
    # a's class times grew with its step: 50 % of 11 ms = 5.5 ms against 5.0, within 5 % of a 10 ms step
    assert by[("a", "cpu_launch_ms")]["label"] == "ok" and by[("a", "cpu_launch_ms")]["last"] == 5.5
    assert ("c", "step_ms") not in by  # a failed job has no step
    assert "traceview: regression: a: step_ms 10.000 → 11.000 (+10.0 %" in err
    # a stricter baseline window length: too few points
    assert run(capsys, "check", "--db", db, "--min-baseline", "5")[0] == 0
    # the text table honours --width and $COLUMNS when piped (capsys is not a terminal)
    code, out, _ = run(capsys, "show", "--db", db, "--width", "70")
    assert code == 0 and max(map(len, out.splitlines())) <= 70 and "regression" in out
    monkeypatch.setenv("COLUMNS", "64")
    out = run(capsys, "check", "--db", db)[1]
    assert max(map(len, out.splitlines())) <= 64 and "─" not in out
    md = run(capsys, "show", "--db", db, "--format", "markdown")[1]
    assert md.startswith(history_cli_marker()) and "| a | 6 | regression | 10.000 | 11.000 | +10.0 % |" in md


def history_cli_marker() -> str:
    from traceview.cli.history import MARKER

    return MARKER


def test_labels_from_ci_environment():
    env = {"GITHUB_SHA": "abc123", "GITHUB_REF_NAME": "main", "GITHUB_HEAD_REF": "", "GITHUB_RUN_ID": "77"}
    assert history.ci_labels({}, env) == {"commit": "abc123", "branch": "main", "run": "77"}
    assert history.ci_labels({"commit": "mine", "x": "1"}, env)["commit"] == "mine"
    gl = {
        "CI_COMMIT_SHA": "d",
        "CI_COMMIT_REF_NAME": "feat",
        "CI_PIPELINE_ID": "9",
        "CI_PIPELINE_CREATED_AT": "2026-02-01T10:00:00Z",
    }
    assert history.ci_labels({}, gl) == {
        "commit": "d",
        "branch": "feat",
        "run": "9",
        "date": "2026-02-01T10:00:00Z",
    }


def _adder(args: tuple) -> None:
    db, rows_path, worker, n = args
    rows = history.read_rows(rows_path)
    for k in range(n):
        history.add(db, rows, {"commit": f"w{worker}-{k}"})


def test_parallel_adds_lose_no_row(tmp_path):
    """Four processes add five runs each at once: 20 runs, every job row and point kept."""
    f = _batch_doc(tmp_path / "r.json", [_row("a", 10.0, {"cpu_launch": 100.0}), _row("b", 5.0)])
    db = tmp_path / "h.duckdb"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_adder, args=((db, f, w, 5),)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = con.execute("SELECT run_id, commit_sha FROM runs ORDER BY run_id").fetchall()
        jobs = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
        pts = con.execute("SELECT count(*) FROM points WHERE metric = 'step_ms'").fetchone()[0]
    finally:
        con.close()
    assert [r[0] for r in runs] == list(range(1, 21))
    assert sorted(r[1] for r in runs) == sorted(f"w{w}-{k}" for w in range(4) for k in range(5))
    assert (jobs, pts) == (40, 40)


@pytest.mark.parametrize(
    "case", ["corrupt", "foreign", "text", "missing", "bad rows", "odd rows", "bad label", "bad window"]
)
def test_bad_database_or_input_exit_2(tmp_path, capsys, case):
    db = tmp_path / "h.duckdb"
    rows = _batch_doc(tmp_path / "r.json", [_row("a", 1.0)])
    args: list = ["check", "--db", db]
    if case == "corrupt":
        assert run(capsys, "add", "--db", db, rows)[0] == 0
        data = bytearray(db.read_bytes())
        data[4096:8192] = b"\xff" * 4096  # the database headers after the magic
        db.write_bytes(bytes(data))
    elif case == "foreign":
        con = duckdb.connect(str(db))
        con.execute("CREATE TABLE sales (id INTEGER)")
        con.close()
        args = ["add", "--db", db, rows]
    elif case == "text":
        db.write_text("not a database at all\n" * 100)
        args = ["add", "--db", db, rows]
    elif case == "bad rows":
        (tmp_path / "x.json").write_text(json.dumps({"kind": "traceview-diff"}))
        args = ["add", "--db", db, tmp_path / "x.json"]
    elif case == "odd rows":  # values of the wrong type are left out, not stored or crashed on
        odd = {**_row("a", 1.0), "primary": {"x": 1}, "shares": [1], "steps": "3", "step_ms": "fast"}
        assert run(capsys, "add", "--db", db, _batch_doc(tmp_path / "o.json", [odd]))[0] == 0
        con = duckdb.connect(str(db), read_only=True)
        try:
            assert con.execute("SELECT job, status, primary_class FROM jobs").fetchall() == [
                ("a", "ok", None)
            ]
            assert con.execute("SELECT metric FROM points ORDER BY metric").fetchall() == [
                ("n_error",),
                ("n_warning",),
            ]
        finally:
            con.close()
        args = ["add", "--db", db, _batch_doc(tmp_path / "o2.json", [{"input": 3}])]
    elif case == "bad label":
        args = ["add", "--db", db, rows, "--label", "date=yesterday"]
    elif case == "bad window":
        assert run(capsys, "add", "--db", db, rows)[0] == 0
        args = ["check", "--db", db, "--recent-window", "1"]
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and err.startswith("traceview: error:") and "Traceback" not in err
    if case == "foreign":
        assert "not a traceview history (tables: sales)" in err
    if case in ("text", "corrupt"):
        assert "h.duckdb" in err


# ---- real bundled traces as inputs --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def twin_rows(tmp_path_factory) -> dict[str, object]:
    """`traceview batch --out` of the elementwise-chain twins, each copied to a folder named `smoke` so that both
    are the same job, as one CI job's runs before and after a change."""
    root = tmp_path_factory.mktemp("twins")
    out = {}
    for k in ("eager", "compiled"):
        shutil.copytree(TWINS / f"elementwise_chain_{k}", root / k / "smoke")
        out[k] = root / f"{k}.json"
        assert main(["batch", str(root / k / "smoke"), "--jobs", "1", "--out", str(out[k])]) == 0
    return out


def _fill(capsys, db, rows, sequence, start=0):
    """Add one run per name of `sequence`, on consecutive days from day `start` + 1."""
    for i, k in enumerate(sequence, start):
        assert run(capsys, "add", "--db", db, rows[k], "--label", f"date=2026-03-{i + 1:02d}")[0] == 0


def test_real_twins_slower_change_is_a_regression(tmp_path, capsys, twin_rows):
    labels = json.loads((TWINS / "labels.json").read_text())
    # the collector's CUDA-event step times (independent of the trace): eager is 2.4x the compiled step
    assert (
        labels["elementwise_chain_eager"]["profiled_step_ms"]
        > 2 * labels["elementwise_chain_compiled"]["profiled_step_ms"]
    )
    rows = {k: json.loads(v.read_text())["rows"][0] for k, v in twin_rows.items()}
    db = tmp_path / "h.duckdb"
    _fill(capsys, db, twin_rows, ["compiled"] * 4)
    code, out, _ = run(capsys, "check", "--db", db, "--format", "json")
    assert code == 0 and {s["label"] for s in json.loads(out)["series"]} == {
        "insufficient_data"
    }  # 1 + 3 points
    _fill(capsys, db, twin_rows, ["compiled", "eager"], start=4)  # one slower run: a single violation
    res = json.loads(run(capsys, "check", "--db", db, "--format", "json")[1])
    step = next(s for s in res["series"] if s["metric"] == "step_ms")
    assert step["label"] == "suspicious" and step["ref"] == rows["compiled"]["step_ms"]
    _fill(capsys, db, twin_rows, ["eager"], start=6)  # the last two runs are slower: a regression
    code, out, err = run(capsys, "check", "--db", db, "--format", "json")
    assert code == 1
    step = next(s for s in json.loads(out)["series"] if s["metric"] == "step_ms")
    assert step["label"] == "regression" and step["last"] == rows["eager"]["step_ms"]
    assert step["delta_pct"] == pytest.approx(
        100 * (rows["eager"]["step_ms"] / rows["compiled"]["step_ms"] - 1)
    )
    assert (step["baseline_n"], step["recent_n"], len(step["violations"])) == (4, 3, 2)
    assert "traceview: regression: smoke: step_ms 0.208 → 0.533" in err


def test_real_twins_faster_change_passes_classes_gate_when_asked(tmp_path, capsys, twin_rows):
    """eager -> compiled: the step falls, cpu_launch time per step grows (torch.compile's host cost): a class
    regression that fails only with --gate-classes."""
    rows = {k: json.loads(v.read_text())["rows"][0] for k, v in twin_rows.items()}
    db = tmp_path / "h.duckdb"
    _fill(capsys, db, twin_rows, ["eager"] * 4 + ["compiled"] * 2)
    code, out, _ = run(capsys, "check", "--db", db, "--format", "json")
    assert code == 0
    by = {s["metric"]: s for s in json.loads(out)["series"]}
    assert by["step_ms"]["label"] == "ok" and by["step_ms"]["delta_pct"] < -50
    launch = by["cpu_launch_ms"]
    share = {k: rows[k]["shares"]["cpu_launch"] / 100 * rows[k]["step_ms"] for k in rows}
    assert launch["label"] == "regression" and not launch["gated"]
    assert (launch["ref"], launch["last"]) == pytest.approx((share["eager"], share["compiled"]))
    code, _, err = run(capsys, "check", "--db", db, "--gate-classes")
    assert code == 1 and "regression: smoke: cpu_launch_ms" in err
