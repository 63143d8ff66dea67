"""Diagnostic: does a process that was profiled run its later steps slower? (ab_traced measurement protocol.)

For each program: the fixed and problem programs alone in fresh processes; ab_twin without the collector; ab_twin
under `collectors collect` (the ab_traced protocol); the fixed program alone again; ab_twin again. Prints medians.
Needs a GPU (`python collectors/examples/diag_residual.py electra_fp32 mobilenetv2_fp32`); what it found on an H100
is in docs/predictions.md ("Does the profiled process run slower after its capture?").
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

PY = sys.executable
PROGS = sys.argv[1:] or ["electra_fp32", "mobilenetv2_fp32"]
ROUNDS = os.environ.get("ROUNDS", "2")


def sh(cmd: list[str]) -> str:
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        print("FAILED", cmd, p.stderr[-2000:], flush=True)
    return p.stdout + f"\n__secs {time.time() - t:.1f}"


def alone(prog: str, fixed: bool) -> str:
    out = sh([PY, "-m", "collectors.examples.user_programs", "--prog", prog, "--time"] + (["--fixed"] if fixed else []))
    m = re.search(r"STEP_MS (\[.*\])", out)
    if not m:
        return "no STEP_MS"
    s = json.loads(m.group(1))[12:]
    return f"median {statistics.median(s):.2f} (min {min(s):.2f} max {max(s):.2f})"


def ab(prog: str, collect: bool) -> str:
    a = f"user_programs --prog {prog} --time"
    cmd = [PY, "-m", "collectors.examples.ab_twin", "--rounds", ROUNDS, a, a + " --fixed"]
    if collect:
        d = tempfile.mkdtemp()
        cmd = [PY, "-m", "collectors", "collect", "--out", d, "--wait", "8", "--warmup", "1", "--active", "3",
               "--shapes", "--name", prog, "--"] + cmd
    out = sh(cmd)
    m = re.search(r"AB_RESULT (\{.*\})", out)
    if not m:
        return "no AB_RESULT " + out[-500:]
    r = json.loads(m.group(1))
    tr = r["traced_run_step_ms"]
    return (f"problem rounds {r['per_round_problem_ms']} fixed rounds {r['per_round_fixed_ms']} "
            f"traced-run first8 {statistics.median(tr[1:9]):.2f} last20 {statistics.median(tr[-20:]):.2f}")


for prog in PROGS:
    print(f"## {prog}", flush=True)
    print("  fixed alone 1 :", alone(prog, True), flush=True)
    print("  problem alone :", alone(prog, False), flush=True)
    print("  ab no collect :", ab(prog, False), flush=True)
    print("  ab collect    :", ab(prog, True), flush=True)
    print("  fixed alone 2 :", alone(prog, True), flush=True)
    print("  ab no collect2:", ab(prog, False), flush=True)
