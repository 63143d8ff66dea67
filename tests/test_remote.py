"""Inputs in object storage (traceview/ingest/remote.py) through fsspec, against in-process filesystems (`memory://`,
`file://`, and a store that denies every read): no network. `analyze`, `batch` (a job folder of ranks, a
missing object as one failed row), `diff` and `--baseline` read URLs as they read local paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLES

from traceview.cli.main import main

fsspec = pytest.importorskip("fsspec")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

GLOO = SAMPLES / "gloo_straggler/slowed"
SINGLE = SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz"


class DeniedFS(MemoryFileSystem):
    """A store whose objects exist but may not be read (an S3 403)."""

    protocol = ("denied",)

    @classmethod
    def _strip_protocol(cls, path):
        return MemoryFileSystem._strip_protocol(path.replace("denied://", "memory://", 1))

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            raise PermissionError(path)
        return super()._open(path, mode, **kwargs)


@pytest.fixture()
def bucket():
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    for f in GLOO.iterdir():
        fs.pipe(f"/bucket/runs/slowed/{f.name}", f.read_bytes())
    fs.pipe("/bucket/one.json.gz", SINGLE.read_bytes())
    fsspec.register_implementation("denied", DeniedFS, clobber=True)
    fsspec.filesystem("denied").pipe("/secret/one.json.gz", SINGLE.read_bytes())
    yield fs
    fs.store.clear()


def _json(tmp_path: Path, *args: str) -> tuple[int, dict]:
    out = tmp_path / "o.json"
    code = main([*args, "--format", "json", "-o", str(out)])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_analyze_a_job_folder_of_ranks_by_url(bucket, tmp_path):
    code, url_doc = _json(tmp_path, "analyze", "memory://bucket/runs/slowed")
    assert code in (0, 1)
    _, local_doc = _json(tmp_path, "analyze", str(GLOO))
    (job,) = url_doc["jobs"]
    assert job["path"] == "memory://bucket/runs/slowed" and job["ranks"] == [0, 1]
    assert job["nccl"]["straggler"]["rank"] == local_doc["jobs"][0]["nccl"]["straggler"]["rank"] == 1
    for u, loc in zip(url_doc["traces"], local_doc["traces"], strict=True):
        assert u["path"] == "memory://bucket/runs/slowed/" + Path(loc["path"]).name
        assert u["steps"] == loc["steps"] and u["findings"] == loc["findings"]


def test_file_url_is_the_local_file(tmp_path):
    _, a = _json(tmp_path, "analyze", SINGLE.as_uri())
    _, b = _json(tmp_path, "analyze", str(SINGLE))
    assert a["traces"][0]["steps"] == b["traces"][0]["steps"] and a["traces"][0]["path"] == SINGLE.as_uri()


@pytest.mark.parametrize(
    ("url", "msg"),
    [("memory://bucket/nope.json.gz", "no such object"), ("denied://secret/one.json.gz", "access denied")],
)
def test_missing_or_denied_object_is_one_error_line(bucket, tmp_path, capsys, url, msg):
    assert main(["analyze", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"traceview: error: {url}: {msg}"]


def test_batch_reads_urls_and_a_bad_one_is_a_failed_row(bucket, tmp_path, capsys):
    out = tmp_path / "b.json"
    code = main(
        [
            "batch",
            "memory://bucket/runs",
            "memory://bucket/one.json.gz",
            "denied://secret/one.json.gz",
            "-j",
            "1",
            "--out",
            str(out),
            "--exit-zero",
        ]
    )
    doc = json.loads(out.read_text())
    rows = {r["input"]: r for r in doc["rows"]}
    assert rows["slowed"]["kind"] == "run" and rows["slowed"]["ranks"] == 2
    assert rows["slowed"]["path"] == "memory://bucket/runs/slowed"
    assert rows["one"]["status"] != "failed"
    assert rows["denied://secret/one.json.gz"]["error"] == "denied://secret/one.json.gz: access denied"
    assert code == 2  # a failed input fails the batch, the others are still analyzed


def test_diff_and_baseline_by_url(bucket, tmp_path):
    base = tmp_path / "base.json"
    main(["batch", str(SINGLE), "-j", "1", "--save-baseline", str(base), "--exit-zero"])
    bucket.pipe("/bucket/base.json", base.read_bytes())
    assert main(
        ["batch", "memory://bucket/one.json.gz", "-j", "1", "--baseline", "memory://bucket/base.json"]
    ) in (0, 1)
    out = tmp_path / "d.json"
    assert main(["diff", str(SINGLE), "memory://bucket/one.json.gz", "--format", "json", "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["pairs"] and all(abs(p.get("step_time", {}).get("delta_us", 0) or 0) < 1e-6 for p in d["pairs"])
