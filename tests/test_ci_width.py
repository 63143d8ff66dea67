"""`batch` and `diff` in a CI log: plain text at `--width` or $COLUMNS (100 by default) when piped."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES

from traceview.cli.main import main

H200 = SAMPLES / "gpu_h200"
INPUTS = [
    SAMPLES / "gpu_h200_compile" / f"{n}.json.gz"
    for n in ("compile_graph_break", "fp32_gemm_tf32", "optimizer_single_tensor")
]
BOX = set("─│┃━┏┓└┘┡┩╇╋┼")


def _cli(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main([*map(str, args)])
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def batch_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("w") / "rows.json"
    assert main(["batch", *map(str, INPUTS), "--jobs", "1", "--out", str(out)]) == 0
    return json.loads(out.read_text())["rows"]


@pytest.mark.parametrize("how", ["default", "COLUMNS=72", "--width 60", "--width 200"])
def test_batch_table_fits_the_width(capsys, monkeypatch, batch_json, how):
    args = ["batch", *INPUTS, "--jobs", "1"]
    width = 100
    if how.startswith("COLUMNS"):
        monkeypatch.setenv("COLUMNS", "72")
        width = 72
    elif how.startswith("--width"):
        width = int(how.split()[1])
        args += ["--width", width]
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    code, out = _cli(capsys, *args)
    lines = out.splitlines()
    assert code == 0 and max(map(len, lines)) <= width and not BOX & set(out)
    # one line per row, whole input names, the step time of the JSON rows; the widest line shows every column
    body = lines[3:]
    assert len(body) == len(batch_json) == 3
    for r, line in zip(batch_json, body, strict=True):
        assert line.startswith(r["input"] + " ") and f"{r['step_ms']:.3f}" in line
    assert ("top finding" in lines[1]) == (width >= 200)


def test_diff_text_fits_the_width(capsys, monkeypatch):
    a, b = H200 / "elementwise_chain_eager.json.gz", H200 / "elementwise_chain_compiled.json.gz"
    monkeypatch.setenv("COLUMNS", "80")
    code, out = _cli(capsys, "diff", a, b)
    assert code == 0 and max(map(len, out.splitlines())) <= 80 and not BOX & set(out)
    assert "class shift: −426.0 µs gpu_memory" in out
    code, narrow = _cli(capsys, "diff", a, b, "--width", 64)
    assert code == 0 and max(map(len, narrow.splitlines())) <= 64
    # the kernels' launching ops stay when before/after columns are dropped: equal kernel names told apart
    doc = json.loads(_cli(capsys, "diff", a, b, "--format", "json")[1])
    removed = [k["op"] for k in doc["pairs"][0]["kernels"] if k["status"] == "removed"]
    kern = narrow[narrow.index("Kernels by launching op") :]
    assert removed and all(f" {op} " in kern for op in removed)
