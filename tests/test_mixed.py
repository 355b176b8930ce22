"""MixedDataset: several TFRecordDatasets drawn from by weight (tf.data's sample_from_datasets, HF's
interleave_datasets). Every item once per epoch with stop="all", over ranks and DataLoader workers; the draws follow
the weights and are a function of (seed, epoch, worker), the same on every rank (equal counts per rank);
stop="first" is a prefix of stop="all"; stop="cycle" reads every dataset whole at least once; state_dict resumes a
mixed epoch exactly where it stood."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

import tfr_torch
from tfr_torch import MixedDataset, TFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
SIZES = {"a": 120, "b": 40, "c": 8}  # ids: a 0.., b 1000.., c 2000..


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixed")
    out = {}
    for n, (name, size) in enumerate(SIZES.items()):
        paths = []
        for shard in range(2):
            path = str(folder / f"{name}-{shard}.tfrecord")
            with tfr_torch.TFRecordWriter(path) as writer:
                for i in range(shard, size, 2):
                    writer.write_example({"id": 1000 * n + i})
            tfr_torch.build_index(path, path + ".idx")
            paths.append(path)
        out[name] = paths
    return out


def parts(files, names=("a", "b", "c"), **kwargs):
    return {name: TFRecordDataset(files[name], SPEC, index="auto", **kwargs) for name in names}


def ids(items):
    return [int(item["id"]) for item in items]


def loader_ids(dataset, workers):
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
    return ids(loader)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("world", [1, 2])
def test_stop_all_gives_every_item_once_over_ranks_and_workers(files, workers, world):
    seen = []
    for rank in range(world):
        mixed = MixedDataset(parts(files, rank=rank, world_size=world, shuffle=True), {"a": 3, "b": 1, "c": 1})
        got = loader_ids(mixed, workers)
        assert len(got) == len(mixed) == sum(SIZES.values()) // world
        seen += got
    assert sorted(seen) == sorted(1000 * n + i for n, size in enumerate(SIZES.values()) for i in range(size))


def test_draws_follow_the_weights_until_a_dataset_runs_out(files):
    mixed = MixedDataset(parts(files, ("a", "b")), {"a": 3, "b": 1}, seed=5)
    first = ids(mixed)[:120]
    share = sum(1 for i in first if i < 1000) / len(first)
    assert 0.65 < share < 0.85, share  # 3:1 is 0.75 (a fixed seed: this is one fixed sequence)
    even = ids(MixedDataset(parts(files, ("a", "b")), seed=5))[:80]
    assert 0.4 < sum(1 for i in even if i < 1000) / len(even) < 0.6


def test_the_mixture_is_a_function_of_seed_and_epoch(files):
    def run(seed, epoch):
        mixed = MixedDataset(parts(files), seed=seed)
        mixed.set_epoch(epoch)
        return ids(mixed)

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(2, 0)
    assert run(1, 0) != run(1, 1)
    assert sorted(run(1, 0)) == sorted(run(1, 1))


def test_stop_first_is_the_prefix_of_stop_all_up_to_the_first_dataset_that_runs_out(files):
    every = ids(MixedDataset(parts(files), seed=3))
    first = ids(MixedDataset(parts(files), stop="first", seed=3))
    assert every[: len(first)] == first
    ran_out = Counter(i // 1000 for i in first)
    assert ran_out[2] == SIZES["c"]  # c, the smallest, ran out: the epoch ended at its next draw
    assert len(first) < len(every)
    with pytest.raises(TypeError, match="has no length"):
        len(MixedDataset(parts(files), stop="first"))


def test_stop_cycle_reads_every_dataset_whole_at_least_once(files):
    got = ids(MixedDataset(parts(files), stop="cycle", seed=4))
    counts = Counter(got)
    for n, size in enumerate(SIZES.values()):
        assert all(counts[1000 * n + i] >= 1 for i in range(size))
    assert any(counts[2000 + i] > 1 for i in range(SIZES["c"]))  # the small one came round again
    assert all(counts[i] == 1 for i in range(SIZES["a"]))  # the largest ran out once: the end


def test_stop_cycle_with_an_empty_dataset_ends(files, tmp_path):
    empty = str(tmp_path / "empty.tfrecord")
    tfr_torch.TFRecordWriter(empty).close()
    got = ids(MixedDataset({"b": TFRecordDataset(files["b"], SPEC), "e": TFRecordDataset(empty, SPEC)},
                           stop="cycle"))
    assert sorted(got) == list(range(1000, 1000 + SIZES["b"]))


@pytest.mark.parametrize("stop", ["all", "first", "cycle"])
def test_state_dict_resumes_exactly_where_the_epoch_stood(files, stop):
    rng = random.Random(stop)

    def make():
        mixed = MixedDataset(parts(files, shuffle=True), {"a": 2, "b": 1, "c": 1}, stop=stop, seed=9)
        mixed.set_epoch(2)
        return mixed

    whole = ids(make())
    for cut in sorted(rng.sample(range(1, len(whole)), 6)) + [len(whole)]:
        first = make()
        it = iter(first)
        head = [int(next(it)["id"]) for _ in range(cut)]
        state = first.state_dict()
        resumed = make()
        resumed.load_state_dict(state)
        assert resumed.state_dict() == state  # saved again before iterating: nothing lost
        assert head + ids(resumed) == whole, cut


def test_a_state_taken_right_after_set_epoch_starts_that_epoch(files):
    mixed = MixedDataset(parts(files), seed=1)
    list(mixed)
    mixed.set_epoch(1)
    state = mixed.state_dict()
    assert state["draws"] == 0 and state["epoch"] == 1
    again = MixedDataset(parts(files), seed=1)
    again.load_state_dict(state)
    fresh = MixedDataset(parts(files), seed=1)
    fresh.set_epoch(1)
    assert ids(again) == ids(fresh)


def test_states_of_another_mixture_or_layout_are_refused(files):
    mixed = MixedDataset(parts(files), seed=1)
    it = iter(mixed)
    next(it)
    state = mixed.state_dict()
    with pytest.raises(ValueError, match=r"another mixture: weights"):
        MixedDataset(parts(files), [1, 2, 1], seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match=r"another mixture: names"):
        MixedDataset(list(parts(files).values()), seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="not a MixedDataset state"):
        mixed.load_state_dict(mixed.datasets[0].state_dict())
    with pytest.raises(ValueError, match="draws must be a non-negative int"):
        mixed.load_state_dict({**state, "draws": -1})
    other = MixedDataset(parts(files), seed=1)
    other.load_state_dict({**state, "workers": 2, "worker": 1})
    with pytest.raises(ValueError, match=r"another reader: worker 1 \(here 0\); workers 2 \(here 1\)"):
        iter(other)


def test_arguments_are_checked(files):
    datasets = parts(files, ("a", "b"))
    with pytest.raises(ValueError, match=r"the weight of dataset 'b' must be a positive finite number, got 0"):
        MixedDataset(datasets, {"a": 1, "b": 0})
    with pytest.raises(ValueError, match=r"weights name \['a', 'x'\], the datasets \['a', 'b'\]"):
        MixedDataset(datasets, {"a": 1, "x": 1})
    with pytest.raises(ValueError, match="1 weights for 2 datasets"):
        MixedDataset(datasets, [1.0])
    with pytest.raises(ValueError, match="nan"):
        MixedDataset(datasets, [1.0, float("nan")])
    with pytest.raises(ValueError, match="stop must be one of 'all', 'first', 'cycle'"):
        MixedDataset(datasets, stop="longest")
    with pytest.raises(TypeError, match="dataset 'a' must be an IterableDataset"):
        MixedDataset({"a": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="at least one dataset"):
        MixedDataset({})
    with pytest.raises(TypeError, match="weights by name need datasets by name"):
        MixedDataset(list(datasets.values()), {"a": 1, "b": 1})


def test_set_epoch_reaches_the_datasets_and_persistent_workers(files):
    mixed = MixedDataset(parts(files, ("a", "b"), shuffle=True), seed=2)
    loader = torch.utils.data.DataLoader(mixed, batch_size=None, num_workers=2, persistent_workers=True)
    epochs = []
    for epoch in range(2):
        mixed.set_epoch(epoch)
        epochs.append(ids(loader))
    assert all(d.epoch == 1 for d in mixed.datasets)
    assert epochs[0] != epochs[1] and sorted(epochs[0]) == sorted(epochs[1])
    direct = []
    for epoch in range(2):
        single = MixedDataset(parts(files, ("a", "b"), shuffle=True), seed=2)
        single.set_epoch(epoch)
        direct.append(sorted(loader_ids(single, 2)))
    assert [sorted(e) for e in epochs] == direct


@pytest.mark.parametrize("workers", [0, 2])
def test_batched_datasets_mix_whole_batches(files, workers):
    mixed = MixedDataset(parts(files, ("a", "b"), batch_size=8), seed=0)
    batches = list(torch.utils.data.DataLoader(mixed, batch_size=None, num_workers=workers))
    assert len(batches) == len(mixed) == 120 // 8 + 40 // 8
    for batch in batches:
        kinds = {int(i) // 1000 for i in batch["id"]}
        assert len(kinds) == 1  # each batch from one dataset
    assert sorted(int(i) for batch in batches for i in batch["id"]) == [*range(120), *range(1000, 1040)]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
def test_stateful_dataloader_with_workers_resumes_the_mixture(files):
    """torchdata's StatefulDataLoader keeps each worker's MixedDataset state; a new loader loading it yields the
    rest of the epoch as the first would have."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        mixed = MixedDataset(parts(files, shuffle=True), {"a": 2, "b": 1, "c": 1}, seed=7)
        return StatefulDataLoader(mixed, batch_size=4, num_workers=2)

    whole = [b["id"].tolist() for b in loader()]
    first = loader()
    it = iter(first)
    head = [next(it)["id"].tolist() for _ in range(9)]
    state = first.state_dict()
    del it
    second = loader()
    second.load_state_dict(state)
    assert head + [b["id"].tolist() for b in second] == whole


@pytest.mark.parametrize("stop", ["all", "first", "cycle"])
@pytest.mark.parametrize("workers", [0, 2])
def test_every_rank_yields_as_many_items_whatever_the_stop(files, stop, workers):
    """Uneven item counts across DDP ranks hang collectives: the draws are the same on every rank, so ranks with
    equal shares of each dataset end their epochs at the same step."""
    counts, seen = [], []
    for rank in range(3):
        mixed = MixedDataset(parts(files, rank=rank, world_size=3, shuffle=True), {"a": 1, "b": 2, "c": 4},
                             stop=stop, seed=11)
        got = loader_ids(mixed, workers)
        counts.append(len(got))
        seen.append(got)
    assert len(set(counts)) == 1, counts
    assert seen[0] != seen[1]  # the ranks read their own records
