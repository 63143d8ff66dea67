"""A rank's step period: how often it completes a step, from the trace alone.

GPU ranks: the median time between consecutive device-side step ends (a step ends with the last GPU activity it
launched) — the GPU's own cadence, which is what a collector's CUDA events measure; the host may run ahead of
it by any amount, so host step spans are not used. Ranks without GPU activity: the median host span of their
`ProfilerStep#N` ranges. With a single step the period is that step's window.

Differences of consecutive step ends never count one instant twice, whatever the windows overlap.
"""

from __future__ import annotations

import polars as pl

from ..model import Trace


def rank_period_ns(trace: Trace, steps: pl.DataFrame) -> tuple[float | None, str]:
    """(the step period in ns or None without steps, how it was measured)."""
    if steps.height == 0:
        return None, "none"
    st = steps.sort("step")
    if trace.has_gpu and st.height > 1:
        return float(st["end"].diff().drop_nulls().median()), "gpu step ends"
    if not trace.has_gpu and st["cpu_end"].null_count() == 0:
        return float((st["cpu_end"] - st["cpu_ts"]).median()), "host step spans"
    return float((st["end"] - st["ts"]).median()), "step window"
