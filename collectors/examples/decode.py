"""Batch-1 autoregressive decode of a small GPT with a KV cache: a growing cache launched op by op, or a static
cache replayed as one CUDA graph per token.

One step generates `--tokens` tokens greedily after a `--prompt`-token prefill. `--cache dynamic` appends each
token's keys/values with torch.cat and launches every op of every layer from Python for every token (the
mistake: a few microseconds of GPU work per kernel behind tens of microseconds of host launch).
`--cache static` preallocates the cache at its maximum length, masks the unused tail, and captures the one-token
step as a CUDA graph that is replayed per token (the fix that `torch.compile(mode="reduce-overhead")` with a
static cache applies).

    traceview collect -- python -m collectors.examples.decode --cache dynamic
    traceview collect -- python -m collectors.examples.decode --cache static
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F

import collectors
from collectors.examples._common import StepTimer, device


class Decoder(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.heads, self.d = heads, d
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers)
        )
        self.head = nn.Linear(d, vocab, bias=False)

    def split(self, x: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = (
            self.qkv[i](self.ln1[i](x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        )
        return q, k, v

    def finish(self, x: torch.Tensor, y: torch.Tensor, i: int) -> torch.Tensor:
        b, _, t, _ = y.shape
        x = x + self.proj[i](y.transpose(1, 2).reshape(b, t, self.d))
        return x + self.mlp[i](self.ln2[i](x))

    def step_dynamic(self, tok: torch.Tensor, pos: int, cache: list) -> torch.Tensor:
        x = self.emb(tok) + self.pos.weight[pos : pos + tok.shape[1]]
        for i in range(len(self.qkv)):
            q, k, v = self.split(x, i)
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1)
            x = self.finish(x, y, i)
        return self.head(x[:, -1]).argmax(-1, keepdim=True)

    def step_static(
        self, tok: torch.Tensor, pos: torch.Tensor, kc: list, vc: list, mask: torch.Tensor
    ) -> torch.Tensor:
        # pos is a 1-element device tensor: the graph reads it, so one capture serves every position
        x = self.emb(tok) + self.pos(pos)[None]
        keep = (mask <= pos)[None, None, None]  # attend to the filled part of the preallocated cache only
        for i in range(len(self.qkv)):
            q, k, v = self.split(x, i)
            kc[i].index_copy_(2, pos, k)
            vc[i].index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(q, kc[i], vc[i], attn_mask=keep)
            x = self.finish(x, y, i)
        return self.head(x[:, -1]).argmax(-1, keepdim=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    max_len = args.prompt + args.tokens
    model = Decoder(args.vocab, args.d, args.layers, args.heads, max_len).to(dev, dtype).eval()
    prompt = torch.randint(0, args.vocab, (1, args.prompt), device=dev)
    hd = args.d // args.heads
    kc = [torch.zeros(1, args.heads, max_len, hd, device=dev, dtype=dtype) for _ in range(args.layers)]
    vc = [torch.zeros_like(t) for t in kc]
    mask = torch.arange(max_len, device=dev)
    tok_buf = torch.zeros(1, 1, dtype=torch.long, device=dev)
    pos_buf = torch.zeros(1, dtype=torch.long, device=dev)
    graph = None

    @torch.no_grad()
    def prefill() -> torch.Tensor:
        cache: list = [None] * args.layers
        nxt = model.step_dynamic(prompt, 0, cache)
        for i, (k, v) in enumerate(cache):
            kc[i][:, :, : args.prompt].copy_(k)
            vc[i][:, :, : args.prompt].copy_(v)
        return nxt, cache

    @torch.no_grad()
    def generate() -> torch.Tensor:
        nonlocal graph
        nxt, cache = prefill()
        out = [nxt]
        for j in range(args.tokens - 1):
            pos = args.prompt + j
            if args.cache == "dynamic":
                nxt = model.step_dynamic(nxt, pos, cache)
            else:
                tok_buf.copy_(nxt)
                pos_buf.fill_(pos)
                if graph is None and dev.type == "cuda":
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(3):
                            model.step_static(tok_buf, pos_buf, kc, vc, mask)
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        static_next = model.step_static(tok_buf, pos_buf, kc, vc, mask)
                    generate.static_next = static_next
                if graph is not None:
                    graph.replay()
                    nxt = generate.static_next.clone()
                else:
                    nxt = model.step_static(tok_buf, pos_buf, kc, vc, mask)
            out.append(nxt)
        return torch.cat(out, 1)

    for _ in range(2):
        toks = generate()  # capture / warm up before the timed loop
    timer = StepTimer(dev)
    timer.mark()
    for _ in collectors.steps(range(args.steps)):  # one step = one generate call
        toks = generate()
        timer.mark()
    timer.report(f"decode_{args.cache}")
    print(f"tokens {toks[0, :8].tolist()}")


if __name__ == "__main__":
    main()
