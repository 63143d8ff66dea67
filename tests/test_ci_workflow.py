"""The GitHub Actions workflow of docs/ci.md runs as written: every `run:` step executed on bundled traces."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES

yaml = pytest.importorskip("yaml")
pytest.importorskip("duckdb")

from packaging.requirements import Requirement  # noqa: E402

from traceview.ci import history  # noqa: E402

BIN = Path(sys.executable).parent
TWINS = SAMPLES / "collected2"


def workflow() -> dict:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = text[text.index("## GitHub Actions") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/ci.md: no yaml block under ## GitHub Actions"
    return yaml.safe_load(block.group(1))


def test_install_step_installs_from_the_repository():
    wf = workflow()
    steps = wf["jobs"]["profile"]["steps"]
    install = [s["run"] for s in steps if "pip install" in s.get("run", "")]
    assert install == ['pip install "$TRACEVIEW"']
    req = Requirement(wf["env"]["TRACEVIEW"])
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert req.name == "traceview" and req.url and req.url.startswith("git+https://")  # not the package index
    assert req.extras == {"collect", "history"} and req.extras <= set(extras)
    assert "duckdb" in " ".join(extras["history"]) and "torch" in " ".join(extras["collect"])


def _run_steps(work: Path, run_dir: Path) -> list[tuple[str, int]]:
    """Every `run:` step in order, as the runner does (bash -eo pipefail, in the checkout); the install step was
    checked above and `collect` (it needs a GPU) is checked against its parser and replaced by a bundled run."""
    from traceview.cli.main import make_parser

    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_STEP_SUMMARY": str(work / "gh_summary.md"),
        "GITHUB_SHA": "0123abc",
        "GITHUB_REF_NAME": "main",
        "GITHUB_RUN_ID": "42",
        "COLUMNS": "100",
    }
    codes = []
    for step in workflow()["jobs"]["profile"]["steps"]:
        cmd = step.get("run")
        if cmd is None or "pip install" in cmd:
            continue
        if cmd.startswith("traceview collect"):
            args = make_parser("collect").parse_args(shlex.split(cmd)[1:])
            assert (args.name, args.out, args.wait, args.warmup, args.active) == (
                "smoke",
                "tv_traces",
                5,
                1,
                3,
            )
            shutil.copytree(run_dir, work / args.out / args.name)
            continue
        p = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", cmd],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert "Traceback" not in p.stderr, p.stderr
        codes.append(
            (
                cmd.split()[1] + (" " + cmd.split()[2] if cmd.startswith("traceview history") else ""),
                p.returncode,
            )
        )
    return codes


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A repository as on main: the baseline is the TF32 GEMM run (`perf/baseline.json`, no finding); the
    rows of it and of its slow twin (fp32 `highest` precision, 8.2x the step) for the history cache."""
    work = tmp_path_factory.mktemp("repo")
    (work / "perf").mkdir()
    for name, run_dir, extra in (
        ("main_rows.json", "fp32_gemm_tf32", ["--save-baseline", "perf/baseline.json"]),
        ("slow_rows.json", "fp32_gemm_highest", []),
    ):
        shutil.copytree(TWINS / run_dir, work / name.removesuffix(".json") / "smoke")
        p = subprocess.run(
            [
                str(BIN / "traceview"),
                "batch",
                f"{name.removesuffix('.json')}/smoke",
                "--jobs",
                "1",
                "--out",
                name,
                *extra,
            ],
            cwd=work,
            capture_output=True,
            text=True,
        )
        assert p.returncode in (0, 1), p.stderr
    return work


def _fresh(checkout: Path, tmp_path: Path, history_runs: int) -> Path:
    work = tmp_path / "w"
    work.mkdir()
    shutil.copytree(checkout / "perf", work / "perf")
    if history_runs:
        rows = history.read_rows(checkout / "main_rows.json")
        for i in range(history_runs):
            history.add(work / "perf-history" / "history.duckdb", rows, {"date": f"2026-03-{i + 1:02d}"})
    return work


def test_workflow_same_run_passes(checkout, tmp_path):
    work = _fresh(checkout, tmp_path, 0)
    codes = _run_steps(work, TWINS / "fp32_gemm_tf32")
    assert codes == [
        ("batch", 0),
        ("history add", 0),
        ("history show", 0),
        ("history check", 0),
        ("summary.md", 0),
    ]
    summary = (work / "summary.md").read_text()
    assert "| `smoke` | ok |" in summary and "<!-- traceview-history -->" in summary
    assert (work / "gh_summary.md").read_text() == summary
    sarif = json.loads((work / "traceview.sarif").read_text())
    assert sarif["version"] == "2.1.0"
    assert (work / "traceview.xml").is_file() and json.loads((work / "summary.json").read_text())[
        "exit_code"
    ] == 0


def test_workflow_slower_run_fails_gate_and_history(checkout, tmp_path):
    """The fp32 `highest` GEMM (8.2x the TF32 step) after five TF32 runs and one slow run on main: the baseline
    gate fails (exit 1: the step, and its TV202 error), and with this second slow run in a row `history check`
    says regression (exit 1)."""
    work = _fresh(checkout, tmp_path, 5)
    history.add(
        work / "perf-history" / "history.duckdb",
        history.read_rows(checkout / "slow_rows.json"),
        {"date": "2026-03-06"},
    )
    codes = _run_steps(work, TWINS / "fp32_gemm_highest")
    assert codes == [
        ("batch", 1),
        ("history add", 0),
        ("history show", 0),
        ("history check", 1),
        ("summary.md", 0),
    ]
    summary = (work / "summary.md").read_text()
    assert "| `smoke` | regressed |" in summary and "| smoke | 7 | regression |" in summary
    assert "- **step_time**: 2.613 → 21.488 ms per step" in summary
