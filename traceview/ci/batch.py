"""`traceview batch`: many independent traces or runs, each analyzed on its own (a local process pool or
Ray), one summary row each.

A job (discover.py: a trace, or the ranks of one run) runs in a worker and comes back as plain data: its
trace digests, a slim analyze document (what SARIF/JUnit need) and its error, if any. A bad input is one
failed row; the other jobs go on. Results are returned in input order whatever order they finish in, so the
local pool and Ray give identical output.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..errors import TraceError
from ..finding_model import severity_rank
from ..options import Options
from .digest import digest, job_keys
from .discover import JobSpec

_CLS_KEEP = ("dominant", "primary", "shares", "analyzed_steps", "window_us")
_TRACE_KEEP = ("path", "rank", "world_size", "summary", "warnings", "verdict_text", "findings")


def slim(doc: dict) -> dict:
    """The analyze document without the bulky sections (layers, per-step tables, kernels)."""
    traces = []
    for t in doc.get("traces") or []:
        e = {k: t.get(k) for k in _TRACE_KEEP}
        e["metadata"] = {"device": (t.get("metadata") or {}).get("device")}
        e["classification"] = {k: v for k, v in (t.get("classification") or {}).items() if k in _CLS_KEEP}
        traces.append(e)
    jobs = [{k: j.get(k) for k in ("path", "ranks", "findings", "classification")} for j in doc.get("jobs") or []]
    return {"schema_version": doc.get("schema_version"), "tool": doc.get("tool"), "traces": traces, "jobs": jobs,
            "errors": list(doc.get("errors") or [])}


def work(spec: JobSpec, options: Options | None) -> dict[str, Any]:
    """One job, in a worker process (pool or Ray): plain, picklable data; never raises."""
    from .jobrun import analyze_job

    out: dict[str, Any] = {"spec": asdict(spec), "digests": [], "doc": None, "error": None}
    try:
        doc = analyze_job(spec, options)
    except TraceError as e:
        out["error"] = str(e)
        return out
    except Exception as e:  # noqa: BLE001 - one broken job is one failed row, never the end of the batch
        out["error"] = f"internal error ({type(e).__name__}: {e}) in {spec.path}"
        return out
    out["digests"] = [digest(t, k) for t, k in zip(doc["traces"], job_keys(doc, spec.label), strict=True)]
    out["doc"] = slim(doc)
    if doc["errors"]:
        out["error"] = "; ".join(e["error"] for e in doc["errors"])
    return out


def _run_local(specs: list[JobSpec], options: Options | None, jobs: int, done: Callable[[int, dict], None]) -> None:
    if jobs <= 1 or len(specs) == 1:
        for k, s in enumerate(specs):
            done(k, work(s, options))
        return
    from concurrent.futures import as_completed

    from .. import procpool

    pool, futures = procpool.start(work, [(s, options) for s in specs], min(jobs, len(specs)))
    with pool:
        futs = {f: k for k, f in enumerate(futures)}
        for f in as_completed(futs):
            k = futs[f]
            try:
                res = f.result()
            except Exception as e:  # noqa: BLE001 - a worker that died (e.g. out of memory)
                res = {"spec": asdict(specs[k]), "digests": [], "doc": None,
                       "error": f"worker failed ({type(e).__name__}: {e}) on {specs[k].path}"}
            done(k, res)


def _work_on_node(spec: JobSpec, options: Options | None) -> tuple[dict[str, Any], str]:
    """`work` as a Ray task, with the id of the node that ran it."""
    import ray

    return work(spec, options), ray.get_runtime_context().get_node_id()


def _run_ray(specs: list[JobSpec], options: Options | None, jobs: int, address: str | None,
             done: Callable[[int, dict], None]) -> None:
    try:
        import ray
    except ImportError:
        raise TraceError("--engine ray needs Ray: pip install 'traceview[ray]'") from None
    started = False
    if not ray.is_initialized():  # else: the caller's Ray (e.g. a notebook or a test) is used and kept
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
        except Exception as e:  # noqa: BLE001 - Ray raises plain Exceptions (timeouts, connection refused)
            raise TraceError(f"--engine ray: could not {'reach Ray at ' + address if address else 'start a local Ray'}"
                             f" ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
        started = True
    try:
        # SPREAD: the jobs go round the nodes, not first onto the driver's; a task whose node dies is retried
        remote = ray.remote(num_cpus=1, scheduling_strategy="SPREAD", max_retries=3)(_work_on_node)
        pending = {remote.remote(s, options): k for k, s in enumerate(specs)}
        nodes: Counter[str] = Counter()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                k = pending.pop(ref)
                try:
                    res, node = ray.get(ref)
                    nodes[node] += 1
                except Exception as e:  # noqa: BLE001 - a lost worker or node
                    res = {"spec": asdict(specs[k]), "digests": [], "doc": None,
                           "error": f"ray task failed ({type(e).__name__}) on {specs[k].path}"}
                done(k, res)
        print(f"traceview: ray: {sum(nodes.values())} job(s) ran on {len(nodes)} node(s): "
              + ", ".join(f"{n[:8]} {c}" for n, c in nodes.most_common()), file=sys.stderr)
    finally:
        if started:
            ray.shutdown()


def run(specs: list[JobSpec], options: Options | None = None, jobs: int | None = None, engine: str = "local",
        address: str | None = None, on_done: Callable[[dict], None] | None = None) -> list[dict]:
    """Analyze every job; results in the order of `specs`. `on_done(result)` is called as each finishes."""
    results: list[dict | None] = [None] * len(specs)
    if not specs:
        return []
    n = jobs or os.cpu_count() or 1

    def done(k: int, res: dict) -> None:
        results[k] = res
        if on_done:
            on_done(res)

    if engine == "ray":
        _run_ray(specs, options, n, address, done)
    else:
        _run_local(specs, options, n, done)
    return [r for r in results if r is not None]


# ---- rows ---------------------------------------------------------------------------------------------------
def _findings(res: dict) -> list[dict]:
    doc = res.get("doc") or {}
    fs = [f for t in doc.get("traces") or [] for f in t.get("findings") or []]
    fs += [f for j in doc.get("jobs") or [] for f in j.get("findings") or []]
    return sorted(fs, key=lambda f: (-f["savings_us"], -severity_rank(f["severity"]), f["code"]))


def row(res: dict, fail_on: str | None = None, top: int = 3) -> dict[str, Any]:
    """One summary row per job. For the ranks of a run: the step time of the slowest rank, the mean shares
    over the ranks, the primary class most ranks share; findings of every rank and of the job."""
    spec = res["spec"]
    digs = res.get("digests") or []
    fs = _findings(res)
    steps = [d for d in digs if d["step_us"] is not None]
    slow = max(steps, key=lambda d: d["step_us"]) if steps else None
    classes = sorted({c for d in digs for c in d["shares"]})
    shares = {c: round(sum(d["shares"].get(c) or 0.0 for d in digs) / len(digs), 2) for c in classes} if digs else {}
    prims = Counter(d["primary"] for d in digs if d["primary"])
    prim = max(prims, key=lambda c: (prims[c], shares.get(c, 0.0))) if prims else None
    counts = Counter(f["severity"] for f in fs)
    failing = bool(fail_on) and any(severity_rank(f["severity"]) >= severity_rank(fail_on) for f in fs)
    status = "failed" if res.get("error") else "findings" if failing else "ok"
    return {
        "input": spec["label"], "kind": "run" if len(spec["files"]) > 1 else "trace",
        "path": spec["folder"] if spec["folder"] and len(spec["files"]) > 1 else spec["files"][0],
        "ranks": len(digs), "status": status, "steps": slow["steps"] if slow else None,
        "step_ms": round(slow["step_us"] / 1000, 4) if slow else None,
        "step_sd_ms": round(slow["step_sd_us"] / 1000, 4) if slow else None,
        "primary": prim, "shares": shares,
        "findings": {s: counts.get(s, 0) for s in ("error", "warning", "info")},
        "top_findings": [{"code": f["code"], "rule": f["rule"], "severity": f["severity"], "title": f["title"],
                          "savings_ms": round(f["savings_us"] / 1000, 4)} for f in fs[:top]],
        "keys": [d["key"] for d in digs], "error": res.get("error"), "baseline": None,
    }


def failed_row(path: str, error: str) -> dict[str, Any]:
    """A row for an input that produced no job (a missing path, a folder without traces)."""
    return row({"spec": {"label": path, "files": [path], "folder": None}, "error": error})


def attach_baseline(rows: list[dict], cmp: dict) -> None:
    """Mark rows with their traces' baseline verdicts (regressed wins over findings and ok)."""
    by_key = {t["key"]: t for t in cmp["traces"]}
    for r in rows:
        got = [by_key[k] for k in r["keys"] if k in by_key]
        if not got:
            continue
        reg = [t for t in got if t["status"] == "regressed"]
        step = [c for t in got for c in t["checks"] if c["metric"] == "step_time"]
        worst = max(step, key=lambda c: c["delta_pct"] or 0.0) if step else None
        r["baseline"] = {
            "status": "regressed" if reg else "new" if all(t["status"] == "new" for t in got) else "ok",
            "step_delta_pct": worst["delta_pct"] if worst else None,
            "regressions": sorted({f"{t['key']}: {m}" if len(got) > 1 else m for t in reg for m in t["regressions"]}),
            "new_findings": [f"{f['code']} {f['title']}" for t in got if t.get("new_findings_gated")
                             for f in t["new_findings"]],
            "notes": [f"{t['key']}: {n}" if len(got) > 1 else n for t in got for n in t.get("notes") or []],
        }
        if reg and r["status"] != "failed":
            r["status"] = "regressed"


def merged_doc(results: list[dict], extra_errors: list[dict]) -> dict:
    """One analyze-shaped document of every job (for the SARIF and JUnit formatters)."""
    from .. import __version__
    from ..report import SCHEMA_VERSION

    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "tool": {"name": "traceview", "version": __version__},
                           "traces": [], "jobs": [], "errors": list(extra_errors)}
    for r in results:
        d = r.get("doc")
        if d:
            doc["traces"] += d["traces"]
            doc["jobs"] += d["jobs"]
            doc["errors"] += d["errors"]
        elif r.get("error"):
            doc["errors"].append({"path": r["spec"]["folder"] or r["spec"]["files"][0], "error": r["error"]})
    return doc
