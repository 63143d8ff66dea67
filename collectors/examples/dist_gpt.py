"""TinyGPT trained data-parallel under torchrun: DDP or FSDP, optionally with a known straggler rank.

NCCL on GPUs (one process per GPU), gloo on CPU. ``--slow-rank R --delay-ms D`` makes rank R spin D ms of
CPU before ``backward()`` every step (like a slow host: a data-loading hiccup, a logging call), so the other
ranks reach the gradient collectives D ms earlier and wait for it inside them. ``--fsdp`` shards the model
with FSDP2 (``fully_shard`` per block: all-gather before each block's forward/backward, reduce-scatter of
its gradients). No profiler code: traceview's collector finds the steps through the optimizer.

``--cause`` picks what makes the slow rank late (ground truth for the job answer's cause): ``delay`` (the CPU
spin above), ``syncs`` (a forward hook on every block reads a scalar back, ``.item()``: the host waits for the
GPU each block), ``copy`` (``--copy-mb`` MiB copied from pageable host memory to the GPU every step),
``kernels`` (``--extra-gemms`` extra bf16 4096² GEMMs on the GPU every step) or ``fp32`` (the slow rank runs
without autocast: the same kernels, slower, in FP32). ``--backend gloo`` lets several
ranks share one GPU (NCCL refuses two ranks on one device).

    traceview collect --modules -- torchrun --nproc-per-node 2 -m collectors.examples.dist_gpt --slow-rank 1
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from collectors.examples._common import StepTimer
from collectors.examples.tinygpt import TinyGPT


def busy(ms: float) -> None:
    """Spin `ms` of wall time on this CPU (no sleep: the rank's host really is busy)."""
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard per block instead of DDP")
    ap.add_argument("--slow-rank", type=int, default=-1, help="rank that spins --delay-ms before backward")
    ap.add_argument("--delay-ms", type=float, default=100.0)
    ap.add_argument("--cause", choices=["delay", "syncs", "copy", "kernels", "fp32"], default="delay",
                    help="what makes --slow-rank late (see the module docstring)")
    ap.add_argument("--copy-mb", type=int, default=128, help="cause copy: pageable MiB copied per step")
    ap.add_argument("--extra-gemms", type=int, default=40, help="cause kernels: extra 4096x4096 GEMMs per step")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None, help="default: nccl on GPUs")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=1024)  # not --d: torchrun would take it for its own option
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument(
        "--no-log", action="store_true", help="don't read the loss back every step (no host sync)"
    )
    args = ap.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    rank = dist.get_rank()
    if cuda:  # modulo: gloo ranks may share a GPU
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    torch.manual_seed(0)  # same initial weights on every rank
    model = TinyGPT(args.vocab, args.dim, args.layers, args.heads, args.seq).to(dev)
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    else:
        model = DDP(model, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)  # its step() marks the collector's boundaries
    g = torch.Generator(device=dev).manual_seed(rank)  # each rank its own data
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev, generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    slow = rank == args.slow_rank
    delay = args.delay_ms if slow and args.cause == "delay" else 0.0
    if slow and args.cause == "syncs":
        blocks = model.module.blocks if isinstance(model, DDP) else model.blocks
        stats: list[float] = []

        def log_stat(_m: torch.nn.Module, _i: object, out: torch.Tensor) -> None:
            stats.append(out.float().abs().mean().item())  # a per-block statistic as a Python float: a sync

        for block in blocks:
            block.register_forward_hook(log_stat)
    pageable = torch.randn(args.copy_mb * 2**18) if slow and args.cause == "copy" else None
    gemm = (torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
            if slow and args.cause == "kernels" and cuda else None)

    fp32 = slow and args.cause == "fp32"  # the same model and data, its GEMMs in FP32 instead of BF16
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        if pageable is not None:
            staged = pageable.to(dev)  # pageable: the host stages it through a bounce buffer and waits
            del staged
        if gemm is not None:
            for _k in range(args.extra_gemms):
                gemm = (gemm @ gemm).clamp_(-1, 1)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda and not fp32):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        if delay:
            busy(delay)
        loss.backward()  # DDP all-reduces / FSDP reduce-scatters the gradients here
        opt.step()
        if not args.no_log:
            # Logging the loss (`.item()`) syncs the host with the GPU once per step, as most loops do: the ranks'
            # hosts start every step together, so what the others wait is the straggler's delay. Without it a
            # launch-bound rank's host runs ahead and its GPU waits inside the collectives for the slower host.
            last_loss = loss.item()
        timer.mark()
    kind = "fsdp" if args.fsdp else "ddp"
    timer.report(f"{kind}_rank{rank}_{args.cause if slow else 'none'}{delay:g}")
    print(
        f"rank {rank} done ({kind}, delay {delay:g} ms, loss {loss.item() if args.no_log else last_loss:.3f})",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
