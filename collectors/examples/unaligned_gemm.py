"""A language-model head trained in bf16 whose vocabulary is not a multiple of 8: its GEMMs' row stride is not a
multiple of 16 bytes, so cuBLAS cannot use the Tensor Cores' aligned (TMA / vectorized) loads and falls back to an
older, several times slower kernel. `--vocab 50304` (padded to a multiple of 64, as nanoGPT does) is the fixed twin.

Each step runs the head's forward and backward: logits = x · Wᵀ ([tokens, d] × [d, vocab]), then the gradients of x
([tokens, vocab] × [vocab, d]) and of W ([vocab, tokens] × [tokens, d]) — the three GEMMs of GPT-2's LM head.

traceview collect --shapes -- python -m collectors.examples.unaligned_gemm [--vocab 50304]
"""

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--d", type=int, default=768)
    args = ap.parse_args()
    dev = device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    x = torch.randn(args.tokens, args.d, device=dev, dtype=dtype, requires_grad=True)
    w = torch.randn(args.vocab, args.d, device=dev, dtype=dtype, requires_grad=True)
    grad = torch.randn(args.tokens, args.vocab, device=dev, dtype=dtype) / args.vocab
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        x.grad = w.grad = None
        logits = torch.nn.functional.linear(x, w)
        logits.backward(grad)
        timer.mark()
        collectors.step()
    timer.report(f"unaligned_gemm_v{args.vocab}")
    print(f"checksum {float(w.grad[0, :4].float().sum()):.3f}")


if __name__ == "__main__":
    main()
