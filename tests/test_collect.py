"""End-to-end tests of `traceview collect` / `traceview trigger` on real (tiny) CPU jobs.

Each test runs a script from tests/scripts under the real CLI in a subprocess and checks what it
wrote: one trace per rank and capture, ProfilerStep#N spans for exactly the active steps,
`module::` annotations, the manifest, and that the script's exit code and output pass through.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from torchrun_util import collect_env, run_collect, torchrun

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "scripts"
MANIFEST_KEYS = {
    "manifest_version", "tool", "run", "created", "finished", "exit_code", "command", "argv", "cwd",
    "hostname", "launcher", "world_size", "mode", "schedule", "options", "versions", "gpu_name",
    "ranks", "traces", "step_time", "signal", "launcher_lost", "cpu_count", "cpu_affinity",
}  # fmt: skip
RANK_KEYS = {
    "rank", "local_rank", "world_size", "pid", "device", "gpu_name", "activities", "versions",
    "step_source", "steps_seen", "step_time_method", "unprofiled_step_ms", "profiled_step_ms",
    "post_capture_step_ms", "warmup_step_ms", "settle_step_ms", "settle",
    "unprofiled_step_ms_median", "profiled_step_ms_median", "traces", "warnings", "terminated_by",
    "cpu_count", "cpu_affinity", "teardown_cupti",
}  # fmt: skip


def collect(out: Path, name: str, opts: list[str], cmd: list[str], **kw) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "traceview",
        "collect",
        "--out",
        str(out),
        "--name",
        name,
        *opts,
        "--",
        *cmd,
    ]
    return subprocess.run(argv, cwd=REPO, env=collect_env(), capture_output=True, text=True, timeout=120, **kw)


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def step_names(trace: dict) -> list[str]:
    return sorted(
        e["name"] for e in trace["traceEvents"]
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    )  # fmt: skip


def traces_of(run: Path, rank: int) -> list[Path]:
    return sorted(run.glob(f"rank{rank}.*.pt.trace.json.gz"))


def test_train_script_modules_and_exit_code(tmp_path: Path) -> None:
    r = collect(
        tmp_path, "train", ["--wait", "3", "--warmup", "1", "--active", "3", "--modules", "--shapes"],
        [sys.executable, str(SCRIPTS / "train_small.py"), "--steps", "10", "--exit-code", "3"],
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert "train_small done" in r.stdout
    assert "stderr line from train_small" in r.stderr
    run = tmp_path / "train"
    (trace_path,) = traces_of(run, 0)
    trace = load(trace_path)
    assert step_names(trace) == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    mods = Counter(
        e["name"] for e in trace["traceEvents"]
        if e.get("cat") == "user_annotation" and e["name"].startswith("module::")
    )  # fmt: skip
    # Qualified paths from the root model; the root itself by class name; one call per active step.
    for name in (
        "module::Net",
        "module::blocks.0",
        "module::blocks.0.fc",
        "module::blocks.1.act",
        "module::head",
    ):
        assert mods[name] == 3, mods
    assert any("Input Dims" in e.get("args", {}) for e in trace["traceEvents"] if e.get("cat") == "cpu_op")

    man = json.loads((run / "manifest.json").read_text())
    assert MANIFEST_KEYS <= man.keys()
    assert man["manifest_version"] == 1
    assert man["exit_code"] == 3 and man["launcher"] == "python" and man["world_size"] == 1
    assert man["schedule"] == {"wait": 3, "warmup": 1, "active": 3, "repeat": 1}
    assert man["options"]["modules"] and man["options"]["record_shapes"] and not man["options"]["with_stack"]
    assert man["argv"][-2:] == ["--exit-code", "3"]
    assert man["traces"] == [
        {"rank": 0, "file": trace_path.name, "capture": 0, "first_step": 4, "last_step": 6}
    ]
    (rank,) = man["ranks"]
    assert RANK_KEYS <= rank.keys()
    assert rank["step_source"] == "optimizer" and rank["steps_seen"] == 10
    # the host's CPUs as the job saw them (its DataLoader workers share them): the same machine as this test
    assert rank["cpu_count"] == man["cpu_count"] == os.cpu_count()
    assert rank["cpu_affinity"] == man["cpu_affinity"] == len(os.sched_getaffinity(0))
    # Steps 1-2 waited (step 0 includes start-up), 3 warmed up, 4-6 were recorded, 7-9 ran after the capture.
    assert len(rank["unprofiled_step_ms"]) == 2 and len(rank["profiled_step_ms"]) == 3
    assert len(rank["warmup_step_ms"]) == 1 and len(rank["post_capture_step_ms"]) == 3
    # CUPTI is finalized after the capture (the user's own TEARDOWN_CUPTI wins): the steps after it run unprofiled
    assert rank["teardown_cupti"] == os.environ.get("TEARDOWN_CUPTI", "1")
    assert man["step_time"]["unprofiled_ms_median"] > 0 and man["step_time"]["profiled_ms_median"] > 0
    if "cuda" not in rank["activities"]:
        assert r.stderr.count("CUDA is not available") == 1


def test_inference_step_api_and_no_torch_import(tmp_path: Path) -> None:
    r = collect(
        tmp_path, "infer", ["--wait", "3", "--warmup", "1", "--active", "4"],
        [sys.executable, str(SCRIPTS / "infer_small.py"), "--steps", "4"],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "infer_small done active=True" in r.stdout
    run = tmp_path / "infer"
    (trace_path,) = traces_of(run, 0)
    # steps(), step_context() and step() each marked 4 boundaries: 12 steps, #4..#7 recorded.
    assert step_names(load(trace_path)) == [f"ProfilerStep#{i}" for i in range(4, 8)]
    rank = json.loads((run / "manifest.json").read_text())["ranks"][0]
    assert rank["step_source"] == "explicit" and rank["steps_seen"] == 12

    # Without the collector the API is a no-op, and importing it never imports torch.
    probe = (
        "import sys; sys.modules['torch'] = None\n"
        "import collectors, collectors.cli, collectors.manifest\n"
        "collectors.step()\n"
        "with collectors.step_context(): pass\n"
        "assert list(collectors.steps([1, 2])) == [1, 2] and not collectors.is_active()\n"
        "import argparse; p = argparse.ArgumentParser(); collectors.cli.add_parsers(p.add_subparsers())\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=collect_env(), capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_time_window_mode(tmp_path: Path) -> None:
    """The window records part of a longer loop: the script runs until the window's trace exists, then 20 more
    calls, so the trace holds fewer calls than the loop made whatever the machine's load (no wall-clock bound)."""
    run = tmp_path / "window"
    r = collect(
        tmp_path, "window", ["--window-s", "0.3", "--delay-s", "0.1"],
        [sys.executable, str(SCRIPTS / "infer_small.py"), "--window-ms", "300000",
         "--until-trace", str(run / "rank0.*.pt.trace.json.gz")],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    calls = int(next(line for line in r.stdout.splitlines() if line.startswith("calls="))[6:])
    (trace_path,) = traces_of(run, 0)
    trace = load(trace_path)
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "aten::linear"]
    # two Linear layers per call; the 20 calls after the trace was written are not in it
    assert 2 < len(ops) <= 2 * (calls - 20), (len(ops), calls)
    man = json.loads((run / "manifest.json").read_text())
    assert man["mode"] == "window" and man["schedule"] is None and man["options"]["window_s"] == 0.3


def test_torchrun_two_ranks_gloo(tmp_path: Path) -> None:
    env_steps = {"STEPS": "8"}
    cmd = [*torchrun(), "--nproc-per-node", "2", "--standalone", str(SCRIPTS / "train_ddp.py")]
    argv = [sys.executable, "-m", "traceview", "collect", "--out", str(tmp_path), "--name", "ddp",
            "--wait", "2", "--warmup", "1", "--active", "2", "--modules", "--", *cmd]  # fmt: skip
    r = run_collect(argv, tmp_path / "ddp", cwd=REPO, env={**collect_env(), **env_steps}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "rank 0 done" in r.stdout and "rank 1 done" in r.stdout, (r.stdout, r.stderr)
    run = tmp_path / "ddp"
    for rank in (0, 1):
        (trace_path,) = traces_of(run, rank)
        trace = load(trace_path)
        assert step_names(trace) == ["ProfilerStep#3", "ProfilerStep#4"]
        assert trace["distributedInfo"]["rank"] == rank and trace["distributedInfo"]["world_size"] == 2
        names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
        assert {"module::DistributedDataParallel", "module::module.0"} <= names
    man = json.loads((run / "manifest.json").read_text())
    assert man["launcher"] == "torchrun" and man["world_size"] == 2 and man["exit_code"] == 0
    assert [r["rank"] for r in man["ranks"]] == [0, 1]
    assert sorted(t["rank"] for t in man["traces"]) == [0, 1]
    assert all(
        len(r["unprofiled_step_ms"]) == 1 and len(r["post_capture_step_ms"]) == 3 for r in man["ranks"]
    ), man["ranks"]
    # the torchrun launcher process itself is not profiled
    assert not list(run.glob("rank*.collect.json"))[2:]


def _wait_for(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_on_demand_trigger(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    run = tmp_path / "od"
    argv = [sys.executable, "-m", "traceview", "collect", "--out", str(tmp_path), "--name", "od", "--on-demand",
            "--", sys.executable, str(SCRIPTS / "long_loop.py")]  # fmt: skip
    # generous limits: they only bound a hang (a loaded 2-core box can take many seconds to start torch)
    env = {**collect_env(), "STOP_FILE": str(stop), "MAX_S": "600"}
    job = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        meta = run / "rank0.collect.json"
        assert _wait_for(lambda: meta.exists() and json.loads(meta.read_text())["steps_seen"] > 3, 300)
        assert not traces_of(run, 0)  # nothing recorded until asked

        def trigger(target: str, steps: int) -> subprocess.CompletedProcess:
            argv = [
                sys.executable,
                "-m",
                "traceview",
                "trigger",
                target,
                "--steps",
                str(steps),
                "--wait-s",
                "240",
            ]
            return subprocess.run(argv, cwd=REPO, env=collect_env(), capture_output=True, text=True, timeout=300)

        t1 = trigger(str(run), 2)
        assert t1.returncode == 0, t1.stderr
        pid = json.loads(meta.read_text())["pid"]
        t2 = trigger(str(pid), 4)  # by pid, repeatable without restarting the job
        assert t2.returncode == 0, t2.stderr
    finally:
        stop.touch()
        out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err
    first, second = (load(p) for p in traces_of(run, 0))
    assert len(step_names(first)) == 2 and len(step_names(second)) == 4
    man = json.loads((run / "manifest.json").read_text())
    assert man["mode"] == "on_demand" and [t["capture"] for t in man["traces"]] == [0, 1]
    assert man["traces"][1]["last_step"] - man["traces"][1]["first_step"] == 3
    assert len(man["ranks"][0]["unprofiled_step_ms"]) > 3 and man["ranks"][0]["post_capture_step_ms"]
    assert man["step_time"]["unprofiled_source"] == "unprofiled_step_ms"


def test_usage_errors(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "traceview", "collect", "--out", str(tmp_path)],
                       cwd=REPO, env=collect_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "no command" in r.stderr
    r = collect(tmp_path, "missing", [], ["/nonexistent/python-xyz"])
    assert r.returncode == 127
    r = subprocess.run([sys.executable, "-m", "traceview", "trigger", str(tmp_path / "nope")],
                       cwd=REPO, env=collect_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX `true`")
def test_non_python_command_reports_no_ranks(tmp_path: Path) -> None:
    r = collect(tmp_path, "true", [], ["true"])
    assert r.returncode == 0 and "no profiled process" in r.stderr
