"""`batch --engine ray --address` on a real multi-node Ray cluster: a head and a second node started as separate
`ray start` processes on this machine, each with one CPU; the rows equal the local pool's and the jobs ran on
both nodes.

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


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp(prefix="tvrc")  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    gcs, *p = _free_ports(14)
    common = ["--num-cpus", "1"]
    head_args = [
        "--head",
        "--port",
        str(gcs),
        "--temp-dir",
        tmp,
        "--include-dashboard",
        "false",
        "--node-manager-port",
        str(p[1]),
        "--object-manager-port",
        str(p[2]),
        "--dashboard-agent-listen-port",
        str(p[3]),
        "--dashboard-agent-grpc-port",
        str(p[4]),
        "--metrics-export-port",
        str(p[5]),
        "--runtime-env-agent-port",
        str(p[11]),
        *common,
    ]
    node_args = [
        "--address",
        f"127.0.0.1:{gcs}",
        "--node-manager-port",
        str(p[6]),
        "--object-manager-port",
        str(p[7]),
        "--dashboard-agent-listen-port",
        str(p[8]),
        "--dashboard-agent-grpc-port",
        str(p[9]),
        "--metrics-export-port",
        str(p[10]),
        "--runtime-env-agent-port",
        str(p[12]),
        *common,
    ]
    groups: list[int] = []
    log = open(os.path.join(tmp, "start.log"), "w+")
    try:
        for args in (head_args, node_args):
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
        yield f"127.0.0.1:{gcs}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(groups)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_batch_on_two_nodes_equals_local_pool(cluster, tmp_path, capsys):
    inputs = [SAMPLES / "gpu_h200_compile", SAMPLES / "nccl_h200x2" / "ddp_balanced"]
    specs = discover(inputs).jobs
    assert len(specs) == 8
    local = [batch.row(r) for r in batch.run(specs, jobs=1)]
    capsys.readouterr()
    out = tmp_path / "rows.json"
    code = main(["batch", *map(str, inputs), "--engine", "ray", "--address", cluster, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert json.loads(out.read_text())["rows"] == local
    # the driver's own count of where the tasks ran, against the cluster's list of nodes
    note = next(ln for ln in err.splitlines() if ln.startswith("traceview: ray: "))
    assert note.startswith("traceview: ray: 8 job(s) ran on 2 node(s): ")
    ran = {part.split()[0]: int(part.split()[1]) for part in note.split(": ", 2)[2].split(", ")}
    ray.init(address=cluster, log_to_driver=False)
    try:
        alive = {n["NodeID"][:8] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()
    assert set(ran) == alive and len(alive) == 2 and sum(ran.values()) == 8
