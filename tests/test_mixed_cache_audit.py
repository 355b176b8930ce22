"""Adversarial checks of MixedDataset and CachedDataset's resumption: every item exactly once per epoch over
simulated ranks x DataLoader workers x shuffle x batch x pad; resuming at random points (also a resumed run's
state, states at an epoch's end, right after set_epoch, in a second pass over the same epoch) gives exactly the rest
of the uninterrupted run, in-process and through torchdata's StatefulDataLoader; mixtures of caches and caches of
mixtures; components that are empty, tiny, or raise; extreme weights; edited states refused by name."""

from __future__ import annotations

import os
import pickle
import random
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import tfr_torch
from tfr_torch import CachedDataset, MixedDataset, TFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
SIZES = {"a": 40, "b": 13, "c": 7}  # ids: a 0.., b 1000.., c 2000..
STOPS = ("all", "first", "cycle")

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:DataLoader workers .* get nothing to read:UserWarning"),
              pytest.mark.filterwarnings("ignore:the 1 file.s. of this dataset hold no records:UserWarning"),
              pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # fork() of a process with threads


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Each dataset in two indexed shards (records interleaved), and an empty file."""
    folder = tmp_path_factory.mktemp("audit")
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
    empty = str(folder / "empty.tfrecord")
    tfr_torch.TFRecordWriter(empty).close()
    tfr_torch.build_index(empty, empty + ".idx")
    out["empty"] = [empty]
    return out


def parts(files, names=("a", "b", "c"), **kwargs):
    return {name: TFRecordDataset(files[name], SPEC, index="auto", **kwargs) for name in names}


def flat(items):
    """The ids of items: records (a 0-d id) or batches."""
    out = []
    for item in items:
        value = item["id"]
        out += value.tolist() if value.dim() else [int(value)]
    return out


def take(iterator, n):
    return flat(next(iterator) for _ in range(n))


# ----- exactly once, equal counts per rank --------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("workers", [0, 1, 3])
def test_every_item_of_every_rank_exactly_once_and_equal_counts_per_rank(files, workers, batch):
    rng = random.Random(f"{workers}-{batch}")
    world, shuffle, pad = rng.choice([2, 3]), rng.random() < 0.5, rng.random() < 0.5
    options = {"world_size": world, "shuffle": shuffle, "pad": pad, "batch_size": batch, "seed": rng.randrange(99)}
    weights = {name: rng.choice([0.5, 1, 4]) for name in SIZES}
    alone = Counter()  # what the datasets yield over the ranks, each read alone
    for rank in range(world):
        for name, dataset in parts(files, rank=rank, **options).items():
            alone.update(flat(DataLoader(dataset, batch_size=None)))
    for stop in STOPS if workers != 3 else ("all", "cycle"):
        seen, counts, seed = Counter(), [], rng.randrange(99)  # the same seed on every rank
        for rank in range(world):
            mixed = MixedDataset(parts(files, rank=rank, **options), weights, stop=stop, seed=seed)
            got = list(DataLoader(mixed, batch_size=None, num_workers=workers))
            counts.append(len(got))
            seen.update(flat(got))
            if stop == "all":
                assert len(got) == len(mixed), (rank, options)
        assert len(set(counts)) == 1, (stop, counts, options)  # DDP's collectives never wait on a rank
        if stop == "all":
            assert seen == alone, options
        elif stop == "cycle":
            assert set(seen) == set(alone), options  # every item at least once


# ----- resuming in-process -------------------------------------------------------------------------------------------


def mixture(files, stop, **kwargs):
    return MixedDataset(parts(files, shuffle=True, seed=3), {"a": 3, "b": 1, "c": 2}, stop=stop, seed=7, **kwargs)


def without_done(state):
    """A mixture's state less the states of datasets it no longer reads (never loaded when resumed)."""
    done = set(state["exhausted"]) | set(state["restart"])
    return {**state, "datasets": {name: part for k, (name, part) in enumerate(state["datasets"].items())
                                  if k not in done}}


@pytest.mark.parametrize("stop", STOPS)
def test_resumes_and_resumes_of_resumes_give_exactly_the_rest(files, stop):
    rng = random.Random(f"chain-{stop}")
    for epoch in (0, 4):
        whole_run = mixture(files, stop)
        whole_run.set_epoch(epoch)
        whole = flat(whole_run)
        for _ in range(4):
            cuts = sorted(rng.sample(range(len(whole) + 1), 2))
            ds = mixture(files, stop)
            ds.set_epoch(epoch)
            it = iter(ds)
            got = take(it, cuts[0])
            state = ds.state_dict()
            again = mixture(files, stop)
            again.load_state_dict(state)
            assert again.epoch == epoch and all(d.epoch == epoch for d in again.datasets)
            it = iter(again)
            assert without_done(again.state_dict()) == without_done(state)  # begun, nothing read: saved again
            got += take(it, cuts[1] - cuts[0])
            third = mixture(files, stop)
            third.load_state_dict(again.state_dict())
            assert got + flat(third) == whole, (epoch, cuts)


@pytest.mark.parametrize("stop", STOPS)
def test_a_state_taken_after_the_epoch_ended_resumes_nothing(files, stop):
    """A checkpoint after the last item (the loop ran out): the rest of that epoch is nothing. It drew on past the
    end with stop="first" / "cycle" (the draw that ended the epoch was counted, the end was not noted)."""
    for seed in range(4):
        ds = MixedDataset(parts(files), stop=stop, seed=seed)
        assert flat(ds)
        state = ds.state_dict()
        resumed = MixedDataset(parts(files), stop=stop, seed=seed)
        resumed.load_state_dict(state)
        assert flat(resumed) == [], seed
        resumed.set_epoch(1)
        assert flat(resumed) == flat(_epoch(files, stop, 1, seed=seed))  # the next epoch whole


def _epoch(files, stop, epoch, seed=None):
    """A new mixture set to `epoch`: `mixture`'s, or an unweighted one seeded by `seed`."""
    ds = mixture(files, stop) if seed is None else MixedDataset(parts(files), stop=stop, seed=seed)
    ds.set_epoch(epoch)
    return ds


@pytest.mark.parametrize("stop", STOPS)
def test_a_second_pass_over_the_same_epoch_resumes_its_own_rest(files, stop):
    """Without set_epoch the next pass repeats the epoch. A state taken in it, before a dataset's first draw, held
    that dataset's state from the end of the last pass: the resumed run lost (or repeated) its items."""
    weights = {"a": 50, "b": 1, "c": 1}  # b and c are drawn late
    whole = flat(MixedDataset(parts(files), weights, stop=stop, seed=1))
    for cut in (0, 1, 5):
        ds = MixedDataset(parts(files), weights, stop=stop, seed=1)
        list(ds)
        it = iter(ds)
        head = take(it, cut)
        resumed = MixedDataset(parts(files), weights, stop=stop, seed=1)
        resumed.load_state_dict(ds.state_dict())
        assert head + flat(resumed) == whole, cut


def test_a_loaded_state_is_not_saved_again_after_set_epoch_to_another_epoch(files):
    ds = mixture(files, "all")
    it = iter(ds)
    take(it, 5)
    state = ds.state_dict()
    resumed = mixture(files, "all")
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # the next epoch instead: a checkpoint now starts epoch 1
    saved = resumed.state_dict()
    assert saved["epoch"] == 1 and saved["draws"] == 0
    again = mixture(files, "all")
    again.load_state_dict(saved)
    assert flat(again) == flat(_epoch(files, "all", 1))


# ----- resuming through StatefulDataLoader --------------------------------------------------------------------------


@pytest.mark.parametrize("persistent", [False, True])
def test_stateful_dataloader_resumes_cycle_near_the_end_where_a_worker_has_finished(files, persistent):
    """Near the end of a stop="cycle" epoch one worker has run out; its state, taken there, drew on (a dataset
    waiting to start a new pass) when resumed: more items than the epoch holds."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        mixed = MixedDataset(parts(files), stop="cycle", seed=2)
        return StatefulDataLoader(mixed, batch_size=None, num_workers=2, persistent_workers=persistent)

    whole = flat(loader())
    for back in (6, 15):
        first = loader()
        it = iter(first)
        head = take(it, len(whole) - back)
        state = first.state_dict()
        del it, first
        second = loader()
        second.load_state_dict(state)
        assert head + flat(second) == whole, back


# ----- mixtures of caches, caches of mixtures -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["memory", "folder"])
def test_a_mixture_of_caches_resumes_in_its_first_and_replayed_epochs(files, tmp_path, where):
    def make(root):  # a folder's cache is shared by the runs given the same root
        return MixedDataset({name: CachedDataset(dataset, None if where == "memory" else tmp_path / root / name,
                                                 shuffle=True, seed=5)
                             for name, dataset in parts(files).items()}, [2, 1, 1], seed=4)

    rng = random.Random(where)
    runner = make("whole")
    wholes = []
    for epoch in range(3):
        runner.set_epoch(epoch)
        wholes.append(flat(runner))
    assert all(sorted(w) == sorted(wholes[0]) for w in wholes)
    for epoch in (0, 2):
        for cut in rng.sample(range(len(wholes[0]) + 1), 3):
            root = f"{epoch}-{cut}"
            ds = make(root)
            if epoch:
                list(ds)  # epoch 0 kept (memory: in this process)
            ds.set_epoch(epoch)
            it = iter(ds)
            head = take(it, cut)
            resumed = make(root)  # a new process: a memory cache reads its part again first
            resumed.load_state_dict(ds.state_dict())
            assert head + flat(resumed) == wholes[epoch], (epoch, cut)


def test_a_cache_of_a_mixture_keeps_each_simulated_ranks_own_part(files, tmp_path):
    """The parts in a shared folder are keyed by rank: a MixedDataset did not say its datasets' rank, and every
    rank of a cached mixture replayed rank 0's part."""
    folder = tmp_path / "cache"
    seen = []
    for rank in range(2):
        mixed = MixedDataset(parts(files, rank=rank, world_size=2), seed=1)
        cached = CachedDataset(mixed, folder)
        first = flat(cached)
        assert flat(cached) == first
        assert first == flat(MixedDataset(parts(files, rank=rank, world_size=2), seed=1))
        seen += first
    assert Counter(seen) == Counter(i for rank in range(2) for d in parts(files, rank=rank, world_size=2).values()
                                    for i in flat(d))


def test_a_cache_of_a_mixture_is_rebuilt_when_the_mixture_changes(files, tmp_path):
    folder = tmp_path / "cache"
    assert len(flat(CachedDataset(MixedDataset(parts(files), seed=1), folder))) == sum(SIZES.values())
    with pytest.warns(UserWarning, match=r"changed: stop\)"):
        changed = CachedDataset(MixedDataset(parts(files), stop="first", seed=1), folder)
    assert flat(changed) == flat(MixedDataset(parts(files), stop="first", seed=1))
    with pytest.warns(UserWarning, match=r"changed: weights\)"):
        changed = CachedDataset(MixedDataset(parts(files), [1, 2, 3], stop="first", seed=1), folder)
    list(changed)
    with pytest.warns(UserWarning, match=r"changed: datasets, names, weights\)"):
        CachedDataset(MixedDataset(parts(files, ("a", "b"), batch_size=2), stop="first", seed=1), folder)


# ----- CachedDataset's resumption -----------------------------------------------------------------------------------


def cache(files, folder=None, **kwargs):
    return CachedDataset(TFRecordDataset(files["a"], SPEC, index="auto", shuffle=True, seed=4), folder, **kwargs)


@pytest.mark.parametrize("phase", ["read", "replay"])
def test_a_cache_resumed_and_saved_again_before_its_first_item_loses_nothing(files, tmp_path, phase):
    """In-process and through StatefulDataLoader (which begins the iteration when it loads a state): a state
    saved right after resuming said the epoch's start, and the next resume repeated its head."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make(name="cache"):
        return cache(files, str(tmp_path / name), shuffle=True, seed=2)

    if phase == "replay":
        list(make())  # epoch 0 kept in the folders
        list(make("whole"))
    epoch = 1 if phase == "replay" else 0
    base = make("whole")
    base.set_epoch(epoch)
    whole = flat(base)
    ds = make()
    ds.set_epoch(epoch)
    it = iter(ds)
    head = take(it, 9)
    state = ds.state_dict()
    assert state["phase"] == phase
    resumed = make()
    resumed.load_state_dict(state)
    iter(resumed)
    again = make()
    again.load_state_dict(resumed.state_dict())
    assert head + flat(again) == whole

    def loader():
        return StatefulDataLoader(make(), batch_size=None, num_workers=0)

    first = loader()
    first.dataset.set_epoch(epoch)
    it = iter(first)
    head = take(it, 9)
    second = loader()
    second.load_state_dict(first.state_dict())
    third = loader()
    third.load_state_dict(second.state_dict())
    assert head + flat(third) == whole


def test_a_cache_state_taken_in_a_second_pass_before_its_first_item_starts_that_pass(files):
    ds = cache(files, shuffle=True)
    list(ds)
    expected = flat(ds)  # epoch 0 again, replayed
    it = iter(ds)  # a third pass, not begun
    state = ds.state_dict()
    assert state["yielded"] == 0
    resumed = cache(files, shuffle=True)
    resumed.load_state_dict(state)
    assert flat(resumed) == expected
    del it


def test_a_loaded_cache_state_is_not_saved_again_after_set_epoch_to_another_epoch(files):
    ds = cache(files)
    it = iter(ds)
    take(it, 3)
    resumed = cache(files)
    resumed.load_state_dict(ds.state_dict())
    resumed.set_epoch(2)
    saved = resumed.state_dict()
    assert saved["epoch"] == 2 and saved["yielded"] == 0


@pytest.mark.parametrize("damage", ["removed", "flipped"])
def test_a_replayed_epoch_resumes_when_its_part_is_damaged_or_removed_between_save_and_load(files, tmp_path,
                                                                                             damage):
    folder = tmp_path / "cache"
    ds = cache(files, folder, shuffle=True, transform=lambda item: {"id": item["id"] + 100_000})
    list(ds)
    ds.set_epoch(3)
    whole = flat(ds)
    it = iter(ds)
    head = take(it, 11)
    state = ds.state_dict()
    part = next(folder / name for name in os.listdir(folder) if name.startswith("part-"))
    if damage == "removed":
        os.remove(part)
    else:
        data = bytearray(part.read_bytes())
        data[len(data) // 2] ^= 0x10
        part.write_bytes(bytes(data))
    resumed = cache(files, folder, shuffle=True, transform=lambda item: {"id": item["id"] + 100_000})
    resumed.load_state_dict(state)
    if damage == "flipped":
        with pytest.warns(UserWarning, match="is damaged"):
            rest = flat(resumed)
    else:
        rest = flat(resumed)
    assert head + rest == whole and min(whole) >= 100_000
    assert resumed.cached()


def test_shuffle_false_replay_resumes_in_a_new_process_from_memory(files):
    ds = cache(files)
    first = flat(ds)
    ds.set_epoch(1)
    it = iter(ds)
    head = take(it, 17)
    resumed = cache(files)  # a new process: nothing in memory
    resumed.load_state_dict(ds.state_dict())
    assert resumed.epoch == 1 and resumed.dataset.epoch == 1
    rest = flat(resumed)
    assert head + rest == first  # shuffle=False: the replay is the first epoch's order
    resumed.set_epoch(2)
    assert flat(resumed) == first


# ----- edge cases of the mixture -------------------------------------------------------------------------------------


class Failing(IterableDataset):
    def __init__(self, n: int, fail_at: int) -> None:
        self.n, self.fail_at = n, fail_at

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise RuntimeError(f"record {i} is bad")
            yield {"id": torch.tensor(5000 + i)}


def test_a_dataset_that_raises_mid_epoch_raises_through_the_mixture_and_the_cache(files):
    mixed = MixedDataset({"a": TFRecordDataset(files["a"], SPEC), "bad": Failing(9, 4)}, seed=0)
    with pytest.raises(RuntimeError, match="record 4 is bad"):
        list(mixed)
    cached = CachedDataset(MixedDataset({"a": TFRecordDataset(files["a"], SPEC), "bad": Failing(9, 4)}, seed=0))
    with pytest.raises(RuntimeError, match="record 4 is bad"):
        list(cached)
    assert not cached.cached()


@pytest.mark.parametrize("stop", STOPS)
def test_empty_tiny_and_single_datasets_end_every_stop(files, stop):
    empty = {f"e{k}": TFRecordDataset(files["empty"], SPEC, index="auto") for k in range(3)}
    tiny = {"c": TFRecordDataset(files["c"], SPEC, index="auto")}
    got = flat(MixedDataset({**empty, **tiny, "b": TFRecordDataset(files["b"], SPEC)}, stop=stop, seed=3))
    if stop == "first":
        assert got == []  # an empty dataset runs out at its first draw (one is drawn before long)
    else:
        assert set(got) == set(range(2000, 2007)) | set(range(1000, 1013))
        if stop == "all":
            assert len(got) == 20
    assert flat(MixedDataset(empty, stop=stop)) == []
    single = flat(MixedDataset(tiny, stop=stop))
    assert single == flat(TFRecordDataset(files["c"], SPEC))


def test_extreme_weights_draw_as_their_ratio_says(files):
    """Scaling every weight by a power of two changes nothing: weights whose sum overflows drew the last dataset
    only, subnormal ones drew by rounding."""
    def run(weights, stop="all"):
        return flat(MixedDataset(parts(files, ("a", "b")), weights, stop=stop, seed=8))

    expected = run([1.0, 3.0])
    for scale in (2.0 ** 1022, 2.0 ** -1074, 2.0 ** 60):  # a sum of inf; the smallest subnormal
        assert run([scale, 3 * scale]) == expected, scale
    a, b = (flat(TFRecordDataset(files[name], SPEC)) for name in ("a", "b"))
    assert run([1e9, 1e-9]) == a + b  # all of a first, then b: every item once
    assert run([1e-9, 1e9], "first") == b


# ----- states refused, pickling ---------------------------------------------------------------------------------------


def test_edited_or_foreign_states_are_refused_by_name(files):
    ds = mixture(files, "all")
    it = iter(ds)
    take(it, 3)
    state = ds.state_dict()
    with pytest.raises(ValueError, match="MixedDataset state version 2; this tfr_torch reads version 1"):
        mixture(files, "all").load_state_dict({**state, "version": 2})
    with pytest.raises(ValueError, match=r"another mixture: stop 'all' \(here 'cycle'\)"):
        mixture(files, "cycle").load_state_dict(state)
    with pytest.raises(ValueError, match=r"this state holds datasets as a list, the mixture \['a', 'b', 'c'\]"):
        mixture(files, "all").load_state_dict({**state, "datasets": ["a", "b", "c"]})
    with pytest.raises(ValueError, match=r"this state holds datasets \['a', 'b'\], the mixture"):
        mixture(files, "all").load_state_dict({**state, "datasets": {"a": {}, "b": {}}})
    with pytest.raises(ValueError, match=r"exhausted must list dataset positions, got \[3\]"):
        mixture(files, "all").load_state_dict({**state, "exhausted": [3]})
    with pytest.raises(ValueError, match="not a MixedDataset state"):
        mixture(files, "all").load_state_dict(cache(files).state_dict())
    with pytest.raises(ValueError, match="not a CachedDataset state"):
        cache(files).load_state_dict(state)
    cached = cache(files)
    with pytest.raises(ValueError, match="CachedDataset state version 0"):
        cached.load_state_dict({**cached.state_dict(), "version": 0})
    with pytest.raises(ValueError, match=r"phase 'done' or reader"):
        cached.load_state_dict({**cached.state_dict(), "phase": "done"})
    other = mixture(files, "all")
    other.load_state_dict({**state, "rank": 1})
    with pytest.raises(ValueError, match=r"taken by another reader: rank 1 \(here 0\)"):
        iter(other)


def test_a_pickled_mixture_mid_epoch_and_a_pickled_loaded_one(files):
    ds = mixture(files, "cycle")
    whole = flat(mixture(files, "cycle"))
    it = iter(ds)
    head = take(it, 21)
    state = ds.state_dict()
    assert flat(pickle.loads(pickle.dumps(ds))) == whole  # a worker's copy: its own draws, from the start
    loaded = mixture(files, "cycle")
    loaded.load_state_dict(state)
    copy = pickle.loads(pickle.dumps(loaded))
    assert copy.state_dict() == state
    assert head + flat(copy) == whole


# ----- StatefulDataLoader across epochs, resumes of resumes -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["mixture", "mixture of caches", "cache of a mixture"])
@pytest.mark.parametrize("persistent", [False, True])
def test_stateful_dataloader_with_workers_resumes_every_epoch_and_resumes_of_resumes(files, tmp_path, kind,
                                                                                    persistent):
    """Epoch 0 reads (and keeps), epoch 1 replays; states mid-epoch, right after resuming (before any batch), and
    of a resumed run: each gives exactly the rest of the uninterrupted epoch."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader(root):
        folder = tmp_path / root
        if kind == "mixture":
            ds = MixedDataset(parts(files, shuffle=True), [1, 2, 3], stop="cycle", seed=6)
        elif kind == "mixture of caches":
            ds = MixedDataset({name: CachedDataset(d, folder / name, shuffle=True, seed=1)
                               for name, d in parts(files).items()}, [1, 2, 3], seed=6)
        else:
            ds = CachedDataset(MixedDataset(parts(files, shuffle=True), [1, 2, 3], seed=6), folder, shuffle=True)
        return ds, StatefulDataLoader(ds, batch_size=2, num_workers=2, persistent_workers=persistent)

    ds, runner = loader("whole")
    wholes = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        wholes.append(flat(runner))
    rng = random.Random(f"{kind}{persistent}")
    for epoch in range(2):
        ds, first = loader(f"run{epoch}")
        if epoch:
            list(first)  # epoch 0 kept
        ds.set_epoch(epoch)
        it = iter(first)
        cut = rng.randrange(1, len(wholes[epoch]) // 2 - 2)
        head = take(it, cut)
        state = first.state_dict()
        del it
        _, second = loader(f"run{epoch}")
        second.load_state_dict(state)
        it = iter(second)
        head += take(it, 2)
        state = second.state_dict()
        del it
        _, third = loader(f"run{epoch}")
        third.load_state_dict(state)
        state = third.state_dict()  # right after loading: nothing read yet
        _, fourth = loader(f"run{epoch}")
        fourth.load_state_dict(state)
        assert head + flat(fourth) == wholes[epoch], (epoch, cut)


@pytest.mark.parametrize("workers", [0, 3])
def test_a_mixture_of_caches_over_ranks_and_workers_replays_each_item_once(files, tmp_path, workers):
    """Each component cached in a folder the ranks share: the read epoch and the replayed ones hold what the
    mixture of the datasets themselves holds, each item once, as many per rank."""
    world = 3
    alone = Counter()
    for rank in range(world):
        alone.update(flat(MixedDataset(parts(files, rank=rank, world_size=world, shuffle=True, pad=True))))
    loaders = []
    for rank in range(world):
        mixed = MixedDataset({name: CachedDataset(d, tmp_path / name, shuffle=True, seed=rank)
                              for name, d in parts(files, rank=rank, world_size=world, shuffle=True,
                                                   pad=True).items()}, [3, 2, 1], seed=9)
        loaders.append((mixed, DataLoader(mixed, batch_size=None, num_workers=workers)))
    for epoch in range(3):
        seen, counts = Counter(), []
        for mixed, loader in loaders:
            mixed.set_epoch(epoch)
            got = flat(loader)
            counts.append(len(got))
            seen.update(got)
        assert seen == alone and len(set(counts)) == 1, epoch


def test_a_cache_resumed_where_one_worker_had_kept_its_part_reads_each_item_once_after(files, tmp_path):
    """Near the end of a first epoch one DataLoader worker has finished (its part kept), the other not: resumed,
    the rest is exactly the uninterrupted run's, and the next epoch (one part replayed, the other read again as in
    the epoch the first was kept from) holds every item once."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader(root):
        ds = CachedDataset(TFRecordDataset(files["b"], SPEC, index="auto", shuffle=True, seed=2), tmp_path / root,
                           shuffle=True)
        return ds, StatefulDataLoader(ds, batch_size=None, num_workers=2)

    _, runner = loader("whole")
    whole = flat(runner)
    for back in (1, 2, 4):
        ds, first = loader(f"cut{back}")
        ds.set_epoch(0)
        it = iter(first)
        head = take(it, len(whole) - back)
        state = first.state_dict()
        del it
        ds, second = loader(f"cut{back}")
        second.load_state_dict(state)
        assert head + flat(second) == whole, back
        ds.set_epoch(1)
        assert sorted(flat(second)) == list(range(1000, 1013)), back
        ds.set_epoch(2)
        assert sorted(flat(second)) == list(range(1000, 1013)), back


@pytest.mark.parametrize("where", ["memory", "folder"])
def test_a_cycling_mixture_of_caches_resumes_the_same_draws_and_items(files, tmp_path, where):
    """stop="cycle" over caches: a dataset that runs out starts again in the same epoch (a replay of the part just
    kept). Resumed in a new process, a first pass keeps nothing, so such a later pass reads the source again, in
    its own order: the draws and the items are the uninterrupted run's, the order inside a pass may not be."""
    def make(root):
        return MixedDataset({name: CachedDataset(d, None if where == "memory" else tmp_path / root / name,
                                                 shuffle=True, seed=1)
                             for name, d in parts(files).items()}, [1, 1, 3], stop="cycle", seed=2)

    whole = flat(make("whole"))
    for cut in random.Random(where).sample(range(len(whole) + 1), 6):
        ds = make(str(cut))
        it = iter(ds)
        head = take(it, cut)
        resumed = make(str(cut))
        resumed.load_state_dict(ds.state_dict())
        got = head + flat(resumed)
        assert [i // 1000 for i in got] == [i // 1000 for i in whole], cut
        assert Counter(got) == Counter(whole), cut


def test_numpy_weights_are_numbers(files):
    import numpy as np

    mixed = MixedDataset(parts(files, ("a", "b")), list(np.array([3, 1])), seed=8)
    assert mixed.weights == [3.0, 1.0] and type(mixed.weights[0]) is float
    assert flat(mixed) == flat(MixedDataset(parts(files, ("a", "b")), [3, 1], seed=8))
    with pytest.raises(ValueError, match=r"the weight of dataset 'b' must be a positive finite number, got '1'"):
        MixedDataset(parts(files, ("a", "b")), [3, "1"])


def test_a_mixture_of_caches_in_a_second_pass_resumes_its_own_rest(files):
    """The same epoch again without set_epoch: a cache not yet drawn said it stood at the end of its last pass."""
    def make():
        return MixedDataset({name: CachedDataset(d, shuffle=True, seed=3) for name, d in parts(files).items()},
                            {"a": 50, "b": 1, "c": 1}, seed=1)

    ds = make()
    list(ds)
    whole = flat(ds)  # the second pass: every cache replays epoch 0's order
    for cut in (0, 2):
        ds = make()
        list(ds)
        it = iter(ds)
        head = take(it, cut)
        resumed = make()  # memory: each part read again first, then replayed from where it stood
        resumed.load_state_dict(ds.state_dict())
        assert head + flat(resumed) == whole, cut


def test_a_rank_reading_as_in_the_epoch_the_other_ranks_kept_resumes_that_read(files, tmp_path):
    """Rank 0 kept its part in epoch 0; rank 1 (its epoch 0 abandoned) reads in epoch 3 as in epoch 0, so that the
    parts split the records as one epoch did. Resumed midway, the rest is that read's, and the ranks' items are
    every record once."""
    folder = tmp_path / "cache"

    def make(rank):
        return CachedDataset(TFRecordDataset(files["a"], SPEC, index="auto", shuffle=True, seed=4, rank=rank,
                                             world_size=2), folder, shuffle=True, seed=1)

    kept = flat(make(0))  # epoch 0, kept
    runner = make(1)
    runner.set_epoch(3)
    whole = flat(runner)  # read as in epoch 0 (and kept)
    assert sorted(kept + whole) == list(range(40))
    runner.clear()
    list(make(0))
    for cut in (1, 9, 19):
        ds = make(1)
        ds.set_epoch(3)
        it = iter(ds)
        head = take(it, cut)
        state = ds.state_dict()
        assert state["phase"] == "read" and state["kept_epoch"] == 0
        resumed = make(1)
        resumed.load_state_dict(state)
        assert head + flat(resumed) == whole, cut
        assert resumed.epoch == 3 and resumed.dataset.epoch == 3


def test_that_read_resumed_through_stateful_dataloader(files, tmp_path):
    """The test above through torchdata's StatefulDataLoader (no workers), which drives the resumed pass: the
    source's state (of the epoch it is read as, 0) is loaded inside that pass while the source is set to epoch 3,
    and must resume all the same. (It did not after StatefulDataLoader's own loads of earlier states began to be
    set aside, when that was told by any torchdata frame up the stack: items came twice.)"""
    from torchdata.stateful_dataloader import StatefulDataLoader

    folder = tmp_path / "cache"

    def make(rank):
        ds = CachedDataset(TFRecordDataset(files["a"], SPEC, index="auto", shuffle=True, seed=4, rank=rank,
                                           world_size=2), folder, shuffle=True, seed=1)
        ds.set_epoch(3 if rank else 0)
        return ds

    list(make(0))  # epoch 0, kept
    runner = make(1)
    whole = flat(runner)  # read as in epoch 0 (and kept)
    runner.clear()
    list(make(0))
    for cut in (1, 9):
        loader = StatefulDataLoader(make(1), batch_size=None)
        it = iter(loader)
        head = take(it, cut)
        state = loader.state_dict()
        resumed = StatefulDataLoader(make(1), batch_size=None)
        resumed.load_state_dict(state)
        assert head + flat(resumed) == whole, cut


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loaded_state_of_an_epoch_left_behind_does_not_bind_the_layout(files, workers):
    """A checkpoint of the last epoch loaded, then set_epoch to the next one under another number of DataLoader
    workers: that state resumes nothing, so it must not refuse the new layout (it did, as 'another reader')."""
    ds = mixture(files, "all")
    it = iter(ds)
    take(it, 4)
    state = {**ds.state_dict(), "workers": 3, "worker": 2}  # as a 3-worker run's worker 2 saved it
    resumed = mixture(files, "all")
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    got = flat(DataLoader(resumed, batch_size=None, num_workers=workers))
    assert sorted(got) == sorted(flat(_epoch(files, "all", 1)))
    cached = CachedDataset(TFRecordDataset(files["b"], SPEC))
    cached.load_state_dict({**cached.state_dict(), "phase": "replay", "reader": "rank0of1-worker2of3"})
    cached.set_epoch(1)
    assert sorted(flat(DataLoader(cached, batch_size=None, num_workers=workers))) == list(range(1000, 1013))
