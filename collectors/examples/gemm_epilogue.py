"""GEMMs whose bias add and GELU run as separate kernels, vs the same math in the GEMM's epilogue.

`--model mlp`: `--layers` blocks of `gelu(x @ w1 + b1) @ w2 + b2` on `--rows` x `--d` bf16 rows (eager: mm, add,
gelu, mm, add: the bias and the activation each read and write the [M, N] product again). `--model bert`:
Hugging Face BERT (random weights, bf16) whose intermediate layer is `gelu(dense(x))`.
`--fix none`: as written; `--fix fused`: `torch._addmm_activation(b, x, w, use_gelu=True)` (cuBLASLt's
bias + GELU epilogue) and `torch.addmm` for the plain bias (BERT: its intermediate layer only);
`--fix compile`: torch.compile (Inductor folds bias and GELU into one kernel after the GEMM, or its epilogue).
Inference steps (no optimizer: steps are marked with collectors.steps). The twins for `gemm-epilogue`.

    traceview collect --shapes -- python -m collectors.examples.gemm_epilogue --model mlp --fix none
    traceview collect --shapes -- python -m collectors.examples.gemm_epilogue --model mlp --fix fused
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F

import collectors
from collectors.examples._common import StepTimer, device


def mlp(args: argparse.Namespace, dev: torch.device, dtype: torch.dtype) -> tuple[callable, tuple]:
    g = torch.Generator(device="cpu").manual_seed(0)
    d, h = args.d, 4 * args.d
    params = [
        (
            (torch.randn(d, h, generator=g) / d**0.5).to(dev, dtype),
            torch.zeros(h).to(dev, dtype),
            (torch.randn(h, d, generator=g) / h**0.5).to(dev, dtype),
            torch.zeros(d).to(dev, dtype),
        )
        for _ in range(args.layers)
    ]
    x = torch.randn(args.rows, d, generator=g).to(dev, dtype)

    def eager(x: torch.Tensor) -> torch.Tensor:
        for w1, b1, w2, b2 in params:
            x = F.gelu(x @ w1 + b1) @ w2 + b2
        return x

    def fused(x: torch.Tensor) -> torch.Tensor:
        for w1, b1, w2, b2 in params:
            x = torch.addmm(b2, torch._addmm_activation(b1, x, w1, use_gelu=True), w2)
        return x

    fn = {"none": eager, "fused": fused, "compile": torch.compile(eager)}[args.fix]
    return fn, (x,)


def bert(args: argparse.Namespace, dev: torch.device, dtype: torch.dtype) -> tuple[callable, tuple]:
    from transformers import BertConfig, BertModel
    from transformers.models.bert import modeling_bert

    if args.fix == "fused":  # the intermediate layer's dense + GELU as one cuBLASLt GEMM with its epilogue

        def forward(self: modeling_bert.BertIntermediate, hidden: torch.Tensor) -> torch.Tensor:
            flat = hidden.reshape(-1, hidden.shape[-1])
            out = torch._addmm_activation(self.dense.bias, flat, self.dense.weight.t(), use_gelu=True)
            return out.view(*hidden.shape[:-1], -1)

        modeling_bert.BertIntermediate.forward = forward
    cfg = BertConfig(
        num_hidden_layers=args.layers,
        hidden_size=args.d,
        num_attention_heads=max(1, args.d // 64),
        intermediate_size=4 * args.d,
        hidden_act="gelu",
        vocab_size=args.vocab,
        max_position_embeddings=max(512, args.seq),
    )
    model = BertModel(cfg, add_pooling_layer=False).to(dev, dtype).eval()
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    run = torch.compile(model) if args.fix == "compile" else model
    return (lambda i: run(input_ids=i).last_hidden_state), (ids,)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "bert"], default="mlp")
    ap.add_argument("--fix", choices=["none", "fused", "compile"], default="none")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--rows", type=int, default=8192, help="mlp: rows per step")
    ap.add_argument("--d", type=int, default=1024, help="model width (the hidden layer is 4x)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32, help="bert: sequences per step")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=30522)
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    fn, inputs = (mlp if args.model == "mlp" else bert)(args, dev, dtype)
    with torch.no_grad():
        for _ in range(3):
            out = fn(*inputs)  # compile and cuBLAS heuristics before the timed loop
        timer = StepTimer(dev)
        timer.mark()
        for _ in collectors.steps(range(args.steps)):  # no optimizer: mark step boundaries explicitly
            out = fn(*inputs)
            timer.mark()
    timer.report(f"epilogue_{args.model}_{args.fix}")
    print(f"checksum {float(out.flatten()[:4].float().sum()):.3f}")


if __name__ == "__main__":
    main()
