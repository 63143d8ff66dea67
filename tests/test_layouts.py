"""Framework trace layouts (traceview/ingest/layouts.py): TorchTitan iteration folders, tensorboard_trace_handler names
(Megatron-LM), dynolog on-demand files, Lightning's PyTorchProfiler output — found by discovery, `analyze DIR` and
`batch`, with ranks from distributedInfo, else the path, else a warning; iterations of one job compared."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

from conftest import SAMPLES
from jobkit import unranked_job

from traceview.ci.discover import discover, sniff
from traceview.cli.main import main
from traceview.ingest import layouts
from traceview.ingest.loader import load_file

LAYOUTS = SAMPLES / "layouts"
TITAN = LAYOUTS / "torchtitan/profiling/traces"
GLOO = SAMPLES / "gloo_straggler"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_path_rank_and_writer_of_documented_names():
    assert layouts.path_rank(Path("iteration_10/rank3_trace.json")) == 3  # TorchTitan
    assert layouts.path_rank(Path("x/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")) == 34  # HTA's test data
    assert (
        layouts.path_rank(Path("run/rank_2/trace.json")) == 2
        and layouts.path_rank(Path("run/rank/5/t.json")) == 5
    )
    assert layouts.path_rank(Path("frank2/vm_14659.1796114837904795216.pt.trace.json")) is None
    assert layouts.writer(Path("iteration_10/rank0_trace.json.gz")) == "torchtitan"
    assert layouts.writer(Path("traces/rank0_trace.json")) is None  # not in an iteration folder
    assert (
        layouts.writer(Path("vm_14659.1796114837904795216.pt.trace.json.gz")) == "tensorboard_trace_handler"
    )
    assert layouts.writer(Path("libkineto_trace_151419.json")) == "dynolog"
    lt = next((LAYOUTS / "lightning").glob("*.pt.trace.json.gz"))
    assert layouts.writer(lt) == "lightning"  # by name (stage "fit-") ...
    with gzip.open(lt) as fh:  # ... and by the metadata Lightning adds to the trace
        assert layouts.writer(Path("renamed.json"), fh.read(4096)) == "lightning"


def test_bundled_layouts_are_copies_of_bundled_runs():
    """The re-laid-out examples are byte copies (the MANIFEST's claim), so the runs' manifests describe them."""
    for it, run in (("iteration_10", "balanced"), ("iteration_20", "slowed")):
        for r in (0, 1):
            assert _sha(TITAN / it / f"rank{r}_trace.json.gz") == _sha(
                next((GLOO / run).glob(f"rank{r}.*.pt.trace.json.gz"))
            )


def test_discovery_of_every_layout():
    d = discover([LAYOUTS])
    jobs = {j.label: [Path(f).name for f in j.files] for j in d.jobs}
    assert jobs == {
        "dynolog/libkineto_trace_440": ["libkineto_trace_440.json.gz"],
        "dynolog/libkineto_trace_456": ["libkineto_trace_456.json.gz"],
        "lightning": [next((LAYOUTS / "lightning").glob("*.pt.trace.json.gz")).name],
        "megatron/tensorboard": [
            "vm_14659.1796114837904795216.pt.trace.json.gz",
            "vm_14660.1796114837926343649.pt.trace.json.gz",
        ],
        "torchtitan/profiling/traces/iteration_10": ["rank0_trace.json.gz", "rank1_trace.json.gz"],
        "torchtitan/profiling/traces/iteration_20": ["rank0_trace.json.gz", "rank1_trace.json.gz"],
    }
    # the dynolog traces carry no distributedInfo and name no rank: one warning for the folder
    assert [w["path"] for w in d.warnings] == [str(LAYOUTS / "dynolog")]
    assert "ranks unknown for 2 traces (dynolog)" in d.warnings[0]["warning"]
    # Megatron's names carry no rank: the ranks come from distributedInfo (stdlib json of the file)
    for f in sorted((LAYOUTS / "megatron/tensorboard").iterdir()):
        with gzip.open(f) as fh:
            assert sniff(f)["rank"] == json.load(fh)["distributedInfo"]["rank"]


def test_ranks_from_torchtitan_file_names_without_distributed_info(tmp_path):
    """TorchTitan names each file by its rank: traces without distributedInfo are still the ranks of one job."""
    src = next((SAMPLES / "cpu_collected/gemm").glob("*.pt.trace.json.gz"))
    with gzip.open(src) as fh:
        assert "distributedInfo" not in json.load(fh)
    it = tmp_path / "profiling/traces/iteration_4"
    it.mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(src, it / f"rank{r}_trace.json.gz")
    d = discover([tmp_path / "profiling/traces"])
    assert [(j.label, len(j.files)) for j in d.jobs] == [("iteration_4", 2)] and not d.warnings
    assert load_file(it / "rank1_trace.json.gz").meta.rank == 1


def test_analyze_torchtitan_root_is_one_job_per_iteration(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["analyze", str(TITAN), "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [(Path(j["path"]).name, j["ranks"]) for j in doc["jobs"]] == [
        ("iteration_10", [0, 1]),
        ("iteration_20", [0, 1]),
    ]
    assert len(doc["traces"]) == 4 and not doc["errors"]
    # iteration_20 is the `slowed` run: rank 1 is the straggler (gloo_straggler/MANIFEST.md)
    assert doc["jobs"][1]["nccl"]["straggler"]["rank"] == 1 and doc["jobs"][1]["nccl"]["straggler"]["raised"]


def test_analyze_folder_of_unranked_traces_warns(tmp_path):
    out = tmp_path / "a.json"
    main(["analyze", str(unranked_job(tmp_path / "job")), "--format", "json", "-o", str(out)])
    (job,) = json.loads(out.read_text())["jobs"]
    assert any(
        "ranks unknown for 2 traces (dynolog)" in w and "file-name order" in w for w in job["warnings"]
    )
    assert job["nccl"]["straggler"]["rank"] == 1  # the same job, its ranks by file order (pids 5xxx in order)


def test_unranked_traces_recorded_one_after_the_other_are_not_a_job(tmp_path):
    """The bundled dynolog layout holds two processes traced at different times (cpu_collected's gemm and tiny-op
    runs): no job; each trace says why."""
    out = tmp_path / "a.json"
    main(["analyze", str(LAYOUTS / "dynolog"), "--format", "json", "-o", str(out)])
    doc = json.loads(out.read_text())
    assert doc["jobs"] == [] and len(doc["traces"]) == 2
    assert all(any("recorded one after the other" in w for w in t["warnings"]) for t in doc["traces"])


def test_batch_compares_iterations_of_one_job(tmp_path, capsys):
    out = tmp_path / "b.json"
    main(["batch", str(TITAN), "-j", "1", "--out", str(out)])
    doc = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert "2 profiled iterations of" in text
    (s,) = doc["series"]
    assert [it["iteration"] for it in s["iterations"]] == [10, 20]
    # independent: the collector's wall-clock profiled step medians of the two runs these iterations copy
    man = {
        r: json.loads((GLOO / r / "manifest.json").read_text())["step_time"]["profiled_ms_median"]
        for r in ("balanced", "slowed")
    }
    for it, run in zip(s["iterations"], ("balanced", "slowed"), strict=True):
        assert abs(it["step_ms"] / man[run] - 1) < 0.25, (it, man[run])
    assert s["iterations"][0]["delta_pct"] == 0.0
    want = 100 * (man["slowed"] / man["balanced"] - 1)  # +476 %
    assert 0.6 * want < s["iterations"][1]["delta_pct"] < 1.2 * want


def test_lightning_trace_steps_modules_and_framework_hooks(tmp_path):
    """The real Lightning trace: ProfilerStep#N are its steps, `[pl][module]` ranges its module layers (by path),
    `[pl][profile]` hooks framework layers of class `(Lightning)` — except the user's training_step."""
    lt = next((LAYOUTS / "lightning").glob("*.pt.trace.json.gz"))
    with gzip.open(lt) as fh:
        raw = json.load(fh)
    names = {e["name"] for e in raw["traceEvents"] if e.get("cat") == "user_annotation"}
    steps = sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))
    hooks = {n for n in names if n.startswith("[pl][profile]")}
    paths = {n.split(": ", 1)[1] for n in names if n.startswith("[pl][module]")}
    assert steps == [2, 3, 4] and paths == {"net", "net.0", "net.1", "net.2"} and len(hooks) == 18
    out = tmp_path / "l.json"
    assert main(["analyze", str(LAYOUTS / "lightning"), "--format", "json", "-o", str(out)]) == 0
    (t,) = json.loads(out.read_text())["traces"]
    assert [s["step"] for s in t["steps"]] == steps
    lay = t["layers"]
    assert lay["source"] == "module_annotations"
    by = {r["layer"]: r for r in lay["layers"]}
    assert {r["name"] for r in lay["layers"] if r["class"] != "(Lightning)"} >= paths | {"training_step"}
    assert by["net.0"]["parent"] == "net" and by["net"]["parent"].endswith(
        "Optimizer.step#SGD.step/training_step"
    )
    framework = {r["name"] for r in lay["layers"] if r["class"] == "(Lightning)"}
    user_steps = {h for h in hooks if h.endswith("training_step")}
    assert framework == {"(Lightning) " + h.removeprefix("[pl][profile]") for h in hooks - user_steps}
    assert not any(r["name"].startswith("[pl]") for r in lay["layers"])
