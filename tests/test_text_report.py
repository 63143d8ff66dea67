"""The terminal report (issue 17 items 2-4): the first screen leads with the verdict, the step time and the top
findings with their savings; the long tables are detail sections; lines fit the width; piped output is plain;
`| head` exits quietly; a progress bar only on a terminal. Numbers are checked against the JSON document of the
same trace."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest
from conftest import SAMPLES

from traceview.formatters.sections import TEXT_SECTIONS
from traceview.formatters.term import middle, step_ranges

GPT2 = SAMPLES / "gpu_h200_real/hf_gpt2_train_bf16.json.gz"
JOB = SAMPLES / "nccl_h200x2/ddp_rank1_slowed"


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**env, **kw.pop("env", {})}, **kw)


@pytest.fixture(scope="module")
def gpt2_doc() -> dict:
    r = run("analyze", GPT2, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["traces"][0]


def test_gpt2_first_screen_leads_with_the_answer(gpt2_doc: dict) -> None:
    """GPT-2 training step: 267 lines with the findings last before; now the verdict, the step time and the
    findings with their savings per step come first, in at most 80 lines (piped: 100 columns)."""
    r = run("analyze", GPT2)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) <= 80, len(lines)
    out = r.stdout
    s = gpt2_doc["summary"]
    head = lines[1]
    assert f"step {s['avg_step_us'] / 1000:,.2f} ms avg" in head and "3 step(s) 1-3" in head
    assert " / ".join(f"{st['dur_us'] / 1000:,.2f}" for st in gpt2_doc["steps"]) in head  # each step's time
    top = gpt2_doc["findings"][0]
    primary = gpt2_doc["classification"]["primary"]
    assert (out.index(gpt2_doc["verdict_text"][:30]) < out.index(f"Fix first: {primary}") < out.index("Findings (")
            < out.index(f"{top['code']} {top['rule']} — fix:"))
    folded = 0
    for f in gpt2_doc["findings"]:  # every finding with its savings per step and % of the step
        if f["severity"] == "info" and round(f["savings_us"] / 1000, 2) == 0:  # saves nothing: folded away
            folded += 1
            assert not any(f" {f['code']} " in line and f["title"][:20] in line for line in lines)
            continue
        row = next(line for line in lines if line.lstrip().split(" ")[0] in ("info", "warning", "error")
                   and f" {f['code']} " in line and f"{f['savings_us'] / 1000:,.2f}" in line)
        assert f"{f['savings_pct']:.1f}" in row
    # the long tables are detail sections
    for title in ("Step time breakdown", "Top kernels", "Top ops", "GPU time per layer", "Repeated layers"):
        assert title not in out
    assert lines[-1] == "More: --detail, or --show " + ",".join(TEXT_SECTIONS)


def test_detail_and_show_select_the_sections() -> None:
    full = run("analyze", GPT2, "--detail", "--width", "160")
    assert full.returncode == 0, full.stderr
    for title in ("Step time breakdown", "GPU 0 idle time by stream", "Top kernels by GPU time", "Top ops by GPU time",
                  "GPU time per layer", "Repeated layers", "Where the step time goes"):
        assert title in full.stdout, title
    assert "More:" not in full.stdout
    some = run("analyze", GPT2, "--show", "kernels", "--show", "repeats", "--width", "160")
    assert "Top kernels by GPU time" in some.stdout and "Repeated layers" in some.stdout
    assert "GPU time per layer" not in some.stdout and "Step time breakdown" not in some.stdout
    assert some.stdout.splitlines()[-1] == "More: --detail, or --show steps,devices,ops,layers,findings,ranks"
    bad = run("analyze", GPT2, "--show", "kernels,bogus")
    assert bad.returncode == 2 and "unknown section(s) bogus" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("width", [60, 100, 160])
def test_every_line_fits_the_width(width: int) -> None:
    for path in (GPT2, JOB):
        r = run("analyze", path, "--detail", "--width", str(width))
        assert r.returncode == 0, r.stderr
        too_long = [line for line in r.stdout.splitlines() if len(line.rstrip()) > width and not line.startswith("More:")]
        assert too_long == [], too_long[:3]


def test_names_are_cut_in_the_middle() -> None:
    r = run("analyze", GPT2, "--show", "layers", "--width", "100")
    # a finding's layer keeps its last parts; the kernel and layer names keep both ends
    row = next(line for line in r.stdout.splitlines() if line.startswith(("info", "warning", "error")) and "…/" in line)
    assert "GPT2Block" not in row  # a layer path cut in the middle: the root and the trailing parts
    path = "GPT2LMHeadModel_0/GPT2Model_0/GPT2Block_0/GPT2Attention_0"
    # the root and as many trailing parts as fit; without room for the root, only trailing parts
    assert middle(path, 50) == "GPT2LMHeadModel_0/…/GPT2Block_0/GPT2Attention_0"
    assert middle("GPT2LMHeadModel/GPT2Model/GPT2Block/GPT2Attention", 33) == "GPT2LMHeadModel/…/GPT2Attention"
    assert middle(path, 34) == "…/GPT2Block_0/GPT2Attention_0"
    assert middle(path, 20) == "…/GPT2Attention_0" and middle(path, len(path)) == path
    cut = middle("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(Params)", 30)
    assert len(cut) == 30 and cut.startswith("void cutlass::") and cut.endswith("(Params)")


def test_plain_when_piped_and_width_from_terminal_or_option() -> None:
    r = run("analyze", GPT2, "--detail")
    assert "\x1b[" not in r.stdout  # no colours or cursor codes in a pipe
    assert r.stdout.splitlines()[0].startswith("---") and "━" not in r.stdout and "─" not in r.stdout
    assert max(len(line.rstrip()) for line in r.stdout.splitlines() if not line.startswith("More:")) <= 100
    assert run("analyze", GPT2, env={"COLUMNS": "120"}).stdout.splitlines()[0].__len__() == 120


def test_head_exits_quietly() -> None:
    """`traceview analyze T --detail | head -1`: the reader goes away; exit 0 and nothing on stderr."""
    p = subprocess.Popen([sys.executable, "-m", "traceview", "analyze", str(GPT2), "--detail"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()  # like head after its line
    err = p.stderr.read()
    assert p.wait(timeout=300) == 0 and err == b"" and first.startswith(b"---")


def test_job_leads_with_the_straggler() -> None:
    r = run("analyze", JOB)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    doc = json.loads(run("analyze", JOB, "--format", "json").stdout)
    job = doc["jobs"][0]
    assert out.index("job ") < out.index("Straggler: rank 1") < out.index("rank0.")  # before the ranks' reports
    assert " ".join(job["nccl"]["straggler"]["cause"]["text"].split()[:8]) in " ".join(out.split())
    r0 = next(r for r in job["nccl"]["ranks"] if r["rank"] == 0)
    assert f"{r0['exposed_wait_per_step_us'] / 1000:,.3f}" in out  # rank 0's exposed wait per step


def _pty_run(args: list[str], env: dict) -> tuple[int, bytes, bytes]:
    """Run with stderr on a pseudo-terminal (stdout a pipe); (exit code, stdout, what reached the terminal). The
    terminal is drained while the command runs: a full pty buffer would block its writes."""
    import threading

    m, s = pty.openpty()
    seen: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(m, 65536)
            except OSError:  # EIO once the command's end of the terminal is closed
                return
            if not chunk:
                return
            seen.append(chunk)

    p = subprocess.Popen([sys.executable, "-m", "traceview", *args], stdout=subprocess.PIPE, stderr=s,
                         env={**os.environ, **env})
    os.close(s)
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out = p.stdout.read()
    rc = p.wait(timeout=300)
    reader.join(timeout=60)
    os.close(m)
    return rc, out, b"".join(seen)


def test_progress_bar_only_on_a_terminal_and_never_in_json() -> None:
    """TRACEVIEW_PROGRESS_DELAY=0 shows it at once (the default waits a second, so quick runs print nothing)."""
    now = {"TRACEVIEW_PROGRESS_DELAY": "0"}
    rc, out, seen = _pty_run(["analyze", str(GPT2), str(SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz")], now)
    assert rc == 0 and b"Verdict" in out and b"\x1b[" not in out  # the report itself stays plain
    for stage in (b"reading hf_gpt2_train_bf16.json.gz", b"decoding hf_gpt2_train_bf16.json.gz",
                  b"analyzing hf_gpt2_train_bf16.json.gz", b"analyzing sync_item_nonzero_cpu.json.gz"):
        assert stage in seen, seen[:400]
    assert b"/2" in seen  # files done of 2
    rc, out, seen = _pty_run(["analyze", str(GPT2), "--format", "json"], now)
    assert rc == 0 and json.loads(out)["traces"] and seen == b""
    r = run("analyze", GPT2, env=now)  # stderr a pipe: nothing
    assert r.returncode == 0 and r.stderr == ""


def test_step_ranges_never_cut() -> None:
    assert step_ranges([3, 1, 2, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]) == "1-3, 7, 9-18"
    assert step_ranges([5]) == "5"


def test_sections_of_the_other_issues_lead_when_present(gpt2_doc: dict) -> None:
    """`classification.primary`, `projection` and `jobs[].nccl.straggler.cause` are printed on the first screen,
    before the findings. The primary and the cause's text are replaced to check they are what leads."""
    import copy
    import io

    from traceview.formatters import text

    t = copy.deepcopy(gpt2_doc)
    p = t["projection"]  # issue 11's section, on this trace
    assert p["fixes"], p
    t["classification"]["primary"] = "cpu_launch"
    buf = io.StringIO()
    text.render({"traces": [t], "jobs": []}, buf, width=200)
    out = buf.getvalue()
    proj = next(line for line in out.splitlines() if line.startswith("Projected step:"))
    unp = p.get("unprofiled_step_us")
    allf = p["all_fixed_unprofiled_step_us"] if unp is not None else p["all_fixed_step_us"]
    assert proj.startswith(f"Projected step: {p['step_us'] / 1000:,.2f} ms traced")
    assert f"→ {allf / 1000:,.2f} ms with every fix" in proj
    f0 = next(f for f in p["fixes"] if f["savings_us"])
    assert f"{f0['code']} −{f0['savings_us'] / 1000:,.2f} ms" in proj
    assert out.index("Fix first: cpu_launch") < out.index("Projected step") < out.index("Findings (")

    doc = json.loads(run("analyze", JOB, "--format", "json").stdout)
    doc["jobs"][0]["nccl"]["straggler"]["cause"] = {"class": "cpu_launch", "excess_us_per_step": 97_700.0,
                                                    "evidence": {}, "text": "rank 1 is late because of its host"}
    buf = io.StringIO()
    text.render(doc, buf, width=120)
    out = buf.getvalue()
    assert out.index("job ") < out.index("\nStraggler: rank 1 is late because of its host\n") < out.index("\nrank 0: ")
