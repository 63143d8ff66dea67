"""Inference without an optimizer: step boundaries through the collectors API (no-ops unprofiled)."""

import argparse
import glob
import time

import torch
from torch import nn

import collectors


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4, help="steps per API (three APIs: 3x this many steps)")
    ap.add_argument("--window-ms", type=float, default=0.0, help="no step boundaries: run this long instead")
    ap.add_argument("--until-trace", default=None,
                    help="with --window-ms: stop once a file matches this glob (the window's trace was written), "
                         "after 20 more calls; --window-ms is then only a cap")
    args = ap.parse_args()
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8)).eval()
    x = torch.randn(8, 64)
    with torch.no_grad():
        calls = 0
        if args.window_ms:  # only --window-s captures a loop like this
            end = time.monotonic() + args.window_ms / 1000
            after = None  # calls left once the window's trace exists
            while time.monotonic() < end and after != 0:
                model(x)
                calls += 1
                if after is None and args.until_trace and calls % 10 == 0 and glob.glob(args.until_trace):
                    after = 20
                elif after:
                    after -= 1
            print(f"calls={calls}")
        else:
            for _ in collectors.steps(range(args.steps)):
                model(x)
            for _ in range(args.steps):
                with collectors.step_context():
                    model(x)
            for _ in range(args.steps):
                model(x)
                collectors.step()
    print(f"infer_small done active={collectors.is_active()}")


if __name__ == "__main__":
    main()
