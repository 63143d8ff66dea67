"""Where the FLOPs and bytes model breaks a physical limit: ops whose kernels, as the model counts their work, ran
faster than their math unit's peak or moved more than the HBM bandwidth allows (`roofline.kernel_bound`).

A measured kernel cannot beat its device, so each row is a model error to look at (an operand layout read wrong, a
tensor counted that the kernel never reads) or, for bytes up to ~1.3x, data the L2 cache held. The sweep that found
the flash / memory-efficient layout, TF32 kernels measured against the FP32 peak, and nll_loss's and copy_'s bytes.

    python tools/limits.py [TRACE_OR_DIR ...]     # default: every trace under sample_traces/
    python tools/limits.py --min-us 5 --bw 1.3    # kernels of at least 5 µs; bandwidth rows above 1.3x
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traceview.analyses.roofline import kernel_bound, peak_expr  # noqa: E402
from traceview.analyses.specs import trace_spec  # noqa: E402
from traceview.errors import TraceError  # noqa: E402
from traceview.ingest.loader import load_file  # noqa: E402


def traces(args: list[str]) -> list[Path]:
    """The rank traces under the paths given (a trace file, or a folder searched recursively)."""
    out = []
    for a in args or [str(ROOT / "sample_traces")]:
        p = Path(a)
        # (a bundled trace is a .json.gz, as tools/golden.py reads them: labels and manifests are plain .json)
        out += sorted(p.rglob("*.json.gz")) if p.is_dir() else [p]
    return out


def over(path: Path, min_ns: int = 5000, bw_limit: float = 1.3) -> pl.DataFrame:
    """[op_name, category, kernels, flops_x_peak, bytes_x_bw] of one trace's ops whose kernels (each at least
    `min_ns`) beat their math unit's peak (flops_x_peak > 1) or moved more than `bw_limit` x the bandwidth."""
    t = load_file(path)
    if not hasattr(t, "gpu") or t.gpu.height == 0:
        return pl.DataFrame()
    spec = trace_spec(t.meta)
    kb = kernel_bound(t, spec).filter(pl.col("flops").is_not_null()).join(t.gpu.select("i", "dur"), on="i")
    kb = kb.filter(pl.col("dur") >= min_ns).with_columns(
        flops_x_peak=pl.col("flops") / (pl.col("dur") * 1e-9) / peak_expr(spec),
        bytes_x_bw=pl.col("bytes") / (pl.col("dur") * 1e-9) / spec.bw)
    bad = kb.filter((pl.col("flops_x_peak") > 1.0) | (pl.col("bytes_x_bw") > bw_limit))
    return bad.group_by("op_name", "category").agg(
        pl.len().alias("kernels"), pl.col("flops_x_peak").max().round(2), pl.col("bytes_x_bw").max().round(2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--min-us", type=float, default=5.0, help="shortest kernel read (µs): launch latency below")
    ap.add_argument("--bw", type=float, default=1.3, help="bandwidth multiple above which a row is listed")
    a = ap.parse_args(argv)
    found = 0
    for p in traces(a.paths):
        try:
            rows = over(p, int(a.min_us * 1000), a.bw)
        except TraceError:
            continue
        for r in rows.iter_rows(named=True):
            found += 1
            print(f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}\t{r['op_name']}\t{r['category']}\t"
                  f"{r['kernels']} kernels\tflops {r['flops_x_peak']}x peak\tbytes {r['bytes_x_bw']}x bandwidth")
    print(f"{found} op(s) over a limit", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
