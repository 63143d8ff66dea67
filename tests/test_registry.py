"""Rule registry, selection, config, docs and the CLI contract of the rules engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES
from traceview.rules import RULES

from traceview import config, docs, registry
from traceview.errors import TraceError


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=300)


def test_every_rule_module_registered_once():
    files = {p.stem for p in (ROOT / "rules").glob("*.py") if p.stem != "__init__"}
    mods = {m.__name__.split(".")[-1] for m in RULES.values()}
    assert files == mods
    for code, m in RULES.items():
        assert m.CODE == code and m.NAME.replace("-", "_") == m.__name__.split(".")[-1]
        assert m.SEVERITY in ("info", "warning", "error") and m.TITLE and callable(m.check)
    assert len({m.NAME for m in RULES.values()}) == len(RULES)


def test_select_ignore_prefixes():
    assert registry.selected() == sorted(RULES)
    assert registry.selected(["TV1"]) == ["TV101", "TV102", "TV103", "TV104", "TV105", "TV106", "TV110"]
    assert registry.selected(["ALL"], ["TV1", "nccl-wait"]) == [
        "TV201", "TV202", "TV203", "TV204", "TV205", "TV206", "TV207", "TV208", "TV301", "TV302", "TV303", "TV401",
        "TV402",
        "TV502",
    ]  # fmt: skip
    assert registry.selected(["host-sync"]) == ["TV102"]
    with pytest.raises(TraceError):
        registry.selected(["TV9"])


def test_docstrings_and_docs_fresh():
    for m in RULES.values():
        assert docs.problems(m) == []
    assert (ROOT / "docs/rules.md").read_text(encoding="utf-8") == docs.render(), "run python -m traceview.docs"


def test_docs_checker_catches_bad_option(monkeypatch):
    m = RULES["TV101"]
    monkeypatch.setattr(m, "__doc__", m.__doc__.replace("`moderate_pct`", "`moderate_percent`"))
    assert any("moderate_percent" in p for p in docs.problems(m))


def test_config_pyproject_and_set(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.traceview]\nignore = ["TV3"]\nfail-on = "error"\n[tool.traceview.launch-bound]\nmoderate_pct = 5\n')
    cfg = config.load(cwd=tmp_path, sets=["TV102.high_pct=20"])
    assert cfg["options"]["launch-bound"]["moderate_pct"] == 5.0
    assert cfg["options"]["host-sync"]["high_pct"] == 20.0 and cfg["ignore"] == ["TV3"] and cfg["fail_on"] == "error"
    (tmp_path / "bad.toml").write_text("[launch-bound]\nmoderate = 5\n")
    with pytest.raises(TraceError, match="unknown option launch-bound.moderate"):
        config.load(str(tmp_path / "bad.toml"))
    with pytest.raises(TraceError, match="must be a float"):
        config.load(cwd=tmp_path, sets=["launch-bound.high_pct=lots"])


def test_config_pyproject_parsed_only_when_it_can_name_traceview(tmp_path):
    # A pyproject.toml that cannot spell `traceview` is not parsed: even broken TOML there is no error.
    (tmp_path / "pyproject.toml").write_text('[project\nname = "other"\n')
    assert config.load(cwd=tmp_path)["source"] is None
    # Once it can, it is parsed (and broken TOML is reported) ...
    (tmp_path / "pyproject.toml").write_text('[project\nname = "traceview-user"\n')
    with pytest.raises(TraceError, match="pyproject.toml"):
        config.load(cwd=tmp_path)
    # ... including a key that spells a letter as a \\u escape.
    (tmp_path / "pyproject.toml").write_text('[tool."trace\\u0076iew"]\nignore = ["TV3"]\n')
    cfg = config.load(cwd=tmp_path)
    assert cfg["ignore"] == ["TV3"] and cfg["source"] == str(tmp_path / "pyproject.toml")
    # bytes that are not UTF-8: ignored in another project's file, one clear error in a traceview config
    (tmp_path / "pyproject.toml").write_bytes(b'[project]\nname = "\xff"\n')
    assert config.load(cwd=tmp_path)["source"] is None
    (tmp_path / "pyproject.toml").write_bytes(b'[tool.traceview]\nignore = ["\xff"]\n')
    with pytest.raises(TraceError, match="not UTF-8 text"):
        config.load(cwd=tmp_path)


#: pyproject.toml texts that name traceview, some with a `[tool.traceview]` table (tomllib says which)
NAMING = [
    '[project]\nname = "x"\ndependencies = ["traceview>=0.1"]\n',
    '[project.scripts]\ntraceview = "traceview.cli.main:main"\n',
    '[project] # [tool.traceview]\nname = "traceview"\n',
    '[tool.setuptools]\npackages = [\n  "traceview",\n  ["traceview"],\n]\n',
    '[tool.setuptools.package-dir]\n"traceview.rules" = "rules"\n',
    '[project]\nx = [\n ["a"]\n]\ntraceview = 1\n',
    '[tool.traceview]\nignore = ["TV3"]\n',
    '[tool]\ntraceview.ignore = ["TV3"]\n',
    'tool.traceview.ignore = ["TV3"]\n',
    'tool = {traceview = {ignore = ["TV3"]}}\n',
    '[tool."traceview"]\nignore = ["TV3"]\n',
    "[ tool . 'traceview' ]\nignore = ['TV3']\n",
    '[tool.other]\nx = [\n ["traceview"],\n]\n[tool]\ntraceview = {ignore = ["TV3"]}\n',
    '[project]\nname = "traceview ["\n[tool]\ntraceview.ignore = ["TV3"]\n',
    '[project]\ndescription = """\n[tool.x]\n"""\n[tool]\ntraceview.ignore = ["TV3"]\n',
]


@pytest.mark.parametrize("text", NAMING)
def test_config_pyproject_that_only_names_traceview_is_not_parsed(text, tmp_path):
    # a project that depends on traceview (or is traceview) names it without configuring it: not parsed (nor
    # tomllib imported); every file with a [tool.traceview] table, as tomllib reads it, still is
    import tomllib

    configures = "traceview" in tomllib.loads(text).get("tool", {})
    (tmp_path / "pyproject.toml").write_text(text)
    cfg = config.load(cwd=tmp_path)
    assert (cfg["source"] is not None) is configures
    assert cfg["ignore"] == (["TV3"] if configures else [])


def test_config_this_repository_pyproject_is_not_parsed():
    assert config._may_configure((Path(__file__).parents[1] / "pyproject.toml").read_bytes()) is False


def test_cli_rules_and_rule():
    r = run("rules", "--format", "json")
    assert r.returncode == 0
    assert [x["code"] for x in json.loads(r.stdout)] == sorted(RULES)
    r = run("rule", "TV201")
    assert r.returncode == 0 and "## How to fix" in r.stdout and "elementwise-chain" in r.stdout
    assert run("rule", "TV999").returncode == 2


SYNC = SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz"
GEMM = SAMPLES / "gpu_h200/compute_bound_gemm.json.gz"


def test_cli_json_findings_and_fail_on():
    r = run("analyze", SYNC, "--format", "json", "--fail-on", "warning")
    assert r.returncode == 1, r.stderr
    t = json.loads(r.stdout)["traces"][0]
    keys = {"rule", "code", "severity", "title", "steps", "count", "cost_us", "savings_us", "savings_pct",
            "evidence", "fix", "layer", "class"}
    assert t["findings"] and all(set(f) == keys for f in t["findings"])
    # what to fix first leads: the findings above info by replayed saving, then the info ones by saving
    key = [(f["severity"] == "info", -f["savings_us"]) for f in t["findings"]]
    assert key == sorted(key) and any(f["severity"] != "info" for f in t["findings"])
    # labels.json: 18 host syncs a step (6 x .item(), nonzero, .cpu()), each followed by GPU idle: the three
    # sync sites are warnings, and the pageable DtoH copies of .cpu() save nothing once the sync is host-sync's
    assert sorted(f["title"].split(" syncs")[0] for f in t["findings"] if f["code"] == "TV102") == [
        ".cpu() / .tolist() / .numpy()", ".item()", "torch.nonzero"]
    assert t["classification"]["dominant"] == "host_sync" and len(t["classification"]["steps"]) == 3
    assert run("analyze", SYNC, "--fail-on", "warning", "--exit-zero").returncode == 0
    assert run("analyze", SYNC, "--fail-on", "warning", "--select", "TV301").returncode == 0  # info only
    # negative control: no warning at all on the GEMM trace
    assert run("analyze", GEMM, "--fail-on", "warning").returncode == 0
    assert run("analyze", SYNC, "--set", "nope.x=1").returncode == 2


def test_cli_text_verdict():
    r = run("analyze", SYNC)
    assert r.returncode == 0 and "Verdict:" in r.stdout and "TV102" in r.stdout and "fix:" in r.stdout


def test_cli_job_straggler():
    r = run("analyze", SAMPLES / "hta/trace_filter", "--format", "json", "--select", "TV5")
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)["jobs"][0]
    assert job["nccl"]["straggler"]["rank"] == 1
    assert job["findings"][0]["rule"] == "nccl-wait" and job["findings"][0]["evidence"]["straggler"] == 1


def test_rules_are_columnar():
    # no per-event Python in rules/ and the engine modules
    for p in [*(ROOT / "rules").glob("*.py"), *(ROOT / "traceview").glob("*.py"), *(ROOT / "traceview/analyses").glob("*.py")]:
        src = Path(p).read_text(encoding="utf-8")
        assert "map_elements" not in src and "map_rows" not in src, p


def test_rule_docs_and_sarif_help_are_self_contained():
    """A user reads the rule docs (`traceview rule`, docs/rules.md, SARIF help) without this project's internal
    files or history: no references to documents outside the repository or to internal wording."""
    import re

    from traceview.formatters.sarif import _rules

    bad = re.compile(r"DOMAIN\.md|PEERS\.md|TRACE_FORMAT|HTA\.md|\.\./shared|the issue'?s?\b|the seed'?s?\b|\bseed \d",
                     re.IGNORECASE)
    texts = {m.CODE: f"{m.__doc__}\n{getattr(m, 'FIX', '')}\n{m.TITLE}" for m in RULES.values()}
    texts["docs/rules.md"] = (ROOT / "docs/rules.md").read_text(encoding="utf-8")
    texts["sarif"] = "\n".join(r["help"]["text"] for r in _rules())
    assert {k: bad.findall(v) for k, v in texts.items() if bad.search(v)} == {}


def test_every_cli_option_has_help():
    import argparse

    from traceview.cli.main import make_parser

    missing = []

    def walk(p: argparse.ArgumentParser, name: str) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, sp in a.choices.items():
                    walk(sp, f"{name} {sub}")
            elif not a.help and not isinstance(a, argparse._HelpAction):
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")

    walk(make_parser(), "traceview")
    assert missing == []
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert "--fail-on" in r.stdout and "exit 0 whatever the" in " ".join(r.stdout.split())
