"""`traceview collect --settle`: the wait phase lasts until the step time stops moving (collectors/settle.py).

The rule on given step times (no process), then real CPU jobs under the CLI whose steps sleep: a warm-up ramp
(40 ms falling 20 % a step to a 3 ms floor) must be left out of the unprofiled reference and out of the capture,
on one rank and on two (which must record the same steps); a step time that never settles is captured after
--settle-max-s with a warning. The assertions hold whatever the machine's load adds to a sleep: they compare the
ramp's steps (>= 13 ms until step 5) with the floor's, never a duration with a bound.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

import pytest
from torchrun_util import collect_env, run_collect, torchrun

from collectors import settle
from traceview.ingest import manifest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "scripts"


def test_windows_and_trend() -> None:
    assert [settle.half(w) for w in (0, 1, 5, 6, 8, 9)] == [3, 3, 3, 3, 4, 5]
    assert settle.trend([10.0] * 5, wait=5) is None  # fewer than 2 x 3 steps
    assert settle.trend([10, 10, 10, 5, 5, 5], wait=1) == 0.5
    ramp = [40 * 0.8**i for i in range(12)]
    assert not any(settle.settled(ramp[: n + 1], wait=5) for n in range(len(ramp)))
    # a prefetch buffer draining: the first steps are fast, later ones wait for the workers
    assert not settle.settled([2, 2, 2, 3, 3, 3], wait=5)
    # one slow step in a window moves neither median
    assert settle.settled([10, 10.2, 30, 10.1, 9.9, 10], wait=5)
    assert settle.settled([10, 10, 10, 10.4, 10.4, 10.4], wait=5, tol=0.05)
    assert not settle.settled([10, 10, 10, 10.6, 10.6, 10.6], wait=5, tol=0.05)


def test_config_from_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(settle.ENV, raising=False)
    default = settle.config(None)
    assert default == {"tol": settle.TOL, "max_s": settle.MAX_S, "explicit": False}  # on by default
    assert settle.config(False) is None
    monkeypatch.setenv(settle.ENV, "0")
    assert settle.config(None) is None
    asked = settle.config(True, max_s=5)
    assert asked == {"tol": settle.TOL, "max_s": 5, "explicit": True}
    # one host (torchrun's LOCAL_WORLD_SIZE = WORLD_SIZE): on; several hosts: only when asked for
    assert settle.applies(default, 2, 2) and settle.applies(asked, 16, 8)
    assert not settle.applies(default, 16, 8) and not settle.applies(None, 1, 1)


def _collect(tmp_path: Path, name: str, opts: list[str], cmd: list[str], env: dict) -> dict:
    argv = [sys.executable, "-m", "traceview", "collect", "--out", str(tmp_path), "--name", name, *opts, "--", *cmd]
    r = run_collect(argv, tmp_path / name, cwd=REPO, env={**collect_env(), **env}, timeout=180)
    assert r.returncode == 0, r.stderr
    man = json.loads((tmp_path / name / "manifest.json").read_text())
    man["_stderr"] = r.stderr  # (the run's closing lines, for the tests that read them)
    st = man["step_time"]
    if "settle_steps" in st:  # the run's closing line says where the recording started, and why there
        said = "once the step time settled" if st["settled"] else "(the step time had not settled)"
        assert f"the capture started at step {st['settle_steps']} {said}" in r.stderr, r.stderr
    return man


def _steps(run: Path, rank: int) -> list[int]:
    (path,) = run.glob(f"rank{rank}.*.pt.trace.json.gz")
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    return sorted(int(e["name"].split("#")[1]) for e in ev if e.get("name", "").startswith("ProfilerStep#"))


def test_ramp_is_left_out_of_reference_and_capture(tmp_path: Path) -> None:
    man = _collect(tmp_path, "ramp", ["--settle", "--wait", "3", "--warmup", "1", "--active", "2"],
                   [sys.executable, str(SCRIPTS / "warming_loop.py")], {"PATTERN": "ramp", "STEPS": "40"})
    (rank,) = man["ranks"]
    ref, before = rank["unprofiled_step_ms"], rank["settle_step_ms"]
    # without --settle steps 1-3 would be the reference and steps 5-6 recorded, all on the ramp
    assert rank["settle"]["settled"] and rank["settle"]["steps"] >= 9, rank["settle"]
    assert len(ref) >= 6 and len(before) >= rank["settle"]["steps"] - 1 - len(ref)
    assert statistics.median(ref) < 0.5 * statistics.median(before), (ref, before)
    first = _steps(tmp_path / "ramp", 0)
    assert first == [rank["settle"]["steps"] + 1, rank["settle"]["steps"] + 2]
    assert man["options"]["settle"] == {"tol": settle.TOL, "max_s": settle.MAX_S, "explicit": True}
    st = man["step_time"]
    assert st["settled"] is True and st["settle_steps"] == rank["settle"]["steps"]
    assert st["unprofiled_ms_median"] == pytest.approx(statistics.median(ref), abs=1e-3)
    from traceview.cli.main import main

    out = tmp_path / "ramp.json"
    assert main(["analyze", str(tmp_path / "ramp"), "--format", "json", "-o", str(out)]) == 0
    prof = json.loads(out.read_text())["traces"][0]["profiling"]
    assert prof["reference_unsettled"] is False and prof["unprofiled_step_ms"] == st["unprofiled_ms_median"]


def test_unsettled_job_is_captured_after_max_s(tmp_path: Path) -> None:
    man = _collect(tmp_path, "alt", ["--settle", "--settle-max-s", "0.5", "--wait", "3", "--warmup", "1",
                                     "--active", "2"],
                   [sys.executable, str(SCRIPTS / "warming_loop.py")], {"PATTERN": "alternate", "STEPS": "120"})
    (rank,) = man["ranks"]
    assert rank["settle"]["settled"] is False and rank["settle"]["seconds"] >= 0.5
    assert any("not settled" in w for w in rank["warnings"])
    assert man["step_time"]["settled"] is False
    assert len(_steps(tmp_path / "alt", 0)) == 2
    # the analyzer says its reference may not be the steady state; a settled run's does not (the ramp above)
    from traceview.cli.main import main

    out = tmp_path / "alt.json"
    assert main(["analyze", str(tmp_path / "alt"), "--format", "json", "-o", str(out)]) == 0
    prof = json.loads(out.read_text())["traces"][0]["profiling"]
    assert prof["reference_unsettled"] is True and "before the step time settled" in prof["note"]
    assert prof["unprofiled_step_ms"] == pytest.approx(statistics.median(rank["unprofiled_step_ms"]), abs=1e-3)


def test_a_long_first_step_does_not_spend_the_settle_budget(tmp_path: Path) -> None:
    """A compiled job's first timed step compiles for longer than --settle-max-s (the H100 run of a compiled
    encoder recompiling for its second sequence length: 23 s against 20, then 13 ms steps): the budget counts from
    the end of that step, so the flat steps after it settle instead of being recorded as unsettled."""
    man = _collect(tmp_path, "comp", ["--settle", "--settle-max-s", "2", "--wait", "3", "--warmup", "1",
                                      "--active", "2"],
                   [sys.executable, str(SCRIPTS / "warming_loop.py")], {"PATTERN": "compile", "STEPS": "40",
                                                                        "FIRST": "2.5"})
    (rank,) = man["ranks"]
    assert rank["settle"]["settled"] is True, rank["settle"]
    assert rank["unprofiled_step_ms_median"] < 100  # the reference is the flat steps', not the compile's
    assert not any("not settled" in w for w in rank["warnings"])


def test_capture_is_lengthened_to_hold_a_recurring_slow_step(tmp_path: Path) -> None:
    """Every sixth step sleeps 60 ms where the others sleep 3 (a per-shape setup or a data stall that recurs): a
    two-step capture would mostly miss them, as the padded BERT's three-step capture missed its 8x steps. The
    settling steps show them recurring, so the capture records as many steps as lie between two of them (six, or
    fewer where the machine's load makes another step slow too) and says so. The wait phase must see two of them:
    `--wait 16` compares two windows of eight steps, so at least sixteen settling steps hold two or three (with
    `--wait 3` a quiet machine settles after seven steps, with one slow step seen: nothing recurs yet)."""
    man = _collect(tmp_path, "periodic", ["--settle", "--wait", "16", "--warmup", "1", "--active", "2"],
                   [sys.executable, str(SCRIPTS / "warming_loop.py")], {"PATTERN": "periodic", "STEPS": "90"})
    (rank,) = man["ranks"]
    got = rank["settle"]["lengthened"]
    assert got["requested"] == 2 and 2 < got["active"] <= 6, got
    assert len(_steps(tmp_path / "periodic", 0)) == got["active"]
    assert any(f"the capture records {got['active']} steps instead of 2" in w for w in rank["warnings"])
    slow = manifest.recurring_slow(rank)
    assert slow is not None and slow["captured_slow"] >= 1, slow


def test_no_settle_keeps_the_fixed_schedule(tmp_path: Path) -> None:
    man = _collect(tmp_path, "fixed", ["--no-settle", "--wait", "3", "--warmup", "1", "--active", "2"],
                   [sys.executable, str(SCRIPTS / "warming_loop.py")], {"PATTERN": "ramp", "STEPS": "12"})
    assert _steps(tmp_path / "fixed", 0) == [4, 5]
    (rank,) = man["ranks"]
    assert rank["settle"] is None and rank["settle_step_ms"] == [] and len(rank["unprofiled_step_ms"]) == 2
    assert man["options"]["settle"] is None and "settled" not in man["step_time"]


def test_two_ranks_agree_on_the_steps(tmp_path: Path) -> None:
    cmd = [*torchrun(), "--nproc-per-node", "2", "--standalone", str(SCRIPTS / "train_ddp.py")]
    man = _collect(tmp_path, "ddp", ["--settle", "--wait", "3", "--warmup", "1", "--active", "2"], cmd,
                   {"RAMP": "1", "STEPS": "40"})
    s0, s1 = _steps(tmp_path / "ddp", 0), _steps(tmp_path / "ddp", 1)
    assert s0 == s1 and s0[0] >= 10, (s0, s1)
    # two steps, unless the ranks' steps looked periodically slow (gloo on a loaded machine can): then the capture is
    # lengthened alike on both, and each rank's manifest says to how many (test_two_ranks_lengthen_their_capture_alike)
    longer = [(r["settle"] or {}).get("lengthened") for r in man["ranks"]]
    assert len(s0) == 2 or all(g and g["active"] == len(s0) for g in longer), (s0, longer)
    assert (tmp_path / "ddp" / "settle.start").exists()
    assert [r["rank"] for r in man["ranks"]] == [0, 1]


def test_two_ranks_lengthen_their_capture_alike(tmp_path: Path) -> None:
    """Every sixth step of both ranks sleeps 60 ms (the others 3): the first rank to settle picks the capture's
    length from its settling steps beside its first step (`settle.start`), and both ranks record the same steps,
    as many as lie between two slow ones, and say so."""
    cmd = [*torchrun(), "--nproc-per-node", "2", "--standalone", str(SCRIPTS / "train_ddp.py")]
    man = _collect(tmp_path, "ddp", ["--settle", "--wait", "16", "--warmup", "1", "--active", "2"], cmd,
                   {"PERIODIC": "1", "STEPS": "90"})
    s0, s1 = _steps(tmp_path / "ddp", 0), _steps(tmp_path / "ddp", 1)
    start, active, by = (int(x) for x in (tmp_path / "ddp" / "settle.start").read_text().split())
    assert s0 == s1 and 2 < len(s0) == active <= 6 and s0[0] == start + 1, (s0, s1, active)
    for rank in man["ranks"]:
        assert rank["settle"]["lengthened"] == {"active": active, "requested": 2}, rank["settle"]
        assert any(f"of rank {by}, the first to settle): the capture records {active} steps instead of 2" in w
                   for w in rank["warnings"]), rank["warnings"]


def test_job_ending_while_settling_says_nothing_was_captured(tmp_path: Path) -> None:
    # 12 steps of the ramp: still falling when the job ends, long before --settle-max-s
    man = _collect(tmp_path, "short", ["--settle", "--wait", "3", "--warmup", "1", "--active", "2"],
                   [sys.executable, str(SCRIPTS / "warming_loop.py")], {"PATTERN": "ramp", "STEPS": "12"})
    (rank,) = man["ranks"]
    assert man["traces"] == [] and rank["settle"] is None
    assert any("still settling" in w and "nothing was captured" in w for w in rank["warnings"]), rank["warnings"]


def test_draining_buffer_rule() -> None:
    # a buffer stepping down (12 batches to 0) drains; a full one, an empty one and one wobbling do not
    assert settle.draining([12, 11, 10, 9, 8, 7], wait=5)
    assert settle.draining([6, 6, 5, 5, 5, 4], wait=5)  # one batch fewer on average
    assert not settle.draining([12, 12, 12, 12, 12, 12], wait=5)
    assert not settle.draining([0, 0, 0, 0, 0, 0], wait=5)
    assert not settle.draining([3, 4, 3, 4, 3, 4], wait=5)
    assert not settle.draining([9, 8, 7], wait=5)  # fewer than two windows
    # two workers' batches in turn: windows of whole periods, compared by their means
    assert settle.window(5, 2) == 4 and settle.window(8, 3) == 6 and settle.window(5, 1) == 3
    alternating = [4, 20, 4, 20, 4, 20, 4, 20]
    assert not settle.settled(alternating[:6], wait=5)  # medians of three swing 4 <-> 20
    assert settle.settled(alternating, wait=5, period=2)
    assert manifest.step_reference(alternating[:7], 2) == 12.0 and manifest.step_reference([4, 4, 20], 1) == 4


def test_loader_buffer_draining_is_waited_out(tmp_path: Path) -> None:
    """The loop's own 3 ms steps while the prefetch buffer drains are flat: the step time alone would settle on
    them. The reference must be the workers' pace (a batch every 12 ms at best, two workers of two 12 ms items),
    whatever the machine adds: the assertion is one-sided (a slower machine only makes the steps longer)."""
    man = _collect(tmp_path, "drain", ["--settle", "--wait", "4", "--warmup", "1", "--active", "2"],
                   [sys.executable, str(SCRIPTS / "loader_drain.py")], {"STEPS": "70"})
    (rank,) = man["ranks"]
    info = rank["settle"]
    assert info["settled"] and info["loader_period"] == 2, info
    assert "the prefetch buffer of its 2 DataLoader workers no longer drained" in man["_stderr"]
    levels = info["loader_ready"]  # the buffers were watched, and were empty (or level) when the capture began
    assert len(levels) == 2 * settle.window(4, 2) and not settle.draining(levels, 4, 2), levels
    # the steps before were the buffer's: the loop's own pace, not the reference's
    assert statistics.median(rank["settle_step_ms"]) < rank["unprofiled_step_ms_median"] / 2, rank
    # once drained the steps alternate (two workers' batches in turn): the reference is their mean over whole
    # periods, the pace of a batch every 12 ms at best, and the analyzer reads the same
    ref = rank["unprofiled_step_ms_median"]
    assert ref >= 9.0 and ref == pytest.approx(statistics.mean(rank["unprofiled_step_ms"]), rel=1e-3), rank
    assert man["step_time"]["unprofiled_ms_median"] == pytest.approx(ref, rel=1e-3)
    (trace,) = (tmp_path / "drain").glob("rank0.*.pt.trace.json.gz")
    assert manifest.rank_step_times(man, trace.name, 0)[0] == pytest.approx(ref, rel=1e-3)
