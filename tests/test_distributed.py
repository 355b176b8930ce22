"""TFRecordDataset in a real multi-process torch.distributed job (gloo on 127.0.0.1, 2 ranks, each with a
DataLoader of 2 worker processes), launched from the test suite.

Each rank runs tests/helpers/ddp_worker.py: it joins the process group from MASTER_ADDR / MASTER_PORT / RANK /
WORLD_SIZE, builds TFRecordDataset without rank or world_size (so the rank comes from torch.distributed), iterates
2 epochs in batch mode (the dataset batches, DataLoader(batch_size=None)) with shuffle and set_epoch, and runs an
all_reduce per batch, so uneven batch counts across ranks hang (caught by a timeout) instead of passing.

Checked per epoch: every rank yields the same number of batches (= len(dataset)); no id is yielded twice across
ranks and workers; together the ranks yield N - N % 2 distinct ids of the dataset (the documented remainder is
dropped); each rank's order differs between epochs. With index="auto" (indexes from tfr_torch.build_index: a
global permutation) and without indexes (record counts scanned, files split by records).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import tfr_torch

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "helpers" / "ddp_worker.py"
WORLD_SIZE = 2
NUM_WORKERS = 2
BATCH_SIZE = 3
EPOCHS = 2
COUNTS = [11, 0, 6, 9, 7]  # records per file: different sizes, one empty file; 33 in all (odd: one is dropped)
TIMEOUT_S = 120


def write_files(folder: Path, counts: list[int], with_index: bool) -> list[int]:
    """Write train-NN.tfrecord files of Examples with unique int64 ids; return all ids."""
    ids: list[int] = []
    next_id = 1000
    for n, count in enumerate(counts):
        path = folder / f"train-{n:02d}.tfrecord"
        with tfr_torch.TFRecordWriter(path) as writer:
            for _ in range(count):
                writer.write_example({"id": next_id, "pad": b"x" * (next_id % 13)})
                ids.append(next_id)
                next_id += 7
        if with_index:
            tfr_torch.build_index(path)
    return ids


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp_path: Path, config: dict) -> list[dict]:
    """Launch WORLD_SIZE ranks of ddp_worker.py; return their results (fail, never hang, past TIMEOUT_S)."""
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    port = free_port()
    procs, outs, logs = [], [], []
    for rank in range(WORLD_SIZE):
        env = dict(os.environ)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE),
                   LOCAL_RANK=str(rank), PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
                   TORCH_DISTRIBUTED_DEBUG="DETAIL", OMP_NUM_THREADS="1")
        if os.path.exists("/sys/class/net/lo"):
            env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo on the loopback interface
        out = tmp_path / f"rank{rank}.json"
        log = open(tmp_path / f"rank{rank}.log", "w+")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(config_path), str(out)], cwd=REPO, env=env,
                                      stdout=log, stderr=subprocess.STDOUT))
        outs.append(out)
        logs.append(log)
    deadline = time.monotonic() + TIMEOUT_S
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
        texts.append(f"--- rank {rank} (exit {procs[rank].returncode}) ---\n{log.read()[-6000:]}")
        log.close()
    if timed_out:
        pytest.fail(f"the distributed job did not finish in {TIMEOUT_S} s (a rank waiting in a collective: uneven "
                    "batch counts?)\n" + "\n".join(texts))
    if any(proc.returncode != 0 for proc in procs):
        pytest.fail("a rank failed\n" + "\n".join(texts))
    return [json.loads(out.read_text()) for out in outs]


@pytest.mark.slow
@pytest.mark.parametrize("index", ["auto", None], ids=["index-auto", "no-index"])
def test_ddp_two_ranks_two_workers_batches(tmp_path, index):
    all_ids = write_files(tmp_path, COUNTS, with_index=index == "auto")
    total = len(all_ids)
    assert total % WORLD_SIZE == 1  # the data set leaves a remainder, which must be dropped
    config = {"paths": str(tmp_path / "train-*.tfrecord"), "index": index, "seed": 1234, "batch_size": BATCH_SIZE,
              "num_workers": NUM_WORKERS, "epochs": EPOCHS}
    results = sorted(run_job(tmp_path, config), key=lambda r: r["rank"])

    per_rank = total // WORLD_SIZE  # 16: each rank's share once the remainder is dropped
    expected_batches = -(-per_rank // BATCH_SIZE)
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["world_size"] == WORLD_SIZE
        assert result["env"] == [rank, WORLD_SIZE]
        # detected through torch.distributed (RANK / WORLD_SIZE were removed from the environment first)
        assert (result["dataset_rank"], result["dataset_world_size"]) == (rank, WORLD_SIZE)
        assert result["len"] == expected_batches
        assert len(result["epochs"]) == EPOCHS

    orders = {}
    for epoch in range(EPOCHS):
        seen: Counter = Counter()
        for rank, result in enumerate(results):
            record = result["epochs"][epoch]
            assert record["epoch"] == epoch
            batches = record["batches"]
            # the same number of batches on every rank, and it is len(dataset)
            assert len(batches) == expected_batches, (rank, epoch, [len(b["ids"]) for b in batches])
            assert record["batch_counts"] == [expected_batches] * WORLD_SIZE
            assert all(b["ranks_in_step"] == WORLD_SIZE for b in batches)
            sizes = [len(b["ids"]) for b in batches]
            assert all(0 < s <= BATCH_SIZE for s in sizes), sizes
            ids = [i for b in batches for i in b["ids"]]
            assert len(ids) == per_rank, (rank, epoch, sizes)
            orders[rank, epoch] = ids
            seen.update(ids)
        duplicates = sorted(i for i, n in seen.items() if n > 1)
        assert not duplicates, f"epoch {epoch}: ids yielded more than once across ranks/workers: {duplicates}"
        assert set(seen) <= set(all_ids), sorted(set(seen) - set(all_ids))
        assert len(seen) == total - total % WORLD_SIZE  # every record but the documented remainder

    for rank in range(WORLD_SIZE):
        assert orders[rank, 0] != orders[rank, 1], f"rank {rank} read both epochs in the same order"
    # the shuffle is global, not only within each rank's fixed share
    assert set(orders[0, 0]) != set(orders[0, 1])
