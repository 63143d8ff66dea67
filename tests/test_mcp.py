"""`traceview mcp`: the MCP SDK's own client drives the server (in process, over stdio and over HTTP) on bundled
traces; answers are checked against the `traceview analyze --format json` document, the raw events (stdlib
json), labels.json / MANIFEST.md and the collector's CUDA-event step times; every answer within its budget."""

from __future__ import annotations

import functools
import gzip
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import ROOT, SAMPLES
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from traceview.agent.bounds import BYTES_PER_TOKEN, DEFAULT_BUDGET_TOKENS
from traceview.agent.server import build

SYNC = "gpu_h200/sync_item_nonzero_cpu.json.gz"  # labels: 6 .item(), 6 nonzero, 6 .cpu() syncs a step
GPT2 = "gpu_h200_real/hf_gpt2_train_bf16.json.gz"  # the largest layer section of the bundled traces
BIGGEST = "hta/trace_diff/test/test.json.gz"  # the largest bundled trace file
JOB = "nccl_h200x2/ddp_rank1_slowed"  # MANIFEST.md: rank 1 spins 100 ms a step
BIG_JOB = "nccl_h200x2/fsdp_rank1_slowed"  # the largest bundled job
TOOLS = {"analyze", "job", "findings", "explain", "layers", "kernels", "ops", "timeline", "diff", "what_if",
         "document"}


@functools.cache
def cli_doc(rel: str) -> dict:
    """The CLI's own JSON document of a bundled input (absolute path, as the server passes it)."""
    out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(SAMPLES / rel), "--format", "json"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)


@functools.cache
def api_doc(rel: str) -> dict:
    from traceview.report import analyze

    return analyze([SAMPLES / rel]).to_dict()


@pytest.fixture(scope="module")
def app():
    return build([SAMPLES], DEFAULT_BUDGET_TOKENS)[0]


def calls(app, *requests: tuple[str, dict]) -> list:
    """Each (tool, arguments) called in one client session, in order; the results."""

    async def go() -> list:
        async with Client(app) as c:
            return [await c.call_tool(name, args) for name, args in requests]

    return anyio.run(go)


def ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    text = result.content[0].text
    assert json.loads(text) == result.structured_content  # the text block is the structured answer
    assert len(text.encode()) <= DEFAULT_BUDGET_TOKENS * BYTES_PER_TOKEN
    return result.structured_content


def refused(result) -> str:
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


def analysis(app, rel: str) -> dict:
    return ok(calls(app, ("analyze", {"path": rel}))[0])


def test_tools_and_resources(app):
    async def go():
        async with Client(app) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            uris = [str(r.uri) for r in (await c.list_resources()).resources]
            rule = await c.read_resource("traceview://rules/TV102")
            schema = await c.read_resource("traceview://schema")
            return tools, uris, rule.contents[0].text, schema.contents[0].text

    tools, uris, rule, schema = anyio.run(go)
    from traceview.rules import RULES, host_sync

    assert tools == TOOLS  # what_if waits for the replay model
    assert set(uris) == {"traceview://schema", *(f"traceview://rules/{c}" for c in RULES)}
    assert rule == f"# TV102 host-sync\n\n{host_sync.__doc__.strip()}\n"  # as `traceview rule TV102` prints it
    assert schema == (ROOT / "docs" / "json-schema.md").read_text(encoding="utf-8")


def test_analyze_is_the_cli_document(app):
    ans = analysis(app, SYNC)
    t, c = ans["traces"][0], cli_doc(SYNC)["traces"][0]
    assert t["path"] == c["path"] == str(SAMPLES / SYNC)
    for k in ("avg_step_us", "gpu_busy_pct"):
        assert t[k] == c["summary"][k]
    assert t["verdict_text"] == c["verdict_text"] and t["projection"] == c["projection"]
    assert t["classification"]["primary"] == c["classification"]["primary"] == "host_sync"  # label: sync_bound
    assert t["findings_total"] == len(c["findings"]) >= 2  # every finding, counted as the CLI's document does
    n = len(c["classification"]["analyzed_steps"])
    assert n == 3
    for k, f in enumerate(t["top_findings"]):
        cf = c["findings"][k]
        assert f["id"] == f"t0.f{k}" and (f["code"], f["title"], f["savings_us"]) == (cf["code"], cf["title"], cf["savings_us"])
        assert f["savings_per_step_us"] == cf["savings_us"]  # the document's savings are per step
    # what to fix first: the rule whose replayed fix saves the most (its findings together), not the top row
    first = next(f for f in c["findings"] if f["code"] == "TV102")
    assert t["fix_first"]["code"] == "TV102" and t["fix_first"]["fix"] == first["fix"]
    labels = json.loads((SAMPLES / "gpu_h200" / "labels.json").read_text())["sync_item_nonzero_cpu"]
    item = next(f for f in c["findings"] if f["title"].startswith(".item()"))
    assert item["count"] == labels["injected_syncs_per_step"]["item"] * n  # 18


def test_findings_page_and_filter(app):
    aid = analysis(app, SYNC)["analysis"]
    doc = api_doc(SYNC)["traces"][0]["findings"]
    ids, offset = [], 0
    while offset is not None:
        page = ok(calls(app, ("findings", {"analysis": aid, "offset": offset, "limit": 4}))[0])
        assert page["total"] == len(doc) and len(page["findings"]) <= 4
        ids += [f["id"] for f in page["findings"]]
        offset = page["next_offset"]
    assert ids == [f"t0.f{k}" for k in range(len(doc))]
    (syncs, errors, slug) = calls(app, ("findings", {"analysis": aid, "rule": "TV102"}),
                                  ("findings", {"analysis": aid, "severity": "error"}),
                                  ("findings", {"analysis": aid, "rule": "host-sync"}))
    syncs, errors, slug = ok(syncs), ok(errors), ok(slug)
    assert [f["id"] for f in syncs["findings"]] == [f"t0.f{k}" for k, f in enumerate(doc) if f["code"] == "TV102"]
    assert len(syncs["findings"]) == 3 and slug["findings"] == syncs["findings"]
    assert [f["id"] for f in errors["findings"]] == [f"t0.f{k}" for k, f in enumerate(doc) if f["severity"] == "error"]


def test_explain_finding_and_rule(app):
    aid = analysis(app, SYNC)["analysis"]
    doc = api_doc(SYNC)["traces"][0]["findings"]
    k = next(k for k, f in enumerate(doc) if f["title"].startswith(".item()"))
    f, r = calls(app, ("explain", {"finding": f"t0.f{k}", "analysis": aid}), ("explain", {"rule": "host-sync"}))
    f, r = ok(f), ok(r)
    from traceview.rules import host_sync

    assert f["source"]["pointer"] == f"/traces/0/findings/{k}"
    assert f["evidence"] == doc[k]["evidence"] and f["fix"] == doc[k]["fix"]
    assert f["source_line"] == "collect_labelled.py(114): step"  # with_stack=True in labels.json
    assert f["mechanism"].startswith("GPU work is asynchronous") and f["mechanism"] in host_sync.__doc__
    assert (r["code"], r["rule"]) == ("TV102", "host-sync")
    assert r["options"] == {name: o.default for name, o in host_sync.OPTIONS.items()}
    assert r["how_to_fix"] in host_sync.__doc__
    assert r["options_doc"].startswith("- `moderate_pct` (3.0)")  # the docstring's ## Options, as written


def test_layers_kernels_ops(app):
    from traceview.ingest.loader import load_file
    from traceview.layer_detail import layer_detail

    aid = analysis(app, GPT2)["analysis"]
    t = api_doc(GPT2)["traces"][0]
    lay, detail, ker, ops = calls(app, ("layers", {"analysis": aid, "top": 5}),
                                  ("layers", {"analysis": aid, "layer": "GPT2LMHeadModel_0/GPT2Model_0/GPT2Block_3",
                                              "top": 3}),
                                  ("kernels", {"analysis": aid, "top": 3}), ("ops", {"analysis": aid, "top": 4}))
    lay, detail, ker, ops = ok(lay), ok(detail), ok(ker), ok(ops)
    rows = sorted(t["layers"]["layers"], key=lambda r: -r["gpu_us"])[:5]
    assert [(r["layer"], r["gpu_us"]) for r in lay["layers"]] == [(r["layer"], r["gpu_us"]) for r in rows]
    assert lay["layers_total"] == len(t["layers"]["layers"]) and lay["total_gpu_us"] == t["layers"]["total_gpu_us"]
    assert lay["source"]["pointer"] == "/traces/0/layers" and lay["attribution"] == t["layers"]["source"] == "modules"
    want = layer_detail(load_file(SAMPLES / GPT2), "GPT2LMHeadModel_0/GPT2Model_0/GPT2Block_3", top=3)
    assert detail["gpu_us"] == want["gpu_us"] and detail["kernel_count"] == want["kernel_count"]
    assert [k["total_us"] for k in detail["kernels"]] == [k["total_us"] for k in want["kernels"]]
    assert [r["total_us"] for r in ker["top_kernels"]] == [r["total_us"] for r in t["top_kernels"][:3]]
    assert ops["top_ops"] == t["top_ops"][:4]
    assert detail["gpu_us"] < lay["layers"][0]["gpu_us"]  # one block of the model's 12


def test_timeline_window_matches_raw_events(app):
    aid = analysis(app, SYNC)["analysis"]
    step = 2
    whole = ok(calls(app, ("timeline", {"analysis": aid, "step": step, "limit": 1}))[0])
    lo, hi = whole["dur_us"] * 0.25, whole["dur_us"] * 0.5
    got, offset = [], 0
    while offset is not None:
        page = ok(calls(app, ("timeline", {"analysis": aid, "step": step, "t0_us": lo, "t1_us": hi,
                                           "offset": offset, "limit": 25}))[0])
        got += page["items"]
        offset = page["next_offset"]
    assert len(got) == page["items_in_window"] > 25
    assert all(r["ts_us"] < hi and r["ts_us"] + r["dur_us"] > lo for r in got)
    # the classifier's segments tile the step
    assert abs(sum(whole["class_us"].values()) - whole["dur_us"]) < 0.01
    # every GPU slice is a kernel/memcpy/memset event of the raw trace at the same time from the step's
    # ProfilerStep# annotation (stdlib json)
    with gzip.open(SAMPLES / SYNC, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    t0 = next(e["ts"] for e in events if e.get("name") == f"ProfilerStep#{step}" and e.get("cat") == "user_annotation")
    raw: dict[str, list[float]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            raw.setdefault(e["name"], []).append(e["ts"] - t0)
    gpu = [r for r in got if r["lane"].startswith("gpu:")]
    assert gpu
    for r in gpu:
        assert min(abs(x - r["ts_us"]) for x in raw[r["name"]]) < 0.002


def test_diff_of_a_fix(app):
    from traceview.ci.compare import diff_paths

    a, b = "collected2/train_syncs_item", "collected2/train_syncs_deferred"
    ans = ok(calls(app, ("diff", {"a": a, "b": b}))[0])
    want = diff_paths(str(SAMPLES / a), str(SAMPLES / b))
    (p,), (w,) = ans["pairs"], want["pairs"]
    assert p["step"] == w["step"] and p["classes"] == w["classes"] and p["findings"] == w["findings"]
    # the collector's CUDA-event profiled step medians (manifest.json), within 5 %
    for side, key in ((a, "a_us"), (b, "b_us")):
        m = json.loads((SAMPLES / side / "manifest.json").read_text())
        ms = m.get("profiled_step_ms") or json.loads((SAMPLES / "collected2" / "labels.json").read_text())[
            Path(side).name]["profiled_step_ms"]
        assert abs(p["step"][key] / 1000 - ms) / ms < 0.05
    host_sync = next(c for c in p["classes"] if c["class"] == "host_sync")
    assert host_sync["b_us"] == 0.0 < host_sync["a_us"]  # the deferred run has no per-step sync


def test_job_straggler(app):
    ans = ok(calls(app, ("job", {"path": JOB}))[0])
    doc = api_doc(JOB)
    (j,) = ans["jobs"]
    assert j["ranks"] == [0, 1] and j["step_period_us"] == doc["jobs"][0]["step_period"]["period_us"]
    f = j["findings"][0]
    assert f["code"] == "TV501" and f["title"].endswith("straggler rank 1 in NCCL collectives")  # MANIFEST: rank 1
    assert [r.get("straggler") for r in j["ranks_classification"]] == [1, None]
    page = ok(calls(app, ("findings", {"analysis": ans["analysis"], "job": 0}))[0])
    assert [x["id"] for x in page["findings"]] == [f"j0.f{k}" for k in range(len(doc["jobs"][0]["findings"]))]
    ex = ok(calls(app, ("explain", {"finding": "j0.f0", "analysis": ans["analysis"]}))[0])
    assert ex["evidence"]["straggler"] == 1


def test_document_pointer(app):
    aid = analysis(app, SYNC)["analysis"]
    doc = api_doc(SYNC)
    s, f, bad = calls(app, ("document", {"analysis": aid, "pointer": "/traces/0/summary"}),
                      ("document", {"analysis": aid, "pointer": "/traces/0/findings", "offset": 2, "limit": 2}),
                      ("document", {"analysis": aid, "pointer": "/traces/0/nope"}))
    assert ok(s)["value"] == doc["traces"][0]["summary"]
    f = ok(f)
    assert f["value"] == doc["traces"][0]["findings"][2:4] and f["total"] == len(doc["traces"][0]["findings"]) and f["next_offset"] == 4
    assert "no 'nope' there" in refused(bad)


def test_bad_arguments_are_one_line(app):
    aid = analysis(app, SYNC)["analysis"]
    res = calls(app, ("findings", {"analysis": aid, "offset": "x"}), ("layers", {"analysis": aid, "layer": "Nope_0"}),
                ("timeline", {"analysis": aid, "step": 99}), ("findings", {"analysis": aid, "severity": "fatal"}),
                ("nope", {}))
    lines = [refused(r) for r in res]
    assert "bad arguments (offset: Input should be a valid integer" in lines[0]
    assert "no layer 'Nope_0'" in lines[1] and "Linear_0" in lines[1]
    assert "no step 99 in this trace (steps: 1, 2, 3)" in lines[2] and "severity 'fatal'" in lines[3]


def test_refusals(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "bad.json").write_text('{"traceEvents": [', encoding="utf-8")
    (root / "out").symlink_to(SAMPLES / "gpu_h200")
    os.mkfifo(root / "fifo.json")  # must be refused, never opened (a read would block)
    app = build([root], DEFAULT_BUDGET_TOKENS)[0]
    res = calls(app, ("analyze", {"path": str(SAMPLES / SYNC)}), ("analyze", {"path": "../../etc/passwd"}),
                ("analyze", {"path": "out/compute_bound_gemm.json.gz"}), ("analyze", {"path": "bad.json"}),
                ("analyze", {"path": "missing.json"}), ("findings", {"analysis": "a-000"}),
                ("explain", {"rule": "TV999"}), ("explain", {"finding": "t0.f0"}), ("diff", {"a": "bad.json", "b": "/"}),
                ("analyze", {"path": "fifo.json"}))
    lines = [refused(r) for r in res]
    assert "outside the allowed roots" in lines[0] and "outside the allowed roots" in lines[1]
    assert "outside the allowed roots" in lines[2]  # a symlink out of the root
    assert "bad.json" in lines[3] and "no such file" in lines[4]
    assert "unknown analysis" in lines[5] and "unknown rule 'TV999'" in lines[6] and "analysis" in lines[7]
    assert "outside the allowed roots" in lines[8]
    assert "fifo.json" in lines[9]


def test_budget_on_the_largest_traces_and_jobs(app):
    """Every tool at its largest arguments stays within the default budget (checked in `ok`); a small budget
    still pages through every finding, and says what it left out."""
    for rel in (GPT2, BIGGEST, BIG_JOB):
        ans = analysis(app, rel)
        aid, step = ans["analysis"], ans["traces"][0]["steps"][0]
        res = calls(app, ("findings", {"analysis": aid, "limit": 200}), ("explain", {"finding": "t0.f0", "analysis": aid}),
                    ("layers", {"analysis": aid, "top": 100}), ("kernels", {"analysis": aid, "top": 100}),
                    ("ops", {"analysis": aid, "top": 100}), ("timeline", {"analysis": aid, "step": step, "limit": 1000}),
                    ("document", {"analysis": aid}), ("document", {"analysis": aid, "pointer": "/traces/0/layers/layers",
                                                                   "limit": 500}))
        answers = [ok(r) for r in res]
        tl = answers[5]
        assert tl["left_out"]["lists"] and tl["next_offset"] == len(tl["items"]) < tl["items_in_window"]
    SMALL = 800  # tokens: below the GPT-2 analysis answer (about 930 tokens whole), so something is left out
    small = build([SAMPLES], SMALL)[0]
    first = calls(small, ("analyze", {"path": GPT2}))[0]
    text = first.content[0].text
    assert len(text.encode()) <= SMALL * BYTES_PER_TOKEN and "left_out" in first.structured_content
    aid = first.structured_content["analysis"]
    n = len(api_doc(GPT2)["traces"][0]["findings"])
    ids, offset = [], 0
    while offset is not None:
        page = calls(small, ("findings", {"analysis": aid, "offset": offset, "limit": 200}))[0]
        assert len(page.content[0].text.encode()) <= SMALL * BYTES_PER_TOKEN
        ids += [f["id"] for f in page.structured_content["findings"]]
        offset = page.structured_content["next_offset"]
    assert ids == [f"t0.f{k}" for k in range(n)]


def test_many_ranks_job(tmp_path):
    """A job of 8 ranks synthesised from the recorded DDP run (tools/synth_ranks.py), straggler rank 5: the job
    tool names it and every answer stays within budget."""
    sys.path.insert(0, str(ROOT / "tools"))
    from synth_ranks import synthesize

    synthesize(SAMPLES / JOB, tmp_path / "job", 8, straggler=5, jitter_us=20.0, seed=1)
    app = build([tmp_path], DEFAULT_BUDGET_TOKENS)[0]
    job, first = calls(app, ("job", {"path": "job"}), ("analyze", {"path": "job"}))
    job, first = ok(job), ok(first)
    (j,) = job["jobs"]
    assert j["ranks"] == list(range(8)) and j["findings"][0]["title"].endswith("straggler rank 5 in NCCL collectives")
    assert [r.get("straggler") for r in j["ranks_classification"]] == [5] * 5 + [None] + [5] * 2
    assert first["analysis"] == job["analysis"] and len(job["traces"]) == 8


def _cut_from(small, big) -> bool:
    """`small` is `big` with list tails dropped and string tails cut: every number where it was."""
    if isinstance(big, dict):
        return isinstance(small, dict) and small.keys() == big.keys() and all(_cut_from(small[k], big[k]) for k in big)
    if isinstance(big, list):
        return isinstance(small, list) and len(small) <= len(big) and all(map(_cut_from, small, big))
    if isinstance(big, str) and small != big:
        return isinstance(small, str) and small.endswith("…") and big.startswith(small[:-1])
    return small == big


def test_fit_only_drops_tails():
    from traceview.agent.bounds import fit, size

    doc = api_doc(GPT2)
    before = json.dumps(doc)
    with pytest.raises(ValueError, match="does not fit"):  # objects too large to cut: refused, never overflowed
        fit(doc, 1000)
    for budget in (4000, 8000):
        got = fit(doc, budget)
        assert size(got) <= budget * BYTES_PER_TOKEN and json.dumps(doc) == before  # the document is untouched
        left = got.pop("left_out")
        assert _cut_from(got, doc) and left["lists"]
        for note in left["lists"]:  # each cut list: shown < total, and the total is the document's
            assert 1 <= note["shown"] < note["total"]
        assert {"path": "traces[0].layers.layers", "shown": got["traces"][0]["layers"]["layers"].__len__(),
                "total": len(doc["traces"][0]["layers"]["layers"])} in left["lists"]


def test_same_input_same_bytes():
    def run() -> list[str]:
        app = build([SAMPLES], DEFAULT_BUDGET_TOKENS)[0]
        first = calls(app, ("analyze", {"path": SYNC}))[0]
        aid = first.structured_content["analysis"]
        rest = calls(app, ("findings", {"analysis": aid, "limit": 3}), ("timeline", {"analysis": aid, "step": 1}))
        return [r.content[0].text for r in (first, *rest)]

    assert run() == run()


# ---- real transports ----------------------------------------------------------------------------------------
def test_stdio_subprocess():
    """Over stdio (the server a subprocess, two roots): list the tools, call each, page through the findings,
    refuse a path outside the roots."""
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-m", "traceview", "mcp", "--root", str(SAMPLES / "gpu_h200"),
                                         "--root", str(SAMPLES / JOB)])

    async def go():
        async with Client(params) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            a = await c.call_tool("analyze", {"path": "sync_item_nonzero_cpu.json.gz"})
            aid = a.structured_content["analysis"]
            pages, offset = [], 0
            while offset is not None:
                pages.append(await c.call_tool("findings", {"analysis": aid, "offset": offset, "limit": 4}))
                offset = pages[-1].structured_content["next_offset"]
            rest = [await c.call_tool(name, args) for name, args in (
                ("explain", {"finding": "t0.f1", "analysis": aid}), ("explain", {"rule": "TV202"}),
                ("layers", {"analysis": aid}), ("kernels", {"analysis": aid}), ("ops", {"analysis": aid}),
                ("timeline", {"analysis": aid, "step": 2, "limit": 5}),
                ("document", {"analysis": aid, "pointer": "/traces/0/projection"}),
                ("diff", {"a": "sync_item_nonzero_cpu.json.gz", "b": "seed_relu_linear_m8.json.gz"}),
                ("job", {"path": str(SAMPLES / JOB)}))]
            out = await c.call_tool("analyze", {"path": str(SAMPLES / GPT2)})
            return tools, a, pages, rest, out

    tools, a, pages, rest, out = anyio.run(go)
    doc = api_doc(SYNC)["traces"][0]
    assert tools == TOOLS
    assert ok(a)["traces"][0]["verdict_text"] == doc["verdict_text"]
    assert [f["id"] for p in pages for f in ok(p)["findings"]] == [f"t0.f{k}" for k in range(len(doc["findings"]))]
    answers = [ok(r) for r in rest]
    assert answers[0]["evidence"] == doc["findings"][1]["evidence"]
    assert answers[6]["value"] == doc["projection"]
    assert answers[8]["jobs"][0]["ranks_classification"][0]["straggler"] == 1
    assert "outside the allowed roots" in refused(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "traceview", "mcp", "--http", f"127.0.0.1:{port}", "--root",
                             str(SAMPLES / "gpu_h200")], cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(3000):  # until it accepts or exits (the bound only keeps a broken server from hanging the run)
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("traceview mcp --http never accepted a connection")


def test_http_localhost_with_token():
    """Streamable HTTP on 127.0.0.1: the bearer token when one is set, the SDK's DNS-rebinding guard."""
    port = _free_port()
    proc = _serve(port, {"TRACEVIEW_MCP_TOKEN": "s3cret"})
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        assert httpx2.post(url, json={}).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        rebound = httpx2.post(url, json={}, headers={**auth, "Host": "attacker.example"})
        assert rebound.status_code >= 400 and rebound.status_code != 401

        async def go():
            http = httpx2.AsyncClient(headers=auth)
            async with Client(streamable_http_client(url, http_client=http)) as c:
                tools = {t.name for t in (await c.list_tools()).tools}
                return tools, await c.call_tool("analyze", {"path": "sync_item_nonzero_cpu.json.gz"})

        tools, a = anyio.run(go)
        assert tools == TOOLS
        assert ok(a)["traces"][0]["avg_step_us"] == api_doc(SYNC)["traces"][0]["summary"]["avg_step_us"]
    finally:
        proc.terminate()
        proc.wait()


def test_http_beyond_localhost_needs_a_token(capsys, monkeypatch):
    from traceview.cli.main import main

    monkeypatch.delenv("TRACEVIEW_MCP_TOKEN", raising=False)
    assert main(["mcp", "--http", "0.0.0.0:1", "--root", str(SAMPLES)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "requires a token in $TRACEVIEW_MCP_TOKEN" in err


def test_http_address_parsing():
    from traceview.cli.mcp import DEFAULT_PORT, is_loopback, parse_http
    from traceview.errors import TraceError

    assert parse_http(":9000") == ("127.0.0.1", 9000) and parse_http("localhost") == ("localhost", DEFAULT_PORT)
    assert parse_http("[::1]:9001") == ("::1", 9001) and parse_http("0.0.0.0:80") == ("0.0.0.0", 80)
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.1")] == [True] * 3 + [False] * 2
    for bad in ("host:port", "127.0.0.1:0", "127.0.0.1:70000"):
        with pytest.raises(TraceError):
            parse_http(bad)


def test_what_if_is_the_cli_replay(app):
    """what_if(analysis, fixes) gives the CLI's `--what-if` numbers: the replayed step with only those fixes."""
    (a,) = calls(app, ("analyze", {"path": str(SAMPLES / SYNC)}))
    aid = ok(a)["analysis"]
    (w, bad) = calls(app, ("what_if", {"analysis": aid, "fixes": ["host-sync", "TV202"]}),
                     ("what_if", {"analysis": aid, "fixes": ["no-such-rule"]}))
    got = ok(w)["what_if"]
    out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(SAMPLES / SYNC), "--what-if",
                          "host-sync,TV202", "--format", "json"], capture_output=True, text=True, check=True, cwd=ROOT)
    want = json.loads(out.stdout)["traces"][0]["projection"]["what_if"]
    assert got == want and got["fixes"] == ["host-sync", "fp32-gemm"]
    assert 0 < got["savings_us"] <= got["step_us"] and got["fixed_step_us"] == pytest.approx(
        got["step_us"] - got["savings_us"], abs=0.01)
    assert bad.is_error and "\n" not in bad.content[0].text and "no-such-rule" in bad.content[0].text


def test_the_users_unprofiled_step_reaches_every_tool(app):
    """analyze(path, unprofiled_ms=...) prices as the CLI's `--unprofiled-ms`: the same projection, and what_if on
    that analysis the CLI's `--what-if` with the same measured step; a bad step is one line, an error."""
    (a, bad) = calls(app, ("analyze", {"path": str(SAMPLES / SYNC), "unprofiled_ms": 2.5}),
                     ("analyze", {"path": str(SAMPLES / SYNC), "unprofiled_ms": -1}))
    got = ok(a)
    (w,) = calls(app, ("what_if", {"analysis": got["analysis"], "fixes": ["host-sync"]}))
    out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(SAMPLES / SYNC), "--what-if", "host-sync",
                          "--unprofiled-ms", "2.5", "--format", "json"], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    want = json.loads(out.stdout)["traces"][0]["projection"]
    assert got["traces"][0]["projection"]["unprofiled_source"] == "user"
    assert {k: v for k, v in got["traces"][0]["projection"].items() if k != "what_if"} == \
        {k: v for k, v in want.items() if k != "what_if"}
    assert ok(w)["what_if"] == want["what_if"]
    (plain,) = calls(app, ("analyze", {"path": str(SAMPLES / SYNC)}))
    assert ok(plain)["analysis"] != got["analysis"]  # another measured step, another analysis
    assert bad.is_error and "\n" not in bad.content[0].text and "--unprofiled-ms" in bad.content[0].text
