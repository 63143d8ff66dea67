"""Write a recorded twin set's labels.json and MANIFEST.md (sample_traces/<set>/) from the runs' own manifests.

The measured numbers (unprofiled / profiled step times: the collector's CUDA events, or wall clock on a CPU
run) come from each run's `manifest.json` and `rank0.collect.json`; the twins, what each fix is and the rule
that should find the problem are declared here, per set. Run from the repo root:
`python tools/labels.py SET` (SET: collected3 | collected4 | collected5; rewrites both files; a test checks
they are current).

Steady state, per set: collected3 takes the manifest's median over its wait steps and leaves its DataLoader
runs untimed; collected4 and later take the median of the wait steps after the first, and for a DataLoader
run (whose wait steps first drain the workers' prefetch buffer and then stall periodically when the workers
are too few) the *mean* (throughput) of the second half of its wait steps.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TRACES = Path(__file__).resolve().parent.parent / "sample_traces"
DATALOADER = ("input_workers_", "cnn_input_")


@dataclass(frozen=True)
class TwinSet:
    """One recorded set: its twins (problem, fixed, fix, rule slug or None), steady-state rule and MANIFEST header."""

    header: str
    twins: list[tuple[str, str, str, str | None]]
    steady: Callable[[str, dict, dict], tuple[float | None, str | None]]
    record: Callable[[str, dict, dict, float | None, str | None, Path], dict]
    runs_table: Callable[[dict], list[str]]
    twins_title: str = "Twins"


def manifest_median(run: str, manifest: dict, collect: dict) -> tuple[float | None, str | None]:
    """collected3: the manifest's median over all wait steps; None for a run in the set's not-steady list."""
    if run in C3_NOT_STEADY:
        return None, None
    return manifest["step_time"]["unprofiled_ms_median"], None


def steady_tail(run: str, manifest: dict, collect: dict) -> tuple[float | None, str | None]:
    """Median of the wait steps after the first; a DataLoader run: the mean of the second half of its wait steps."""
    wait = collect["unprofiled_step_ms"]
    if run.startswith(DATALOADER):
        tail = wait[len(wait) // 2 :]
        return round(statistics.fmean(tail), 4), f"mean of wait steps {len(wait) - len(tail) + 1}-{len(wait)}"
    return round(statistics.median(wait[1:]), 4), f"median of wait steps 2-{len(wait)}"


def _command(m: dict) -> str:
    return m["command"].replace("python3 -m collectors.examples.", "")


def _trace(run_dir: Path) -> str:
    return sorted(run_dir.glob("rank0.*.pt.trace.json.gz"))[0].name


def record_options(run: str, m: dict, collect: dict, ms: float | None, how: str | None, d: Path) -> dict:
    """collected3's run record: group, profiler options, steady flag."""
    steady = ms is not None
    return {
        "group": "heldout" if steady else "labelled",
        "command": _command(m),
        "with_stack": m["options"]["with_stack"],
        "modules": m["options"]["modules"],
        "unprofiled_step_ms": ms,
        "profiled_step_ms": m["step_time"]["profiled_ms_median"],
        "unprofiled_steady_state": steady,
        **({"why_not_steady": C3_NOT_STEADY[run]} if not steady else {}),
        "torch": m["versions"]["torch"],
        "gpu": m["gpu_name"],
        "trace": _trace(d),
    }


def record_ranks(run: str, m: dict, collect: dict, ms: float | None, how: str | None, d: Path) -> dict:
    """collected4's run record: how the steady step was taken, ranks."""
    return {
        "command": _command(m),
        "unprofiled_step_ms": ms,
        "unprofiled_how": how,
        "profiled_step_ms": m["step_time"]["profiled_ms_median"],
        "ranks": len(sorted(d.glob("rank*.pt.trace.json.gz"))),
        "torch": m["versions"]["torch"],
        "gpu": m["gpu_name"],
        "trace": _trace(d),
    }


def record_full(run: str, m: dict, collect: dict, ms: float | None, how: str | None, d: Path) -> dict:
    """collected5's run record: collected4's plus the profiler options and how the step was timed."""
    r = record_ranks(run, m, collect, ms, how, d)
    return {
        "command": r.pop("command"),
        "with_stack": m["options"]["with_stack"],
        "modules": m["options"]["modules"],
        "timed_by": collect.get("step_time_method"),
        **r,
    }


def table_options(labels: dict) -> list[str]:
    out = ["| run | command | stack | modules | unprofiled ms | profiled ms |", "|---|---|---|---|---|---|"]
    for name, r in labels.items():
        u = f"{r['unprofiled_step_ms']:.3f}" if r["unprofiled_step_ms"] is not None else "not steady"
        out.append(
            f"| `{name}` | `{r['command']}` | {r['with_stack']} | {r['modules']} | {u} | "
            f"{r['profiled_step_ms']:.3f} |"
        )
    return out


def table_ranks(labels: dict) -> list[str]:
    out = ["| run | command | ranks | unprofiled ms (how) | profiled ms |", "|---|---|---|---|---|"]
    for name, r in labels.items():
        out.append(
            f"| `{name}` | `{r['command']}` | {r['ranks']} | {r['unprofiled_step_ms']:.3f} ({r['unprofiled_how']}) | "
            f"{r['profiled_step_ms']:.3f} |"
        )
    return out


def table_full(labels: dict) -> list[str]:
    out = [
        "| run | command | stack | timed by | unprofiled ms (how) | profiled ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in labels.items():
        out.append(
            f"| `{name}` | `{r['command']}` | {r['with_stack']} | {r['timed_by']} | "
            f"{r['unprofiled_step_ms']:.3f} ({r['unprofiled_how']}) | {r['profiled_step_ms']:.3f} |"
        )
    return out


def build(name: str) -> tuple[dict, str]:
    """(labels.json document, MANIFEST.md text) of set `name`, from the runs found in sample_traces/<name>/."""
    spec, d = SETS[name], TRACES / name
    labels: dict = {}
    for run in sorted(p.parent for p in d.glob("*/manifest.json")):
        m = json.loads((run / "manifest.json").read_text())
        collect = json.loads((run / "rank0.collect.json").read_text())
        ms, how = spec.steady(run.name, m, collect)
        labels[run.name] = spec.record(run.name, m, collect, ms, how, run)
    twins = []
    for problem, fixed, fix, rule in spec.twins:
        variant = FIX_VARIANTS.get((problem, fixed))
        a, b = labels[problem]["unprofiled_step_ms"], labels[fixed]["unprofiled_step_ms"]
        saving = round(a - b, 4)
        twins.append(
            {
                "problem": problem,
                "fixed": fixed,
                "fix": fix,
                "rule": rule,
                **({"fix_variant": variant} if variant else {}),
                "measured_fix_saving_ms": saving,
                "measured_fix_saving_pct": round(100 * saving / a, 1),
            }
        )
    rows = ["| problem run | fixed run | fix | rule | unprofiled problem / fixed (ms) | measured saving |"]
    rows.append("|---|---|---|---|---|---|")
    for t in twins:
        a, b = labels[t["problem"]]["unprofiled_step_ms"], labels[t["fixed"]]["unprofiled_step_ms"]
        suffix = f" (its `{t['fix_variant']}` variant)" if "fix_variant" in t else ""
        rows.append(
            f"| `{t['problem']}` | `{t['fixed']}` | {t['fix']} | {t['rule'] or '(none yet)'}{suffix} | {a:.3f} / {b:.3f} | "
            f"{t['measured_fix_saving_ms']:.3f} ms ({t['measured_fix_saving_pct']} %) |"
        )
    md = (
        spec.header
        + f"\n## {spec.twins_title}\n\n"
        + "\n".join(rows)
        + "\n\n## Runs\n\n"
        + "\n".join(spec.runs_table(labels))
        + "\n"
    )
    return {"runs": labels, "twins": twins}, md


# ---------------------------------------------------------------------------------------------------- the sets
C3_NOT_STEADY = {
    "cnn_input_nw2": "2 workers prefetch 4 batches: the 4 timed wait steps consume the buffer",
    "cnn_input_nw8b": "8 workers prefetch 16 batches: the timed wait steps consume the buffer",
}
C3_HEADER = """# Held-out runs and real-model twins recorded with `traceview collect` (NVIDIA H200, torch 2.11.0+cu130)

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
Generated by `python tools/labels.py collected3` (labels.json and this file).
"""
C3_TWINS = [
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
    (
        "gpt2_sdpa",
        "gpt2_sdpa_compiled",
        "torch.compile (Inductor fuses the elementwise chains and pads the LM head's GEMMs to a multiple of 8)",
        "elementwise-chain+unaligned-gemm",
    ),
    (
        "resnet18_fp32",
        "resnet18_bf16_cl",
        "bf16 autocast and channels_last for the convolutions",
        "fp32-conv",
    ),
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

C4_HEADER = """# Twins for the real-world rules, recorded with `traceview collect` (NVIDIA H200, torch 2.11.0+cu130)

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
one GPU. Generated by `python tools/labels.py collected4` (labels.json and this file).
"""
C4_TWINS = [
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
    ("small_batch_c4_graph", "small_batch_c128_graph", "serve 128 rows per call instead of 4", "small-grid"),
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

C5_HEADER = """# Second and real-model twins, and held-out profiler-cost runs (NVIDIA H200, torch 2.11.0+cu130)

Issue 25 asks every rule for two measured twins, one on a real-library model, and the profiler-cost model checked
on held-out runs with `with_stack=True`, compiled, CUDA-graph and tiny-op steps. This set adds twins for the
GEMM epilogue (synthetic MLP, Hugging Face BERT's intermediate layer), pageable copies (synthetic, torchvision
ResNet-18 inputs), recompiles, graph breaks and launch-bound steps on Hugging Face GPT-2 under torch.compile,
small grids on torchvision ResNet-18 served one image per call, a second input-bound twin and CPU-only
cpu-op-overhead twins; random weights. Recorded 2026-12-02 in two device calls,
`collectors/examples/record_collected5.sh OUT eager`, then `... compile cpu` (the graph-break pair is the
`--hook item|tensor` one: a hook logging each block's output norm with `.item()` vs keeping it on the GPU). The
CPU GPT-2 twin measured foreach AdamW *slower* than the single-tensor loop: kept as measured.

Every run is `python3 -m collectors collect --wait 10 --warmup 1 --active 3 --shapes [--stack] -- ...` (DataLoader
runs: `--wait 24`; recompiling runs: fewer steps); each folder holds the trace, `manifest.json` and
`rank0.collect.json` as written. *unprofiled*: the collector's step periods over the wait steps (CUDA events; wall
clock on the CPU-only runs): the median after the first, and for DataLoader runs the mean of the second half;
*profiled*: median of the 3 recorded steps. A twin's saving = unprofiled problem − unprofiled fixed (same machine,
same session). Generated by `python tools/labels.py collected5` (labels.json and this file).
"""
C5_TWINS: list[tuple[str, str, str, str | None]] = [
    (
        "epilogue_mlp_eager",
        "epilogue_mlp_fused",
        "torch._addmm_activation: bias + GELU in the GEMM's epilogue",
        "gemm-epilogue",
    ),
    ("epilogue_mlp_eager", "epilogue_mlp_compiled", "torch.compile fuses bias + GELU", "gemm-epilogue"),
    (
        "epilogue_bert_eager",
        "epilogue_bert_fused",
        "BertIntermediate through torch._addmm_activation (HF BERT)",
        "gemm-epilogue",
    ),
    ("h2d_mlp_pageable", "h2d_mlp_pinned", "pinned host buffer + non_blocking copy", "pageable-memcpy"),
    (
        "h2d_resnet18_pageable",
        "h2d_resnet18_pinned",
        "pinned input batch + non_blocking copy (torchvision ResNet-18)",
        "pageable-memcpy",
    ),
    ("gpt2c_recompile", "gpt2c_mark_dynamic", "mark_dynamic on the sequence dim (HF GPT-2)", "recompile"),
    (
        "gpt2c_hook_item",
        "gpt2c_hook_tensor",
        "a logging hook keeps its norm on the GPU, no .item() (HF GPT-2)",
        "graph-break",
    ),
    (
        "gpt2_b1_eager",
        "gpt2_b1_reduce_overhead",
        "torch.compile(mode='reduce-overhead') at batch 1 (HF GPT-2)",
        "launch-bound",
    ),
    (
        "resnet18_serve_c1_graph",
        "resnet18_serve_c32_graph",
        "serve 32 images per call instead of 1 (torchvision ResNet-18, CUDA graph)",
        "small-grid",
    ),
    ("input_workers_nw0", "input_workers_nw10", "DataLoader(num_workers=10) instead of 0", "input-bound"),
    ("cpu_adamw_single", "cpu_adamw_foreach", "AdamW(foreach=True) on CPU", "cpu-op-overhead"),
    (
        "cpu_gpt2_single",
        "cpu_gpt2_foreach",
        "AdamW(foreach=True) on CPU (HF GPT-2, 2 layers d 128)",
        "cpu-op-overhead",
    ),
]

#: (problem, fixed) -> the rule's fix variant the fixed twin applies, where it is not the rule's first advice (the
#: rule's `fix_variants(ctx)` prices it; tools/predictions.py compares the twin with that). gemm-epilogue's advice is
#: the GEMM's own epilogue (the `_fused` twins, torch._addmm_activation); torch.compile is a different fix: Inductor
#: folds the lone bias into addmm but runs bias + GELU as one Triton pointwise kernel after the GEMM, which still
#: reads and writes the [M, N] product once (the compiled trace's `triton_poi_fused_add_gelu_0`)
FIX_VARIANTS = {("epilogue_mlp_eager", "epilogue_mlp_compiled"): "compile"}

SETS = {
    "collected3": TwinSet(
        C3_HEADER,
        C3_TWINS,
        manifest_median,
        record_options,
        table_options,
        "Twins: the measured saving of each fix",
    ),
    "collected4": TwinSet(C4_HEADER, C4_TWINS, steady_tail, record_ranks, table_ranks),
    "collected5": TwinSet(C5_HEADER, C5_TWINS, steady_tail, record_full, table_full),
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in SETS:
        print(f"usage: python tools/labels.py {{{' | '.join(SETS)}}}", file=sys.stderr)
        return 2
    doc, md = build(argv[0])
    (TRACES / argv[0] / "labels.json").write_text(json.dumps(doc, indent=1) + "\n")
    (TRACES / argv[0] / "MANIFEST.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
