"""Synthesise a job of many rank files from a recorded one: every rank a copy of a recorded rank, its clock
shifted a little, and one straggler.

    python tools/synth_ranks.py SRC_RUN_DIR OUT_DIR --ranks 256 [--straggler K] [--jitter-us 20] [--seed 0]
                                [--shift-us RANK=US ...]

SRC_RUN_DIR holds the rank files of a recorded job with a known straggler (e.g. sample_traces/nccl_h200x2/
ddp_rank1_slowed: rank 1 spins 100 ms before backward). Rank K of the new job is a copy of the recorded
straggler (`--slow-from`, default the highest recorded rank), every other rank a copy of a recorded waiting
rank (`--base-from`, default rank 0). Each copy gets its own `distributedInfo.rank`/`world_size` and a clock
shift (`baseTimeNanoseconds`) drawn uniformly from ±`--jitter-us`, so the ranks do not arrive at exactly the
same instant; the events themselves are untouched (byte for byte), so every rank keeps its recorded work and
waits. `--shift-us RANK=US` moves one rank's clock by US more (a rank whose host clock runs ahead, or that
starts each step later: it is recorded as arriving US later at every collective, without any work of its own
that makes it late). The manifest is not copied (it describes the recorded ranks); OUT_DIR/SYNTH.md says what was made.
Used by bench/ to time many-rank jobs and by tests/ to check a small one (generated at test time).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from pathlib import Path

_DEC = json.JSONDecoder()


def _read(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")


def _rank_of(text: str) -> int | None:
    m = re.search(r'"distributedInfo"\s*:\s*', text)
    if not m:
        return None
    obj, _ = _DEC.raw_decode(text, m.end())
    return obj.get("rank") if isinstance(obj, dict) else None


def _set_object(text: str, key: str, update: dict) -> str:
    """`text` with the top-level JSON object under `key` updated (the first occurrence: the trace header)."""
    m = re.search(rf'"{key}"\s*:\s*', text)
    if not m:
        return text
    obj, end = _DEC.raw_decode(text, m.end())
    return text[:m.end()] + json.dumps({**obj, **update}) + text[end:]


def _shift_base(text: str, shift_ns: int) -> str:
    m = re.search(r'"baseTimeNanoseconds"\s*:\s*(\d+)', text)
    if not m:
        raise SystemExit("source trace has no baseTimeNanoseconds: cannot shift its clock")
    return text[:m.start(1)] + str(int(m.group(1)) + shift_ns) + text[m.end(1):]


def synthesize(src: Path, out: Path, ranks: int, straggler: int | None = None, base_from: int | None = None,
               slow_from: int | None = None, jitter_us: float = 20.0, seed: int = 0,
               shift_us: dict[int, float] | None = None) -> list[Path]:
    """Write `ranks` rank files into `out` and return their paths. `shift_us`: rank -> extra clock shift (µs)."""
    files = sorted(p for p in src.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != "manifest.json"
                   and not p.name.endswith(".collect.json"))
    texts = {}
    for p in files:
        t = _read(p)
        r = _rank_of(t)
        if r is not None:
            texts[r] = t
    if len(texts) < 2:
        raise SystemExit(f"{src}: needs at least two rank files with distributedInfo.rank")
    base_from = min(texts) if base_from is None else base_from
    slow_from = max(texts) if slow_from is None else slow_from
    straggler = ranks // 2 if straggler is None else straggler
    if not 0 <= straggler < ranks:
        raise SystemExit(f"--straggler {straggler} is not a rank of a {ranks}-rank job")
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for k in range(ranks):
        src_rank = slow_from if k == straggler else base_from
        t = _set_object(texts[src_rank], "distributedInfo", {"rank": k, "world_size": ranks})
        t = _set_object(t, "traceview_collect", {"rank": k, "world_size": ranks})
        t = _shift_base(t, round((rng.uniform(-jitter_us, jitter_us) + (shift_us or {}).get(k, 0.0)) * 1000))
        p = out / f"rank{k}.synth.pt.trace.json.gz"
        p.write_bytes(gzip.compress(t.encode("utf-8"), compresslevel=1))
        written.append(p)
    (out / "SYNTH.md").write_text(
        f"Synthesised by tools/synth_ranks.py from {src}: {ranks} ranks, rank {straggler} a copy of recorded rank "
        f"{slow_from} (the straggler), the others copies of recorded rank {base_from}; clocks shifted by up to "
        f"±{jitter_us:g} µs (seed {seed})"
        + "".join(f"; rank {r} shifted {v:+g} µs more" for r, v in sorted((shift_us or {}).items())) + ".\n",
        encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--straggler", type=int, default=None, help="rank of the straggler (default: ranks // 2)")
    ap.add_argument("--base-from", type=int, default=None, help="recorded rank the others copy (default: lowest)")
    ap.add_argument("--slow-from", type=int, default=None, help="recorded straggler rank (default: highest)")
    ap.add_argument("--jitter-us", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shift-us", action="append", default=[], metavar="RANK=US",
                    help="shift one rank's clock by US µs more (repeatable)")
    a = ap.parse_args(argv)
    try:
        shift = {int(k): float(v) for k, v in (x.split("=", 1) for x in a.shift_us)}
    except ValueError:
        print(f"--shift-us takes RANK=US, got {a.shift_us}", file=sys.stderr)
        return 2
    if a.ranks < 2:
        print("--ranks must be at least 2", file=sys.stderr)
        return 2
    paths = synthesize(a.src, a.out, a.ranks, a.straggler, a.base_from, a.slow_from, a.jitter_us, a.seed, shift)
    print(f"wrote {len(paths)} rank files to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
