"""A fix's saving measured in ONE process: the problem and its fix alternate in blocks of steps (A/B).

Two separate processes of the same training loop can run the host 10–45 % apart on a shared machine (seen on
the H200 host: the same metadata-only ops ran 1.1–1.45× slower in one twin's process than in the other's), and
on a launch-bound step that difference alone is the size of a fix's saving. Here one process builds the model
once (a second copy with the same weights where the fix needs another module: SDPA attention, channels_last)
and alternates `--block` steps of the problem with `--block` steps of the fix for `--rounds` rounds; every
step is timed with CUDA events (no profiler) and the first step of each block is left out (the switch). The
saving is median(problem steps) − median(fixed steps); the spread of the per-round differences says how sure.

    python -m collectors.examples.ab_real_models --fix sync-item --batch 2 --seq 256 --amp
    python -m collectors.examples.ab_real_models --fix attn --amp

Options are real_models.py's; `--fix` names what differs between the two (the problem side first):
sync-item (loss.item() every step → none), attn (eager → sdpa), amp (FP32 → bf16 autocast),
optim-foreach / optim-fused (single-tensor AdamW → foreach / fused), empty-cache (empty_cache() every step →
none), bf16-cl (ResNet: FP32 → bf16 autocast + channels_last).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from collectors.examples._common import device
from collectors.examples.real_models import OPTIM_IMPL, build_gpt2, build_resnet, model_args

FIXES = ("sync-item", "attn", "amp", "optim-foreach", "optim-fused", "empty-cache", "bf16-cl")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fix", choices=FIXES, required=True)
    model_args(ap)
    ap.add_argument("--block", type=int, default=4, help="steps per block (the first is left out)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps of each side first")
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    build = build_gpt2 if args.model == "gpt2" else build_resnet

    def side(**over: object) -> dict:
        a = argparse.Namespace(**{**vars(args), **over})
        torch.manual_seed(0)
        model, loss_fn = build(a, dev)
        return {"args": a, "model": model, "loss_fn": loss_fn}

    fix = args.fix
    if fix == "attn":
        sides = [side(attn="eager"), side(attn="sdpa")]
    elif fix == "bf16-cl":
        sides = [side(amp=False, channels_last=False), side(amp=True, channels_last=True)]
    else:
        s = side()
        sides = [dict(s, args=argparse.Namespace(**vars(s["args"]))), dict(s, args=argparse.Namespace(**vars(s["args"])))]
        if fix == "amp":
            sides[0]["args"].amp, sides[1]["args"].amp = False, True
    if sides[1]["model"] is not sides[0]["model"]:
        sides[1]["model"].load_state_dict(sides[0]["model"].state_dict())
    opt_names = {"optim-foreach": ("single", "foreach"), "optim-fused": ("single", "fused")}.get(fix, (args.optim,) * 2)
    for sd, name in zip(sides, opt_names, strict=True):
        sd["opt"] = torch.optim.AdamW(sd["model"].parameters(), lr=1e-4, **OPTIM_IMPL[name])
    sides[0]["sync"], sides[1]["sync"] = fix == "sync-item", False
    sides[0]["empty"], sides[1]["empty"] = fix == "empty-cache", False
    logged: list = []

    def step(sd: dict) -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=sd["args"].amp):
            loss = sd["loss_fn"](sd["model"])
        sd["opt"].zero_grad(set_to_none=True)
        loss.backward()
        sd["opt"].step()
        logged.append(loss.item() if sd["sync"] else loss.detach())
        if sd["empty"] and dev.type == "cuda":
            torch.cuda.empty_cache()

    for sd in sides:
        for _ in range(args.warmup):
            step(sd)
    marks: list[tuple[int, int, torch.cuda.Event]] = []  # (side, round, event after the step)
    for r in range(args.rounds):
        for k, sd in enumerate(sides):
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            prev = start
            for _ in range(args.block):
                step(sd)
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                marks.append((k, r, prev, ev))
                prev = ev
    torch.cuda.synchronize()
    times: dict[int, dict[int, list[float]]] = {0: {}, 1: {}}
    for k, r, a, b in marks:
        times[k].setdefault(r, []).append(a.elapsed_time(b))
    steady = {k: [t for r in sorted(times[k]) for t in times[k][r][1:]] for k in (0, 1)}
    med = {k: statistics.median(steady[k]) for k in (0, 1)}
    per_round = [statistics.median(times[0][r][1:]) - statistics.median(times[1][r][1:]) for r in range(args.rounds)]
    out = {"fix": fix, "problem_step_ms": round(med[0], 4), "fixed_step_ms": round(med[1], 4),
           "saving_ms": round(med[0] - med[1], 4), "per_round_saving_ms": [round(x, 3) for x in per_round],
           "rounds": args.rounds, "block": args.block, "steps_per_side": len(steady[0])}
    print("AB_RESULT " + json.dumps(out), flush=True)
    print(f"last loss {float(logged[-1]):.3f}")


if __name__ == "__main__":
    main()
