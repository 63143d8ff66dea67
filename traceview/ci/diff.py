"""`traceview diff A B`: what changed between two runs, from their analyze documents.

Per pair of traces (matched by key: the run's rank, or the file name without the collector's stamp; a
lone trace on each side is paired whatever its name):
- **step**: mean step time before/after (the classifier's analyzed steps), its per-step spread, the change;
- **class shift**: per class, time per step before/after (share x mean step) and the change, largest
  first — the changes add up to the step-time change ("+18.2 ms host_sync, −6.1 ms gpu_compute per step"); when
  they do not (one side has no classes: a CPU-only trace), the pair's `warnings` say so;
- **layers**: GPU time per step per layer (the `layers` section), added/removed/faster/slower/same;
- **kernels**: GPU time per step per (kernel name, launching op): added/removed/faster/slower/same, from
  the full kernel table when the caller passes it (`kernel_rows`), else from the documents' `top_kernels`;
- **findings**: appeared, disappeared (matched by `digest.finding_key`) and changed severity; for run folders
  also the job-level findings (`job_findings`, e.g. the straggler).
"same" means within `SAME_PCT` % of the before value. Times are µs per step.
"""

from __future__ import annotations

import math
from typing import Any

from .digest import digest, finding_key

SCHEMA_VERSION = 2  # 2: a/b_savings_us are the replayed savings per step (issue 25)
SAME_PCT = 2.0  # a layer/kernel whose per-step time moved less than this (% of before) is "same"
NOISE_SIGMAS = 2.0


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def status(a: float | None, b: float | None) -> str:
    if not a:
        return "added" if b else "same"
    if not b:
        return "removed"
    d = b - a
    if abs(d) <= SAME_PCT / 100 * a:
        return "same"
    return "slower" if d > 0 else "faster"


def pair(keys_a: list[str], keys_b: list[str]) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Match entries by key; a lone leftover on each side is paired too (the run was renamed)."""
    idx_b: dict[str, int] = {}
    for j, k in enumerate(keys_b):
        idx_b.setdefault(k, j)
    pairs, used = [], set()
    for i, k in enumerate(keys_a):
        j = idx_b.get(k)
        if j is not None and j not in used:
            pairs.append((i, j))
            used.add(j)
    left_a = [i for i in range(len(keys_a)) if i not in {p[0] for p in pairs}]
    left_b = [j for j in range(len(keys_b)) if j not in used]
    if len(left_a) == 1 and len(left_b) == 1:
        pairs.append((left_a[0], left_b[0]))
        left_a, left_b = [], []
    return pairs, left_a, left_b


def fmt_us(v: float, signed: bool = True) -> str:
    """µs below 1 ms, else ms; with a sign (− for minus) when `signed`."""
    sign = ("+" if v > 0 else "−" if v < 0 else "±") if signed else ("−" if v < 0 else "")
    a = abs(v)
    return f"{sign}{a / 1000:,.2f} ms" if a >= 1000 else f"{sign}{a:,.1f} µs"


def shift_text(classes: list[dict], step_a: float | None, n: int = 3) -> str:
    """The largest class changes, e.g. '+18.2 ms host_sync, −6.1 ms gpu_compute per step'."""
    floor = 0.005 * (step_a or 0)  # under 0.5 % of the step: not worth a word
    parts = [f"{fmt_us(c['delta_us'])} {c['class']}" for c in classes[:n] if abs(c["delta_us"]) > floor]
    return (", ".join(parts) + " per step") if parts else "no class moved by 0.5 % of the step or more"


def _step(da: dict, db: dict) -> dict:
    a, b = da["step_us"], db["step_us"]
    d = None if a is None or b is None else b - a
    noise = NOISE_SIGMAS * math.sqrt((da["step_sd_us"] ** 2 / max(da["steps"], 1))
                                     + (db["step_sd_us"] ** 2 / max(db["steps"], 1)))
    return {"a_us": a, "b_us": b, "delta_us": _r(d), "delta_pct": _r(100 * d / a, 2) if d is not None and a else None,
            "a_sd_us": da["step_sd_us"], "b_sd_us": db["step_sd_us"], "a_steps": da["steps"], "b_steps": db["steps"],
            "noise_us": _r(noise), "beyond_noise": d is not None and abs(d) > noise}


def _classes(da: dict, db: dict) -> list[dict]:
    out = []
    for c in sorted(set(da["classes"]) | set(db["classes"])):
        a = (da["classes"].get(c) or {}).get("us") or 0.0
        b = (db["classes"].get(c) or {}).get("us") or 0.0
        out.append({"class": c, "a_us": a, "b_us": b, "delta_us": _r(b - a),
                    "a_pct": da["shares"].get(c), "b_pct": db["shares"].get(c)})
    out.sort(key=lambda r: (-abs(r["delta_us"]), r["class"]))
    return out


def _shift_warnings(da: dict, db: dict, classes: list[dict]) -> list[str]:
    """A warning when the class shifts do not add up to the step-time change (they do when both sides carry the
    same breakdown): a side without one (a CPU-only trace has no GPU classes) or a breakdown of other steps."""
    a, b = da["step_us"], db["step_us"]
    if a is None or b is None:
        return []
    if da.get("host_split") != db.get("host_split") and da["classes"] and db["classes"]:
        host, gpu = ("A", "B") if da.get("host_split") else ("B", "A")
        return [f"{gpu}'s classes are the GPU classifier's and {host}'s the host split of a trace without GPU activity "
                "(input, cpu_ops, communication, outside_ops): they do not compare; compare classes only between "
                "traces of the same kind"]
    total = sum(c["delta_us"] or 0.0 for c in classes)
    # (each class rounded to the ns and its mean over steps: a few ns per class apart at most)
    if abs(total - (b - a)) <= max(1.0, 0.01 * max(a, b)):
        return []
    bare = [side for side, d in (("A", da), ("B", db)) if not d["classes"] and d["step_us"]]
    why = (f"{' and '.join(bare)} {'have' if len(bare) > 1 else 'has'} no bottleneck classes (no GPU activity "
           f"classified: a CPU-only trace?), so {'their' if len(bare) > 1 else 'its'} classes read 0" if bare
           else "the two sides' classes cover different time")
    return [f"the class shifts add up to {fmt_us(total)} per step but the step time changed by {fmt_us(b - a)}: "
            f"{why}; compare classes only between traces of the same kind"]


def _layers(da: dict, db: dict) -> list[dict]:
    out = []
    for name in set(da["layers"]) | set(db["layers"]):
        a = (da["layers"].get(name) or {}).get("gpu_us")
        b = (db["layers"].get(name) or {}).get("gpu_us")
        out.append({"layer": name, "status": status(a, b), "a_us": a, "b_us": b,
                    "delta_us": _r((b or 0.0) - (a or 0.0))})
    out.sort(key=lambda r: (-abs(r["delta_us"]), r["layer"]))
    return out


def kernels_from_doc(entry: dict) -> list[dict]:
    """Per-step kernel rows from the document's top kernels (the top 10 only)."""
    n = len((entry.get("classification") or {}).get("analyzed_steps") or []) or entry["summary"]["steps"] or 1
    return [{"name": k["name"], "op": k.get("op"), "kind": k.get("kind"), "calls": k["count"] / n,
             "us": k["total_us"] / n} for k in entry.get("top_kernels") or []]


def _kernels(ka: list[dict], kb: list[dict]) -> list[dict]:
    a = {(k["name"], k.get("op")): k for k in ka}
    b = {(k["name"], k.get("op")): k for k in kb}
    out = []
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        ua, ub = (x or {}).get("us"), (y or {}).get("us")
        out.append({"name": key[0], "op": key[1], "kind": (x or y).get("kind"), "status": status(ua, ub),
                    "a_us": _r(ua), "b_us": _r(ub), "delta_us": _r((ub or 0.0) - (ua or 0.0)),
                    "a_calls": _r((x or {}).get("calls"), 2), "b_calls": _r((y or {}).get("calls"), 2)})
    out.sort(key=lambda r: (-abs(r["delta_us"]), r["name"], r["op"] or ""))
    return out


def _by_rule(fs: list[dict]) -> dict[str, dict]:
    """Job findings keyed by rule and its ordinal: a job's straggler finding is the same finding whether its title
    says "No straggler" or names the rank (a title key would read a severity change as removed + added)."""
    seen: dict[str, int] = {}
    out = {}
    for f in fs:
        n = seen[f["rule"]] = seen.get(f["rule"], 0) + 1
        out[f"{f['rule']}#{n}"] = f
    return out


def _findings(fa: list[dict], fb: list[dict], by_rule: bool = False) -> dict:
    a = _by_rule(fa) if by_rule else {finding_key(f): f for f in fa}
    b = _by_rule(fb) if by_rule else {finding_key(f): f for f in fb}
    slim = ("rule", "code", "severity", "title", "savings_us")
    return {
        "appeared": [{k: f[k] for k in slim} for key, f in b.items() if key not in a],
        "disappeared": [{k: f[k] for k in slim} for key, f in a.items() if key not in b],
        "changed": [{"rule": f["rule"], "code": f["code"], "title": f["title"], "a_severity": a[key]["severity"],
                     "b_severity": f["severity"], "a_savings_us": a[key]["savings_us"], "b_savings_us": f["savings_us"]}
                    for key, f in b.items() if key in a and a[key]["severity"] != f["severity"]],
    }


def diff_entries(ta: dict, tb: dict, key: str, kernels_a: list[dict] | None = None,
                 kernels_b: list[dict] | None = None) -> dict[str, Any]:
    """The diff of two trace entries of analyze documents."""
    da, db = digest(ta, key, layers_limit=None), digest(tb, key, layers_limit=None)
    classes = _classes(da, db)
    full = kernels_a is not None and kernels_b is not None
    ka = kernels_a if full else kernels_from_doc(ta)
    kb = kernels_b if full else kernels_from_doc(tb)
    return {
        "key": key, "a": ta["path"], "b": tb["path"], "rank": ta.get("rank"),
        "step": _step(da, db), "primary": {"a": da["primary"], "b": db["primary"]},
        "classes": classes, "shift_text": shift_text(classes, da["step_us"]),
        "layers": _layers(da, db), "kernels": _kernels(ka, kb), "kernels_source": "all" if full else "top_kernels",
        "findings": _findings(ta.get("findings") or [], tb.get("findings") or []),
        "warnings": _shift_warnings(da, db, classes),
    }


def diff(doc_a: dict, doc_b: dict, keys_a: list[str] | None = None, keys_b: list[str] | None = None,
         kernels: dict[str, list[dict]] | None = None) -> dict[str, Any]:
    """Diff two analyze documents. `keys_*` name their trace entries (default: the file name without the
    collector's stamp, plus the rank); `kernels` maps a trace path to its full per-step kernel rows."""
    from .. import __version__
    from .digest import job_keys

    ta, tb = doc_a.get("traces") or [], doc_b.get("traces") or []
    keys_a = keys_a or job_keys(doc_a, None)
    keys_b = keys_b or job_keys(doc_b, None)
    kernels = kernels or {}
    pairs, left_a, left_b = pair(keys_a, keys_b)
    out = []
    for i, j in pairs:
        out.append(diff_entries(ta[i], tb[j], keys_a[i], kernels.get(ta[i]["path"]), kernels.get(tb[j]["path"])))
    return {"schema_version": SCHEMA_VERSION, "kind": "traceview-diff",
            "tool": {"name": "traceview", "version": __version__}, "pairs": out,
            "unmatched_a": [ta[i]["path"] for i in left_a], "unmatched_b": [tb[j]["path"] for j in left_b],
            "job_findings": _findings([f for j in doc_a.get("jobs") or [] for f in j.get("findings") or []],
                                      [f for j in doc_b.get("jobs") or [] for f in j.get("findings") or []],
                                      by_rule=True),
            "errors": list(doc_a.get("errors") or []) + list(doc_b.get("errors") or [])}


def kernel_rows(trace: Any, entry: dict) -> list[dict]:
    """The full per-step kernel table of a loaded trace over the steps its entry analyzed."""
    import polars as pl

    from ..analyses.kernels import kernel_table
    from ..analyses.windows import step_of

    nums = (entry.get("classification") or {}).get("analyzed_steps") or entry["summary"]["step_numbers"]
    steps = trace.steps.filter(pl.col("step").is_in(nums))
    if not trace.has_gpu or steps.height == 0:
        return []
    gpu = step_of(trace.gpu, steps).filter(pl.col("step").is_not_null())
    n = steps.height
    return [{"name": r["name"], "op": r["op_name"], "kind": r["kind"], "calls": r["count"] / n,
             "us": r["total"] / n / 1000} for r in kernel_table(trace, gpu).iter_rows(named=True)]
