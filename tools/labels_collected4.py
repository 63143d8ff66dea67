"""Write sample_traces/collected4/labels.json and MANIFEST.md from the runs' own manifest files.

The measured numbers come from each run's `rank0.collect.json` (the collector's CUDA-event step periods); the
twins, and what each fix is, are declared here. Run from the repo root: `python tools/labels_collected4.py`
(rewrites both files; a test checks they are current).

Steady state: most runs use the median of the timed wait steps after the first. A DataLoader run's wait steps
first drain the workers' prefetch buffer and then stall periodically when the workers are too few, so its
steady step is the *mean* (throughput) of the second half of its wait steps.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

DIR = Path(__file__).resolve().parent.parent / "sample_traces" / "collected4"

# (problem run, fixed run, the fix, the rule slug that should find the problem)
TWINS = [
    (
        "attn_eager_s2048",
        "attn_flash_s2048",
        "SDPA flash backend instead of eager softmax(QK^T)",
        "materialized-attention",
    ),
    (
        "attn_math_s2048",
        "attn_flash_s2048",
        "SDPA flash backend instead of its math fallback",
        "materialized-attention",
    ),
    (
        "gpt2_eager_attn_s1024",
        "gpt2_sdpa_s1024",
        "attn_implementation='sdpa' instead of 'eager' (HF GPT-2)",
        "materialized-attention",
    ),
    ("conv_fp32", "conv_bf16_cl", "bf16 autocast + channels_last for the convolutions", "fp32-conv"),
    (
        "resnet50_fp32",
        "resnet50_bf16_cl",
        "bf16 autocast + channels_last (torchvision ResNet-50; slower here: a negative twin)",
        "fp32-conv",
    ),
    (
        "small_batch_c4_graph",
        "small_batch_c128_graph",
        "serve 128 rows per call instead of 4",
        "small-grid",
    ),
    ("decode_dynamic", "decode_static", "static KV cache replayed as a CUDA graph", "decode-loop"),
    (
        "hf_generate_dynamic",
        "hf_generate_static",
        "cache_implementation='static' (transformers compiles it)",
        "decode-loop",
    ),
    ("alloc_churn_empty_cache", "alloc_churn", "no torch.cuda.empty_cache() in the loop", "allocator-churn"),
    (
        "gpt2_sdpa_empty_cache",
        "gpt2_sdpa_ref",
        "no torch.cuda.empty_cache() in the loop (HF GPT-2)",
        "allocator-churn",
    ),
    ("input_workers_nw2", "input_workers_nw10", "DataLoader(num_workers=10) instead of 2", "loader-workers"),
    (
        "cnn_input_nw3",
        "cnn_input_nw12",
        "DataLoader(num_workers=12) instead of 3 (torchvision transforms)",
        "loader-workers",
    ),
    (
        "ddp_accum4_gloo2",
        "ddp_accum4_gloo2_nosync",
        "model.no_sync() on the first 3 of 4 micro-batches (gloo, 2 ranks)",
        "accumulation-sync",
    ),
    (
        "ddp_accum4_nccl",
        "ddp_accum4_nccl_nosync",
        "model.no_sync() on the first 3 of 4 micro-batches (NCCL, 1 rank)",
        "accumulation-sync",
    ),
]
DATALOADER = ("input_workers_", "cnn_input_")


def steady_ms(run: str, collect: dict) -> tuple[float, str]:
    wait = collect["unprofiled_step_ms"]
    if run.startswith(DATALOADER):
        tail = wait[len(wait) // 2 :]
        return round(statistics.fmean(tail), 4), f"mean of wait steps {len(wait) - len(tail) + 1}-{len(wait)}"
    return round(statistics.median(wait[1:]), 4), f"median of wait steps 2-{len(wait)}"


def build() -> tuple[dict, str]:
    labels: dict = {}
    for run in sorted(p.parent for p in DIR.glob("*/manifest.json")):
        m = json.loads((run / "manifest.json").read_text())
        collect = json.loads((run / "rank0.collect.json").read_text())
        ms, how = steady_ms(run.name, collect)
        labels[run.name] = {
            "command": m["command"].replace("python3 -m collectors.examples.", ""),
            "unprofiled_step_ms": ms,
            "unprofiled_how": how,
            "profiled_step_ms": m["step_time"]["profiled_ms_median"],
            "ranks": len(sorted(run.glob("rank*.pt.trace.json.gz"))),
            "torch": m["versions"]["torch"],
            "gpu": m["gpu_name"],
            "trace": sorted(run.glob("rank0.*.pt.trace.json.gz"))[0].name,
        }
    twins = []
    for problem, fixed, fix, rule in TWINS:
        a, b = labels[problem]["unprofiled_step_ms"], labels[fixed]["unprofiled_step_ms"]
        saving = round(a - b, 4)
        twins.append(
            {
                "problem": problem,
                "fixed": fixed,
                "fix": fix,
                "rule": rule,
                "measured_fix_saving_ms": saving,
                "measured_fix_saving_pct": round(100 * saving / a, 1),
            }
        )
    doc = {"runs": labels, "twins": twins}
    rows = ["| problem run | fixed run | fix | rule | unprofiled problem / fixed (ms) | measured saving |"]
    rows.append("|---|---|---|---|---|---|")
    for t in twins:
        a, b = labels[t["problem"]]["unprofiled_step_ms"], labels[t["fixed"]]["unprofiled_step_ms"]
        rows.append(
            f"| `{t['problem']}` | `{t['fixed']}` | {t['fix']} | {t['rule']} | {a:.3f} / {b:.3f} | "
            f"{t['measured_fix_saving_ms']:.3f} ms ({t['measured_fix_saving_pct']} %) |"
        )
    runs = ["| run | command | ranks | unprofiled ms (how) | profiled ms |", "|---|---|---|---|---|"]
    for name, r in labels.items():
        runs.append(
            f"| `{name}` | `{r['command']}` | {r['ranks']} | {r['unprofiled_step_ms']:.3f} ({r['unprofiled_how']}) | "
            f"{r['profiled_step_ms']:.3f} |"
        )
    md = HEADER + "\n## Twins\n\n" + "\n".join(rows) + "\n\n## Runs\n\n" + "\n".join(runs) + "\n"
    return doc, md


HEADER = """# Twins for the real-world rules, recorded with `traceview collect` (NVIDIA H200, torch 2.11.0+cu130)

Problem/fixed twins for issue 27's rules: attention that materialises its scores, FP32 convolutions, kernels too
small for the GPU, batch-1 decode, `empty_cache()` in the loop, too few DataLoader workers, DDP accumulation
without `no_sync()`. Each has a small synthetic workload (`collectors/examples/`) and a real-library one (Hugging
Face transformers GPT-2, torchvision ResNet-50 / ResNet-18 transforms), random weights. Recorded 2026-12-02 in one
device call: `collectors/examples/record_collected4.sh OUT compute host` (about 7 min of device time).

Every run is `python3 -m collectors collect --wait 10 --warmup 1 --active 3 --shapes -- ...` (DataLoader runs:
`--wait 24`); each folder holds the trace(s), `manifest.json` and `rank*.collect.json` as written. *unprofiled*: the
collector's CUDA-event step periods over the wait steps (median after the first; DataLoader runs: the mean of the
second half, after the prefetch buffer drained, since stalls are periodic); *profiled*: median of the 3 recorded
steps. A twin's saving = unprofiled problem − unprofiled fixed (same machine, same session). The ResNet-50 twin
measured bf16 + channels_last *slower* than FP32 (cuDNN heuristics, `cudnn.benchmark` off): it is kept as
measured. The NCCL accumulation twin runs one rank (its all-reduce is a local copy); the gloo twin two ranks on
one GPU. Generated by `python tools/labels_collected4.py` (labels.json and this file).
"""


def main() -> int:
    doc, md = build()
    (DIR / "labels.json").write_text(json.dumps(doc, indent=1) + "\n")
    (DIR / "MANIFEST.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
