"""Golden digests: the sha256 of the `traceview analyze --format json` document of every bundled trace and
job folder (`tests/golden_digests.json`); `--check` recomputes and compares, `--update` rewrites the file.

A refactor that moves code must leave every digest unchanged; a change that alters numbers on purpose runs
`python tools/golden.py --update` and says why in its commit.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
DIGESTS = ROOT / "tests" / "golden_digests.json"
# a representative subset for the default test run: every input kind (one GPU trace per family, a CPU-only
# trace, ROCm, a collector run with its manifest, NCCL and gloo jobs, a 2-rank HTA job)
SUBSET = (
    "gpu_h200/sync_item_nonzero_cpu.json.gz",
    "gpu_h200/launch_bound_tiny_ops.json.gz",
    "gpu_h200_compile/compile_graph_break.json.gz",
    "gpu_h200_memory/memory_pressure_empty_cache.json.gz",
    "gpu_h200_real/hf_gpt2_train_bf16.json.gz",
    "cpu_trace_example_torch2.13.json.gz",
    "cpu_collected/tinygpt_train",
    "collected/train_tinygpt_modules",
    "collected2/adamw_foreach",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/trace_filter",
    "nccl_h200x2/ddp_rank1_slowed",
    "gloo_straggler/slowed",
)


def _is_trace(p: Path) -> bool:
    return p.name.endswith(".json.gz") and p.is_file()


def inputs() -> list[str]:
    """Every bundled trace file, and every folder analyzed as one input (a collector run with its manifest,
    or a folder of rank files: the ranks of a job), as paths relative to sample_traces/. A folder of unrelated
    traces (gpu_h200/) is not a job: its files count one by one."""
    out: set[str] = set()
    for p in SAMPLES.rglob("*"):
        if _is_trace(p):
            out.add(p.relative_to(SAMPLES).as_posix())
        elif p.is_dir():
            traces = [c for c in p.iterdir() if _is_trace(c)]
            if traces and (
                (p / "manifest.json").is_file() or (len(traces) > 1 and all("rank" in c.name for c in traces))
            ):
                out.add(p.relative_to(SAMPLES).as_posix())
    return sorted(out)


def document(rel: str) -> tuple[int, bytes]:
    """(exit code, stdout bytes) of `traceview analyze sample_traces/REL --format json`, run in-process from
    the repository root (the document holds the input's path as given)."""
    from traceview.cli.main import main

    buf = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = main(["analyze", f"sample_traces/{rel}", "--format", "json"])
    finally:
        os.chdir(cwd)
    return rc, buf.getvalue().encode()


def digest(rel: str) -> str:
    rc, out = document(rel)
    return f"rc={rc} sha256={hashlib.sha256(out).hexdigest()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="rewrite tests/golden_digests.json")
    ap.add_argument("--subset", action="store_true", help="only the representative subset")
    ap.add_argument("only", nargs="*", help="inputs (relative to sample_traces/) to check")
    a = ap.parse_args(argv)
    names = a.only or (list(SUBSET) if a.subset else inputs())
    old = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
    new, bad = {}, []
    t0 = time.perf_counter()
    for rel in names:
        new[rel] = digest(rel)
        if not a.update and old.get(rel) != new[rel]:
            bad.append(rel)
            print(f"changed: {rel}: {old.get(rel)} -> {new[rel]}")
    took = time.perf_counter() - t0
    if a.update:
        merged = new if not a.only and not a.subset else {**old, **new}
        DIGESTS.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        print(f"wrote {len(merged)} digests to {DIGESTS.relative_to(ROOT)} ({took:.1f} s)")
        return 0
    print(f"{len(names) - len(bad)}/{len(names)} unchanged ({took:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
