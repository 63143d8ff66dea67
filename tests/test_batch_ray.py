"""`traceview batch --engine ray` on a local Ray instance gives exactly the local pool's results.

One Ray instance for the module (starting Ray takes seconds on the CI box); batch uses a Ray that is already
initialized and leaves it running."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest
from conftest import SAMPLES

from traceview.ci import batch
from traceview.ci.discover import discover
from traceview.cli.main import main

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    tmp = tempfile.mkdtemp(prefix="tvray")  # short: Ray's socket paths live under it
    for attempt in range(3):  # Ray gives its raylet a fixed 30 s to start: a busy box can miss that
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=tmp)
            break
        except Exception as e:  # noqa: BLE001 - Ray raises plain Exceptions
            ray.shutdown()
            if attempt == 2:
                shutil.rmtree(tmp, ignore_errors=True)
                pytest.skip(f"a local Ray did not start on this machine: {str(e).splitlines()[0]}")
    yield
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def test_ray_equals_local_pool(local_ray, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cut.json.gz").write_bytes((SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz").read_bytes()[:400])
    inputs = [SAMPLES / "gpu_h200_compile", SAMPLES / "nccl_h200x2/ddp_balanced", bad]
    specs = discover(inputs).jobs
    assert len(specs) == 7 + 1 + 1
    local = batch.run(specs, jobs=2)
    remote = batch.run(specs, jobs=2, engine="ray")
    assert ray.is_initialized()  # the caller's Ray is left running
    assert remote == local
    assert [r["error"] is not None for r in remote] == [False] * 8 + [True]
    assert [len(r["digests"]) for r in remote] == [1] * 7 + [2, 0]
    # the command line on the same Ray: same rows, exit 2 for the bad file
    capsys.readouterr()
    out = tmp_path / "s.json"
    assert main(["batch", *map(str, inputs), "--engine", "ray", "--out", str(out)]) == 2
    rows = json.loads(out.read_text())["rows"]
    assert rows == [batch.row(r) for r in local]
