"""ElasticDistributedSampler: DistributedSampler's indices, and a mid-epoch state that W ranks save and W' ranks
resume (tfr_torch.elastic_state merges the ranks' states).

Ranks are simulated in one process (rank=/num_replicas= given), each with its own loader over an
IndexedTFRecordDataset whose record i has id FIRST + i. Checked as exact multisets of ids: nothing the epoch yielded
before the resume comes again; after it every index the epoch has not yielded comes exactly once (with drop_last,
less the remainder that evens the new ranks; without it, plus the padding that does, repeats of the first ones
left); every new rank takes the same number of indices and batches.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

import tfr_torch
from tfr_torch import ElasticDistributedSampler, IndexedTFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
COUNTS = [23, 0, 17, 31, 9]  # 80 records
FIRST = 100
BATCH = 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, write_corpus):
    folder = tmp_path_factory.mktemp("sampler")
    return write_corpus(folder, COUNTS, lambda i: {"id": i, "blob": b"s" * (i % 7)}, name="train-{:02d}.tfrecord",
                        first=FIRST, index=True)


def epoch_indices(size: int, world: int, drop_last: bool, seed: int = 7, epoch: int = 0) -> list[int]:
    """The indices an epoch of `world` ranks holds (each once), from torch's own DistributedSampler."""
    found = set()
    for rank in range(world):
        sampler = DistributedSampler(range(size), world, rank, seed=seed, drop_last=drop_last)
        sampler.set_epoch(epoch)
        found |= set(sampler)
    return sorted(found)


def check_rest(size, before, after_per_rank, world_before, drop_last, world_after) -> None:
    """`after_per_rank` is what the epoch (of `world_before` ranks) had left after `before`, exactly once, evened
    for `world_after` ranks: cut to a multiple (drop_last) or padded with repeats of indices left (the same world
    size goes on in the uninterrupted order: its padding repeats the epoch's first indices, as DistributedSampler's
    does)."""
    left = set(epoch_indices(size, world_before, drop_last)) - set(before)
    after = [i for rank in after_per_rank for i in rank]
    assert len({len(rank) for rank in after_per_rank}) == 1, [len(r) for r in after_per_rank]  # equal per rank
    if drop_last:
        assert len(after) == len(set(after)) == len(left) // world_after * world_after
        assert set(after) <= left
    else:
        again = set(after) - left  # only where the same layout goes on with its epoch's own padding
        assert not again or world_after == world_before, f"{sorted(again)} came again after the resume"
        assert set(after) >= left
        repeats = Counter(after) - Counter(left)
        assert sum(repeats.values()) == -len(left) % world_after  # only the padding that evens the ranks


# ----- the sampler alone ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_same_indices_as_distributed_sampler(world, drop_last, shuffle):
    for epoch in (0, 1):
        ours, theirs = [], []
        for rank in range(world):
            mine = ElasticDistributedSampler(range(23), world, rank, shuffle=shuffle, seed=7, drop_last=drop_last)
            torch_s = DistributedSampler(range(23), world, rank, shuffle=shuffle, seed=7, drop_last=drop_last)
            mine.set_epoch(epoch)
            torch_s.set_epoch(epoch)
            assert len(mine) == len(torch_s)
            ours.append(list(mine))
            theirs.append(list(torch_s))
        assert ours == theirs


def take(samplers, steps):
    """Each rank takes `steps` indices (as DDP ranks do, step for step); returns (taken per rank, merged state)."""
    taken = []
    for sampler in samplers:
        iterator = iter(sampler)
        taken.append([next(iterator) for _ in range(steps)])
    return taken, tfr_torch.elastic_state([s.state_dict() for s in samplers])


def resumed(state, world, drop_last, size=80):
    samplers = [ElasticDistributedSampler(range(size), world, r, seed=7, drop_last=drop_last) for r in range(world)]
    for sampler in samplers:
        sampler.load_state_dict(state)
    return samplers


LAYOUTS = [(1, 4), (4, 1), (2, 3), (3, 2), (3, 3), (4, 6)]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("size", [80, 83])
@pytest.mark.parametrize("old,new", LAYOUTS, ids=[f"{a}-to-{b}" for a, b in LAYOUTS])
def test_resume_under_another_world_size_takes_the_rest_exactly_once(old, new, size, drop_last):
    samplers = [ElasticDistributedSampler(range(size), old, r, seed=7, drop_last=drop_last) for r in range(old)]
    before, state = take(samplers, 9 if old < 4 else 5)
    after = [list(s) for s in resumed(state, new, drop_last, size)]
    check_rest(size, [i for rank in before for i in rank], after, old, drop_last, new)


def test_ranks_stopped_at_different_steps():
    """Without DDP's lockstep (ranks of a plain job stop where they are), the rest is still taken exactly once."""
    samplers = [ElasticDistributedSampler(range(80), 3, r, seed=7) for r in range(3)]
    before = []
    for sampler, steps in zip(samplers, (2, 11, 7)):
        iterator = iter(sampler)
        before += [next(iterator) for _ in range(steps)]
    state = tfr_torch.elastic_state([s.state_dict() for s in samplers])
    check_rest(80, before, [list(s) for s in resumed(state, 3, False)], 3, False, 3)


@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_of_a_resume(drop_last):
    """2 -> 3 -> 1 -> 1 (the same layout again), each stopping midway: the epoch's indices, each once (less the
    padding that evened a layout), and each resume takes exactly what was left."""
    size = 83  # 2 ranks: padded to 84 or cut to 82
    a, state_a = take([ElasticDistributedSampler(range(size), 2, r, seed=7, drop_last=drop_last) for r in range(2)],
                      10)
    b, state_b = take(resumed(state_a, 3, drop_last, size), 8)
    flat_ab = [i for rank in a + b for i in rank]
    assert len(flat_ab) == len(set(flat_ab))
    c, state_c = take(resumed(state_b, 1, drop_last, size), 20)
    d = [list(s) for s in resumed(state_c, 1, drop_last, size)]
    check_rest(size, flat_ab + c[0], d, 2, drop_last, 1)
    everything = flat_ab + c[0] + d[0]
    assert sorted(set(everything)) == epoch_indices(size, 2, drop_last)
    # no padding was needed (84 - 20 = 64 left, 63 of them indices: 21 each), and with drop_last the 2 of 62 that
    # the 3 ranks dropped came back for the one rank after them
    assert len(everything) == len(set(everything))


def test_merged_state_under_the_same_layout_keeps_the_uninterrupted_order():
    full = [list(ElasticDistributedSampler(range(83), 4, r, seed=7)) for r in range(4)]  # padded to 84
    head, state = take([ElasticDistributedSampler(range(83), 4, r, seed=7) for r in range(4)], 6)
    rest = [list(s) for s in resumed(state, 4, False, 83)]
    assert [h + t for h, t in zip(head, rest)] == full


def test_resumed_order_is_deterministic_and_shuffled():
    _, state = take([ElasticDistributedSampler(range(80), 2, r, seed=7) for r in range(2)], 9)
    once = [list(s) for s in resumed(state, 3, False)]
    again = [list(s) for s in resumed(state, 3, False)]
    assert once == again
    assert once[0] != sorted(once[0])


def test_state_after_loading_merges_again():
    """state_dict() right after loading is this rank's part of the resumed epoch: merged again, nothing is lost."""
    _, state = take([ElasticDistributedSampler(range(80), 2, r, seed=7) for r in range(2)], 9)
    again = tfr_torch.elastic_state([s.state_dict() for s in resumed(state, 3, False)])
    assert again["segments"] == [*state["segments"], {"world_size": 3, "yielded": [0, 0, 0]}]
    assert [list(s) for s in resumed(again, 3, False)] == [list(s) for s in resumed(state, 3, False)]


def test_a_state_resumes_only_its_epoch():
    _, state = take([ElasticDistributedSampler(range(80), 2, r, seed=7) for r in range(2)], 9)
    sampler = resumed(state, 1, False)[0]
    assert sampler.epoch == 0
    sampler.set_epoch(1)  # the next epoch: a fresh one, as DistributedSampler's
    fresh = DistributedSampler(range(80), 1, 0, seed=7)
    fresh.set_epoch(1)
    assert list(sampler) == list(fresh)


# ----- through loaders, over IndexedTFRecordDataset --------------------------------------------------------------


def ids(batch) -> list[int]:
    return [i - FIRST for i in batch["id"].reshape(-1).tolist()]


def stage(corpus, world, workers, steps, load=None, batch_size=BATCH):
    """One StatefulDataLoader per rank, over its own sampler (loading `load` first); `steps` batches from each
    (None: to the end). Returns (indices per rank, per batch; loader states)."""
    got, states = [], []
    for rank in range(world):
        dataset = IndexedTFRecordDataset(corpus.paths, SPEC)
        sampler = ElasticDistributedSampler(dataset, world, rank, seed=7)
        if load is not None:
            sampler.load_state_dict(load)
        loader = StatefulDataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers)
        batches = []
        iterator = iter(loader)
        while steps is None or len(batches) < steps:
            try:
                batches.append(ids(next(iterator)) if batch_size else [int(next(iterator)["id"]) - FIRST])
            except StopIteration:
                break
        states.append(loader.state_dict())
        del iterator
        got.append(batches)
    return got, states


GRID = [((1, 2), (4, 0)), ((4, 0), (1, 3)), ((2, 2), (3, 0)), ((2, 0), (3, 3))]


@pytest.mark.parametrize("old,new", GRID, ids=[f"{a}x{b}-to-{c}x{d}" for (a, b), (c, d) in GRID])
def test_stateful_dataloader_resumes_under_another_layout(corpus, old, new):
    """Slow-ish: DataLoaders with worker processes. The sampler lives in the main process: num_workers is free."""
    (world, workers), (world2, workers2) = old, new
    before, states = stage(corpus, world, workers, 3)
    merged = tfr_torch.elastic_state(states)  # the samplers' states, taken from the loaders' states
    after, _ = stage(corpus, world2, workers2, None, merged)
    assert len({len(rank) for rank in after}) == 1  # every new rank the same number of batches
    flat_before = [i for rank in before for batch in rank for i in batch]
    assert len(flat_before) == world * 3 * BATCH
    check_rest(80, flat_before, [[i for b in rank for i in b] for rank in after], world, False, world2)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [BATCH, None], ids=["batched", "unbatched"])
def test_stateful_dataloader_round_trip(corpus, workers, batch_size):
    """Slow-ish with workers. loader.state_dict() -> a new loader's load_state_dict(): the same layout goes on in
    the uninterrupted order."""
    full, _ = stage(corpus, 2, workers, None, batch_size=batch_size)
    head, states = stage(corpus, 2, workers, 5, batch_size=batch_size)
    rest = []
    for rank, state in enumerate(states):
        dataset = IndexedTFRecordDataset(corpus.paths, SPEC)
        loader = StatefulDataLoader(dataset, batch_size=batch_size,
                                    sampler=ElasticDistributedSampler(dataset, 2, rank, seed=7), num_workers=workers)
        loader.load_state_dict(state)
        rest.append([ids(b) if batch_size else [int(b["id"]) - FIRST] for b in loader])
    assert [h + r for h, r in zip(head, rest)] == full


def test_plain_dataloader_with_workers_and_a_batch_sampler(corpus):
    """Slow-ish: worker processes. A plain DataLoader's workers draw indices ahead of the batches handed out:
    state_dict(consumed=batches x batch_size) saves where the training loop is. torch's BatchSampler over it."""
    dataset = IndexedTFRecordDataset(corpus.paths, SPEC)
    samplers = [ElasticDistributedSampler(dataset, 2, r, seed=7) for r in range(2)]
    before, parts = [], []
    for sampler in samplers:
        loader = DataLoader(dataset, batch_sampler=BatchSampler(sampler, BATCH, False), num_workers=2)
        iterator = iter(loader)
        before += [i for _ in range(3) for i in ids(next(iterator))]
        parts.append(sampler.state_dict(consumed=3 * BATCH))
        del iterator
    merged = tfr_torch.elastic_state(parts)
    after = []
    for rank in range(3):
        sampler = ElasticDistributedSampler(dataset, 3, rank, seed=7)
        sampler.load_state_dict(merged)
        after.append([i for batch in DataLoader(dataset, batch_size=BATCH, sampler=sampler) for i in ids(batch)])
    check_rest(80, before, after, 2, False, 3)


# ----- errors -----------------------------------------------------------------------------------------------------


def test_load_refuses_another_dataset_or_order(corpus):
    dataset = IndexedTFRecordDataset(corpus.paths, SPEC)
    _, state = take([ElasticDistributedSampler(dataset, 2, r, seed=7) for r in range(2)], 3)
    with pytest.raises(ValueError, match=r"cannot resume: the saved state has seed=7, this sampler has 8$"):
        ElasticDistributedSampler(dataset, 2, 0, seed=8).load_state_dict(state)
    with pytest.raises(ValueError, match=r"cannot resume: the saved state has size=80, this sampler has 79 "
                                         r"\(another dataset\?\)"):
        ElasticDistributedSampler(range(79), 2, 0, seed=7).load_state_dict(state)
    with pytest.raises(ValueError, match=r"cannot resume: the saved state has fingerprint='[0-9a-f]{8}', this sampler "
                                         r"has None \(another dataset\?\)"):
        ElasticDistributedSampler(range(80), 2, 0, seed=7).load_state_dict(state)  # no files: another dataset
    with pytest.raises(ValueError, match=r"cannot resume: the saved state has drop_last=False, this sampler has True"):
        ElasticDistributedSampler(dataset, 2, 0, seed=7, drop_last=True).load_state_dict(state)
    with pytest.raises(ValueError, match=r"cannot resume: the saved state has shuffle=True, this sampler has False"):
        ElasticDistributedSampler(dataset, 2, 0, seed=7, shuffle=False).load_state_dict(state)
    with pytest.raises(ValueError, match=r"has version 2, newer than this tfr_torch reads \(1\): upgrade tfr_torch"):
        ElasticDistributedSampler(dataset, 2, 0, seed=7).load_state_dict(dict(state, version=2))
    with pytest.raises(ValueError, match="not an ElasticDistributedSampler state: a dict with keys"):
        ElasticDistributedSampler(dataset, 2, 0, seed=7).load_state_dict({"yielded": 3})


def test_a_rank_part_loaded_by_another_rank_is_refused():
    sampler = ElasticDistributedSampler(range(80), 2, 1, seed=7)
    next(iter(sampler))
    part = sampler.state_dict()
    with pytest.raises(ValueError, match=r"cannot resume: the saved state has rank=1, this sampler has 0: it is one "
                                         r"rank's part \(rank 1 of 2\); to resume under another world size, merge "
                                         r"every rank's part with tfr_torch.elastic_state"):
        ElasticDistributedSampler(range(80), 2, 0, seed=7).load_state_dict(part)
    with pytest.raises(ValueError, match=r"the saved state has world_size=2, this sampler has 3"):
        ElasticDistributedSampler(range(80), 3, 1, seed=7).load_state_dict(part)


def test_elastic_state_names_what_is_wrong_with_sampler_states(corpus):
    samplers = [ElasticDistributedSampler(range(80), 3, r, seed=7) for r in range(3)]
    parts = [s.state_dict() for s in samplers]
    with pytest.raises(ValueError, match=r"the sampler states of 2 of the 3 ranks are missing \(rank 0, 2\): gather "
                                         "every rank's state"):
        tfr_torch.elastic_state(parts[1])
    samplers[2].set_epoch(4)
    with pytest.raises(ValueError, match=r"the sampler states come from different epochs or samplers: epoch=0 in rank "
                                         r"0's, epoch=4 in rank 2's"):
        tfr_torch.elastic_state(parts[:2], samplers[2].state_dict())
    dataset_part = tfr_torch.TFRecordDataset(corpus.paths, SPEC, index="auto").state_dict()
    with pytest.raises(ValueError, match=r"give the states of one kind: 3 ElasticDistributedSampler state\(s\) and 1 "
                                         r"TFRecordDataset state\(s\) were given"):
        tfr_torch.elastic_state(parts, dataset_part)
    with pytest.raises(ValueError, match=r"consumed=5 but this sampler has not begun epoch 0"):
        samplers[0].state_dict(consumed=5)
    next(iter(samplers[0]))
    with pytest.raises(ValueError, match=r"consumed=5 is more than the 1 indices this sampler has handed out in "
                                         "epoch 0"):
        samplers[0].state_dict(consumed=5)
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 3\), got 3"):
        ElasticDistributedSampler(range(80), 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ElasticDistributedSampler(range(80), 3, 2).num_samples == 27  # 80 padded to 81


def test_docs_sampler_example_runs(corpus, tmp_path, monkeypatch):
    """Slow-ish: a loader with 2 worker processes. The datasets guide's sampler example (docs/guides/datasets.md),
    with its save recipe: one rank (detected) saves after 2 batches through 2 workers and resumes with 0 workers;
    then the next epoch."""
    import re
    from pathlib import Path

    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    text = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "datasets.md").read_text()
    section = text[text.index("## Resuming mid-epoch"):]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    recipe = next(b for b in blocks if "def save_data_state" in b)
    example = next((b for b in blocks if "def indexed_loader" in b), None)
    assert example, "the datasets guide lost its ElasticDistributedSampler example"
    scope: dict = {}
    exec(compile(recipe, "docs/guides/datasets.md (resume recipe)", "exec"), scope)
    exec(compile(example, "docs/guides/datasets.md (sampler example)", "exec"), scope)
    loader = scope["indexed_loader"](corpus.paths, SPEC, None, 2)
    iterator = iter(loader)
    before = [i for _ in range(2) for i in ids(next(iterator))]
    scope["save_data_state"](loader, str(tmp_path / "data.pt"))
    del iterator
    state = torch.load(tmp_path / "data.pt", weights_only=True)
    resumed = scope["indexed_loader"](corpus.paths, SPEC, state, 0)
    after = [i for batch in resumed for i in ids(batch)]
    assert len(before) == 64 and sorted(before + after) == list(range(80))
    scope["train"](corpus.paths, SPEC, 2, state)  # the rest of epoch 0, then epoch 1: runs as written
