"""features.detect: the kernel-name tests on distinct names (large traces) answer as on every kernel."""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import load
from traceview.analyses import features
from traceview.analyses.features import TRITON_RE


@pytest.mark.parametrize("rel", ["gpu_h200_compile/compile_no_break.json.gz", "gpu_h200_real/hf_gpt2_train_bf16.json.gz"])
def test_distinct_kernel_names_same_features(rel, monkeypatch):
    t = load(rel)
    every = features.detect(t)
    monkeypatch.setattr(features, "_DISTINCT_MIN", 0)
    assert features.detect(t) == every
    # the Triton count is a count of kernels, not of names
    k = t.gpu.filter(pl.col("kind") == "compute")
    assert every.triton_kernels == int(k["name"].str.contains(TRITON_RE).sum())
