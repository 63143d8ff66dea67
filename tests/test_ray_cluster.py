"""`batch --engine ray --address` on a real multi-node Ray cluster: a head (no CPUs: it schedules, runs no task)
and two worker nodes with one CPU each, started as separate `ray start` processes on this machine. The rows equal
the local pool's and the jobs ran on both workers; killing a worker node mid-run loses no row (its tasks are
retried on the other node, or reported failed, naming their input).

Starting two Ray nodes takes a minute of CPU, so the test runs only when asked (`pytest -m cluster`); it is
skipped when a node does not come up (Ray gives a raylet a fixed 30 s, which a busy machine can miss). Every
process it starts is in a process group of its own, ended by that group's id."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import SAMPLES

from traceview.ci import batch
from traceview.ci.discover import discover
from traceview.cli.main import main

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.cluster

START_TIMEOUT_S = 120


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _ray_start(args: list[str], env: dict, log) -> subprocess.Popen:
    """`ray start …` in a new process group; the daemons it leaves running stay in that group."""
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--disable-usage-stats", *args]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(groups: list[int]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 0.0)):
        for g in groups:
            try:
                os.killpg(g, sig)
            except ProcessLookupError:
                pass
        time.sleep(wait)


#: the ports each Ray node listens on besides the head's GCS port: every node gets its own
NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port")  # fmt: skip


def _port_args(ports: list[int]) -> list[str]:
    return [a for flag, port in zip(NODE_PORTS, ports, strict=True) for a in (flag, str(port))]


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp(prefix="tvrc")  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    gcs, *p = _free_ports(1 + 3 * len(NODE_PORTS))
    own = [p[k : k + len(NODE_PORTS)] for k in range(0, len(p), len(NODE_PORTS))]  # each node's own ports
    head_args = ["--head", "--port", str(gcs), "--temp-dir", tmp, "--include-dashboard", "false",
                 *_port_args(own[0]), "--num-cpus", "0"]  # fmt: skip
    worker_args = [["--address", f"127.0.0.1:{gcs}", *_port_args(q), "--num-cpus", "1"] for q in own[1:]]
    groups: list[int] = []
    log = open(os.path.join(tmp, "start.log"), "w+")
    try:
        for args in (head_args, *worker_args):
            proc = _ray_start(args, env, log)
            groups.append(proc.pid)
            try:
                rc = proc.wait(START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                rc = None
            if rc != 0:
                log.seek(0)
                last = [ln for ln in log.read().splitlines() if ln.strip()][-1:] or ["?"]
                pytest.skip(f"a Ray node did not start on this machine ({last[0][:200]})")
        address = f"127.0.0.1:{gcs}"
        if len(_workers(address, wait_s=START_TIMEOUT_S)) != 2:
            pytest.skip("the two Ray worker nodes did not register with the head on this machine")
        yield address, groups[1:]
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(groups)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _workers(address: str, want: int = 2, wait_s: float = 0.0) -> set[str]:
    """Ids (8 hex digits) of the live nodes that have CPUs, i.e. the worker nodes; waits up to `wait_s` for
    `want` of them (Ray marks a killed node dead only after its health checks fail)."""
    ray.init(address=address, log_to_driver=False)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            alive = {n["NodeID"][:8] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0}
            if len(alive) == want or time.monotonic() >= deadline:
                return alive
            time.sleep(1.0)
    finally:
        ray.shutdown()


INPUTS = [SAMPLES / "gpu_h200_compile", SAMPLES / "nccl_h200x2" / "ddp_balanced"]


@pytest.fixture(scope="module")
def local_rows() -> list[dict]:
    specs = discover(INPUTS).jobs
    assert len(specs) == 8
    return [batch.row(r) for r in batch.run(specs, jobs=1)]


def test_batch_on_two_nodes_equals_local_pool(cluster, local_rows, tmp_path, capsys):
    address, _ = cluster
    capsys.readouterr()
    out = tmp_path / "rows.json"
    code = main(["batch", *map(str, INPUTS), "--engine", "ray", "--address", address, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert json.loads(out.read_text())["rows"] == local_rows
    # the driver's own count of where the tasks ran, against the cluster's list of worker nodes
    note = next(ln for ln in err.splitlines() if ln.startswith("traceview: ray: "))
    assert note.startswith("traceview: ray: 8 job(s) ran on 2 node(s): "), note
    ran = {part.split()[0]: int(part.split()[1]) for part in note.rsplit(": ", 1)[1].split(", ")}
    assert set(ran) == _workers(address) and sum(ran.values()) == 8


def test_killing_a_worker_node_mid_run_loses_no_row(cluster, local_rows):
    """Runs last: it kills a worker node (its raylet and workers, by process group) as the first job finishes;
    every job still has its row — retried on the surviving node (`max_retries`), or a failed row naming it."""
    address, node_groups = cluster
    specs = discover(INPUTS).jobs
    killed: list[int] = []

    def kill_one(_res: dict) -> None:
        if not killed:
            killed.append(node_groups[1])
            os.killpg(node_groups[1], signal.SIGKILL)

    rows = [batch.row(r) for r in batch.run(specs, engine="ray", address=address, on_done=kill_one)]
    assert killed
    assert len(rows) == len(specs) == len(local_rows)
    for row, want, spec in zip(rows, local_rows, specs, strict=True):
        if row != want:  # a task that ran out of retries: reported, never dropped
            assert row["status"] == "failed" and str(spec.path) in row["error"], row
    assert len(_workers(address, want=1, wait_s=START_TIMEOUT_S)) == 1  # the node is really gone
