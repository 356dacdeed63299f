"""Two machines, played by two torchrun agents on this one: ``--nnodes 2`` with node ranks 0 and 1,
meeting on loopback. The same commands run on two real machines with the first one's address
(README, "More than one machine"); here gloo is told to use the loopback interface, as a user sets
GLOO_SOCKET_IFNAME to a cluster's interface."""
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import torch

from labkit.checkpoint.resume import RunConfig, train
from labkit.dist import launch

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_agents(per_node: list[list[str]], script: list[str], timeout: float) -> list[subprocess.CompletedProcess]:
    """Start one torchrun agent per entry of ``per_node`` (its own rendezvous options), both running
    ``script``; wait for both. A timeout kills both and fails."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([TORCHRUN, "--nnodes", "2", "--nproc-per-node", "2", *opts, "-m", *script],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for opts in per_node]
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return out


def test_3d_training_on_two_nodes():
    port = str(_free_port())
    static = [["--node-rank", str(k), "--master-addr", "127.0.0.1", "--master-port", port] for k in (0, 1)]
    runs = _two_agents(static, ["labkit.parallel3d.torchrun_3d", "--dp", "1", "--tp", "2", "--pp", "2",
                                "--steps", "2"], timeout=240)
    for r in runs:
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    head = runs[0].stdout          # rank 0 (node 0) checks the result against one process
    assert "on 4 ranks (gloo)" in head and "torchrun_3d: OK" in head
    assert float(head.split("one-process param| = ")[1].split()[0]) < 1e-12
    assert "torchrun_3d" not in runs[1].stdout


def test_elastic_restart_across_two_nodes(tmp_path):
    """Rank 3 (on the second node) dies after step 5 of the first attempt: both agents restart
    their workers (c10d rendezvous), which resume from the step-4 checkpoint every rank has, and
    end where the uninterrupted run ends, bit for bit."""
    endpoint = f"127.0.0.1:{_free_port()}"
    c10d = [["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "labkit-two-nodes",
             "--rdzv-conf", f"is_host={k == 0}", "--max-restarts", "3"] for k in (0, 1)]
    out = tmp_path / "final.pt"
    runs = _two_agents(c10d, ["labkit.checkpoint.elastic", "--folder", str(tmp_path / "ckpt"), "--steps", "8",
                              "--out", str(out), "--fail", "3", "5"], timeout=300)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    final = torch.load(out)
    assert final["attempt"] == 1 and final["resumed_from"] == 4
    full = launch(train, 4, RunConfig(), 8, quiet=True)[0]
    assert all(torch.equal(full["params"][k], final["params"][k]) for k in full["params"])
