"""The GPU frame's `graph` (kernels launched as a CUDA / HIP graph's nodes) from every graph-launch call's name, and the
category columns held as codes (`model.SCHEMA`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceview
from tests.hostile import PATHS, mini_trace, use_path, write


def _with_launch(name: str, cat: str = "cuda_runtime") -> dict:
    t = mini_trace()
    for e in t["traceEvents"]:
        if e["name"] == "cudaLaunchKernel":
            e["name"], e["cat"] = name, cat
    return t


@pytest.mark.parametrize("path_kind", PATHS)
@pytest.mark.parametrize(("call", "cat", "graph"), [
    ("cudaGraphLaunch", "cuda_runtime", True),
    ("cudaGraphLaunch_v10000", "cuda_runtime", True),
    ("cudaGraphLaunch_ptsz", "cuda_runtime", True),  # per-thread default stream
    ("cuGraphLaunch", "cuda_driver", True),  # the driver API's
    ("hipGraphLaunch", "cuda_runtime", True),
    ("cudaLaunchKernel", "cuda_runtime", False),
    ("cudaGraphLaunchHelper", "cuda_runtime", False),  # (a name that only contains it)
])
def test_graph_launch_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_kind: str, call: str, cat: str,
                            graph: bool) -> None:
    use_path(path_kind, monkeypatch)
    t = traceview.load(write(tmp_path / "t.json", _with_launch(call, cat)))
    k = t.gpu.filter(pl.col("kind") == "compute")
    assert k.height == 3 and k["launch"].null_count() == 0  # each kernel found its launch
    assert k["graph"].to_list() == [graph] * 3


@pytest.mark.parametrize("path_kind", PATHS)
@pytest.mark.parametrize("coded", [False, True])
def test_category_columns_are_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_kind: str,
                                    coded: bool) -> None:
    """Both ways the loader builds them: from the scanner's dictionary codes (a large trace; `coded` forces it
    on this small one) and from the rows' text."""
    from traceview.ingest import loader

    use_path(path_kind, monkeypatch)
    if coded:
        monkeypatch.setattr(loader, "SMALL_ROWS", 0)
    t = traceview.load(write(tmp_path / "t.json", mini_trace()))
    assert t.host.schema["cat"] == pl.Categorical and t.gpu.schema["cat"] == pl.Categorical
    assert t.gpu.schema["kind"] == pl.Categorical and "launch_name" not in t.gpu.columns
    # compared and counted as text
    assert t.host.filter(pl.col("cat") == "cuda_runtime").height == 3
    assert sorted(t.gpu["kind"].to_list()) == ["compute"] * 3
    assert dict(t.host.group_by("cat").len().iter_rows()) == {"user_annotation": 3, "cpu_op": 3, "cuda_runtime": 3}
