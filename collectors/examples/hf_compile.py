"""Hugging Face GPT-2 inference (random weights, bf16) eager or under torch.compile, with the mistakes as flags.

- `--mode eager|compile|reduce-overhead`: eager; `torch.compile(model)`; `mode="reduce-overhead"` (Inductor's
  kernels replayed as CUDA graphs). At `--batch 1` and a short `--seq` eager GPT-2 launches hundreds of
  kernels of a few µs each: launch-bound, which reduce-overhead fixes.
- `--shapes fixed|vary|dynamic`: `vary` feeds a new sequence length every step (`--seq + 8 * step`, automatic
  dynamic shapes off, as a server without padding buckets gets), so the compiled model recompiles inside every
  step; `dynamic` feeds the same lengths with the sequence dimension marked dynamic
  (`torch._dynamo.maybe_mark_dynamic`): one symbolic graph, no recompile.
- `--hook none|item|tensor|check|async`: a forward hook on every transformer block. `item` logs its output norm
  read on the host with `.item()` (a graph break and a sync in each block, as a debugging/logging hook does),
  `tensor` keeps the norm on the GPU (one graph; collected5 records this pair). `check` tests the output for
  NaN/inf in Python (`if not torch.isfinite(h).all(): raise`: a data-dependent branch, a break and a sync),
  `async` with `torch._assert_async` (on the GPU, one graph): a pair whose break hands Dynamo no host value
  (a logged `.item()` float can be specialised on by Dynamo).

Steps are marked with collectors.steps (no optimizer). The real-model twins for `launch-bound`, `recompile`
and `graph-break`.

    traceview collect --shapes -- python -m collectors.examples.hf_compile --mode eager --batch 1 --seq 32
    traceview collect --shapes -- python -m collectors.examples.hf_compile --mode compile --shapes vary
"""

from __future__ import annotations

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile", "reduce-overhead"], default="eager")
    ap.add_argument("--shapes", choices=["fixed", "vary", "dynamic"], default="fixed")
    ap.add_argument("--hook", choices=["none", "item", "tensor", "check", "async"], default="none")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, GPT2Config

    cfg = torch._dynamo.config
    if args.shapes != "fixed":
        cfg.automatic_dynamic_shapes = False  # every new length is a new static graph unless marked dynamic
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 4096)  # never give up and fall back to eager
    dev = device()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    longest = args.seq + 8 * (args.steps + 4)
    gcfg = GPT2Config(
        n_layer=args.layers,
        n_embd=args.d,
        n_head=max(1, args.d // 64),
        n_positions=longest,
        vocab_size=args.vocab,
    )
    model = AutoModelForCausalLM.from_config(gcfg, attn_implementation="sdpa").to(dev, dtype).eval()
    norms: list = []

    def hook(module: torch.nn.Module, inputs: tuple, output: tuple) -> None:
        h = output[0] if isinstance(output, tuple) else output
        if args.hook in ("item", "tensor"):
            n = h.float().norm()
            norms.append(n.item() if args.hook == "item" else n.detach())
        elif args.hook == "async":
            torch._assert_async(torch.isfinite(h).all())
        elif not torch.isfinite(h).all():  # read on the host: Dynamo breaks the graph here
            raise FloatingPointError(f"non-finite activations after {type(module).__name__}")

    if args.hook != "none":
        for block in model.transformer.h:
            block.register_forward_hook(hook)
    run = (
        model
        if args.mode == "eager"
        else torch.compile(model, mode=None if args.mode == "compile" else args.mode)
    )

    def tokens(i: int) -> torch.Tensor:
        seq = args.seq + 8 * (i + 1) if args.shapes != "fixed" else args.seq
        ids = torch.randint(0, args.vocab, (args.batch, seq), device=dev)
        if args.shapes == "dynamic":
            torch._dynamo.maybe_mark_dynamic(ids, 1)
        return ids

    with torch.no_grad():
        for _ in range(3 if args.shapes == "fixed" else 1):  # compile before the timed loop
            out = run(input_ids=tokens(-1), use_cache=False).logits
            norms.clear()  # each call starts with an empty log, as every timed step does
        timer = StepTimer(dev)
        timer.mark()
        for i in collectors.steps(range(args.steps)):  # no optimizer: mark step boundaries explicitly
            out = run(input_ids=tokens(i), use_cache=False).logits
            norms.clear()
            timer.mark()
    timer.report(f"gpt2_{args.mode}_{args.shapes}_hook_{args.hook}_b{args.batch}")
    print(f"checksum {float(out[0, 0, :4].float().sum()):.3f}")


if __name__ == "__main__":
    main()
