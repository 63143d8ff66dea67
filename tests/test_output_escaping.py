"""Issue 13, items 6 and 7: trace strings cannot style, link or inject anything in the text, Markdown and
JUnit reports, and a trace with 20,000 steps gives a handful of warning lines, not 20,000."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from hostile import analyze_json, error_lines, ev, mini_trace, run_cli, write
from markdown_it import MarkdownIt

from traceview.safe_text import md_code, md_text, printable, rich_safe, xml_chars

HOSTILE = {
    "close_tag": "[/bold]",
    "rich_link": "[link=https://evil.example]click[/link]",
    "osc8": "\x1b]8;;https://evil.example\x1b\\hidden\x1b]8;;\x1b\\",
    "clear": "\x1b[2J\x1b[31mred\x07\x9b1m",
    "img": "<img src=https://evil.example/p.png onerror=alert(1)>",
    "script": "<script>alert(1)</script>",
    "md_image": "![pixel](https://evil.example/p.png)",
    "md_link": "[text](javascript:alert(1))",
    "mention": "@everyone please",
    "pipe_tick": "a|b `c` *d* _e_",
    "bidi": "abc\u202edcba",
    "nul": "x\x00y\x01z\x7f",
}


def _hostile_trace() -> dict:
    """The mini trace with every hostile string as a kernel name, an op name and a python frame."""
    d = mini_trace()
    evs = d["traceEvents"]
    for k, (key, name) in enumerate(HOSTILE.items()):
        t = 2_000 + 10 * k
        evs.append(ev(name=name, ts=t, dur=2, args={"External id": 500 + k}))
        evs.append(ev(name="cudaLaunchKernel", cat="cuda_runtime", ts=t + 0.5, dur=1,
                      args={"correlation": 500 + k, "External id": 500 + k}))
        evs.append(ev(name=f"k_{key}_{name}", cat="kernel", pid=0, tid=7, ts=t + 2, dur=3,
                      args={"correlation": 500 + k, "External id": 500 + k, "device": 0, "stream": 7}))
    evs.append(ev(name="ProfilerStep#3", cat="user_annotation", ts=2_000, dur=200))
    return d


@pytest.fixture()
def hostile_path(tmp_path):
    return write(tmp_path / "hostile[red].json", _hostile_trace())


def test_text_report_shows_names_literally(hostile_path, capsys):
    rc, out, err = run_cli(capsys, "analyze", hostile_path, "--detail")  # every section: every trace string
    assert rc == 0, err
    assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out and "\u202e" not in out
    assert "[/bold]" in out  # a markup closing tag shown, not an error (was: exit 2, half a report)
    assert "[link=https://evil.example]click[/link]" in out  # not a hidden hyperlink
    assert "hostile[red].json" in out
    assert "\\x1b[2J" in out and "\\u202e" in out  # escape sequences shown as text


def test_layers_text_shows_names_literally(hostile_path, capsys):
    rc, out, err = run_cli(capsys, "layers", hostile_path)
    assert rc == 0, err
    assert "\x1b" not in out and "hostile[red].json" in out


def test_error_line_has_no_control_characters(tmp_path, capsys):
    bad = tmp_path / "bad\x1b[31m\nname.json"
    bad.write_text("{nope")
    rc, _, err = run_cli(capsys, "analyze", bad)
    assert rc == 2 and "\x1b" not in err and len(error_lines(err)) == 1
    assert "bad\\x1b[31m\\x0aname.json" in err


def _injected(doc: dict) -> dict:
    """The document with a hostile string in every field a renderer shows that a trace can set: paths,
    warnings, verdict, device name, finding titles, layers and notes, error lines."""
    bad = " ".join(HOSTILE.values())
    for t in doc["traces"]:
        t["path"] = t["path"] + bad
        t["warnings"].append(bad)
        t["verdict_text"] = bad
        t["metadata"]["device"] = bad
        assert t["findings"], "the mini trace raises findings"
        for f in t["findings"]:
            f["title"], f["layer"] = bad, bad
            f.setdefault("evidence", {})["note"] = bad
    doc["errors"].append({"path": bad, "error": bad})
    return doc


def _render(doc: dict, fmt: str) -> str:
    import importlib
    import io

    buf = io.StringIO()
    mod = importlib.import_module(f"traceview.formatters.{fmt}")
    if fmt == "text":  # every detail section, so every trace string is printed
        from traceview.formatters.sections import TEXT_SECTIONS

        mod.render(doc, buf, show=TEXT_SECTIONS)
    else:
        mod.render(doc, buf)
    return buf.getvalue()


def test_text_renderer_escapes_every_trace_string(hostile_path, capsys):
    rc, doc, err = analyze_json(capsys, hostile_path)
    assert rc == 0, err
    out = _render(_injected(doc), "text")
    assert "\\x1b" in out and "\x1b" not in out and "\u202e" not in out
    for where in ("warning: [/bold] [link=", "TV101 launch-bound: [/bold] [link=", "note: [/bold] [link="):  # the markup shown literally wherever a trace string goes
        assert where in out, where


def test_markdown_renders_no_html_links_or_images(hostile_path, capsys):
    rc, doc, err = analyze_json(capsys, hostile_path)
    assert rc == 0, err
    out = _render(_injected(doc), "markdown")
    assert out.count("everyone") >= 6
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(out)
    for tag in ("<img", "<script", "<a ", "<em>", "<strong>d", "<code>c</code>", "<b>"):
        assert tag not in html, tag
    prose = re.sub(r"<code>.*?</code>", "", html, flags=re.S)  # code spans render nothing active
    assert "@everyone" not in prose and "@\u200beveryone" in prose  # no mention
    # no autolink: `https:<zero-width space>//` (outside the code span of the heading)
    assert [x for x in out.splitlines() if "https://" in x and not x.startswith("## ")] == []
    assert "https:\u200b//evil.example" in prose
    assert "&lt;script&gt;" in html and "[/bold]" in html and "![pixel]" in html
    # the hostile names did not break the findings table: every row has the header's 9 cells
    rows = [x for x in out.splitlines() if x.startswith("| ")]
    assert rows and all(x.replace("\\|", "").count("|") == 10 for x in rows)


def test_junit_is_valid_xml_with_control_characters(hostile_path, capsys, tmp_path):
    bad = tmp_path / "bad\x01.json"
    bad.write_text("{nope")
    rc, out, err = run_cli(capsys, "analyze", hostile_path, bad, "--format", "junit")
    assert rc == 2
    root = ET.fromstring(out)
    errs = [c for c in root.iter("testcase") if c.find("error") is not None]
    assert len(errs) == 1 and errs[0].get("classname").endswith("bad\\x01.json")


def test_json_keeps_the_names_exactly(hostile_path, capsys):
    rc, doc, err = analyze_json(capsys, hostile_path)
    assert rc == 0, err
    names = {k["name"] for k in doc["traces"][0]["top_kernels"]}
    assert "k_close_tag_[/bold]" in names  # JSON is data: escaping is the renderers' business


def test_safe_text_helpers():
    assert printable("a\x1b[1mb\tc\n") == "a\\x1b[1mb\tc\n"
    assert rich_safe({"a": ["[b]x[/b]", 1]}) == {"a": ["\\[b]x\\[/b]", 1]}
    assert md_text("<b>*x*</b> | [l](u)") == "&lt;b&gt;\\*x\\*&lt;/b&gt; \\| \\[l\\]\\(u\\)"
    assert md_code("a`b") == "``a`b``" and md_code("`x") == "`` `x ``"
    assert xml_chars("a\x00b\x0bc\td") == "a\\x00b\\x0bc\td"


# ---- item 7: warnings at scale -------------------------------------------------------------------------

def _many_steps(n: int) -> dict:
    d = mini_trace(steps=3)
    for s in range(3, n):
        t = 1_000 + s * 100
        d["traceEvents"].append(ev(name=f"ProfilerStep#{s}", cat="user_annotation", ts=t, dur=100))
        d["traceEvents"].append(ev(name="aten::add", ts=t + 5, dur=20))
    return d


def test_20000_steps_give_one_warning_line(tmp_path, capsys):
    p = write(tmp_path / "long.json", _many_steps(20_000))
    rc, doc, err = analyze_json(capsys, p)
    assert rc == 0, err
    t = doc["traces"][0]
    assert t["summary"]["steps"] == 20_000
    assert t["warnings"] == ["steps 3-19999 (19,997 steps) left out of the rules and the classification: they "
                             "launched no GPU work"]
    rc, out, err = run_cli(capsys, "analyze", p, "--show", "steps")
    assert rc == 0, err
    assert out.count("warning:") == 1
    assert "19,980 more" in out and len(out) < 50_000  # the step table shows the first and last 10 steps


def test_repeated_warnings_are_counted_not_repeated():
    from traceview.notes import aggregate

    ws = [f"step {k} took {k * 1.5:,.1f} ms" for k in range(1000)] + ["other", "other"]
    got = aggregate(ws)
    assert got == ["step 0 took 0.0 ms", "step 1 took 1.5 ms", "step 2 took 3.0 ms",
                   "... and 997 more warnings like the one above", "other"]


def test_json_document_is_valid_with_hostile_names(hostile_path, capsys):
    rc, out, err = run_cli(capsys, "analyze", hostile_path, "--format", "sarif")
    assert rc == 0, err
    json.loads(out)
