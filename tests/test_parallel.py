"""The analysis's threads (traceview.parallel) and the per-trace memo under them: the same document with one thread
or several, results in the order asked, a shared result computed once, no deadlock when a part asks for parts."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from traceview import parallel
from traceview.memo import forget, once_in, per_trace
from traceview.model import Trace
from traceview.report import analyze_trace

ROOT = Path(__file__).resolve().parents[1]
#: a GPU training trace whose rules find something (the fixes and their replays run) and a decode loop
TRACES = ["sample_traces/gpu_h200/launch_bound_tiny_ops.json.gz", "sample_traces/gpu_h200/elementwise_chain_eager.json.gz"]


@pytest.mark.parametrize("rel", TRACES)
def test_the_document_is_the_same_on_one_thread_and_several(rel, monkeypatch):
    from traceview.ingest.loader import load_file

    trace = load_file(ROOT / rel)
    docs = []
    for n in ("1", "4"):
        monkeypatch.setenv("TRACEVIEW_THREADS", n)
        forget(trace)
        docs.append(json.dumps(analyze_trace(trace), sort_keys=True))
    assert docs[0] == docs[1]
    assert json.loads(docs[0])["findings"]  # (the rules, the fixes and their replays ran)


def test_results_in_the_order_asked_and_the_first_error_raised(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_THREADS", "4")

    def slow(k: int, wait: float):
        def f():
            time.sleep(wait)
            return k
        return f

    assert parallel.run_all([slow(0, 0.05), slow(1, 0.0), slow(2, 0.02)]) == [0, 1, 2]

    def bad(msg):
        def f():
            raise ValueError(msg)
        return f

    with pytest.raises(ValueError, match="first"):
        parallel.run_all([slow(0, 0.0), bad("first"), bad("second")])


def test_a_part_that_asks_for_parts_runs_them_itself(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_THREADS", "2")
    # more nested waits than the pool has threads: each part's own parts run in its thread, so none waits on a
    # pool that the waiting parts fill
    inner = [lambda k=k: parallel.run_all([lambda j=j: (k, j) for j in range(3)]) for k in range(4)]
    assert parallel.run_all(inner) == [[(k, j) for j in range(3)] for k in range(4)]


def test_one_thread_runs_in_the_caller(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_THREADS", "1")
    me = threading.get_ident()
    assert parallel.run_all([threading.get_ident, threading.get_ident]) == [me, me]
    assert parallel.start(threading.get_ident).result() == me


def test_a_shared_result_is_computed_once_while_others_wait():
    calls = []

    @per_trace
    def slow(trace, k):
        calls.append(k)
        time.sleep(0.05)
        return [k]

    trace = Trace.__new__(Trace)  # (identity is all the memo reads)
    got = []
    threads = [threading.Thread(target=lambda: got.append(slow(trace, 7))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [7]
    assert len(got) == 4 and all(g is got[0] for g in got)


def test_a_failed_computation_is_retried_by_a_waiting_thread():
    store: dict = {}
    started, n = threading.Event(), []

    def fail():
        started.set()
        time.sleep(0.05)
        raise RuntimeError("boom")

    def ok():
        n.append(1)
        return 5

    errors = []

    def first():
        try:
            once_in(store, "k", fail)
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=first)
    t.start()
    started.wait()
    assert once_in(store, "k", ok) == 5  # waited for the failing call, then computed it itself
    t.join()
    assert len(errors) == 1 and n == [1] and store == {"k": 5}


def test_a_recursion_on_the_same_key_is_not_a_deadlock():
    store: dict = {}
    depth = []

    def f():
        depth.append(1)
        return 1 if len(depth) > 1 else once_in(store, "k", f) + 1

    assert once_in(store, "k", f) == 2


def test_parts_asked_while_computing_a_memoised_result_run_in_that_thread(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_THREADS", "4")
    store: dict = {}
    me = threading.get_ident()
    # a pool thread would wait for "k", which this thread computes while waiting for the pool: the parts run here
    got = once_in(store, "k", lambda: parallel.run_all([threading.get_ident, lambda: once_in(store, "k", lambda: -1)]))
    assert got[0] == me
    assert parallel.run_all([threading.get_ident, threading.get_ident]) != [me, me]  # (a pool otherwise)


def test_the_default_is_one_thread(monkeypatch):
    # threads only when asked: on 16 cores they saved 5 % of wall for +85 MB peak RSS (parallel.DEFAULT_WORKERS)
    monkeypatch.delenv("TRACEVIEW_THREADS", raising=False)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _pid: set(range(16)))
    assert parallel.workers() == 1
    monkeypatch.setenv("TRACEVIEW_THREADS", "3")
    assert parallel.workers() == 3
