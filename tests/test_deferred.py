"""traceview.cli.lazy_stdlib: stand-in modules load on first attribute read and behave like the real ones."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_statement_does_not_load_attribute_read_does():
    got = _run("""
        import sys
        from traceview.cli.lazy_stdlib import defer, loaded
        assert "colorsys" not in sys.modules
        assert defer(("colorsys", "no_such_module_xyz")) == ["colorsys"]
        import colorsys
        from importlib import import_module
        import_module("colorsys")
        before = loaded("colorsys")
        h = colorsys.rgb_to_hsv(1.0, 0.0, 0.0)
        print(before, loaded("colorsys"), h, sys.modules["colorsys"].rgb_to_hsv is colorsys.rgb_to_hsv)
    """)
    assert got == "False True (0.0, 1.0, 1.0) True"


def test_package_submodule_and_from_import():
    # importlib.metadata is a package: its submodules and `from ... import` work through the stand-in
    got = _run("""
        from traceview.cli.lazy_stdlib import defer, loaded
        assert defer(("importlib.metadata",)) == ["importlib.metadata"]
        import importlib.metadata
        print(loaded("importlib.metadata"))
        from importlib.metadata import version
        import importlib.metadata._meta
        print(loaded("importlib.metadata"), version("polars") == __import__("polars").__version__)
    """)
    assert got.splitlines() == ["False", "True True"]


def test_already_imported_modules_are_left_alone():
    got = _run("""
        import json
        from traceview.cli.lazy_stdlib import defer, loaded
        print(defer(("json",)), loaded("json"))
    """)
    assert got == "[] True"


def test_cli_run_leaves_the_unused_modules_unloaded(tmp_path):
    # the CLI's own run (`main()` without argv) defers them; the report is still written
    out = tmp_path / "r.json"
    got = _run(f"""
        import sys
        import traceview.cli.main as cli
        sys.argv = ["traceview", "analyze", "--format", "json", "-o", {str(out)!r},
                    "sample_traces/gpu_h200/seed_single_gemm_eager.json.gz"]
        cli._exit = lambda code: print("exit", code)
        cli.main()
        from traceview.cli.lazy_stdlib import MODULES, loaded
        print(sorted(m for m in MODULES if loaded(m)))
    """)
    assert got.splitlines() == ["exit 0", "[]"]
    assert out.stat().st_size > 1000


def test_cli_worker_processes_through_the_stand_ins(tmp_path):
    # -j 2 spawns workers (multiprocessing: pickle, subprocess, read through the stand-ins): same document
    outs = []
    for j in ("1", "2"):
        out = tmp_path / f"j{j}.json"
        subprocess.run([sys.executable, "-m", "traceview", "analyze", "-j", j, "--format", "json", "-o", str(out),
                        "sample_traces/nccl_h200x2/fsdp_balanced"], check=True, capture_output=True)
        outs.append(out.read_text())
    assert outs[0] == outs[1] and '"jobs"' in outs[0]


def test_cli_run_never_loads_numpy_ma_and_writes_the_same_document(tmp_path):
    # polars' numpy -> Series conversions and numpy's np.unique read numpy.ma's mask lookups: the stand-in answers
    # them for plain arrays; the document is the one an in-process analysis (numpy.ma loaded) writes
    out = tmp_path / "r.json"
    rel = "sample_traces/gpu_h200_real/hf_gpt2_train_bf16.json.gz"
    got = _run(f"""
        import sys
        import traceview.cli.main as cli
        sys.argv = ["traceview", "analyze", "--format", "json", "-o", {str(out)!r}, {rel!r}]
        cli._exit = lambda code: print("exit", code)
        cli.main()
        from traceview.cli.lazy_stdlib import loaded
        print(loaded("numpy.ma"))
    """)
    assert got.splitlines() == ["exit 0", "False"]
    ref = _run(f"""
        import json, sys
        import numpy.ma
        from traceview.report import analyze
        json.dump(analyze([{rel!r}]).to_dict(), sys.stdout)
    """)
    import json

    assert json.loads(out.read_text()) == json.loads(ref)


def test_numpy_ma_stand_in_answers_as_numpy_ma_and_loads_for_masked_arrays():
    got = _run("""
        import numpy as np, polars as pl
        import traceview.cli.lazy_stdlib as deferred
        print(deferred.defer_numpy_ma())  # not the CLI's own run: nothing deferred
        deferred.defer(())
        print(deferred.defer_numpy_ma())
        a = np.arange(3)
        ans = (np.ma.getmask(a), np.ma.getdata(a) is a, np.ma.is_masked(a), np.ma.nomask, pl.Series(a).to_list())
        print(deferred.loaded("numpy.ma"), ans)
        view = np.ma.getdata(a, subok=False)  # not answered: the real module
        print(deferred.loaded("numpy.ma"), view is a, np.ma.nomask is ans[3])
        m = np.ma.masked_array([1, 2, 3], mask=[0, 1, 0])
        print(pl.Series(m).to_list(), np.ma.is_masked(m))
    """)
    assert got.splitlines() == ["False", "True", "False (np.False_, True, False, np.False_, [0, 1, 2])",
                                "True False True", "[1, None, 3] True"]
