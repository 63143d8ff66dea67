"""A DataLoader twin (too few workers → enough workers) measured in ONE process, in steady state.

`ab_twin.py` times each round as a fresh run of an example; for a DataLoader that cannot work: each fresh run
starts its workers, and its first steps drain the prefetch buffer those workers filled while the model was built,
so a round times the buffer, not the workers' pace (rounds of the same twin spread 0.6–3.4 ms). Here both loaders
live for the whole process (persistent workers, one long-lived iterator each, an index space that never ends) and
the rounds alternate between them:

1. the problem's loader (`--workers-a`) alone first, long enough for `traceview collect`'s capture (run it with
   `--wait 24` or more: its first steps drain the buffer); its wait steps are the unprofiled steps the
   profiler-cost model is solved to, its active steps the trace the prediction is made from;
2. `--rounds` rounds in ABBA order, each side: `settle` untimed steps (the loader's buffer, refilled while the
   other side ran, drains: max(24, 4 x prefetch_factor x workers) steps), then `--steps` steps timed with CUDA
   events, no profiler. A side's step is the MEAN of its timed steps: a loader short of workers delivers batches
   in bursts (N workers finish N batches together, then the loop waits a whole batch-time), so its steps
   alternate short and long and their median is either; the mean is the loop's throughput.

The model and its optimizer are shared, so both sides run the same GPU work; the worker count is the only
difference. The saving is the median over rounds of (A's mean step − B's mean step). Prints one
`AB_RESULT {json}` line (as ab_twin.py) and writes it to the collector's run folder as `ab_result.json`.

    traceview collect --wait 24 --warmup 1 --active 3 --shapes --name input_workers_nw2 -- \\
        python -m collectors.examples.loader_ab --workload input_workers --workers-a 2 --workers-b 10
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.nn import functional as F

from collectors.examples import _common, cnn_input, input_workers
from collectors.examples.ab_twin import ab_result, write_result

#: batches each worker keeps ready (DataLoader's default prefetch_factor)
PREFETCH = 2
#: index space of the endless datasets: far more samples than any run draws
ENDLESS = 10_000_000


def _loaders(ds: torch.utils.data.Dataset, batch: int, pin_memory: bool) -> Callable[[int], Iterator]:
    """workers -> a long-lived iterator over `ds` (persistent workers), as the example's own loader but endless."""
    def loader(workers: int) -> Iterator:
        return iter(torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, pin_memory=pin_memory,
                                                persistent_workers=True, prefetch_factor=PREFETCH))

    return loader


def _input_workers(args: argparse.Namespace, dev: torch.device) -> tuple[Callable, Callable[[int], Iterator]]:
    """input_workers.py's MLP and its CPU-costly samples: (step(batch), loader(workers))."""
    torch.manual_seed(0)
    d = args.d
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.ReLU()) for _ in range(8)], nn.Linear(d, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # its step() marks the collector's steps
    ds = input_workers.CostlySamples(ENDLESS, d, args.cpu_ms)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, y = (t.to(dev, non_blocking=True) for t in batch)
        for _ in range(4):  # as input_workers.py
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()

    return step, _loaders(ds, args.batch, pin_memory=True)


def _cnn_input(args: argparse.Namespace, dev: torch.device) -> tuple[Callable, Callable[[int], Iterator]]:
    """cnn_input.py's ResNet-18 and its per-sample augmentation: (step(batch), loader(workers))."""
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    classes = 100
    tv = cnn_input.torchvision
    model = (tv.models.resnet18(num_classes=classes) if tv is not None else cnn_input.SmallConvNet(classes)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ds = cnn_input.AugmentedImages(ENDLESS, 256, 224, classes)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        images, labels = (t.to(dev) for t in batch)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step, _loaders(ds, args.batch, pin_memory=False)


WORKLOADS = {"input_workers": (_input_workers, 16), "cnn_input": (_cnn_input, 32)}


def timed(step: Callable, it: Iterator, n: int, dev: torch.device, name: str) -> list[float]:
    """Run n steps from `it`; their CUDA-event periods (ms), as the collector's step timer takes them (printed as
    a STEP_TIME line named `name`)."""
    timer = _common.StepTimer(dev)
    timer.mark()
    for _ in range(n):
        step(next(it))
        timer.mark()
    return timer.report(name, skip=0)["step_ms"]


def settle_steps(workers: int) -> int:
    """Untimed steps before a side's timed ones: its buffer, refilled while the other side ran, drains."""
    return max(24, 4 * PREFETCH * workers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="input_workers")
    ap.add_argument("--workers-a", type=int, default=2, help="the problem's workers")
    ap.add_argument("--workers-b", type=int, default=10, help="the fix's workers")
    ap.add_argument("--cpu-ms", type=float, default=2.0, help="input_workers: worker CPU per sample")
    ap.add_argument("--batch", type=int, default=None, help="default: the example's")
    ap.add_argument("--d", type=int, default=2048, help="input_workers: the MLP's width")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=36, help="timed steps per side and round")
    ap.add_argument("--trace-steps", type=int, default=40, help="steps of the problem's first (captured) run")
    args = ap.parse_args()
    build, batch = WORKLOADS[args.workload]
    args.batch = args.batch or batch
    dev = _common.device()
    step, loader = build(args, dev)
    it = {"problem": loader(args.workers_a), "fixed": loader(args.workers_b)}
    workers = {"problem": args.workers_a, "fixed": args.workers_b}
    traced = timed(step, it["problem"], args.trace_steps, dev, "traced")  # the collector captures within these
    runs: dict[str, list[float]] = {"problem": [], "fixed": []}
    for r in range(args.rounds):
        for side in ("problem", "fixed") if r % 2 else ("fixed", "problem"):
            for _ in range(settle_steps(workers[side])):
                step(next(it[side]))
            runs[side].append(statistics.fmean(timed(step, it[side], args.steps, dev, side)))
    name = f"{args.workload} --workers {{}}" + (f" --cpu-ms {args.cpu_ms:g}" if args.workload == "input_workers"
                                                 else "")
    write_result(ab_result(
        name.format(args.workers_a), name.format(args.workers_b), runs, traced,
        settle_steps={k: settle_steps(v) for k, v in workers.items()},
        method="long-lived loaders alternating in one process, mean step of each side (collectors/examples/loader_ab.py)",
    ))


if __name__ == "__main__":
    main()
