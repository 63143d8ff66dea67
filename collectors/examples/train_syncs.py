"""A small transformer training loop that reads metrics back every step (`.item()`), vs the same loop deferring them.

`--sync` (default): every step calls `loss.item()` after the forward (logging), `acc.item()` (a metric) and
`clip_grad_norm_(...).item()` after the backward: three blocking host syncs per step, so the host can
never run ahead of the GPU and the GPU idles while the host launches the next phase. `--deferred`: the same
math with the metrics accumulated on the GPU and read once after the loop. `--log-grad-norms` also logs
every parameter's gradient norm each step (`p.grad.norm().item()` per parameter in the sync variant, the
same norm kernels stacked on the GPU in the deferred one). The model is TinyGPT
(collectors/examples/tinygpt.py) with TF32 matmuls and foreach AdamW, so no other rule applies. At the
default size (4 layers, d 256, batch 32) the loop is launch-bound and the syncs cost about nothing; at
`--layers 2 --d 1024 --heads 16 --batch 64` it is GPU-bound and every sync leaves the GPU idle.

    traceview collect --shapes -- python -m collectors.examples.train_syncs
    traceview collect --shapes -- python -m collectors.examples.train_syncs --deferred
    traceview collect --shapes -- python -m collectors.examples.train_syncs --log-grad-norms --layers 2 --d 1024 \
        --heads 16 --batch 64
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F

from collectors.examples._common import StepTimer, device
from collectors.examples.tinygpt import TinyGPT


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--deferred", action="store_true", help="keep metrics on the GPU; no per-step sync")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument(
        "--log-grad-norms", action="store_true", help="log each parameter's gradient norm every step"
    )
    args = ap.parse_args()
    torch.set_float32_matmul_precision("high")
    dev = device()
    torch.manual_seed(0)
    model = TinyGPT(args.vocab, args.d, args.layers, args.heads, args.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)  # its step() marks the collector's boundaries
    data = torch.randint(0, args.vocab, (4, args.batch, args.seq + 1), device=dev)
    history: list[tuple[float, float, float]] = []
    loss_sum = torch.zeros((), device=dev)
    acc_sum = torch.zeros((), device=dev)
    gnorm_sum = torch.zeros((), device=dev)
    params = list(model.parameters())
    per_param_sum = torch.zeros(len(params), device=dev)
    per_param_last: list[float] = []
    timer = StepTimer(dev)
    timer.mark()
    for i in range(args.steps):
        tokens = data[i % data.shape[0]]
        x, y = tokens[:, :-1], tokens[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        acc = (logits.argmax(-1) == y).float().mean()
        if not args.deferred:
            loss_val = loss.item()  # sync 1: logging the loss
            acc_val = acc.item()  # sync 2: a metric
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.log_grad_norms:
            if args.deferred:
                per_param_sum += torch.stack([p.grad.norm() for p in params])
            else:
                per_param_last = [p.grad.norm().item() for p in params]  # one sync per parameter
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if args.deferred:
            loss_sum += loss.detach()
            acc_sum += acc
            gnorm_sum += gnorm
        else:
            history.append((loss_val, acc_val, gnorm.item()))  # sync 3: the gradient norm
        opt.step()
        timer.mark()
    timer.report("train_syncs_deferred" if args.deferred else "train_syncs_item")
    if args.log_grad_norms:
        last = per_param_sum.tolist() if args.deferred else per_param_last
        print(f"{len(params)} parameters, first grad-norm entry {last[0]:.4f}")
    if args.deferred:
        n = args.steps
        print(
            f"mean loss {loss_sum.item() / n:.3f} acc {acc_sum.item() / n:.4f} gnorm {gnorm_sum.item() / n:.3f}"
        )
    else:
        n = len(history)
        print(f"mean loss {sum(h[0] for h in history) / n:.3f} acc {sum(h[1] for h in history) / n:.4f}")


if __name__ == "__main__":
    main()
