"""Write sample_traces/collected3/labels.json and MANIFEST.md from the runs' own manifest.json files.

The measured numbers (unprofiled / profiled step times: the collector's CUDA events) come from each run's
manifest; the twins and what each fix is are declared here. Run from the repo root:
`python tools/labels_collected3.py` (rewrites both files; a test checks they are current).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DIR = Path(__file__).resolve().parent.parent / "sample_traces" / "collected3"

# (problem run, fixed run, the fix, rule slug that should find the problem or None when no rule covers it yet)
TWINS = [
    (
        "gpt2_eager_attn",
        "gpt2_sdpa",
        "SDPA (flash / memory-efficient) instead of eager softmax(QK^T) attention",
        "materialized-attention",
    ),
    ("gpt2_fp32", "gpt2_sdpa", "bf16 autocast instead of FP32 GEMMs", "fp32-gemm"),
    (
        "gpt2_sdpa_single",
        "gpt2_sdpa",
        "AdamW(foreach=True) instead of the single-tensor loop",
        "unfused-optimizer",
    ),
    (
        "gpt2_sdpa_single",
        "gpt2_sdpa_fused",
        "AdamW(fused=True) instead of the single-tensor loop",
        "unfused-optimizer",
    ),
    (
        "gpt2_sdpa",
        "gpt2_sdpa_fused",
        "AdamW(fused=True) instead of foreach (a negative control: not faster here)",
        None,
    ),
    ("gpt2_sdpa_item", "gpt2_sdpa_noitem", "no loss.item() every step", "host-sync"),
    ("gpt2_sdpa", "gpt2_sdpa_compiled", "torch.compile", None),
    ("resnet18_fp32", "resnet18_bf16_cl", "bf16 autocast and channels_last for the convolutions", "fp32-conv"),
    (
        "fp32_gemm_n4096_highest",
        "fp32_gemm_n4096_tf32",
        "set_float32_matmul_precision('high') (TF32)",
        "fp32-gemm",
    ),
    ("adamw_l12_single", "adamw_l12_fused", "AdamW(fused=True)", "unfused-optimizer"),
    (
        "elementwise_32mib_eager",
        "elementwise_32mib_compiled",
        "torch.compile fuses the chain",
        "elementwise-chain",
    ),
    (
        "compile_break_r4096",
        "compile_where_r4096",
        "torch.where instead of a data-dependent branch",
        "graph-break",
    ),
    (
        "train_syncs_item_b16",
        "train_syncs_deferred_b16",
        "metrics kept on the GPU, no per-step .item()",
        "host-sync",
    ),
]
# DataLoader runs: the wait steps the collector times run while the workers' prefetch buffer drains, so their
# unprofiled step time is not the steady state; they are kept for verdicts, not for timing comparisons.
NOT_STEADY = {
    "cnn_input_nw2": "2 workers prefetch 4 batches: the 4 timed wait steps consume the buffer",
    "cnn_input_nw8b": "8 workers prefetch 16 batches: the timed wait steps consume the buffer",
}


def build() -> tuple[dict, str]:
    labels: dict = {}
    for run in sorted(p.parent for p in DIR.glob("*/manifest.json")):
        m = json.loads((run / "manifest.json").read_text())
        st = m["step_time"]
        trace = sorted(run.glob("rank0.*.pt.trace.json.gz"))[0].name
        steady = run.name not in NOT_STEADY
        labels[run.name] = {
            "group": "heldout" if steady else "labelled",
            "command": m["command"].replace("python3 -m collectors.examples.", ""),
            "with_stack": m["options"]["with_stack"],
            "modules": m["options"]["modules"],
            "unprofiled_step_ms": st["unprofiled_ms_median"] if steady else None,
            "profiled_step_ms": st["profiled_ms_median"],
            "unprofiled_steady_state": steady,
            **({"why_not_steady": NOT_STEADY[run.name]} if not steady else {}),
            "torch": m["versions"]["torch"],
            "gpu": m["gpu_name"],
            "trace": trace,
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
    lines = [
        "| problem run | fixed run | fix | rule | unprofiled problem / fixed (ms) | measured saving |",
        "|---|---|---|---|---|---|",
    ]
    for t in twins:
        a, b = labels[t["problem"]]["unprofiled_step_ms"], labels[t["fixed"]]["unprofiled_step_ms"]
        lines.append(
            f"| `{t['problem']}` | `{t['fixed']}` | {t['fix']} | {t['rule'] or '(none yet)'} | "
            f"{a:.3f} / {b:.3f} | {t['measured_fix_saving_ms']:.3f} ms ({t['measured_fix_saving_pct']} %) |"
        )
    runs = ["| run | command | stack | modules | unprofiled ms | profiled ms |", "|---|---|---|---|---|---|"]
    for name, r in labels.items():
        u = f"{r['unprofiled_step_ms']:.3f}" if r["unprofiled_step_ms"] is not None else "not steady"
        runs.append(
            f"| `{name}` | `{r['command']}` | {r['with_stack']} | {r['modules']} | {u} | "
            f"{r['profiled_step_ms']:.3f} |"
        )
    md = (
        HEADER
        + "\n## Twins: the measured saving of each fix\n\n"
        + "\n".join(lines)
        + "\n\n## Runs\n\n"
        + "\n".join(runs)
        + "\n"
    )
    return doc, md


HEADER = """# Held-out runs and real-model twins recorded with `traceview collect` (NVIDIA H200, torch 2.11.0+cu130)

Runs that nothing was fitted on: other sizes and options than `../collected2/` for the replay model's
profiler-overhead estimate (issue 25: `--stack`, `--modules`, compiled, CUDA graph, tiny ops), and eager/fixed twins
on real-library models (Hugging Face transformers 5.17 GPT-2, 6 layers d 768 seq 512, random weights; torchvision
0.26 ResNet-18) and on collected2's synthetic workloads at other sizes. Recorded 2026-12-02 in two device calls
(`collectors/examples/record_collected3.sh OUT heldout real`, then `... twins`; about 10.5 min of device time).

Every run is `python3 -m collectors collect --wait 5 --warmup 1 --active 3 --shapes [--stack|--modules] -- python3 -m
collectors.examples.<command>`; each folder holds the trace, `manifest.json` and `rank0.collect.json` as written.
*unprofiled*: median of the collector's CUDA-event step periods over the wait steps 1-4; *profiled*: over the 3
recorded steps. A twin's saving = unprofiled problem − unprofiled fixed (same machine, same session).
The DataLoader runs (`cnn_input_*`) are not timed: their wait steps drain the workers' prefetch buffer.
Generated by `python tools/labels_collected3.py` (labels.json and this file).
"""


def main() -> int:
    doc, md = build()
    (DIR / "labels.json").write_text(json.dumps(doc, indent=1) + "\n")
    (DIR / "MANIFEST.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
