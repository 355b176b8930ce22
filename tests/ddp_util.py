"""Launching a real torch.distributed (gloo) job from a test: one process per rank, meeting at a file store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_ranks(folder: Path, worker: Path, config: dict, world_size: int, timeout_s: float,
              label: str = "the distributed job") -> list[dict]:
    """Run `world_size` ranks of `worker CONFIG.json OUT.json` with RANK / WORLD_SIZE / DDP_STORE_FILE set (no TCP
    port to agree on: the ranks meet at a file store in `folder`); return each rank's OUT.json in rank order. A job
    that does not end in `timeout_s` (a rank waiting in a collective: uneven batch counts?) or a rank that fails
    fails the test with the ranks' logs; it never hangs."""
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "config.json"
    config_path.write_text(json.dumps(config))
    procs, outs, logs = [], [], []
    for rank in range(world_size):
        env = dict(os.environ, DDP_STORE_FILE=str(folder / "store"), RANK=str(rank), WORLD_SIZE=str(world_size),
                   LOCAL_RANK=str(rank), PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   TORCH_DISTRIBUTED_DEBUG="DETAIL", OMP_NUM_THREADS="1")
        if os.path.exists("/sys/class/net/lo"):
            env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo on the loopback interface
        outs.append(folder / f"rank{rank}.json")
        logs.append(open(folder / f"rank{rank}.log", "w+"))
        procs.append(subprocess.Popen([sys.executable, str(worker), str(config_path), str(outs[-1])], cwd=REPO,
                                      env=env, stdout=logs[-1], stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    texts = []
    for rank, log in enumerate(logs):
        log.seek(0)
        texts.append(f"--- {label}, rank {rank} (exit {procs[rank].returncode}) ---\n{log.read()[-6000:]}")
        log.close()
    if timed_out:
        pytest.fail(f"{label} did not finish in {timeout_s} s (a rank waiting in a collective: uneven batch "
                    "counts?)\n" + "\n".join(texts))
    if any(proc.returncode != 0 for proc in procs):
        pytest.fail(f"{label}: a rank failed\n" + "\n".join(texts))
    return [json.loads(out.read_text()) for out in outs]
