"""A large job's ranks reduced to what the job's analysis reads as they are read (`traceview/ingest/reduced.py`,
docs/multi-rank.md "Scale and memory"): the reduced frames are a column subset of the loaded ones, a reduced rank
loaded again is the loaded trace, and a job whose ranks are all reduced (the threshold forced down) gives the same
document, byte for byte, as the job that kept them whole — checked on our 2 x H200 recording with a straggler
(sample_traces/nccl_h200x2/ddp_rank1_slowed) and on the gloo job, matched on host-side collectives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceview.report as report
from traceview.ingest.loader import load_file
from traceview.ingest.reduced import GPU_COLUMNS, HOST_COLUMNS, ReducedTrace, full, reduce
from traceview.options import Options

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "sample_traces" / "nccl_h200x2" / "ddp_rank1_slowed"


def test_reduced_rank_keeps_the_job_columns_and_reloads_whole() -> None:
    path = sorted(RUN.glob("rank1*.pt.trace.json.gz"))[0]
    t = load_file(path)
    r = reduce(t)
    assert isinstance(r, ReducedTrace) and r.meta is t.meta
    assert r.gpu.columns == [c for c in GPU_COLUMNS if c in t.gpu.columns]
    assert r.host.columns == [c for c in HOST_COLUMNS if c in t.host.columns]
    assert r.gpu.height == t.gpu.height and r.host.height == t.host.height and r.steps.equals(t.steps)
    assert r.flows.height == 0 and r.memory.height == 0
    assert r.gpu.equals(t.gpu.select(r.gpu.columns)) and r.host.equals(t.host.select(r.host.columns))
    # what it keeps per rank: under two thirds of the loaded frames (the kernel and op names are most of it)
    kept = r.gpu.estimated_size() + r.host.estimated_size()
    assert kept < 2 / 3 * (t.gpu.estimated_size() + t.host.estimated_size())
    again = full(r)
    assert not isinstance(again, ReducedTrace) and full(t) is t
    for name in ("gpu", "host", "steps", "flows", "memory", "threads", "gpu_annotations"):
        assert getattr(again, name).equals(getattr(t, name)), name


def _doc(path: Path) -> str:
    return json.dumps(report.analyze([path], Options()).to_dict(), sort_keys=True, default=str)


@pytest.mark.parametrize("run", ["nccl_h200x2/ddp_rank1_slowed", "gloo_straggler/slowed"])
def test_reduced_ranks_give_the_same_document(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _doc(REPO / "sample_traces" / run)
    monkeypatch.setattr(report, "REDUCE_ABOVE_RANKS", 1)  # every job's ranks reduced as read
    assert _doc(REPO / "sample_traces" / run) == whole
