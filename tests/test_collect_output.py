"""What `traceview collect` leaves and prints (issue 31 item 6): no lock file in the run folder, torch's USDT
profiler probe lines kept in `profiler.log` instead of the passed-through stderr, and a warning with the spread in
the manifest when the recorded step times vary more than 2x."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from torchrun_util import collect_env

from collectors.cli import _report
from collectors.manifest import SPREAD_WARN, step_time_summary
from collectors.outfilter import LineFilter

REPO = Path(__file__).resolve().parents[1]
PROBE = b"USDT:2026-12-02 01:09:34 23907:23907 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
STREAM = (
    b"epoch 1\rprogress 50%\rprogress 100%\n"
    + PROBE
    + b"loss 0.5\n"
    + PROBE.replace(b"52] profiler_start", b"59] profiler_stop")
    + b"USDT in the middle: ] profiler_start stays\nUSD\nlast line without newline"
)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_line_filter_keeps_everything_but_probe_lines(size: int) -> None:
    """Whatever the chunking, the passed bytes are the stream without its two probe lines, in order."""
    f, out, log = LineFilter(), [], []
    for k in range(0, len(STREAM), size):
        o, lg = f.feed(STREAM[k : k + size])
        out.append(o)
        log.append(lg)
    o, lg = f.close()
    out.append(o)
    log.append(lg)
    probes = [line + b"\n" for line in STREAM.split(b"\n") if line.startswith(b"USDT:2026")]
    assert len(probes) == 2
    assert b"".join(log) == b"".join(probes)
    assert b"".join(out) == STREAM.replace(probes[0], b"").replace(probes[1], b"")


def test_line_filter_passes_partial_lines_at_once() -> None:
    """A progress bar's \\r redraws reach the terminal when written, not at the next newline."""
    f = LineFilter()
    assert f.feed(b"progress 10%") == (b"progress 10%", b"")
    assert f.feed(b"\rUSDT: not a line start") == (b"\rUSDT: not a line start", b"")
    assert f.feed(b"\nUS") == (b"\n", b"")  # could be a probe line: held until its newline
    assert f.feed(b"ER 1\n") == (b"USER 1\n", b"")


def ranks(*steps: list[float]) -> list[dict]:
    return [
        {"rank": r, "profiled_step_ms": s, "unprofiled_step_ms": [10.0, 10.5]} for r, s in enumerate(steps)
    ]


def test_spread_summary() -> None:
    # the run: 2.3 / 33.6 / 29.4 ms
    st = step_time_summary(ranks([2.3, 33.6, 29.4]))
    assert st["profiled_spread"] == round(33.6 / 2.3, 2) and st["unprofiled_spread"] == 1.05
    assert st["spread_warning"].startswith("profiled steps vary 14.6x (2.30 to 33.60 ms)")
    # each rank against itself: a rank twice as slow as another is not a spread
    st = step_time_summary(ranks([10.0, 11.0, 12.0], [20.0, 21.0]))
    assert st["profiled_spread"] == 1.2 and st["spread_warning"] is None
    assert step_time_summary(ranks([10.0]))["profiled_spread"] is None  # one step: no spread


def test_report_prints_the_warning() -> None:
    man = {"ranks": [{}], "traces": [{}], "step_time": step_time_summary(ranks([2.3, 33.6, 29.4]))}
    buf = io.StringIO()
    with redirect_stderr(buf):
        _report(Path("run"), man)
    assert "traceview collect: warning: profiled steps vary 14.6x" in buf.getvalue()


def test_collect_run_folder_and_output(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    argv = [sys.executable, "-m", "traceview", "collect", "--out", str(tmp_path), "--name", "run",
            "--wait", "3", "--warmup", "1", "--active", "3", "--",
            sys.executable, str(REPO / "tests/scripts/train_small.py"), "--steps", "10", "--slow-step", "5",
            "--stderr-lines"]  # fmt: skip
    r = subprocess.run(argv, cwd=REPO, env=collect_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    assert not (run / ".launcher.lock").exists()
    # the probe lines are in the log (one start and one stop per capture), not in the passed-through stderr
    log = (run / "profiler.log").read_text().splitlines()
    assert [line.rsplit("] ", 1)[1] for line in log] == ["profiler_start", "profiler_stop"]
    assert all(line.startswith("USDT:") for line in log)
    assert not any(re.match(r"USDT:.*\] profiler_\w+$", line) for line in r.stderr.splitlines())
    # the script's own stderr passes, a partial line and a line quoting a probe line included
    assert "progress 10% 100%\n" in r.stderr and "USDT:-like text inside a line" in r.stderr
    assert "stderr line from train_small" in r.stderr and "train_small done" in r.stdout
    # the spread in the manifest is the rank's own recorded steps' max / min; the warning is printed iff > 2x
    man = json.loads((run / "manifest.json").read_text())
    prof = man["ranks"][0]["profiled_step_ms"]
    assert len(prof) == 3 and max(prof) >= 500  # the 0.5 s sleep of step 5 is one of the recorded steps
    st = man["step_time"]
    assert st["profiled_spread"] == round(max(prof) / min(prof), 2)
    warned = "traceview collect: warning: profiled steps vary" in r.stderr
    assert warned == (st["profiled_spread"] > SPREAD_WARN) == (st["spread_warning"] is not None)


def test_merge_carries_the_hosts_cpus(tmp_path: Path) -> None:
    """The ranks' recorded CPUs reach the manifest (the lowest rank's at the top, each rank's own in `ranks`), and
    the analyzer's reader takes a rank's affinity over its machine count (what its DataLoader workers may use)."""
    from collectors import manifest as mf
    from traceview.ingest.manifest import parse_manifest, rank_cpus

    for rank, (count, aff) in enumerate([(64, 12), (64, 16)]):
        mf.write_json_atomic(
            tmp_path / f"rank{rank}.collect.json",
            {"rank": rank, "world_size": 2, "cpu_count": count, "cpu_affinity": aff, "traces": [],
             "unprofiled_step_ms": [], "profiled_step_ms": []},
        )  # fmt: skip
    man = mf.merge(tmp_path)
    assert (man["cpu_count"], man["cpu_affinity"]) == (64, 12)
    assert [(r["cpu_count"], r["cpu_affinity"]) for r in man["ranks"]] == [(64, 12), (64, 16)]
    doc, why = parse_manifest(json.loads((tmp_path / "manifest.json").read_text()))
    assert why is None and rank_cpus(doc, "none", 1) == 16 and rank_cpus(doc, "none", 0) == 12
    doc["ranks"][1]["cpu_affinity"] = None  # not recorded off Linux: the machine's count
    assert rank_cpus(doc, "none", 1) == 64
    bad, why = parse_manifest({"manifest_version": 1, "ranks": [{"rank": 0, "cpu_affinity": "12"}]})
    assert rank_cpus(bad, "none", 0) is None and "ranks[0].cpu_affinity" in why
