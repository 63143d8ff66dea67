"""The text report's first screen over every bundled trace (issue 31 item 3): every line fits the width at 80 and
100 columns, the recording's edges are one dim line after the verdict (why only with --detail), no info row that
saves nothing, and the verdict, "Fix first" and "nothing to fix" never disagree."""

from __future__ import annotations

import functools
import io
import re

import pytest
from conftest import SAMPLES, bundled

from traceview.formatters import text
from traceview.report import analyze


def inputs() -> list[str]:
    """Every bundled trace: a run folder (collector manifest, or rank files of one job) as one input, else each
    trace file."""
    out: set[str] = set()
    for p in bundled("*.json*"):
        if p.name in ("labels.json", "manifest.json") or p.name.endswith(".collect.json"):
            continue
        run = p.parent
        if (run / "manifest.json").exists():
            out.add(run.relative_to(SAMPLES).as_posix())
        else:
            out.add(p.relative_to(SAMPLES).as_posix())
    return sorted(out)


INPUTS = inputs()


@functools.cache
def doc(rel: str) -> dict:
    return analyze([SAMPLES / rel]).to_dict()


def render(rel: str, width: int, show: tuple[str, ...] = ()) -> list[str]:
    buf = io.StringIO()
    text.render(doc(rel), buf, show=show, width=width)
    return buf.getvalue().splitlines()


def test_found_every_bundled_trace() -> None:
    assert len(INPUTS) >= 60 and "gpu_h200_compile/compile_graph_break.json.gz" in INPUTS


@pytest.mark.parametrize("rel", INPUTS)
def test_first_screen(rel: str) -> None:
    d = doc(rel)
    for width in (80, 100):
        lines = render(rel, width)
        too_long = [line for line in lines if len(line) > width]
        assert not too_long, (width, too_long)
    lines = render(rel, 100)
    for t in d["traces"]:
        # no warning line about the recording's edges; one dim line with the amount when some was left out
        assert not any(
            line.startswith("warning:") and "left out of" in line and "period" in line for line in lines
        )
        excl = t["summary"].get("excluded_us")
        if excl and len(d["traces"]) == 1:  # one line at 80 columns
            (line,) = [line for line in render(rel, 80) if "at the recording's edges left out" in line]
            assert line.startswith(f"{excl / 1000:,.2f} ms at the recording's edges") and line.endswith(
                "--detail)"
            )
        # verdict, fix first and "nothing to fix" agree
        c = t.get("classification") or {}
        verdict = t.get("verdict_text") or ""
        if "nothing above info to fix" in verdict:
            assert not any(line.startswith("Fix first:") for line in lines)
        if c.get("primary_basis") == "savings" and len(d["traces"]) == 1:
            (ff,) = [line for line in lines if line.startswith("Fix first:")]
            assert ff.split()[2] == c["primary"] and verdict.startswith("Verdict:")
    # no info row that saves nothing on the first screen
    for line in lines:
        m = re.match(r"^info\s+TV\d+\s.*\s(\d+\.\d\d)\s+[\d.]+\s", line)
        assert not (m and float(m.group(1)) == 0.0), line


def test_edges_say_why_with_detail() -> None:
    rel = "gpu_h200_compile/compile_graph_break.json.gz"
    (t,) = doc(rel)["traces"]
    notes = t["summary"]["excluded"]["notes"]
    assert len(notes) == 2 and notes[0].startswith("179.4 µs at the start of step 1")
    assert notes not in t["warnings"]
    short, full = "\n".join(render(rel, 200)), "\n".join(render(rel, 200, tuple(text.SECTIONS)))
    assert notes[0] not in short and notes[0] in full and "; --detail)" in short


def test_readme_example_is_the_real_first_screen() -> None:
    """The README's example output is what the install command's trace prints at 100 columns (path line aside)."""
    readme = (SAMPLES.parent / "README.md").read_text()
    block = readme.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    got = [line.rstrip() for line in render("gpu_h200/sync_item_nonzero_cpu.json.gz", 100)]
    assert block[1:] == got[1:] and "sync_item_nonzero_cpu.json.gz" in block[0]
