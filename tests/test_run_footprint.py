"""What a run holds, guarded without timing: the modules a CLI run imports (start-up, issue 32) and the
whole-trace results the report frees before its largest step (memory, issue 32)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, load

from traceview.analyses import replay, replay_graph
from traceview.options import Options
from traceview.report import SECTIONS, analyze_trace

#: packages only other commands, formats or the app use: an `analyze --format json` run never imports them
HEAVY = ("pandas", "plotly", "rich", "hta", "dash", "pyarrow", "torch")


def _modules(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_cli_import_leaves_heavy_packages_unloaded():
    got = _modules("""
        import json, sys
        import traceview.cli.main
        print(json.dumps(sorted(sys.modules)))
    """)
    assert {m.split(".")[0] for m in got} & set(HEAVY) == set()
    assert "rich.progress" not in got and "traceview.rules" not in got  # the rules load with the analysis


def test_json_run_of_a_tiny_trace_imports_no_heavy_package(tmp_path):
    out = tmp_path / "r.json"
    got = _modules(f"""
        import json, sys
        import traceview.cli.main as cli
        code = cli.main(["analyze", "sample_traces/gpu_h200/seed_single_gemm_eager.json.gz", "--format", "json",
                         "-o", {str(out)!r}])
        assert code == 0, code
        print(json.dumps(sorted(sys.modules)))
    """)
    assert {m.split(".")[0] for m in got} & set(HEAVY) == set()
    assert "traceview.rules" in got  # (the run did analyse: every rule ran)
    doc = json.loads(out.read_text())
    assert doc["traces"][0]["findings"] is not None


#: imported only for what a one-file run does not do: parse a pyproject.toml that configures traceview (this
#: repository's names traceview without configuring it), discover framework job folders, escape HTML
#: (Markdown)
NOT_FOR_ONE_FILE = ("tomllib", "traceview.ci.discover", "gzip", "html", "pandas", "rich.progress")


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_cli_run_of_one_trace_in_this_repository_skips_config_parse_and_job_discovery(fmt, tmp_path):
    # run from the repository root: its pyproject.toml names traceview (the project, its script) but holds no
    # [tool.traceview] table
    out = tmp_path / "r.out"
    got = _modules(f"""
        import json, os, sys
        os.chdir({str(ROOT)!r})
        import traceview.cli.main as cli
        code = cli.main(["analyze", "sample_traces/gpu_h200/seed_single_gemm_eager.json.gz",
                         "--format", {fmt!r}, "-o", {str(out)!r}])
        assert code == 0, code
        print(json.dumps(sorted(sys.modules)))
    """)
    assert "traceview.rules" in got and "traceview.ci.job_inputs" in got  # (the run analysed its input)
    assert set(NOT_FOR_ONE_FILE) & got == set()
    assert ("rich.console" in got) is (fmt == "text")  # the text report renders with rich; JSON needs none
    text = out.read_text()
    if fmt == "json":
        assert json.loads(text)["traces"][0]["path"].endswith("seed_single_gemm_eager.json.gz")
    else:
        assert "seed_single_gemm_eager.json.gz" in text and "TV202" in text


def _graph_cached(trace) -> bool:
    hit = replay_graph.build._per_trace_cache.get(id(trace))
    return bool(hit and hit[0]() is trace and hit[1])


def test_replay_graph_is_freed_before_the_layer_table_and_the_document_keeps_its_order():
    t = load("gpu_h200_real/hf_gpt2_train_bf16.json.gz")
    entry = analyze_trace(t, Options())
    # the replay ran (its fidelity section and the fixes' savings come from it) and its graph was dropped after
    assert entry["replay"]["graph"]["host_anchors"] > 0
    assert not _graph_cached(t)
    assert all(not (h := c._per_trace_cache.get(id(t))) or not h[1] for c in replay.CACHES)
    # the layer table, computed last, still sits in its document place (SECTIONS order)
    keys = [k for s in SECTIONS for k in s.keys]
    assert [k for k in entry if k in keys] == [k for k in keys if k in entry]
    assert entry["layers"]["layers"], "the layer table was built"
    # asking again rebuilds the graph: a dropped result is recomputed, never served stale
    g = replay_graph.build(t)
    assert g.a_ts.size == entry["replay"]["graph"]["host_anchors"]
