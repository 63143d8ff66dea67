"""A small GPT-style transformer training step (AdamW), with an optional input-bound DataLoader.

Module paths read like user code (emb, blocks.N.{ln1,attn,ln2,mlp}, head), so `--modules` traces show
per-layer time. `--input-bound` feeds it from a Dataset that burns ~40 ms of CPU per batch with
num_workers=0 and pageable memory: the GPU waits for the input pipeline. `--gpt2` sizes it like GPT-2
small (12 layers, d=768, 12 heads, seq 512, batch 8, vocab 50257) for overhead measurements.

    traceview collect --modules --stack --memory -- python -m collectors.examples.tinygpt
    traceview collect -- python -m collectors.examples.tinygpt --input-bound
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.nn import functional as F

from collectors.examples._common import StepTimer, device


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads)
        self.ln2, self.mlp = nn.LayerNorm(d), MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class SlowDataset(torch.utils.data.Dataset):
    """Each item is a whole batch of token ids, made by a CPU-heavy 'tokenizer' (~burn_ms of work)."""

    def __init__(self, n: int, batch: int, seq: int, vocab: int, burn_ms: float) -> None:
        self.n, self.shape, self.vocab, self.burn_s = n, (batch, seq + 1), vocab, burn_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        end, acc = time.perf_counter() + self.burn_s, 0
        while time.perf_counter() < end:  # pure-Python busy work, like slow decoding/augmentation
            acc = (acc * 1103515245 + 12345) % 2**31
        g = torch.Generator().manual_seed(i + acc % 7)
        return torch.randint(0, self.vocab, self.shape, generator=g)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--gpt2", action="store_true", help="GPT-2 small sizes")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast")
    ap.add_argument("--input-bound", action="store_true", help="DataLoader burning --burn-ms per batch")
    ap.add_argument("--burn-ms", type=float, default=40.0)
    args = ap.parse_args()
    if args.gpt2:
        args.layers, args.d, args.heads, args.seq, args.batch, args.vocab = 12, 768, 12, 512, 8, 50257
    dev = device()
    torch.manual_seed(0)
    model = TinyGPT(args.vocab, args.d, args.layers, args.heads, args.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)  # its step() marks the collector's boundaries

    if args.input_bound:
        ds = SlowDataset(args.steps, args.batch, args.seq, args.vocab, args.burn_ms)
        batches = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0, pin_memory=False))
    else:
        fixed = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev)
        batches = (fixed for _ in range(args.steps))

    timer = StepTimer(dev)
    timer.mark()
    for tokens in batches:
        tokens = tokens.to(dev)
        x, y = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.mark()
    timer.report("tinygpt_gpt2" if args.gpt2 else ("tinygpt_input_bound" if args.input_bound else "tinygpt"))
    print(f"loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
