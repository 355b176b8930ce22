"""TFRecordDataset in a real multi-process torch.distributed job (gloo on 127.0.0.1, 2 ranks, each with a
DataLoader of 2 worker processes), launched from the test suite.

Each rank runs tests/helpers/ddp_worker.py: it joins the process group through a file store, RANK and
WORLD_SIZE, builds TFRecordDataset without rank or world_size (so the rank comes from torch.distributed), iterates
2 epochs in batch mode (the dataset batches, DataLoader(batch_size=None)) with shuffle and set_epoch, and runs an
all_reduce per batch, so uneven batch counts across ranks hang (caught by a timeout) instead of passing.

Checked per epoch: every rank yields the same number of batches (= len(dataset)); no id is yielded twice across
ranks and workers; together the ranks yield N - N % 2 distinct ids of the dataset (the documented remainder is
dropped); each rank's order differs between epochs. With index="auto" (indexes from tfr_torch.build_index: a
global permutation) and without indexes (record counts scanned, files split by records).

Then rank detection itself (tfr_torch.data.distributed), with a stand-in torch_xla module: the documented order,
torch_xla asked only when already imported with its runtime running several replicas (never imported, never started,
the environment never written), probe failures falling through with a debug line, and check_rank_world refusing a
dataset whose rank was detected before the job started. tests/test_xla.py runs the real torch_xla.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
import torch

from tfr_torch.data.distributed import RankWorld, check_rank_world, detect_rank_world, rank_world
from ddp_util import run_ranks

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "helpers" / "ddp_worker.py"
WORLD_SIZE = 2
NUM_WORKERS = 2
BATCH_SIZE = 3
EPOCHS = 2
COUNTS = [11, 0, 6, 9, 7]  # records per file: different sizes, one empty file; 33 in all (odd: one is dropped)
TIMEOUT_S = 120


@pytest.fixture
def write_files(write_corpus):
    """write_files(folder, counts, with_index) -> ids: train-NN.tfrecord files of Examples with unique int64 ids."""
    return lambda folder, counts, with_index: write_corpus(
        folder, counts, lambda i: {"id": i, "pad": b"x" * (i % 13)}, name="train-{:02d}.tfrecord", first=1000,
        step=7, index=with_index).ids


def run_job(tmp_path: Path, config: dict) -> list[dict]:
    """Launch WORLD_SIZE ranks of ddp_worker.py; return their results (fail, never hang, past TIMEOUT_S)."""
    return run_ranks(tmp_path, WORKER, config, WORLD_SIZE, TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.parametrize("index", ["auto", None], ids=["index-auto", "no-index"])
def test_ddp_two_ranks_two_workers_batches(tmp_path, index, write_files):
    """Slow by nature: two fresh interpreters import torch and start two DataLoader workers each (2-6 s)."""
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


# --- rank detection (tfr_torch.data.distributed): the order, and a torch_xla probe that never starts XLA ---------


class FakeXlaRuntime:
    """Stands in for torch_xla.runtime; any question asked before the runtime is initialized fails the test."""

    def __init__(self, xla: FakeXla, ordinal: int, world_size: int, spmd: bool = False, error: Exception = None):
        self._xla, self._ordinal, self._world_size, self._spmd, self._error = xla, ordinal, world_size, spmd, error

    def _ask(self, value):
        assert self._xla.initialized, "asked torch_xla's runtime a question before it was initialized"
        if self._error is not None:
            raise self._error
        return value

    def is_spmd(self):
        return self._spmd

    def global_ordinal(self):
        return self._ask(self._ordinal)

    def world_size(self):
        return self._ask(self._world_size)

    def process_index(self):
        return self._ask(self._ordinal)

    def process_count(self):
        return self._ask(self._world_size)


class FakeXla(types.ModuleType):
    def __init__(self, initialized: bool, ordinal: int = 0, world_size: int = 1, **kw):
        super().__init__("torch_xla")
        self.initialized = initialized
        self._XLAC = types.SimpleNamespace(_xla_runtime_is_initialized=lambda: self.initialized)
        self.runtime = FakeXlaRuntime(self, ordinal, world_size, **kw)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "PJRT_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    return monkeypatch


def test_explicit_arguments_win_and_are_checked(clean_env):
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=3, world_size=4))
    assert rank_world(2, 5) == RankWorld(2, 5, "rank=/world_size=")
    assert detect_rank_world(2, 5) == (2, 5)
    with pytest.raises(ValueError, match=r"^give both rank and world_size or neither \(got rank=1, "
                                         r"world_size=None\)$"):
        detect_rank_world(1, None)
    with pytest.raises(ValueError, match=r"^rank must be an int in \[0, 2\), got 2 \(from rank=/world_size=\)$"):
        detect_rank_world(2, 2)
    with pytest.raises(ValueError, match=r"^world_size must be a positive int, got 0 \(from rank=/world_size=\)$"):
        detect_rank_world(0, 0)
    with pytest.raises(ValueError, match=r"^rank must be an int in \[0, 2\), got True"):
        detect_rank_world(True, 2)


def test_default_is_rank_0_of_1(clean_env):
    assert rank_world() == RankWorld(0, 1, "default")


def test_environment(clean_env):
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    assert rank_world() == RankWorld(1, 2, "RANK/WORLD_SIZE")
    clean_env.setenv("RANK", "one")
    with pytest.raises(ValueError, match=r"^RANK='one' / WORLD_SIZE='2' are not integers$"):
        detect_rank_world()
    clean_env.setenv("RANK", "2")
    with pytest.raises(ValueError, match=r"^rank must be an int in \[0, 2\), got 2 \(from RANK/WORLD_SIZE\)$"):
        detect_rank_world()


def test_torch_xla_is_never_imported(clean_env):
    """With torch_xla installed but not imported, detection must not import it (that writes PJRT_DEVICE)."""
    attempts = []

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "torch_xla":
                attempts.append(name)
            return None

    clean_env.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    before = dict(os.environ)
    assert rank_world() == RankWorld(1, 2, "RANK/WORLD_SIZE")
    assert attempts == []
    assert dict(os.environ) == before


def test_uninitialized_xla_runtime_is_not_asked(clean_env, caplog):
    """torch_xla imported, runtime not started (e.g. in the parent before xmp.spawn): RANK/WORLD_SIZE answer, the
    runtime is left alone (FakeXlaRuntime fails the test if asked), and the environment is not written."""
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(False, ordinal=0, world_size=1))
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    before = dict(os.environ)
    with caplog.at_level(logging.DEBUG, logger="tfr_torch.data.distributed"):
        assert rank_world() == RankWorld(1, 2, "RANK/WORLD_SIZE")
    assert dict(os.environ) == before
    assert "torch_xla is imported but its runtime is not initialized: not asking it for the rank" in caplog.text


def test_running_xla_replicas_come_before_the_environment(clean_env):
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=3, world_size=4))
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "2")
    assert rank_world() == RankWorld(3, 4, "torch_xla")


def test_xla_spmd_ranks_are_processes(clean_env):
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=1, world_size=2, spmd=True))
    assert rank_world() == RankWorld(1, 2, "torch_xla")


def test_single_xla_replica_falls_through_to_the_environment(clean_env, caplog):
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=0, world_size=1))
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.DEBUG, logger="tfr_torch.data.distributed"):
        assert rank_world() == RankWorld(1, 2, "RANK/WORLD_SIZE")
    assert "torch_xla's runtime runs one replica: trying the next source" in caplog.text


@pytest.mark.parametrize("error", [OSError("libtpu not found"), RuntimeError("runtime torn down"),
                                   AttributeError("module 'torch_xla.runtime' has no attribute 'global_ordinal'")])
def test_failing_xla_probe_falls_through_with_a_debug_line(clean_env, caplog, error):
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=1, world_size=4, error=error))
    with caplog.at_level(logging.DEBUG, logger="tfr_torch.data.distributed"):
        assert rank_world() == RankWorld(0, 1, "default")
    assert f"torch_xla could not give the rank ({type(error).__name__}: {error}); trying the next source" in caplog.text


def test_torch_distributed_comes_first(clean_env):
    import torch.distributed as dist

    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=3, world_size=4))
    clean_env.setattr(dist, "is_initialized", lambda: True)
    clean_env.setattr(dist, "get_rank", lambda: 1)
    clean_env.setattr(dist, "get_world_size", lambda: 2)
    assert rank_world() == RankWorld(1, 2, "torch.distributed")


def test_check_refuses_a_rank_detected_before_the_replicas_started(clean_env):
    built = rank_world()  # in the parent, before the launcher: nothing running
    assert built == RankWorld(0, 1, "default")
    check_rank_world(built, "TFRecordDataset")  # read where it was built: fine
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=2, world_size=4))  # now inside replica 2 of 4
    with pytest.raises(RuntimeError) as info:
        check_rank_world(built, "TFRecordDataset")
    assert str(info.value) == (
        "TFRecordDataset was built as rank 0 of 1 (from default) but is read as rank 2 of 4 (from torch_xla): built "
        "before the distributed job started (before torch_xla.launch / xmp.spawn / init_process_group) and handed "
        "to it, it would not split the records between ranks. Build it inside the function each replica runs, or "
        "pass rank= and world_size= explicitly")
    check_rank_world(rank_world(0, 1), "TFRecordDataset")  # given explicitly: the caller's word stands
    check_rank_world(rank_world(), "TFRecordDataset")  # built inside the replica: fine


class CheckedStream(torch.utils.data.IterableDataset):
    """Checks its build-time rank where it is read, as TFRecordDataset does."""

    def __init__(self, built):
        self.built = built

    def __iter__(self):
        check_rank_world(self.built, "CheckedStream")
        yield from range(3)


def test_check_in_a_worker_that_sees_no_job_trusts_its_parent(clean_env):
    built = RankWorld(1, 4, "torch_xla")  # detected in a replica; a spawned worker sees no runtime
    with pytest.raises(RuntimeError, match=r"^CheckedStream was built as rank 1 of 4 \(from torch_xla\) but is read "
                                           r"as rank 0 of 1 \(from default\)"):
        list(CheckedStream(built))  # in the replica itself this would be a real mismatch
    loader = torch.utils.data.DataLoader(CheckedStream(built), batch_size=None, num_workers=1)
    assert list(loader) == [0, 1, 2]


def test_check_in_a_worker_that_inherited_a_running_job(clean_env, loader_error):
    built = rank_world()  # before the job: rank 0 of 1
    clean_env.setitem(sys.modules, "torch_xla", FakeXla(True, ordinal=2, world_size=4))  # a forked worker inherits it
    loader = torch.utils.data.DataLoader(CheckedStream(built), batch_size=None, num_workers=1,
                                         multiprocessing_context="fork")
    error = loader_error(loader)
    assert isinstance(error, RuntimeError), repr(error)
    assert ("CheckedStream was built as rank 0 of 1 (from default) but is read as rank 2 of 4 (from torch_xla)"
            in str(error))
