"""Issue 13, item 10: the atheris fuzz target (tests/fuzz/fuzz_loader.py) for a bounded number of
iterations (not a time bound), from seeds generated here. Any exception other than a TraceError fails."""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import dump, mini_trace

pytest.importorskip("atheris")

FUZZ = Path(__file__).resolve().parent / "fuzz"
RUNS = 400


def _seeds(d: Path) -> None:
    """Valid and odd traces; the first byte of each picks the C (0) or the Python (1) path."""
    clean = dump(mini_trace())
    odd = dump(mini_trace(kernel_args={"registers per thread": 254.0, "grid": "4,32,1"}))
    legacy = json.dumps(mini_trace()["traceEvents"]).encode()
    for k, body in enumerate([clean, odd, legacy, gzip.compress(clean, mtime=0), clean.decode().encode("utf-16"),
                              clean[: len(clean) * 2 // 3]]):
        for path in (b"\x00", b"\x01"):
            (d / f"seed{k}{path[0]}").write_bytes(path + body)


def test_fuzz_loader_bounded_iterations(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _seeds(corpus)
    # libFuzzer's RSS check reads the child's peak RSS, which Linux carries over from this (pytest) process across
    # fork/exec: after a long suite that alone can pass the default 2 GB. The bound is 2 GB above what we hold.
    rss_limit = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + 2048
    r = subprocess.run([sys.executable, str(FUZZ / "fuzz_loader.py"), f"-runs={RUNS}", "-seed=1",
                        f"-rss_limit_mb={rss_limit}",
                        f"-dict={FUZZ / 'json.dict'}", f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    crashes = sorted(tmp_path.glob("crash-*"))
    assert r.returncode == 0 and not crashes, f"{crashes}: {r.stderr[-4000:]}"
    assert f"Done {RUNS} runs" in r.stderr
