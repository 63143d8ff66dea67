"""Every bundled trace's and job's `--format json` document is byte-identical to its recorded digest
(`tests/golden_digests.json`, written by `python tools/golden.py --update` when numbers change on purpose).

The default run checks a representative subset (one input of each kind, ~10 s); `pytest -m golden_full`
checks all of them (~100 s)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import golden  # noqa: E402

RECORDED: dict[str, str] = json.loads(golden.DIGESTS.read_text())


def test_the_digests_cover_every_bundled_input() -> None:
    assert sorted(RECORDED) == golden.inputs()
    assert set(golden.SUBSET) <= set(RECORDED)
    # the job folders are there, analyzed as one input each
    assert {
        "nccl_h200x2/ddp_rank1_slowed",
        "gloo_straggler/slowed",
        "hta/trace_filter",
        "collected/train_tinygpt_modules",
    } <= set(RECORDED)


def test_the_in_process_document_is_the_command_lines() -> None:
    """The digests hash what `traceview analyze --format json` prints: the CLI run as its own process gives
    the recorded digest too."""
    import hashlib
    import subprocess

    rel = "nccl_h200x2/ddp_rank1_slowed"
    out = subprocess.run(
        [sys.executable, "-m", "traceview", "analyze", f"sample_traces/{rel}", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    assert out.returncode in (0, 1) and json.loads(out.stdout)["jobs"]
    assert f"rc={out.returncode} sha256={hashlib.sha256(out.stdout).hexdigest()}" == RECORDED[rel]


@pytest.mark.parametrize("rel", golden.SUBSET)
def test_document_unchanged(rel: str) -> None:
    assert golden.digest(rel) == RECORDED[rel]


@pytest.mark.golden_full
@pytest.mark.parametrize("rel", sorted(set(RECORDED) - set(golden.SUBSET)))
def test_document_unchanged_full(rel: str) -> None:
    assert golden.digest(rel) == RECORDED[rel]
