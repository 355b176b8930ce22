"""A real 2-rank gloo job (2 DataLoader workers per rank) stopped mid-epoch and resumed as 3 ranks (1 worker
each): every record of the epoch exactly once over both jobs (less the remainder that gives the 3 new ranks as
many records), and the same number of batches on every rank of each job (one all_reduce per batch: uneven
counts would hang, caught by the timeout). See tests/helpers/elastic_ddp_worker.py for the save/load recipe."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from ddp_util import run_ranks

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "helpers" / "elastic_ddp_worker.py"
COUNTS = [23, 0, 17, 31, 9]  # 80 records
BATCH_SIZE = 4
TIMEOUT_S = 240  # a hang guard only (ranks waiting in a collective): the jobs take a few seconds


def run_job(folder: Path, name: str, world: int, config: dict) -> list[dict]:
    """Launch `world` ranks of the helper; return their results in rank order (fail, never hang)."""
    return run_ranks(folder, WORKER, config, world, TIMEOUT_S, label=f"job {name}")


@pytest.mark.slow
@pytest.mark.parametrize("index", ["auto", None], ids=["index", "no-index"])
def test_two_rank_job_resumed_as_three_ranks(tmp_path, write_corpus, index):
    """Slow by nature: five fresh interpreters import torch, four of them with DataLoader workers."""
    ids = write_corpus(tmp_path / "data", COUNTS, lambda i: {"id": i, "pad": b"x" * (i % 13)},
                       name="train-{:02d}.tfrecord", first=1000, step=7, index=index == "auto").ids
    state = str(tmp_path / "checkpoint.pt")
    base = {"paths": str(tmp_path / "data" / "train-*.tfrecord"), "index": index, "seed": 5,
            "batch_size": BATCH_SIZE}
    first = run_job(tmp_path / "job1", "2 ranks", 2, {**base, "num_workers": 2, "take": 3, "save": state})
    second = run_job(tmp_path / "job2", "3 ranks", 3, {**base, "num_workers": 1, "take": None, "load": state})

    for job in (first, second):
        assert len({len(r["batches"]) for r in job}) == 1  # every rank the same number of batches
        assert all(r["batch_counts"] == [len(r["batches"])] * len(job) for r in job)
    assert all(len(r["batches"]) == 3 for r in first)
    before = [i for r in first for batch in r["batches"] for i in batch]
    after = [i for r in second for batch in r["batches"] for i in batch]
    seen = Counter(before + after)
    assert not [i for i, c in seen.items() if c > 1], "an id was yielded twice"
    left = len(ids) - len(before)  # 80 - 24 = 56 (2 ranks drop nothing of 80)
    assert len(after) == left // 3 * 3  # 54: the 3 new ranks get 18 each, 2 left over
    assert set(before + after) <= set(ids)
