"""Batch-1 greedy generation with Hugging Face GPT-2 (random weights): the default dynamic KV cache, or the
static cache that transformers compiles with CUDA graphs.

One step is one `model.generate(..., max_new_tokens=N)` call. `--cache dynamic` (the default in transformers)
grows the cache every token and launches each layer's ops from Python (launch-bound at batch 1).
`--cache static` passes `cache_implementation="static"`: a fixed-shape cache, which transformers' generate
compiles (`torch.compile`, mode "reduce-overhead": CUDA graphs) so each token is one graph replay.

    traceview collect -- python -m collectors.examples.hf_generate --cache dynamic
    traceview collect -- python -m collectors.examples.hf_generate --cache static
"""

from __future__ import annotations

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, GPT2Config

    dev = device()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=args.layers, n_positions=1024)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype).to(dev).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, args.prompt), device=dev)
    kw = {"max_new_tokens": args.tokens, "min_new_tokens": args.tokens, "do_sample": False, "pad_token_id": 0}
    if args.cache == "static":
        kw["cache_implementation"] = "static"

    def generate() -> torch.Tensor:
        with torch.no_grad():
            return model.generate(ids, **kw)

    for _ in range(3):
        out = generate()  # compile and capture before the timed loop
    timer = StepTimer(dev)
    timer.mark()
    for _ in collectors.steps(range(args.steps)):  # one step = one generate call
        out = generate()
        timer.mark()
    timer.report(f"hf_generate_{args.cache}")
    print(f"generated {out.shape[1] - args.prompt} tokens")


if __name__ == "__main__":
    main()
