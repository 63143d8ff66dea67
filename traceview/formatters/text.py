"""Terminal report. The first screen answers "what is slow and what do I fix": per trace the verdict, the step
time, the top findings with their savings per step (and, when the document has them, what to fix first and the
projected step time); per job the straggler and its cause. The long tables are detail sections, printed with
`--detail` (all) or `--show steps,devices,kernels,ops,layers,repeats,findings,ranks`.

Width: the terminal's (or `--width`); names are cut in the middle to fit. Piped output is plain text (no
colours, ASCII rules).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.text import Text

from ..safe_text import text_safe
from ..units import num
from . import findings_text, layers
from .kernel_names import short_kernel
from .sections import TEXT_SECTIONS
from .tables import cut_rows
from .term import console, middle, plain, rule, step_ranges, table

SECTIONS = TEXT_SECTIONS  # detail sections, in print order
ROLE_LABELS = {"kernel": "Kernel", "memcpy": "Memcpy", "memset": "Memset", "communication": "Comm",
               "runtime": "Runtime", "dataloader": "DataLoader", "cpu_exec": "CPU Exec", "other": "Other"}
TOP_CPU_OPS = 5  # ops by self CPU time on the first screen of a trace without GPU activity


def _ms(us_: float | None, nd: int = 2) -> str:
    return num(None if us_ is None else us_ / 1000, nd)


def _style(con: Console, style: str) -> str:
    return "" if plain(con) else style


def header(t: dict, con: Console, show: Collection[str] = ()) -> None:
    """Path, device, steps, step time, GPU busy; warnings; verdict; what to fix first; the recording's edges left
    out (one dim line; why with --detail); projection."""
    meta, s = t["metadata"], t["summary"]
    rank = f" · rank {t['rank']}" if t.get("rank") is not None else ""
    rule(con, middle(t["path"], max(con.width - len(rank) - 8, 20)) + rank)
    cpu = t.get("cpu") or {}
    dev = meta.get("device") or ("CPU (no GPU activity)" if cpu else meta.get("backend"))
    nums = s.get("step_numbers") or []
    per = ""
    if 1 < len(nums) <= 6:  # a few steps: each one's time; more: --show steps
        per = " (" + " / ".join(_ms(r["dur_us"]) for r in t.get("steps", [])) + ")"
    busy = f" · GPU busy {num(s['gpu_busy_pct'])}\u00a0%" if not cpu else ""
    line = (f"{dev} · {meta['format']} · {s['steps']} step(s) {step_ranges(nums)} · "
            f"step {_ms(s.get('avg_step_us'))} ms avg{per}{busy}")
    con.print(Text(line))
    for w in t.get("warnings", []):
        con.print(Text("warning: ", style=_style(con, "yellow")) + Text(w))
    if t.get("verdict_text"):
        con.print(Text(t["verdict_text"], style=_style(con, "bold")))
    fix_first(t, con)
    edges(s, con, detail="steps" in show)
    projection(t.get("projection"), con)
    what_if(t.get("projection"), con)
    prof = t.get("profiling")
    if prof and prof.get("note"):
        lead = "profiler overhead: "
        con.print(Text(lead, style=_style(con, "yellow" if prof.get("launch_bound_may_be_artifact") else "dim"))
                  + Text(prof["note"]))


def fix_first(t: dict, con: Console) -> None:
    """What to fix first: the primary class and its costliest finding, only when a finding above info says so
    (with nothing to fix the verdict line says that, and the primary class is only the largest one)."""
    c = t.get("classification") or {}
    primary = c.get("primary")
    if not isinstance(primary, str) or c.get("primary_basis") != "savings":
        return
    top = next((f for f in t.get("findings") or [] if f.get("class") == primary and f.get("severity") != "info"),
               None)
    what = primary + (f" — {top['code']} {top['rule']}" if top else "")
    con.print(Text("Fix first: ", style=_style(con, "bold")) + Text(what))


def edges(s: dict, con: Console, detail: bool) -> None:
    """The recording's edges left out of the steps: one dim line; with --detail, why (summary.excluded.notes)."""
    excl = s.get("excluded_us")
    if not excl:
        return
    ex = s.get("excluded") or {}
    where = ", ".join(f"{_ms(v)} {k}" for k, v in (("before", ex.get("before_us")), ("after", ex.get("after_us"))) if v)
    line = f"{_ms(excl)} ms at the recording's edges left out ({where}" + (")" if detail else "; --detail)")
    if not detail and len(line) > con.width:  # one line: the split before/after is in --detail
        line = f"{_ms(excl)} ms at the recording's edges left out (--detail)"
    con.print(Text(line, style=_style(con, "dim")))
    if detail:
        for note in ex.get("notes") or []:
            con.print(Text(f"  {note}", style=_style(con, "dim")))


def projection(p: dict | None, con: Console) -> None:
    """`projection`: the step now and with every fix (a timeline projection: overlapping fixes are not counted
    twice), in unprofiled terms when the profiler's cost is known, and what each fix alone saves per step."""
    if not isinstance(p, dict) or not p.get("step_us") or not p.get("fixes"):
        return
    unp = p.get("replayed_unprofiled_step_us")
    allf = p.get("all_fixed_unprofiled_step_us") if unp is not None else p.get("all_fixed_step_us")
    line = f"Projected step: {_ms(p['step_us'])} ms traced"
    if unp is not None:
        line += f", {_ms(unp)} ms unprofiled (replayed)"
    if allf is not None:
        line += f" → {_ms(allf)} ms with every fix"
    codes = {f.get("rule"): f.get("code") or f.get("rule") for f in p["fixes"]}
    shown = [f for f in p["fixes"][:4] if f.get("savings_us")]
    parts = [f"{f.get('code') or f.get('rule')} −{_ms(f.get('savings_us'))} ms/step"
             + (f" (host-bound after it: up to −{_ms(f['if_host_keeps_up_us'])} if the host keeps up, less on a slower "
                "one)" if f.get("if_host_keeps_up_us") else "")
             # a fix whose time a larger one saves too reports what is left after it (as its findings do)
             + (f" after {', '.join(codes.get(r, r) for r in f['after'])} (−{_ms(f['alone_savings_us'])} alone)"
                if f.get("after") and f.get("alone_savings_us") is not None else "")
             for f in shown]
    if parts:
        each = "each alone" if not any(f.get("after") for f in shown) else "each alone unless after another"
        line += f" (save, {each}: " + ", ".join(parts) + ")"
    con.print(Text(line))


def what_if(p: dict | None, con: Console) -> None:
    """`projection.what_if`: the replayed unprofiled step with only the chosen fixes."""
    w = (p or {}).get("what_if") if isinstance(p, dict) else None
    if not isinstance(w, dict):
        return
    line = (f"What if {', '.join(w['fixes']) or 'nothing'}: {_ms(w['step_us'])} ms unprofiled (replayed) → "
            f"{_ms(w['fixed_step_us'])} ms (save {_ms(w['savings_us'])} ms/step)")
    if w.get("without_model"):
        line += f"; no replay model for {', '.join(w['without_model'])}"
    if w.get("nothing_to_fix"):
        line += f"; nothing to change in this trace for {', '.join(w['nothing_to_fix'])}"
    if w.get("unknown"):
        line += f"; not applied: {', '.join(w['unknown'])}"
    con.print(Text(line))


def steps_detail(t: dict, con: Console) -> None:
    s = t["summary"]
    cpu = t.get("cpu") or {}
    if cpu.get("split_by_step"):
        cols = [("step", "right"), ("ms", "right"), ("input %", "right"), ("in ops %", "right"), ("comm %", "right"),
                ("outside ops %", "right")]
        rows = [[str(r["step"]), _ms(r["dur_us"]), num(r["input_pct"]), num(r["cpu_ops_pct"]),
                 num(r["communication_pct"]), num(r["outside_ops_pct"])] for r in cpu["split_by_step"]]
        con.print(table(con, "Host time per step (no GPU activity): DataLoader > ops > host collectives > outside ops",
                        cols, rows, name_col=None))
        return
    # roles that are zero in every step are left out: narrower, and nothing is lost
    roles = [k for k in ROLE_LABELS if any(r["breakdown_pct"][k] for r in t["steps"])]
    rows = [[str(r["step"]), _ms(r["dur_us"]), num(r["gpu_busy_pct"]), *[num(r["breakdown_pct"][k]) for k in roles]]
            for r in t["steps"]]
    rows = cut_rows(rows, 3 + len(roles))
    rows.append(["avg", _ms(s["avg_step_us"]), num(s["gpu_busy_pct"]), *[num(s["breakdown_pct"][k]) for k in roles]])
    con.print(table(con, "Step time breakdown, % of step (tb_plugin priority order; roles at 0 in every step left out)",
                    [("step", "right"), ("ms", "right"), ("GPU busy", "right"),
                     *[(ROLE_LABELS[k], "right") for k in roles]], rows, name_col=None))


def devices_detail(t: dict, con: Console) -> None:
    for dev in t["devices"]:
        tp = dev["temporal"]
        con.print(Text(f"GPU {dev['device']} ({dev.get('name') or '?'}): busy {num(dev['busy_pct'])} % of steps · "
                       f"temporal (HTA): idle {num(tp['idle_pct'])} % · compute {num(tp['compute_pct'])} % · "
                       f"non-compute {num(tp['non_compute_pct'])} % of {_ms(tp['span_us'])} ms"))
        rows = [[str(r["stream"]), _ms(r["idle_us"], 3), _ms(r["host_wait_us"], 3), _ms(r["kernel_wait_us"], 3),
                 _ms(r["other_us"], 3), num(r["host_wait_pct"])] for r in dev["idle_by_stream"]]
        con.print(table(con, f"GPU {dev['device']} idle time by stream (HTA causes)",
                        [("stream", "right"), ("idle ms", "right"), ("host wait ms", "right"),
                         ("kernel wait ms", "right"), ("other ms", "right"), ("host wait %", "right")], rows,
                        name_col=None))


def kernels_detail(t: dict, con: Console) -> None:
    if not t["top_kernels"]:
        return
    rows = [[short_kernel(r["name"]), r["kind"], str(r["count"]), _ms(r["total_us"], 3), num(r["mean_us"], 2), num(r["share_pct"]),
             r["op"] or "-"] for r in t["top_kernels"]]
    con.print(table(con, "Top kernels by GPU time", [("kernel", "left"), ("kind", "left", 2), ("count", "right"),
                                                     ("total ms", "right"), ("mean µs", "right", 3),
                                                     ("share %", "right"), ("launched by", "left", 1)], rows,
                    min_name=40))


def ops_detail(t: dict, con: Console, limit: int | None = None) -> None:
    cpu = t.get("cpu") or {}
    if cpu.get("top_ops"):
        ops = cpu["top_ops"][:limit] if limit else cpu["top_ops"]
        rows = [[r["op"], str(r["calls"]), _ms(r["self_us"], 3), num(r["self_pct"]), _ms(r["total_us"], 3),
                 num(r["total_pct"])] for r in ops]
        n = cpu.get("ops_total") or len(cpu["top_ops"])
        con.print(table(con, f"Top ops by CPU time (self = minus the ops inside; {len(ops)} of {n} op names)",
                        [("op", "left"), ("calls", "right"), ("self ms", "right"), ("self % step", "right"),
                         ("total ms", "right"), ("total % step", "right")], rows))
        return
    if not t["top_ops"]:
        return
    rows = [[r["op"], str(r["calls"]), str(r["kernels"]), _ms(r["gpu_us"], 3), _ms(r["cpu_us"], 3), num(r["share_pct"])]
            for r in t["top_ops"]]
    con.print(table(con, "Top ops by GPU time", [("op", "left"), ("calls", "right"), ("kernels", "right"),
                                                 ("GPU ms", "right"), ("CPU ms", "right"), ("share %", "right")], rows))


def render_trace(t: dict, con: Console, show: Collection[str] = ()) -> None:
    header(t, con, show)
    findings_text.render_trace(t, con, show)
    cpu = t.get("cpu") or {}
    if cpu.get("top_ops") and "ops" not in show:
        ops_detail(t, con, TOP_CPU_OPS)  # on a CPU trace the heaviest ops are part of the answer
    for name in SECTIONS:
        if name not in show:
            continue
        if name == "steps":
            steps_detail(t, con)
        elif name == "devices":
            devices_detail(t, con)
        elif name == "kernels":
            kernels_detail(t, con)
        elif name == "ops":
            ops_detail(t, con)
        elif name == "layers":
            layers.render_layers(t, con)
        elif name == "repeats":
            layers.render_repeats(t, con)


def _hint(con: Console, show: Collection[str]) -> None:
    left = [s for s in SECTIONS if s not in show]
    if left:
        msg = f"More: --detail, or --show {','.join(left)}"
        if len(msg) > con.width:  # the section list stays one piece to copy, on its own line
            msg = f"More: --detail, or --show with some of\n  {','.join(left)}"
        con.print(Text(msg, style=_style(con, "dim")), soft_wrap=True)


def _job_of(path: str, jobs: list[dict]) -> dict | None:
    p = Path(path)
    for j in jobs:
        if Path(j["path"]) in p.parents:
            return j
    return None


def _with_host_classes(j: dict, traces: list[dict]) -> dict:
    """The job with each CPU-only rank's host class (its trace's `cpu.dominant`) beside the GPU classes."""
    cpu = {t["path"]: (t.get("cpu") or {}).get("dominant") for t in traces}
    rows = [{**r, "cpu_dominant": cpu.get(r.get("path"))} for r in j.get("classification") or []]
    return {**j, "classification": rows}


def render(doc: dict, out: IO[str], show: Collection[str] = (), width: int | None = None) -> None:
    doc = text_safe(doc)  # trace strings go out as rich Text (no markup); control characters made visible
    con = console(out, width)
    jobs = [_with_host_classes(j, doc["traces"]) for j in doc.get("jobs", [])]
    done: set[int] = set()
    for t in doc["traces"]:
        j = _job_of(t["path"], jobs)
        if j is not None and id(j) not in done:  # a job's straggler and cause before its ranks' reports
            done.add(id(j))
            findings_text.render_job(j, con, show)
        render_trace(t, con, show)
    for j in jobs:
        if id(j) not in done:
            findings_text.render_job(j, con, show)
    if doc["traces"] or jobs:
        _hint(con, show)


# Kept for the rules engine's registration (engine.register) until the pipeline refactor removes it: the
# renderers above are called directly, these hooks are not used.
EXTRA: list = []
JOB_EXTRA: list = []
