"""Elastic mid-epoch resumption: a checkpoint of W ranks x K DataLoader workers resumed by W' ranks x K' workers.

Ranks are simulated in one process (rank=/world_size= given), each with its own torchdata StatefulDataLoader (real
worker processes where K > 0). Every rank takes the same number of steps, as in DDP, then saves
`loader.state_dict()`; `tfr_torch.elastic_state` merges them; a fresh dataset per new rank loads the merged state
and a fresh loader with K' workers reads the rest. Checked, as exact multisets of record ids: no id twice over
the whole epoch, the ids after the resume are exactly the ones not yielded before (less the remainder dropped to
give every new rank the same number of records, which is named), and every new rank yields the same number of
batches. Per-record and batched datasets; indexed (global shuffle, read by offset), indexed GZIP (buffered
shuffle, records split by index) and unindexed files (buffered shuffle, counted); a resume of a resume.
tests/test_distributed.py resumes a real 2-rank gloo job as 3 ranks.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import tfr_torch
from tfr_torch import TFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
COUNTS = [23, 0, 17, 31, 9]  # 80 records
BATCH = 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, write_corpus):
    folder = tmp_path_factory.mktemp("elastic")
    plain = write_corpus(folder / "plain", COUNTS, lambda i: {"id": i, "blob": b"e" * (i % 11)},
                          name="train-{:02d}.tfrecord", first=100, step=1, index=True)
    gz = write_corpus(folder / "gzip", COUNTS, lambda i: {"id": i, "blob": b"e" * (i % 11)},
                       name="train-{:02d}.tfrecord.gz", first=100, step=1, compression="gzip", index=True)
    assert plain.ids == gz.ids
    return {"index": (plain.paths, "auto"), "noindex": (plain.paths, None), "gzindex": (gz.paths, "auto"),
            "ids": plain.ids}


def make(corpus, source: str, rank: int, world: int, batched: bool, shuffle: bool = True,
         pad: bool = False) -> TFRecordDataset:
    paths, index = corpus[source]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # counting files without an index warns
        return TFRecordDataset(paths, SPEC, index=index, shuffle=shuffle, seed=7, rank=rank, world_size=world,
                               batch_size=BATCH if batched else None, shuffle_buffer=6, interleave=2, pad=pad)


def ids_of(item) -> list[int]:
    return item["id"].reshape(-1).tolist()


def run_stage(datasets, workers: int, steps: int | None, load=None):
    """One loader per rank: load `load` into each dataset (fresh loader), take `steps` items from each (None: to
    the end); return (items per rank, loader states)."""
    items, states = [], []
    for dataset in datasets:
        if load is not None:
            dataset.load_state_dict(load)
        loader = StatefulDataLoader(dataset, batch_size=None, num_workers=workers)
        got = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # idle workers, counting
            iterator = iter(loader)
            while steps is None or len(got) < steps:
                try:
                    got.append(ids_of(next(iterator)))
                except StopIteration:
                    break
            states.append(loader.state_dict())
        del iterator
        items.append(got)
    return items, states


def check_exactly_once(all_ids, before, after_per_rank, world_before: int, world_after: int, batched: bool) -> None:
    """No id twice in the epoch; the rest is what was left of the epoch (the first layout's: N // W x W records),
    less the remainder dropped to give each new rank as many (fewer than world_after); every new rank the same
    number of items."""
    before_ids = [i for rank in before for item in rank for i in item]
    after_ids = [i for rank in after_per_rank for item in rank for i in item]
    seen = Counter(before_ids + after_ids)
    assert not [i for i, c in seen.items() if c > 1], "an id was yielded twice"
    assert set(after_ids) <= set(all_ids) - set(before_ids)
    left = len(all_ids) // world_before * world_before - len(before_ids)
    assert len(after_ids) == left // world_after * world_after  # only the remainder that evens the ranks
    assert len({len(rank) for rank in after_per_rank}) == 1, [len(r) for r in after_per_rank]  # equal batches
    if batched:
        assert all(1 <= len(item) <= BATCH for rank in after_per_rank for item in rank)


# (W, K) -> (W', K'): K = 0 is the main process
GRID = [((1, 0), (4, 0)), ((4, 0), (1, 0)), ((2, 2), (2, 0)), ((1, 0), (1, 3)), ((2, 1), (3, 2)), ((3, 0), (2, 1)),
        ((2, 2), (1, 2))]


@pytest.mark.parametrize("source", ["index", "gzindex", "noindex"])
@pytest.mark.parametrize("batched", [False, True], ids=["record", "batch"])
@pytest.mark.parametrize("old,new", GRID, ids=[f"{a}x{b}-to-{c}x{d}" for (a, b), (c, d) in GRID])
def test_resume_under_another_layout_gives_the_rest_exactly_once(corpus, source, batched, old, new):
    """Slow-ish: a few DataLoaders with worker processes per case."""
    (world, workers), (world2, workers2) = old, new
    steps = 3 if batched else 7
    before, states = run_stage([make(corpus, source, r, world, batched) for r in range(world)], workers, steps)
    assert all(len(rank) == steps for rank in before)
    merged = tfr_torch.elastic_state(states)
    after, _ = run_stage([make(corpus, source, r, world2, batched) for r in range(world2)], workers2, None, merged)
    check_exactly_once(corpus["ids"], before, after, world, world2, batched)


@pytest.mark.parametrize("source", ["index", "noindex"])
def test_resume_of_a_resume(corpus, source):
    """2x2 -> 3x0 -> 1x2 -> same layout again: each stage stops midway; the epoch is every record at most once and
    each resume reads exactly what is left (less each new world size's remainder)."""
    all_ids = corpus["ids"]
    a, states_a = run_stage([make(corpus, source, r, 2, True) for r in range(2)], 2, 2)
    b, states_b = run_stage([make(corpus, source, r, 3, True) for r in range(3)], 0, 2,
                            tfr_torch.elastic_state(states_a))
    check_partial = [i for rank in a + b for item in rank for i in item]
    assert len(check_partial) == len(set(check_partial))
    c, states_c = run_stage([make(corpus, source, 0, 1, True)], 2, 3, tfr_torch.elastic_state(states_b))
    d, _ = run_stage([make(corpus, source, 0, 1, True)], 2, None, tfr_torch.elastic_state(states_c))
    yielded = [i for rank in a + b + c + d for item in rank for i in item]
    assert len(yielded) == len(set(yielded)), "an id was yielded twice"
    # the epoch is 80 records (world 2 drops none); B dropped what A left modulo 3 (its world size) from its own
    # segment, but C (one rank) reads every record no segment yielded, those included: nothing is missing
    assert sorted(yielded) == sorted(all_ids)


PAD_LAYOUTS = [((3, 0), (2, 1)), ((2, 2), (3, 0)), ((1, 2), (3, 0))]


@pytest.mark.parametrize("source", ["index", "gzindex", "noindex"])
@pytest.mark.parametrize("batched", [False, True], ids=["record", "batch"])
@pytest.mark.parametrize("old,new", PAD_LAYOUTS, ids=[f"{a}x{b}-to-{c}x{d}" for (a, b), (c, d) in PAD_LAYOUTS])
def test_resume_with_pad_reads_every_record(corpus, source, batched, old, new):
    """Slow-ish: DataLoaders with worker processes. pad=True: nothing is dropped to even the ranks; the epoch's
    positions (80 records, padded to a multiple of the first world size by repeating its first records) that no
    reader yielded are read after the resume, padded again to a multiple of the new world size. Every record comes
    at least once, and the only repeats are those two paddings."""
    (world, workers), (world2, workers2) = old, new
    before, states = run_stage([make(corpus, source, r, world, batched, pad=True) for r in range(world)], workers,
                               3 if batched else 7)
    merged = tfr_torch.elastic_state(states)
    after, _ = run_stage([make(corpus, source, r, world2, batched, pad=True) for r in range(world2)], workers2, None,
                         merged)
    assert len({len(rank) for rank in after}) == 1, [len(rank) for rank in after]  # equal per new rank
    before_ids = [i for rank in before for item in rank for i in item]
    after_ids = [i for rank in after for item in rank for i in item]
    positions = -(-80 // world) * world  # the first layout's epoch: 80 records padded (81 for 3 ranks)
    left = positions - len(before_ids)
    assert len(after_ids) == -(-left // world2) * world2  # the rest, padded for the new ranks
    seen = Counter(before_ids + after_ids)
    assert set(seen) == set(corpus["ids"])  # every record
    assert sum(seen.values()) - len(seen) == (positions - 80) + (len(after_ids) - left)  # repeats: padding only


def test_same_layout_resume_keeps_the_uninterrupted_order(corpus):
    """A merged state loaded by the layout that saved it resumes each reader where it was: the order of an
    uninterrupted epoch (as a worker's own state does)."""
    full, _ = run_stage([make(corpus, "noindex", r, 2, False) for r in range(2)], 0, None)
    head, states = run_stage([make(corpus, "noindex", r, 2, False) for r in range(2)], 0, 5)
    rest, _ = run_stage([make(corpus, "noindex", r, 2, False) for r in range(2)], 0, None,
                        tfr_torch.elastic_state(states))
    assert [h + t for h, t in zip(head, rest)] == full


def test_resumed_order_is_deterministic_and_shuffled(corpus):
    head, states = run_stage([make(corpus, "gzindex", r, 2, False) for r in range(2)], 0, 9)
    merged = tfr_torch.elastic_state(states)
    once, _ = run_stage([make(corpus, "gzindex", r, 3, False) for r in range(3)], 0, None, merged)
    again, _ = run_stage([make(corpus, "gzindex", r, 3, False) for r in range(3)], 0, None, merged)
    assert once == again
    flat = [i for rank in once for item in rank for i in item]
    assert flat != sorted(flat)


def test_unshuffled_resume_reads_the_rest_in_order(corpus):
    paths, _ = corpus["index"]
    head, states = run_stage([make(corpus, "index", r, 2, False, shuffle=False) for r in range(2)], 2, 6)
    rest, _ = run_stage([make(corpus, "index", 0, 1, False, shuffle=False)], 0, None,
                        tfr_torch.elastic_state(states))
    flat = [i for item in rest[0] for i in item]
    assert flat == sorted(flat)
    check_exactly_once(corpus["ids"], head, rest, 2, 1, False)


def test_without_a_dataloader(corpus):
    """Datasets iterated directly (no DataLoader): their state_dict() parts merge the same way."""
    datasets = [make(corpus, "index", r, 2, True) for r in range(2)]
    iterators = [iter(d) for d in datasets]
    before = [[ids_of(next(it)) for _ in range(3)] for it in iterators]
    merged = tfr_torch.elastic_state([d.state_dict() for d in datasets])
    resumed = [make(corpus, "index", r, 4, True) for r in range(4)]
    for d in resumed:
        d.load_state_dict(merged)
    after = [[ids_of(item) for item in d] for d in resumed]
    check_exactly_once(corpus["ids"], before, after, 2, 4, True)
    # state_dict right after loading is this reader's part of the new layout, and merges again
    again = [make(corpus, "index", r, 4, True) for r in range(4)]
    for d in again:
        d.load_state_dict(merged)
    remerged = tfr_torch.elastic_state([d.state_dict() for d in again])
    assert remerged["segments"][:-1] == merged["segments"]
    assert remerged["segments"][-1]["yielded"] == [[0]] * 4


# ----- invalid states ------------------------------------------------------------------------------------------


def test_elastic_state_names_what_is_wrong(corpus):
    datasets = [make(corpus, "index", r, 2, True) for r in range(2)]
    parts = [d.state_dict() for d in datasets]
    with pytest.raises(ValueError, match=r"the parts of 1 of the 2 readers \(2 rank\(s\) x 1 worker\(s\)\) are "
                                         r"missing: rank 1 worker 0; gather every rank's state"):
        tfr_torch.elastic_state(parts[0])
    other = make(corpus, "index", 1, 2, True)
    other.set_epoch(3)
    with pytest.raises(ValueError, match=r"the parts come from different epochs or datasets: epoch=0 in rank 0 "
                                         r"worker 0's part, epoch=3 in rank 1 worker 0's"):
        tfr_torch.elastic_state(parts[0], other.state_dict())
    with pytest.raises(ValueError, match=r"newer than this tfr_torch reads \(2\): upgrade tfr_torch"):
        tfr_torch.elastic_state({**parts[0], "version": 3})
    with pytest.raises(ValueError, match="not a TFRecordDataset or StatefulDataLoader state: a dict with keys"):
        tfr_torch.elastic_state({"model": 1})


def test_load_refuses_another_dataset(corpus):
    merged = tfr_torch.elastic_state([d.state_dict() for d in [make(corpus, "index", r, 2, True) for r in range(2)]])
    paths, _ = corpus["index"]
    fewer = TFRecordDataset(paths[:-1], SPEC, index="auto", shuffle=True, seed=7, batch_size=BATCH)
    with pytest.raises(ValueError, match="cannot resume: the saved state has files=5, this dataset has 4"):
        fewer.load_state_dict(merged)
    renamed = dict(merged, fingerprint="00000000")
    with pytest.raises(ValueError, match="cannot resume: the saved state has fingerprint='00000000', this dataset has"):
        make(corpus, "index", 0, 3, True).load_state_dict(renamed)
    seeded = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=8, batch_size=BATCH)
    with pytest.raises(ValueError, match="cannot resume: the saved state has seed=7, this dataset has 8"):
        seeded.load_state_dict(merged)
    with pytest.raises(ValueError, match="cannot resume: the saved state has global_shuffle=True, this dataset has "
                                         "False"):
        make(corpus, "noindex", 0, 1, True).load_state_dict(merged)  # the same files, read without an index
    with pytest.raises(ValueError, match=r"state has version 7, newer than this tfr_torch reads \(2\)"):
        make(corpus, "index", 0, 1, True).load_state_dict(dict(merged, version=7))


def test_a_worker_part_read_by_another_worker_is_refused(corpus):
    dataset = make(corpus, "index", 0, 1, False)
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    del iterator
    part = state["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    fresh = make(corpus, "index", 0, 1, False)
    fresh.load_state_dict(part)
    with pytest.raises(ValueError, match=r"the state is worker 0 of 2's part and is read by worker 0 of 1"):
        next(iter(fresh))


def test_docs_recipe_runs(corpus, tmp_path):
    """The datasets guide's save/resume recipe (docs/guides/datasets.md), run in one process (no process group):
    save with 2 workers, resume with 0."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "datasets.md").read_text()
    block = re.search(r"## Resuming mid-epoch.*?```python\n(.*?)```", text, re.S)
    assert block, "the datasets guide lost its resume recipe"
    scope: dict = {}
    exec(compile(block.group(1), "docs/guides/datasets.md (resume recipe)", "exec"), scope)
    dataset = make(corpus, "gzindex", 0, 1, False)
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2)
    iterator = iter(loader)
    before = [ids_of(next(iterator)) for _ in range(11)]
    scope["save_data_state"](loader, str(tmp_path / "data.pt"))
    del iterator
    resumed = scope["resume_loader"](make(corpus, "gzindex", 0, 1, False), str(tmp_path / "data.pt"), 0)
    after = [ids_of(item) for item in resumed]
    check_exactly_once(corpus["ids"], [before], [after], 1, 1, False)
    assert sorted(i for item in before + after for i in item) == sorted(corpus["ids"])
