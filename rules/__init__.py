"""traceview's rules: `RULES` is the one table code -> rule module (like ruff's codes.rs).

Each module is named by its slug in snake_case and exposes `CODE`, `NAME` (the slug), `SEVERITY` (the
default severity of a finding at or above the moderate threshold), `TITLE`, `FIX`, `OPTIONS` (name ->
`Option` with the default and its source), `Evidence` (the msgspec struct its findings' evidence is) and
`check(ctx: RuleContext) -> list[Finding]`; a rule that judges
a whole job (the ranks of one run) also has `check_job(ctx: JobContext) -> list[Finding]`; `CPU = True` when
it also runs on traces without GPU activity (then `ctx.cpu` holds the host analyses). A rule whose class's
verdict words would misname its mechanism may set `VERDICT` (the verdict line's words when its fix leads). The
rule API is `traceview.ruleapi`. Its docstring (sections What it detects / Why it is slow / How to fix / Evidence /
Options / References) is the user documentation (`traceview rule CODE`, docs/rules.md). Adding a rule = one
file here + one line below + its test. Codes are never reused: TV1 host and launch, TV2 kernels, TV3 data
movement, TV4 input pipeline, TV5 distributed.
"""

from __future__ import annotations

from types import ModuleType

from traceview.ruleapi import Option

from . import (
    accumulation_sync,
    allocator_churn,
    cpu_op_overhead,
    decode_loop,
    elementwise_chain,
    fp32_conv,
    fp32_gemm,
    gemm_epilogue,
    graph_break,
    host_sync,
    input_bound,
    launch_bound,
    loader_workers,
    materialized_attention,
    memory_pressure,
    nccl_wait,
    pageable_memcpy,
    recompile,
    shape_setup,
    small_grid,
    unaligned_gemm,
    unfused_optimizer,
)

__all__ = ["BY_NAME", "RULES", "Option"]

RULES: dict[str, ModuleType] = {
    "TV101": launch_bound,
    "TV102": host_sync,
    "TV103": graph_break,
    "TV104": recompile,
    "TV105": decode_loop,
    "TV106": shape_setup,
    "TV110": cpu_op_overhead,
    "TV201": elementwise_chain,
    "TV202": fp32_gemm,
    "TV203": unfused_optimizer,
    "TV204": gemm_epilogue,
    "TV205": materialized_attention,
    "TV206": fp32_conv,
    "TV207": small_grid,
    "TV208": unaligned_gemm,
    "TV301": pageable_memcpy,
    "TV302": memory_pressure,
    "TV303": allocator_churn,
    "TV401": input_bound,
    "TV402": loader_workers,
    "TV501": nccl_wait,
    "TV502": accumulation_sync,
}
BY_NAME: dict[str, ModuleType] = {m.NAME: m for m in RULES.values()}
