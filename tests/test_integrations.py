"""traceview/integrations: the Lightning Callback with real Lightning on CPU, the Hugging Face TrainerCallback
(when transformers is installed) and the TorchTitan trace post-processor."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest
from conftest import SAMPLES

from traceview.cli.main import main

TITAN = SAMPLES / "layouts/torchtitan/profiling/traces"


def _steps_of(trace) -> list[int]:
    with gzip.open(trace) as fh:
        evs = json.load(fh)["traceEvents"]
    return sorted(int(e["name"].split("#")[1]) for e in evs if e.get("name", "").startswith("ProfilerStep#"))


def test_integrations_import_no_framework():
    """Importing the package and the TorchTitan post-processor loads no framework and no torch."""
    code = (
        "import sys, traceview.integrations, traceview.integrations.torchtitan; "
        "print([m for m in ('lightning', 'pytorch_lightning', 'transformers', 'torchtitan', 'torch') if m in sys.modules])"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.stdout.strip() == "[]", got.stderr


def test_lightning_callback_profiles_the_window(tmp_path):
    L = pytest.importorskip("lightning")
    torch = pytest.importorskip("torch")
    from traceview.integrations.lightning import TraceviewCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(128, 16), torch.randint(0, 2, (128,)))
    cb = TraceviewCallback(tmp_path, name="lt", wait=3, warmup=1, active=2)
    trainer = L.Trainer(
        max_steps=8,
        callbacks=[cb],
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=16))
    assert trainer.global_step == 8  # Lightning's own count of optimizer steps
    run = tmp_path / "lt"
    (trace,) = run.glob("rank0.*.pt.trace.json.gz")
    # 0-based steps 0-2 wait, 3 warmup, 4-5 recorded: the profiler numbers them as traceview collect does
    assert _steps_of(trace) == [4, 5]
    man = json.loads((run / "manifest.json").read_text())
    assert man["launcher"] == "lightning" and man["schedule"] == {
        "wait": 3,
        "warmup": 1,
        "active": 2,
        "repeat": 1,
    }
    assert [(t["first_step"], t["last_step"]) for t in man["traces"]] == [(4, 5)]
    st = man["step_time"]
    # unprofiled: steps 1-2 (step 0 includes start-up); profiled: 4-5; method wall on CPU
    assert (st["unprofiled_samples"], st["profiled_samples"], st["method"]) == (2, 2, "wall")
    out = tmp_path / "a.json"
    assert main(["analyze", str(run), "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [s["step"] for s in doc["traces"][0]["steps"]] == [4, 5]


def test_hf_trainer_callback_profiles_the_window(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from traceview.integrations.hf import TraceviewCallback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 2)

        def forward(self, x, labels=None):
            logits = self.lin(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"x": torch.randn(8, generator=g), "labels": torch.tensor(i % 2)}

    cb = TraceviewCallback(tmp_path, name="hf", wait=2, warmup=1, active=2)
    args = transformers.TrainingArguments(
        str(tmp_path / "o"),
        max_steps=6,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
    )
    transformers.Trainer(model=Tiny(), args=args, train_dataset=Data(), callbacks=[cb]).train()
    (trace,) = (tmp_path / "hf").glob("rank0.*.pt.trace.json.gz")
    assert _steps_of(trace) == [3, 4]


def test_torchtitan_post_processor_analyzes_the_written_trace(tmp_path, caplog):
    from traceview.integrations.torchtitan import analyze_trace_file

    it = tmp_path / "profiling/traces/iteration_20"
    it.mkdir(parents=True)
    f = it / "rank1_trace.json.gz"
    shutil.copy(TITAN / "iteration_20/rank1_trace.json.gz", f)
    with caplog.at_level("INFO", logger="traceview"):
        out = analyze_trace_file(str(f))
    assert out == it / "rank1_trace.traceview.json" and (it / "rank1_trace.traceview.md").exists()
    doc = json.loads(out.read_text())
    ref = tmp_path / "ref.json"
    main(["analyze", str(f), "--format", "json", "-o", str(ref)])
    want = json.loads(ref.read_text())["traces"][0]
    (t,) = doc["traces"]
    assert t["rank"] == 1 and t["steps"] == want["steps"] and t["verdict_text"] == want["verdict_text"]
    assert want["verdict_text"] in caplog.text
    # the report beside the trace is not taken for a trace of the iteration
    dj = tmp_path / "d.json"
    assert main(["analyze", str(it), "--format", "json", "-o", str(dj)]) == 0
    assert [t["path"] for t in json.loads(dj.read_text())["traces"]] == [str(f)]
    bad = it / "rank2_trace.json"
    bad.write_text("{oops")
    assert (
        analyze_trace_file(str(bad)) is None
        or json.loads((it / "rank2_trace.traceview.json").read_text())["errors"]
    )
