"""cli.small_input_settings: an analyzer run of small trace files runs polars with one thread, unless the user set
it, polars is loaded, or an input's size is not known or not small (the pool serves the whole run)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import traceview.cli.main as cli

KEY = cli.POLARS_THREADS
TINY = "sample_traces/gpu_h200/seed_single_gemm_eager.json.gz"


def _settings(monkeypatch, argv: list[str]) -> str | None:
    # (set, then deleted through monkeypatch: whatever the call sets is undone after the test, as is a user's value)
    monkeypatch.setenv(KEY, "")
    monkeypatch.delenv(KEY)
    monkeypatch.delitem(sys.modules, "polars", raising=False)  # (restored after the test)
    set_ = cli.small_input_settings(argv)
    got = os.environ.get(KEY)
    assert set_ == (got is not None)
    return got


def test_small_files(monkeypatch):
    argv = ["analyze", TINY, "--format", "json", "-o", os.devnull, "--step", "3"]
    assert _settings(monkeypatch, argv) == cli.SMALL_INPUT_THREADS


def test_user_setting_and_loaded_polars(monkeypatch):
    monkeypatch.setenv(KEY, "7")
    assert not cli.small_input_settings(["analyze", TINY])
    assert os.environ[KEY] == "7"
    monkeypatch.delenv(KEY)
    import polars  # noqa: F401 - loaded: too late to set

    assert not cli.small_input_settings(["analyze", TINY]) and KEY not in os.environ


def test_unknown_or_large_inputs(monkeypatch, tmp_path: Path):
    big = tmp_path / "big.json.gz"  # small on disk, large as JSON: the gzip trailer tells
    big.write_bytes(gzip.compress(b" " * (cli.SMALL_INPUT_BYTES + 1)))
    assert big.stat().st_size < cli.SMALL_INPUT_BYTES
    for argv in (["analyze", "-"], ["analyze", "s3://bucket/t.json"], ["analyze", "sample_traces/hta/trace_filter"],
                 ["analyze", str(big)], ["analyze", TINY, str(big)], ["analyze", "missing.json"]):
        assert _settings(monkeypatch, argv) is None, argv


def test_json_bytes(tmp_path: Path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(b"[]" * 5000))
    assert cli._json_bytes(str(p), p.stat().st_size) == 10000
    q = tmp_path / "t.json"
    q.write_text("[]")
    assert cli._json_bytes(str(q), 2) == 2


def test_cli_run_sets_it_before_polars():
    code = ("import sys, os, traceview.cli.main as cli; assert 'polars' not in sys.modules; "
            f"sys.argv = ['traceview', 'analyze', '--format', 'json', '-o', os.devnull, {TINY!r}]; "
            "cli._exit = lambda code: print(code, __import__('polars').thread_pool_size())\ncli.main()")
    env = {k: v for k, v in os.environ.items() if k != KEY}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=Path(cli.__file__).resolve().parents[2])
    assert out.stdout.split() == ["0", cli.SMALL_INPUT_THREADS]
