"""Issue 13, item 9: `traceview collect` when the job is stopped by a signal, or its launcher dies.

Real CPU jobs (tests/scripts/signal_loop.py) under the real CLI. The job touches a file once it has run a
few recorded steps; only then is the signal sent. Waits are bounded only to keep a broken run from
hanging the suite: nothing here asserts how long anything takes.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchrun_util import collect_env

from collectors import manifest as mf

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "scripts" / "signal_loop.py"
READY_STEPS = 5


def _start(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, int]:
    """Launch `collect` recording every step; return (launcher, run dir, pid of the profiled process) once the
    job has run READY_STEPS recorded steps."""
    ready = tmp_path / f"ready_{name}"
    argv = [sys.executable, "-m", "traceview", "collect", "--out", str(tmp_path), "--name", name, "--wait", "0",
            "--warmup", "0", "--active", "100000", "--", sys.executable, str(SCRIPT)]
    env = {**collect_env(), "READY_FILE": str(ready), "READY_STEPS": str(READY_STEPS), "MAX_S": "300"}
    job = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not ready.exists():
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            out, err = job.communicate()
            pytest.fail(f"the job did not get ready: rc={job.returncode} {err[-2000:]}")
        time.sleep(0.1)
    run = tmp_path / name
    return job, run, json.loads((run / "rank0.collect.json").read_text())["pid"]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _recorded_steps(run: Path) -> list[int]:
    import traceview

    (trace,) = sorted(run.glob("rank0.*.pt.trace.json.gz"))
    return traceview.load_file(trace).steps["step"].to_list()


def _check_saved(run: Path, signal_name: str, exit_code: int) -> dict:
    man = json.loads((run / "manifest.json").read_text())
    assert man["exit_code"] == exit_code and man["signal"] == signal_name
    assert len(man["traces"]) == 1
    steps = _recorded_steps(run)
    assert len(steps) >= READY_STEPS - 1 and steps == list(range(steps[0], steps[0] + len(steps)))
    return man


def test_sigterm_to_the_job_saves_the_capture(tmp_path):
    job, run, pid = _start(tmp_path, "term")
    os.kill(pid, signal.SIGTERM)
    out, err = job.communicate(timeout=300)
    assert job.returncode == 128 + signal.SIGTERM, err[-2000:]
    man = _check_saved(run, "SIGTERM", 143)
    rank = man["ranks"][0]
    assert rank["terminated_by"] == "SIGTERM" and any("terminated by SIGTERM" in w for w in rank["warnings"])
    assert man["launcher_lost"] is False


def test_sigint_to_the_launcher_alone_stops_the_job(tmp_path):
    job, run, pid = _start(tmp_path, "int")
    os.kill(job.pid, signal.SIGINT)  # not from a terminal: the job would not see it unless passed on
    out, err = job.communicate(timeout=300)
    assert job.returncode == 128 + signal.SIGINT, err[-2000:]
    assert "KeyboardInterrupt" in err  # the script got it as a Ctrl-C
    _check_saved(run, "SIGINT", 130)


def test_killed_launcher_leaves_no_orphan(tmp_path):
    job, run, pid = _start(tmp_path, "kill")
    os.kill(job.pid, signal.SIGKILL)
    job.communicate(timeout=300)
    deadline = time.monotonic() + 300
    while not _gone(pid):
        assert time.monotonic() < deadline, "the profiled process outlived its launcher"
        time.sleep(0.1)
    man = _check_saved(run, "SIGTERM", 143)  # written by rank 0: the launcher could not
    assert man["launcher_lost"] is True and man["finished"]


@pytest.mark.parametrize("opts,msg", [(["--active", "0"], "--active must be >= 1"),
                                      (["--wait", "-1"], "--wait must be >= 0"),
                                      (["--window-s", "0"], "--window-s must be > 0")])
def test_bad_schedule_leaves_no_run_folder(tmp_path, opts, msg):
    r = subprocess.run([sys.executable, "-m", "traceview", "collect", "--out", str(tmp_path), "--name", "bad", *opts,
                        "--", sys.executable, "-c", "pass"], cwd=REPO, env=collect_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and msg in r.stderr
    assert not (tmp_path / "bad").exists() and list(tmp_path.iterdir()) == []


@pytest.fixture()
def registry_base(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"traceview-collect-{os.getuid()}"


def test_pid_registry_is_a_private_directory(registry_base, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    mf.register_pid(424242, run)
    st = os.lstat(registry_base)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert mf.run_dir_of_pid(424242) == run.resolve()


@pytest.mark.parametrize("attack", ["world-writable", "symlink", "other-owner"])
def test_pid_registry_planted_by_someone_else_is_not_used(registry_base, tmp_path, capsys, attack):
    theirs = tmp_path / "attacker"
    theirs.mkdir()
    if attack == "world-writable":
        registry_base.mkdir()
        registry_base.chmod(0o777)
    elif attack == "symlink":
        registry_base.symlink_to(theirs)
    else:
        if os.getuid() != 0:
            pytest.skip("needs root to give the directory to another user")
        registry_base.mkdir(mode=0o700)
        os.chown(registry_base, 54321, -1)
    (theirs / "424242").write_text(str(theirs))  # where the attacker would send `trigger 424242`
    if attack == "world-writable":
        (registry_base / "424242").write_text(str(theirs))
    mf.register_pid(424242, tmp_path)
    assert "pid registry not used" in capsys.readouterr().err
    assert mf.run_dir_of_pid(424242) is None  # neither their folder nor ours
    assert (theirs / "424242").read_text() == str(theirs)  # and nothing of ours written into theirs
