"""Baselines: save a compact summary of a run, and gate CI on regressions against it.

`--save-baseline FILE` writes one digest per trace (see digest.py: step time and its per-step spread,
class times per step, shares, primary class, findings, the largest layers). `--baseline FILE` compares the
current traces with it, matched by key (the job label, plus `rank<R>` for the ranks of a run; a lone
unmatched trace on each side is paired whatever its name), and fails (exit 1) when the **step time**
regressed: the mean step grew by more than `max-regression` % of the baseline's mean step **and** by more
than the noise, `noise-sigmas` (default 2) standard errors of the difference of the two means:
sqrt(sd_base² / n_base + sd_now² / n_now) from the per-step spread of each run.

Users gate on step time: a run that got faster passes even when a class grew (a faster step has a larger
share of host overhead) or a new finding appeared; those are reported as notes. Only where asked:
- `--gate-classes`: a **class** regressed: its time per step (share x mean step) grew by more than
  `max-regression` % of the baseline's mean step — i.e. its share of the baseline step rose by that many
  points — and by more than the noise of that class's per-step times (same formula);
- `--gate-new-findings`: a **new warning or error finding** appeared: its key is not in the baseline, or was
  only `info` there.
Traces without a baseline entry are reported as `new`, baseline entries without a current trace as `missing`;
neither fails the gate.

Thresholds (percent) live in `[tool.traceview.baseline]` of pyproject.toml: `max-regression` (default 5),
`noise-sigmas`, `gate-classes`, `gate-new-findings` (booleans), and per metric `step_time` or a class name
(`host_sync = 2`). `--max-regression 3` replaces the default, `--max-regression host_sync=2` one metric.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analyses.classify import CLASSES
from ..errors import TraceError
from ..finding_model import severity_rank
from .jsonfile import read_json

KIND = "traceview-baseline"
SCHEMA_VERSION = 1
METRICS = ["step_time", *CLASSES]


@dataclass
class Thresholds:
    default_pct: float = 5.0
    per_metric: dict[str, float] = field(default_factory=dict)
    noise_sigmas: float = 2.0
    gate_classes: bool = False  # class growth fails the gate (else it is a note)
    gate_new_findings: bool = False  # a new warning/error finding fails the gate (else it is a note)

    def pct(self, metric: str) -> float:
        return self.per_metric.get(metric, self.default_pct)


def _number(where: str, v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: expected a number, got {v!r}") from None
    if not math.isfinite(x) or x < 0:
        raise TraceError(f"{where}: expected a number >= 0, got {v!r}")
    return x


def _flag(where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise TraceError(f"{where}: expected true or false, got {v!r}")
    return v


def _metric(where: str, name: str) -> str:
    if name not in METRICS:
        raise TraceError(f"{where}: unknown metric {name!r} (metrics: {', '.join(METRICS)})")
    return name


def thresholds(table: dict | None, cli: list[str] | None = None, gate_classes: bool = False,
               gate_new_findings: bool = False) -> Thresholds:
    """From `[tool.traceview.baseline]`, `--max-regression` values (`PCT` or `METRIC=PCT`; the CLI wins) and the
    `--gate-classes` / `--gate-new-findings` flags (each turns its gate on; the config may turn it on too)."""
    th = Thresholds()
    for k, v in (table or {}).items():
        where = f"config: baseline.{k}"
        if k in ("max-regression", "max_regression"):
            th.default_pct = _number(where, v)
        elif k in ("noise-sigmas", "noise_sigmas"):
            th.noise_sigmas = _number(where, v)
        elif k in ("gate-classes", "gate_classes"):
            th.gate_classes = _flag(where, v)
        elif k in ("gate-new-findings", "gate_new_findings"):
            th.gate_new_findings = _flag(where, v)
        else:
            th.per_metric[_metric("config: [tool.traceview.baseline]", k)] = _number(where, v)
    for s in cli or []:
        if "=" in s:
            k, v = s.split("=", 1)
            th.per_metric[_metric("--max-regression", k.strip())] = _number(f"--max-regression {s}", v)
        else:
            th.default_pct = _number("--max-regression", s)
    th.gate_classes = th.gate_classes or gate_classes
    th.gate_new_findings = th.gate_new_findings or gate_new_findings
    return th


def save(digests: list[dict], path: str | Path, step: int | None = None) -> None:
    from .. import __version__

    doc = {"kind": KIND, "schema_version": SCHEMA_VERSION, "tool": {"name": "traceview", "version": __version__},
           "step": step, "traces": digests}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def load(path: str | Path) -> dict:
    p = Path(path)
    doc = read_json(p, "baseline")
    if not isinstance(doc, dict) or doc.get("kind") != KIND or not isinstance(doc.get("traces"), list):
        raise TraceError(f"baseline {p}: not a traceview baseline (write one with --save-baseline)")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise TraceError(f"baseline {p}: schema_version {doc.get('schema_version')} (this traceview reads "
                         f"{SCHEMA_VERSION}); save it again")
    for k, t in enumerate(doc["traces"]):
        problem = _bad_digest(t)
        if problem:
            raise TraceError(f"baseline {p}: traces[{k}]{problem}; save it again with --save-baseline")
    return doc


#: no profiled step lasts a day (µs): a larger baseline time is no measurement, and would pass any regression
_MAX_US = 86_400e6


def _show(v: Any) -> str:
    return repr(v)[:40]


def _bad_time(where: str, v: Any, null: bool = True) -> str | None:
    """Why `v` is not a time in µs (a finite number in [0, a day]), or None."""
    if v is None and null:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= _MAX_US:
        return f"{where}: expected a time in µs (a finite number from 0 to {_MAX_US:.0f}), got {_show(v)}"
    return None


def _bad_sd(where: str, sd: Any, mean: Any, n: int) -> str | None:
    """Why `sd` cannot be the sample standard deviation of `n` values >= 0 of mean `mean` (it is at most
    mean·sqrt(n)): a noise band that wide would hide any regression."""
    bad = _bad_time(where, sd)
    if bad or sd is None:
        return bad
    if sd > (mean or 0.0) * math.sqrt(max(n, 1)) * (1 + 1e-6) + 1e-3:
        return f"{where}: {_show(sd)} is larger than the spread of {n} steps of mean {_show(mean)} µs can be"
    return None


def _bad_digest(t: Any) -> str | None:
    """Why one baseline trace digest cannot be compared with (what `compare_one` reads: types, finite numbers
    in range), or None."""
    if not isinstance(t, dict):
        return f": expected an object, got {_show(t)}"
    if not isinstance(t.get("key"), str):
        return f".key: expected a string, got {_show(t.get('key'))}"
    if t.get("path") is not None and not isinstance(t["path"], str):
        return f".path: expected a string, got {_show(t['path'])}"
    n = t.get("steps", 0)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**31:
        return f".steps: expected a whole number >= 0, got {_show(n)}"
    bad = _bad_time(".step_us", t.get("step_us")) or _bad_sd(".step_sd_us", t.get("step_sd_us"), t.get("step_us"), n)
    if bad:
        return bad
    classes = t.get("classes") or {}
    if not isinstance(classes, dict):
        return f".classes: expected an object, got {_show(classes)}"
    for c, v in classes.items():
        if c not in CLASSES:
            return f".classes: unknown class {_show(c)} (classes: {', '.join(CLASSES)})"
        if not isinstance(v, dict):
            return f".classes.{c}: expected an object, got {_show(v)}"
        bad = _bad_time(f".classes.{c}.us", v.get("us")) or _bad_sd(f".classes.{c}.sd_us", v.get("sd_us"),
                                                                    v.get("us"), n)
        if bad:
            return bad
    findings = t.get("findings") or []
    if not isinstance(findings, list):
        return f".findings: expected a list, got {_show(findings)}"
    for k, f in enumerate(findings):
        if not isinstance(f, dict):
            return f".findings[{k}]: expected an object, got {_show(f)}"
        for name in ("key", "rule", "code", "title", "severity"):
            if not isinstance(f.get(name), str):
                return f".findings[{k}].{name}: expected a string, got {_show(f.get(name))}"
        try:
            severity_rank(f["severity"])
        except (KeyError, ValueError):
            return f".findings[{k}].severity: unknown severity {_show(f['severity'])}"
    return None


def _check(name: str, base_mean: float | None, base_sd: float, base_n: int, now_mean: float | None, now_sd: float,
           now_n: int, ref_us: float, pct: float, sigmas: float) -> dict:
    """One metric: regressed when it grew beyond both the allowed % of the reference step and the noise."""
    b, c = base_mean or 0.0, now_mean or 0.0
    delta = c - b
    allowed = pct / 100 * ref_us
    noise = sigmas * math.sqrt(base_sd ** 2 / max(base_n, 1) + now_sd ** 2 / max(now_n, 1))
    return {"metric": name, "base_us": round(b, 3), "now_us": round(c, 3), "delta_us": round(delta, 3),
            "delta_pct": round(100 * delta / ref_us, 2) if ref_us else None, "allowed_us": round(allowed, 3),
            "noise_us": round(noise, 3), "regressed": delta > max(allowed, noise)}


def _notes(checks: list[dict], new: list[dict], th: Thresholds) -> list[str]:
    """What moved without failing the gate: the class shift, class growth and new findings not gated."""
    from .diff import fmt_us, shift_text

    step = checks[0]
    moved = sorted(({"class": c["metric"], "delta_us": c["delta_us"]} for c in checks[1:]),
                   key=lambda r: (-abs(r["delta_us"]), r["class"]))
    out = []
    if step["delta_us"] or any(r["delta_us"] for r in moved):
        pct = step["delta_pct"] or 0.0
        sign = "+" if pct > 0 else "−" if pct < 0 else "±"
        out.append(f"step {fmt_us(step['delta_us'])} ({sign}{abs(pct):.1f} %); class shift: "
                   f"{shift_text(moved, step['base_us'])}")
    if not th.gate_classes:
        out += [f"{c['metric']} grew {fmt_us(c['delta_us'])} a step ({c['delta_pct']:+.1f} % of the baseline step, "
                f"beyond the allowed {fmt_us(c['allowed_us'], False)} and the noise {fmt_us(c['noise_us'], False)}); "
                "not gated (--gate-classes fails on it)" for c in checks[1:] if c["regressed"]]
    if not th.gate_new_findings:
        out += [f"new {f['severity']} finding {f['code']} {f['title']}; not gated (--gate-new-findings fails on it)"
                for f in new]
    return out


def compare_one(base: dict, now: dict, th: Thresholds) -> dict:
    """Compare one current digest with its baseline digest. Every check says whether it `regressed` (beyond the
    allowed % and the noise) and whether it is `gated` (the step time always, classes with gate_classes); only
    a gated regression, or a new finding with gate_new_findings, makes the trace `regressed`."""
    ref = base.get("step_us") or 0.0
    checks = [_check("step_time", base.get("step_us"), base.get("step_sd_us") or 0.0, base.get("steps") or 0,
                     now.get("step_us"), now.get("step_sd_us") or 0.0, now.get("steps") or 0, ref,
                     th.pct("step_time"), th.noise_sigmas)]
    for c in sorted(set(base.get("classes") or {}) | set(now.get("classes") or {})):
        bc, nc = (base.get("classes") or {}).get(c) or {}, (now.get("classes") or {}).get(c) or {}
        checks.append(_check(c, bc.get("us"), bc.get("sd_us") or 0.0, base.get("steps") or 0, nc.get("us"),
                             nc.get("sd_us") or 0.0, now.get("steps") or 0, ref, th.pct(c), th.noise_sigmas))
    for c in checks:
        c["gated"] = c["metric"] == "step_time" or th.gate_classes
    warn = severity_rank("warning")
    before = {f["key"]: f for f in base.get("findings") or []}
    new = [f for f in now.get("findings") or [] if severity_rank(f["severity"]) >= warn
           and (f["key"] not in before or severity_rank(before[f["key"]]["severity"]) < warn)]
    regressed = [c for c in checks if c["regressed"] and c["gated"]]
    return {"key": now["key"], "base_key": base["key"], "path": now["path"],
            "status": "regressed" if regressed or (new and th.gate_new_findings) else "ok", "checks": checks,
            "regressions": [c["metric"] for c in regressed],
            "new_findings": [{k: f[k] for k in ("rule", "code", "severity", "title")} for f in new],
            "new_findings_gated": th.gate_new_findings, "notes": _notes(checks, new, th)}


def compare(base_doc: dict, digests: list[dict], th: Thresholds) -> dict:
    """Every current digest against the baseline: {traces: [...], missing: [keys], regressed: bool}."""
    from .diff import pair

    base = base_doc["traces"]
    pairs, _, left_base = pair([d["key"] for d in digests], [b["key"] for b in base])
    got = {i: compare_one(base[j], digests[i], th) for i, j in pairs}
    rows = [got.get(i) or {"key": d["key"], "base_key": None, "path": d["path"], "status": "new", "checks": [],
                           "regressions": [], "new_findings": [], "new_findings_gated": th.gate_new_findings,
                           "notes": []} for i, d in enumerate(digests)]
    return {"traces": rows, "missing": [base[j]["key"] for j in left_base],
            "regressed": any(r["status"] == "regressed" for r in rows),
            "thresholds": {"max_regression_pct": th.default_pct, "per_metric_pct": th.per_metric,
                           "noise_sigmas": th.noise_sigmas, "gate_classes": th.gate_classes,
                           "gate_new_findings": th.gate_new_findings}}
