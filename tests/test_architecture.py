"""The pipeline's shape: no import cycle among the package's modules, analyses never reach up to the
consumers, every bundled trace conforms to the declared trace model, and the Python API example (docs/api.md) returns the
whole document (the same one `--format json` prints), byte-identical across runs."""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES, bundled, load

ROOT = Path(__file__).resolve().parent.parent
PKG_DIRS = {"traceview": ROOT / "traceview", "traceview.rules": ROOT / "rules"}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, d in PKG_DIRS.items():
        for f in d.rglob("*.py"):
            rel = f.relative_to(d).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
        for f in d.rglob("*.c"):  # C extensions (traceview.ingest._scan): leaves of the graph
            mods[".".join([pkg, *f.relative_to(d).with_suffix("").parts])] = f
    return mods


def _is_pkg(f: Path) -> bool:
    return f.name == "__init__.py"


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (module level and inside functions; not TYPE_CHECKING)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, f in mods.items():
        if f.suffix != ".py":
            continue
        pkg = mod if _is_pkg(f) else mod.rsplit(".", 1)[0]
        tree = ast.parse(f.read_text())
        skip = {id(n) for t in ast.walk(tree) if _type_checking(t) for n in ast.walk(t)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for n in names:
                while n and n not in mods and "." in n:
                    n = n.rsplit(".", 1)[0]
                if n in mods and n != mod:
                    graph[mod].add(n)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))  # the import graph is shallow; restored for the other tests
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_graph_sees_the_pipeline() -> None:
    g = import_graph()
    assert {"traceview.sections.job", "traceview.sections.layers", "traceview.sections.findings", "traceview.sections.verdict"} <= g["traceview.report"]
    assert "traceview.ruleapi" in g["traceview.rules.host_sync"]
    assert len(g) >= 50


def test_no_import_cycle() -> None:
    assert _cycles(import_graph()) == []


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


# The data flows one way, and the folders say so: ingest (bytes -> columns -> Trace) -> model -> analyses ->
# rules -> sections -> report -> the views (formatters, ci, cli, app). A module imports only from its own
# layer or the layers above it in this list (the model is the vocabulary ingest builds, so it comes first).
LAYERS = [
    {"traceview.errors", "traceview.units", "traceview.records", "traceview.memo", "traceview.parallel", "traceview.procpool", "traceview.engine",
     "traceview.notes", "traceview.frames", "traceview.ingest.manifest", "traceview.ingest.categories", "traceview.ingest.heap_trim"},
    # the call tree, the distinct-names regex and row-id lookups are part of building the model
    {"traceview.model", "traceview.analyses.tree", "traceview.analyses.names", "traceview.analyses.rowid"},
    {"traceview.ingest"},  # and its modules
    {"traceview.analyses"},  # and its modules
    {"traceview.analyses.classify"},
    {"traceview.finding_model", "traceview.evidence", "traceview.ruleapi"},
    {"traceview.rules"},
    {"traceview.options", "traceview.registry", "traceview.config"},  # a run's options: the rules, selected
    {"traceview.sections.section", "traceview.sections.findings"},
    {"traceview.sections"},  # one module per report section
    {"traceview.report", "traceview.layer_detail", "traceview.docs"},
    {"traceview.formatters", "traceview.ci", "traceview.cli", "traceview.agent", "traceview.integrations", "traceview.safe_text", "traceview.trace_cache",
     "traceview.app"},
]
#: the views, and the other views each may import (public names only): the CLI drives CI commands and
#: formatters, CI documents reuse the Markdown formatter's cells; a formatter imports no other view
VIEWS = {
    "traceview.formatters": set(),
    "traceview.ci": {"traceview.formatters"},
    "traceview.cli": {"traceview.ci", "traceview.formatters", "traceview.agent"},  # `traceview mcp` starts the agent server
    "traceview.agent": {"traceview.ci"},  # the MCP server answers diff() through the CI diff
    # the web app: the Diff and Trends pages show the CI diff and history, the Raw page the JSON formatter's
    # bytes, Perfetto the annotated trace `traceview annotate` writes
    "traceview.app": {"traceview.ci", "traceview.formatters", "traceview.cli"},
}


def _view(mod: str) -> str | None:
    return next((v for v in VIEWS if mod == v or mod.startswith(v + ".")), None)


def test_views_import_each_other_only_as_allowed() -> None:
    bad = [f"{mod} -> {d}" for mod, deps in import_graph().items() for d in deps
           if _view(mod) and _view(d) and _view(d) != _view(mod) and _view(d) not in VIEWS[_view(mod)]]
    assert bad == []


def _private_imports(f: Path, pkg: str) -> list[tuple[str, str]]:
    """(module, name) of every `from M import _name` in file f (relative imports resolved from `pkg`)."""
    out = []
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            out += [(base, a.name) for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_views_never_import_each_others_internals() -> None:
    """No view (nor the app) imports an underscore name from another part of the package."""
    mods = _modules()
    files = {m: f for m, f in mods.items() if _view(m) and f.suffix == ".py"}
    files["app"] = ROOT / "app.py"
    bad = []
    for mod, f in files.items():
        pkg = mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for base, name in _private_imports(f, pkg):
            if base.startswith("traceview") and (mod == "app" or _view(base) != _view(mod)):
                bad.append(f"{mod}: from {base} import {name}")
    assert bad == []


def test_every_module_has_a_layer() -> None:
    """A new module lands in a folder of the pipeline (or is placed in LAYERS on purpose)."""
    assert [m for m, f in _modules().items() if _layer(m) is None and f.suffix == ".py"
            and m not in ("traceview", "traceview.__main__")] == []


def test_the_layer_check_catches_an_upward_import() -> None:
    assert _layer("traceview.ingest.loader") < _layer("traceview.sections.verdict") < _layer("traceview.cli.main")
    assert _view("traceview.formatters.text") == "traceview.formatters" and _view("traceview.report") is None


def _layer(mod: str) -> int | None:
    for k, group in enumerate(LAYERS):
        if any(mod == g or mod.startswith(g + ".") for g in group):
            return k
    return None


def test_imports_point_downstream_only() -> None:
    bad = []
    for mod, deps in import_graph().items():
        a = _layer(mod)
        for d in deps:
            b = _layer(d)
            if a is not None and b is not None and b > a:
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_every_bundled_trace_conforms_to_the_model() -> None:
    from traceview.model import schema_problems

    files = [p.relative_to(SAMPLES).as_posix() for p in bundled()]
    assert len(files) >= 40
    bad = {rel: p for rel in files if (p := schema_problems(load(rel)))}
    assert bad == {}


def test_schema_problems_reports_a_wrong_frame() -> None:
    from dataclasses import replace

    from traceview.model import schema_problems

    t = load("gpu_h200/sync_item_nonzero_cpu.json.gz")
    broken = replace(t, gpu=t.gpu.drop("stream").with_columns(extra=0))
    assert set(schema_problems(broken)) == {"gpu.stream: missing", "gpu.extra: not declared"}


def _readme_api_block() -> str:
    text = (ROOT / "docs/api.md").read_text()
    m = re.search(r"# Python API\s+```python\n(.*?)```", text, re.S)
    assert m, "docs/api.md has no Python API block"
    return m.group(1)


def test_readme_python_api_returns_the_whole_document(tmp_path: Path, monkeypatch) -> None:
    src = SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz"
    (tmp_path / "trace.json.gz").write_bytes(src.read_bytes())
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(_readme_api_block(), "docs/api.md", "exec"), ns)  # noqa: S102 - the docs' own example
    doc = ns["doc"]
    (t,) = doc["traces"]
    for key in ("summary", "steps", "devices", "top_kernels", "layers", "classification", "findings",
                "verdict_text", "profiling"):
        assert key in t, key
    assert t["classification"]["dominant"] and t["verdict_text"].startswith("Verdict:")
    assert {f["code"] for f in t["findings"]} >= {"TV101", "TV102"}
    # the same document the CLI prints
    from traceview.cli.main import main

    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    assert main(["analyze", "trace.json.gz", "--format", "json"]) == 0
    import json

    cli_doc = json.loads(buf.getvalue())
    assert cli_doc == json.loads(json.dumps(doc))


def _json_of(path: Path, seed: str, *extra: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(path), "--format", "json", *extra],
                         capture_output=True, env=env, check=False)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


@pytest.mark.parametrize("rel", ["gpu_h200/sync_item_nonzero_cpu.json.gz", "nccl_h200x2/ddp_rank1_slowed",
                                 "gpu_h200_real/hf_gpt2_train_bf16.json.gz"])
def test_json_is_byte_identical_across_runs(rel: str) -> None:
    a, b = _json_of(SAMPLES / rel, "1"), _json_of(SAMPLES / rel, "2")
    assert a and a == b


def test_job_step_matches_the_rank_entries() -> None:
    """`--step N` on a directory of ranks: each rank's job-level shares equal its trace entry's for step N."""
    from traceview.options import Options
    from traceview.report import analyze

    doc = analyze([SAMPLES / "nccl_h200x2/ddp_rank1_slowed"], Options(step=7)).to_dict()
    (job,) = doc["jobs"]
    by_path = {t["path"]: t for t in doc["traces"]}
    assert len(job["classification"]) == 2
    for r in job["classification"]:
        t = by_path[r["path"]]
        assert t["classification"]["analyzed_steps"] == [7]
        assert r["shares"] == t["classification"]["shares"]
    # and the job's matching covers step 7 only
    assert job["nccl"]["steps"] == 1


def test_ignoring_the_rule_skips_its_job_check() -> None:
    from traceview.options import Options
    from traceview.report import analyze

    on = analyze([SAMPLES / "nccl_h200x2/ddp_rank1_slowed"]).to_dict()["jobs"][0]
    off = analyze([SAMPLES / "nccl_h200x2/ddp_rank1_slowed"],
                  Options.build(ignore=["TV501"])).to_dict()["jobs"][0]
    assert [f["code"] for f in on["findings"]] == ["TV501"] and on["nccl"]["straggler"]["raised"]
    assert off["findings"] == [] and not off["nccl"]["straggler"]["raised"]


def _unstable_sorts(src: str) -> list[int]:
    """Lines of polars sorts over several keys (`.sort(a, b)`, `.sort([a, b])`, `arg_sort_by`) that leave
    `maintain_order` unset."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("sort", "arg_sort_by")):
            continue
        if isinstance(node.func.value, ast.Name) and node.func.value.id == "np":
            continue
        if {k.arg for k in node.keywords} & {"maintain_order", "kind", "axis", "key", "reverse"}:
            continue
        n = len(node.args)
        if n == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
            n = len(node.args[0].elts)
        if n > 1 or node.func.attr == "arg_sort_by":
            out.append(node.lineno)
    return out


def test_sorts_over_several_keys_keep_the_order_of_ties() -> None:
    """polars' sort over several keys leaves ties in an arbitrary order unless `maintain_order=True` (one that may
    differ with the thread count: the same trace would not give the same document on every machine), and it is
    the slower path (15x on the replay graph's anchors, 1.3 M rows). Every such sort in the analyzer keeps the
    order its input gives."""
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in [*(ROOT / "traceview").rglob("*.py"), *(ROOT / "rules").rglob("*.py")]
           for n in _unstable_sorts(p.read_text())]
    assert not bad, bad
    assert _unstable_sorts('df.sort("a", "b")\nnp.sort(x)\ndf.sort("a")\ndf.sort(["a", "b"], maintain_order=True)') == [1]
