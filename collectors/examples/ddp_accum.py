"""DDP training with gradient accumulation: all-reducing every micro-batch, or only the last (no_sync()).

One optimizer step accumulates `--accum` micro-batches. Without `--no-sync` DDP all-reduces the gradients after
every micro-batch's backward (accum x the communication: the mistake); with it, the first accum-1 backwards run
inside `model.no_sync()` and only the last one all-reduces (the fix). Run it under torchrun (NCCL on GPUs; gloo
with `--backend gloo`, which also lets two processes share one GPU). `--model gpt2` trains Hugging Face GPT-2
(random weights, `--layers`, d 768, SDPA attention) instead of the small built-in GPT.

`--ab-rounds N` measures the fix in this process after the `--steps` loop (the one `traceview collect` traces):
N rounds in ABBA order of `--ab-steps` steps with every micro-batch all-reduced and as many with `no_sync()`,
each side's first step left out, timed with CUDA events on the same DDP model; prints an `AB_RESULT {json}` line
as ab_twin.py does and writes it to the collector's run folder as `ab_result.json` (tools/ab_labels.py). Two
processes of the same step can run their host 10-45 % apart, more than this fix saves.

    traceview collect -- torchrun --nproc-per-node 1 -m collectors.examples.ddp_accum --accum 4
    traceview collect -- torchrun --nproc-per-node 1 -m collectors.examples.ddp_accum --accum 4 --no-sync
    traceview collect -- torchrun --nproc-per-node 1 -m collectors.examples.ddp_accum --model gpt2 --layers 6 --batch 4
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from collectors.examples._common import StepTimer
from collectors.examples.ab_twin import ab_result, write_result
from collectors.examples.tinygpt import TinyGPT


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--model", choices=["tinygpt", "gpt2"], default="tinygpt")
    ap.add_argument("--ab-rounds", type=int, default=0, help="ABBA rounds of all-reduce vs no_sync() after the loop")
    ap.add_argument("--ab-steps", type=int, default=8, help="timed steps of each side of a round")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    rank = dist.get_rank()
    dev = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % max(torch.cuda.device_count(), 1))
        if cuda
        else torch.device("cpu")
    )
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    vocab = 50257 if args.model == "gpt2" else 8192
    if args.model == "gpt2":  # Hugging Face GPT-2 from its config (real_models.build_gpt2's)
        from transformers import AutoModelForCausalLM, GPT2Config

        cfg = GPT2Config(n_layer=args.layers, n_embd=768, n_head=12, n_positions=args.seq, vocab_size=vocab)
        net = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(dev)
    else:
        net = TinyGPT(vocab, args.dim, args.layers, 16, args.seq).to(dev)
    model = DDP(net, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)  # its step() marks the collector's steps
    g = torch.Generator(device=dev).manual_seed(rank)
    tokens = torch.randint(0, vocab, (args.accum, args.batch, args.seq + 1), device=dev, generator=g)

    def step(no_sync: bool) -> None:
        opt.zero_grad(set_to_none=True)
        for m in range(args.accum):
            last = m == args.accum - 1
            ctx = model.no_sync() if no_sync and not last else contextlib.nullcontext()
            with ctx, torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
                out = model(tokens[m, :, :-1])
                logits = out.logits if args.model == "gpt2" else out
                loss = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(), tokens[m, :, 1:].reshape(-1)
                )
                (loss / args.accum).backward()
        opt.step()

    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        step(args.no_sync)
        timer.mark()
    traced = timer.report(f"ddp_accum{args.accum}{'_nosync' if args.no_sync else ''}_rank{rank}")
    if args.ab_rounds:
        ab_rounds(step, args, dev, traced["step_ms"])
    dist.destroy_process_group()


def ab_rounds(step, args: argparse.Namespace, dev: torch.device, traced: list[float]) -> None:
    """The fix measured on the same model in this process: ABBA rounds of the flags' mode (the problem) and the
    other one (no_sync() toggled), each side's median step over `--ab-steps` after one left out."""
    sides = {"problem": args.no_sync, "fixed": not args.no_sync}
    med: dict[str, list[float]] = {"problem": [], "fixed": []}
    for r in range(args.ab_rounds):
        for side in ("problem", "fixed") if r % 2 else ("fixed", "problem"):
            timer = StepTimer(dev)
            step(sides[side])
            timer.mark()
            for _ in range(args.ab_steps):
                step(sides[side])
                timer.mark()
            med[side].append(statistics.median(timer.report(f"ab_{side}", skip=0)["step_ms"]))
    flag = " --no-sync"
    base = "ddp_accum " + " ".join(sys.argv[1:]).replace(flag, "")
    write_result(ab_result(base + (flag if args.no_sync else ""), base + ("" if args.no_sync else flag), med, traced))


if __name__ == "__main__":
    main()
