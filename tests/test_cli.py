from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from conftest import SAMPLES

SMALL = SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz"


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_analyze_json_document():
    r = run("analyze", SMALL, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 2 and not doc["errors"]
    t = doc["traces"][0]
    assert [s["step"] for s in t["steps"]] == [1, 2, 3]
    assert t["metadata"]["device"] == "NVIDIA H200"
    assert t["top_kernels"][0]["op"] == "aten::addmm"
    total = sum(t["summary"]["breakdown_pct"].values())
    assert abs(total - 100) < 0.05


def test_analyze_text_and_step():
    r = run("analyze", SMALL, "--step", "2", "--show", "steps,kernels", "--width", "160")
    assert r.returncode == 0, r.stderr
    assert "Step time breakdown" in r.stdout and "aten::addmm" in r.stdout
    r = run("analyze", SMALL, "--step", "9")
    assert r.returncode == 2 and "no step 9" in r.stderr


def _bad_inputs(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notjson.json").write_text("hello, I am not a trace")
    good = gzip.decompress(SMALL.read_bytes())
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(good)[:400])
    (tmp_path / "noevents.json").write_text(json.dumps({"schemaVersion": 1, "foo": []}))
    (tmp_path / "garbage.json.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 50)
    return {
        "missing": (tmp_path / "nope.json", "no such file"),
        "empty dir": (tmp_path / "empty", "no trace files"),
        "not json": (tmp_path / "notjson.json", "not a JSON trace"),
        "truncated gz": (tmp_path / "cut.json.gz", "truncated gzip"),
        "no traceEvents": (tmp_path / "noevents.json", "traceEvents"),
        "bad gzip": (tmp_path / "garbage.json.gz", "gzip"),
    }


@pytest.mark.parametrize("case", ["missing", "empty dir", "not json", "truncated gz", "no traceEvents", "bad gzip"])
def test_bad_input_one_line_exit_2(tmp_path, case):
    path, needle = _bad_inputs(tmp_path)[case]
    r = run("analyze", path)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0]


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_trace_is_analyzed_with_warning(tmp_path, gz):
    text = gzip.decompress(SMALL.read_bytes())
    p = tmp_path / ("partial.json.gz" if gz else "partial.json")
    p.write_bytes(gzip.compress(text)[:15000] if gz else text[: int(len(text) * 0.7)])
    r = run("analyze", p, "--format", "json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["traces"][0]
    assert any("truncated" in w for w in t["warnings"])
    assert t["summary"]["steps"] >= 1


def test_invalid_json_from_profiler_is_repaired(tmp_path):
    doc = json.loads(gzip.decompress(SMALL.read_bytes()))
    text = json.dumps(doc)
    # what old writers emit: bare inf and an unescaped quote inside a name
    text = text.replace('"blocks per SM": 0.', '"blocks per SM": inf, "x": 0.', 1)
    text = text.replace('"name": "aten::linear"', '"name": "aten::li"near"', 1)
    p = tmp_path / "bad.json"
    p.write_text(text)
    r = run("analyze", p, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert any("repaired" in w for w in json.loads(r.stdout)["traces"][0]["warnings"])


def test_one_bad_file_does_not_abort_the_batch(tmp_path):
    (tmp_path / "a.json").write_text("{nope")
    r = run("analyze", tmp_path / "a.json", SMALL, "--format", "json")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert len(doc["traces"]) == 1 and len(doc["errors"]) == 1


def test_directory_argument_analyzes_each_file():
    r = run("analyze", SAMPLES / "hta/trace_filter", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [t["rank"] for t in doc["traces"]] == [0, 1]


def test_analyzer_runs_without_torch(tmp_path):
    """The analyzer must import and run where torch is absent: block the import and run the CLI."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from traceview.cli.main import main\n"
            f"rc = main(['analyze', {str(SMALL)!r}, '--format', 'json', '-o', {str(tmp_path / 'o.json')!r}])\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "sys.exit(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "o.json").read_text())["traces"][0]["findings"]


def test_process_run_output_complete_and_quiet(tmp_path):
    """`traceview analyze` ends its process itself once stdout/stderr are flushed (cli._exit): the report written
    with -o and the one on stdout are the same whole document, and a reader that leaves at once gets exit 0 and
    nothing on stderr (no traceback, no "Exception ignored")."""
    out = tmp_path / "o.json"
    r = run("analyze", SMALL, "--format", "json", "-o", out)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr
    printed = run("analyze", SMALL, "--format", "json")
    assert json.loads(out.read_text()) == json.loads(printed.stdout)
    assert json.loads(printed.stdout)["traces"][0]["steps"][0]["step"] == 1
    p = subprocess.Popen([sys.executable, "-m", "traceview", "analyze", str(SMALL), "--detail"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the report is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0 and err == "", err


def test_process_run_keeps_exit_handlers(tmp_path):
    """The fast exit (cli._exit) still runs the exit handlers of whoever runs the CLI: a profiler writing its report
    (`python -m pyinstrument -m traceview ...`) or coverage saving its data registers one, and lost it before."""
    mark, out = tmp_path / "handler.txt", tmp_path / "o.json"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(mark)!r}, 'w').write('ran'))\n"
            f"sys.argv = ['traceview', 'analyze', {str(SMALL)!r}, '--format', 'json', '-o', {str(out)!r}]\n"
            "from traceview.cli.main import main\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert mark.read_text() == "ran"
    assert json.loads(out.read_text())["traces"][0]["steps"][0]["step"] == 1


def test_process_run_under_a_profiler_returns(tmp_path):
    """Under a profiler (sys.setprofile, as pyinstrument and cProfile set) the CLI returns normally instead of
    ending the process, so a profiler that writes its report after the run (`python -m pyinstrument -m traceview`)
    still writes it."""
    mark, out = tmp_path / "after.txt", tmp_path / "o.json"
    code = ("import sys\nsys.setprofile(lambda *a: None)\n"
            f"sys.argv = ['traceview', 'analyze', {str(SMALL)!r}, '--format', 'json', '-o', {str(out)!r}]\n"
            "from traceview.cli.main import main\n"
            f"try:\n    main()\nfinally:\n    sys.setprofile(None)\n    open({str(mark)!r}, 'w').write('returned')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert mark.read_text() == "returned"
    assert json.loads(out.read_text())["traces"][0]["steps"][0]["step"] == 1


#: command lines the argparse-free reading of `analyze` takes (cli._fast_analyze): the plain runs
FAST = [["analyze", "a.json"], ["analyze", "a.json", "b.json.gz", "dir"], ["analyze", "a.json", "--format", "json"],
        ["analyze", "--format", "json", "a.json", "-o", "/dev/null"], ["analyze", "a", "--format=markdown"],
        ["analyze", "a", "--output", "r.txt", "--format", "sarif"], ["analyze", "a", "--output=", "--format=text"],
        ["analyze", "-o", "r.json", "--format", "json", "a", "b"], ["analyze", "", "-o", "x"]]
#: those it leaves to argparse (valid or not): every other option, abbreviations, stdin, split paths, repeats
SLOW = [["analyze"], ["analyze", "--format", "json"], ["analyze", "a", "--form", "json"], ["analyze", "-", "a"],
        ["analyze", "a", "-ojson.out"], ["analyze", "a", "--format", "xml"], ["analyze", "a", "--format"],
        ["analyze", "a", "-o", "-"], ["analyze", "a", "--format", "json", "b"], ["analyze", "a", "--step", "2"],
        ["analyze", "a", "-o", "x", "-o", "y"], ["analyze", "a", "--", "b"], ["analyze", "a", "--detail"],
        ["analyze", "a", "-o=x"], ["layers", "a"], ["rules"], []]


@pytest.mark.parametrize("argv", FAST)
def test_fast_analyze_arguments_are_argparses(argv):
    """The plain `analyze` command line read without argparse (start-up, issue 32) gives the namespace argparse
    gives: every attribute, the defaults included, with the same values."""
    from traceview.cli import main as cli

    fast = cli._fast_analyze(argv)
    assert fast is not None
    assert vars(fast) == vars(cli.make_parser("analyze").parse_args(argv))


@pytest.mark.parametrize("argv", SLOW)
def test_fast_analyze_leaves_the_rest_to_argparse(argv):
    from traceview.cli import main as cli

    assert cli._fast_analyze(argv) is None


def test_plain_analyze_run_does_not_import_argparse(tmp_path):
    out = tmp_path / "r.json"
    code = ("import json, sys\nimport traceview.cli.main as cli\n"
            f"assert cli.main(['analyze', {str(SMALL)!r}, '--format', 'json', '-o', {str(out)!r}]) == 0\n"
            "print('argparse' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False"]
    assert json.loads(out.read_text())["traces"][0]["steps"][0]["step"] == 1
