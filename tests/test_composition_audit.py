"""Adversarial checks of datasets composed as users build them, beyond tests/test_mixed*.py,
tests/test_mixed_cache_audit.py, tests/test_cache*.py and tests/test_nodes*.py (whose components are all alike:
indexed, uncompressed, per-record or all batched).

Here one mixture holds components that differ in every option at once: an indexed uncompressed shuffled dataset
with `location_key`, a GZIP dataset with seek points (global shuffle through them), an unindexed one with a
`transform`, and one with a corrupt record read with `on_error="skip"`; batched components of different batch
sizes; mixtures of mixtures; caches of such mixtures and mixtures of caches over them. Checked against a simple
model: every record exactly once per epoch over simulated ranks x DataLoader workers (the bad record never, the
repeats `on_error="skip"` documents for several ranks only on the skipping dataset, and equal counts per rank);
`len()` equal to what is yielded; a run resumed from a state taken after k items (random k, the epoch's end, right
after `set_epoch`) yields exactly the rest of the uninterrupted run, with the state passed through JSON and
`torch.save(weights_only=True)`; heterogeneous mixtures merged by `elastic_state` and resumed under another world
size read each remaining record once; `TFRecordNode` over such datasets (GZIP with `on_error="skip"` and
`location_key`) resumed through torch.save, its len() what each rank yields; errors raised inside a component (not
skipped) name the file and the offset; edited and foreign states refused by name, when they are loaded (a mixture's,
a cache's of a mixture, a mixture of mixtures', before any dataset takes its part), also a replayed epoch's state
of a cache of another source; a cache folder rebuilt when a dataset's `location_key` changes; `elastic_state`
refusing CachedDataset states by name.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import CachedDataset, MixedDataset, TFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
SIZES = {"plain": 24, "gz": 18, "raw": 10, "bad": 12}  # ids: plain 0.., gz 1000.., raw 2000.., bad 3000..
BAD_ID = 3005  # the corrupt record of "bad"
BASE = {name: 1000 * n for n, name in enumerate(SIZES)}
PLAIN_WHERE: dict[int, str] = {}  # id -> "path:offset" of the "plain" component's records (the fixture's)

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:DataLoader workers .* get nothing to read:UserWarning"),
              pytest.mark.filterwarnings("ignore:counting the records:UserWarning"),
              pytest.mark.filterwarnings("ignore::tfr_torch.errors.SkippedRecordWarning"),
              pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # fork() of a process with threads


def doubled(item):
    """The "raw" component's transform (module level: it pickles for DataLoader workers)."""
    return {**item, "twice": item["id"] * 2}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two shards per component: "plain" indexed, "gz" GZIP with an index and seek points, "raw" with no index,
    "bad" indexed with one record whose data is corrupt (its CRC fails)."""
    folder = tmp_path_factory.mktemp("composition")
    out = {}
    for name, size in SIZES.items():
        paths = []
        for shard in range(2):
            path = str(folder / f"{name}-{shard}.tfrecord{'.gz' if name == 'gz' else ''}")
            with tfr_torch.TFRecordWriter(path, compression="gzip" if name == "gz" else None) as writer:
                for i in range(shard, size, 2):
                    writer.write_example({"id": BASE[name] + i})
            if name != "raw":
                tfr_torch.build_index(path, path + ".idx")
            paths.append(path)
        out[name] = paths
    bad = out["bad"][1]  # ids 3001, 3003, 3005, ...: the third record (3005) is damaged
    data = bytearray(open(bad, "rb").read())
    record = len(data) // (SIZES["bad"] // 2)
    data[2 * record + 14] ^= 0x01
    open(bad, "wb").write(bytes(data))
    out["bad_offset"] = 2 * record
    PLAIN_WHERE.update(locations(out["plain"], 0, SIZES["plain"]))
    return out


def locations(paths, base, size, gz=False):
    """{id: "path:offset"} of files written as the fixture writes them (records of equal size, ids interleaved
    over two shards; offsets in the decompressed stream for GZIP): a model independent of the index."""
    out = {}
    for shard, path in enumerate(paths):
        data = gzip.decompress(open(path, "rb").read()) if gz else open(path, "rb").read()
        count = len(range(shard, size, 2))
        for position in range(count):
            out[base + shard + 2 * position] = f"{path}:{position * (len(data) // count)}"
    return out


def components(files, names=tuple(SIZES), batch=None, **ranks):
    """The components, each with its own options."""
    batches = batch or {}
    made = {"plain": lambda: TFRecordDataset(files["plain"], SPEC, index="auto", shuffle=True, seed=3,
                                             location_key="where", batch_size=batches.get("plain"), **ranks),
            "gz": lambda: TFRecordDataset(files["gz"], SPEC, index="auto", shuffle=True, seed=5,
                                          batch_size=batches.get("gz"), **ranks),
            "raw": lambda: TFRecordDataset(files["raw"], SPEC, transform=doubled, batch_size=batches.get("raw"),
                                           **ranks),
            "bad": lambda: TFRecordDataset(files["bad"], SPEC, index="auto", on_error="skip",
                                           batch_size=batches.get("bad"), **ranks)}
    return {name: made[name]() for name in names}


WEIGHTS = {"plain": 3, "gz": 2, "raw": 1, "bad": 1.5}


def mixture(files, stop="all", seed=0, names=tuple(SIZES), batch=None, epoch=0, **ranks):
    mixed = MixedDataset(components(files, names, batch, **ranks), {n: WEIGHTS[n] for n in names}, stop=stop,
                         seed=seed)
    mixed.set_epoch(epoch)
    return mixed


def ids(item):
    value = item["id"]
    return value.tolist() if value.dim() else [int(value)]


def flat(items):
    return [i for item in items for i in ids(item)]


def good_ids(names=tuple(SIZES)):
    return sorted(BASE[n] + i for n in names for i in range(SIZES[n]) if BASE[n] + i != BAD_ID)


def check_item(item):
    """What each component's options put in its items: locations, the transform's key."""
    first = ids(item)[0]
    if first < 1000:
        where = item["where"] if isinstance(item["where"], list) else [item["where"]]
        assert where == [PLAIN_WHERE[i] for i in ids(item)]
    else:
        assert "where" not in item
    if 2000 <= first < 3000:
        assert torch.equal(item["twice"], item["id"] * 2)
    else:
        assert "twice" not in item


def roundtrip(state, how, tmp_path):
    if how == "json":
        return json.loads(json.dumps(state))
    if how == "torch":
        path = tmp_path / "state.pt"
        torch.save(state, path)
        return torch.load(path, weights_only=True)
    return state


# ----- exactly once ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_heterogeneous_mixture_yields_every_good_record_once_and_its_len(files, workers):
    """One rank: every record but the corrupt one exactly once per epoch, each item carrying what its own
    component's options put in it; len() (known once the unindexed files are counted) is what is yielded."""
    mixed = mixture(files)
    for epoch in (0, 1):
        mixed.set_epoch(epoch)
        items = list(DataLoader(mixed, batch_size=None, num_workers=workers))
        for item in items:
            check_item(item)
        assert sorted(flat(items)) == good_ids()
    with pytest.raises(TypeError, match="the length of this TFRecordDataset is unknown"):
        len(mixed)  # "raw" has no index, and one rank does not count it
    known = mixture(files, names=("plain", "gz", "bad"))
    assert len(known) == len(good_ids(("plain", "gz", "bad"))) + 1  # the bad record is counted (by its index)


@pytest.mark.parametrize("workers", [0, 2])
def test_heterogeneous_ranks_yield_each_record_once_and_as_many_items(files, workers):
    """Two simulated ranks: without the skipping component every record exactly once over the ranks and workers,
    with equal counts per rank and len() equal to each rank's count."""
    names = ("plain", "gz", "raw")
    seen, counts = [], []
    for rank in range(2):
        mixed = mixture(files, names=names, rank=rank, world_size=2, epoch=1)
        got = flat(DataLoader(mixed, batch_size=None, num_workers=workers))
        assert len(got) == len(mixed)
        seen += got
        counts.append(len(got))
    assert sorted(seen) == good_ids(names)
    assert counts[0] == counts[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_skipping_component_over_ranks_repeats_only_its_own_records(files, workers):
    """on_error="skip" with several ranks repeats a skipping reader's first records (documented): the other
    components still give each record once, the skipping one each good record at least once, and the ranks as
    many items as each other."""
    seen, counts = Counter(), []
    for rank in range(2):
        mixed = mixture(files, rank=rank, world_size=2)
        got = flat(DataLoader(mixed, batch_size=None, num_workers=workers))
        seen.update(got)
        counts.append(len(got))
    assert counts[0] == counts[1]
    assert set(seen) == set(good_ids())
    assert all(n == 1 for i, n in seen.items() if i < 3000)


# ----- resumption -----------------------------------------------------------------------------------------------


def signature(item):
    """What identifies an item: its ids, and its locations where it has them."""
    where = item.get("where")
    return (tuple(ids(item)), tuple(where) if isinstance(where, list) else where)


def run(dataset, epoch):
    dataset.set_epoch(epoch)
    items = list(dataset)
    for item in items:
        check_item(item)
    return [signature(x) for x in items]


def resumed_rest(make, epoch, k, how, tmp_path, after_set_epoch=False):
    """The head of `epoch` (k items) from one copy, its state through `how`, and the rest from a fresh copy."""
    first = make()
    first.set_epoch(epoch)
    iterator = iter(first)
    head = [signature(next(iterator)) for _ in range(k)]
    if after_set_epoch:  # the loop ran out, and the next epoch was set: its state starts that epoch
        head += [signature(x) for x in iterator]
        first.set_epoch(epoch + 1)
    state = roundtrip(first.state_dict(), how, tmp_path)
    second = make()
    second.load_state_dict(state)
    return head, [signature(x) for x in second], state


BATCHES = {"plain": 5, "gz": 4, "raw": 3, "bad": 2}


@pytest.mark.parametrize("stop", ["all", "first", "cycle"])
@pytest.mark.parametrize("batch", [None, BATCHES])
def test_a_heterogeneous_mixture_resumes_at_any_item_through_json_and_torch_save(files, tmp_path, stop, batch):
    """States after random k (also 0, the last item and past it), through JSON and torch.save(weights_only=True),
    in two epochs: the head and the rest are the uninterrupted epoch, locations included."""
    def make():
        return mixture(files, stop=stop, seed=7, batch=batch)

    full = {epoch: run(make(), epoch) for epoch in (0, 1)}
    rng = random.Random(f"{stop}-{batch}")
    for epoch in (0, 1):
        n = len(full[epoch])
        for k in sorted({0, 1, n - 1, n, *rng.sample(range(n), 3)}):
            how = rng.choice(["json", "torch"])
            head, rest, _ = resumed_rest(make, epoch, k, how, tmp_path)
            assert head + rest == full[epoch], (epoch, k, how)


def test_a_state_taken_right_after_set_epoch_starts_the_next_epoch_whole(files, tmp_path):
    def make():
        return mixture(files, seed=2, batch=BATCHES)

    head, rest, state = resumed_rest(make, 0, 0, "json", tmp_path, after_set_epoch=True)
    assert state["epoch"] == 1 and state["draws"] == 0
    assert rest == run(make(), 1)


def nested(files, stop="all", **ranks):
    """A mixture of two mixtures: ("plain", "bad") and ("gz", "raw")."""
    inner = {"left": MixedDataset(components(files, ("plain", "bad"), **ranks), [1, 2], seed=1),
             "right": MixedDataset(components(files, ("gz", "raw"), **ranks), [3, 1], stop=stop, seed=2)}
    return MixedDataset(inner, {"left": 1, "right": 1}, seed=3)


def test_a_mixture_of_mixtures_yields_each_record_once_and_resumes(files, tmp_path):
    full = {epoch: run(nested(files), epoch) for epoch in (0, 1)}
    for epoch in (0, 1):
        assert sorted(i for s in full[epoch] for i in s[0]) == good_ids()
    assert full[0] != full[1]
    rng = random.Random(4)
    for epoch in (0, 1):
        for k in sorted({0, len(full[epoch]), *rng.sample(range(len(full[epoch])), 4)}):
            head, rest, _ = resumed_rest(lambda: nested(files), epoch, k, "json", tmp_path)
            assert head + rest == full[epoch], (epoch, k)


# ----- elastic resumption ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("world", "new_world", "stop"), [(2, 1, "all"), (2, 3, "all"), (3, 2, "first")])
def test_a_heterogeneous_mixture_merged_resumes_under_another_world_size(files, tmp_path, world, new_world, stop):
    """GZIP through seek points, unindexed files (counted for several ranks) and an indexed shuffled dataset with
    locations, stopped after k items on every rank, merged (through JSON) and read by another world size: every
    record not yet read once (less, per dataset, a remainder under the new world size), equal counts per new rank,
    the locations of the rest those of their records."""
    names = ("plain", "gz", "raw")
    seen, parts = [], []
    k = 5
    for rank in range(world):
        mixed = mixture(files, stop=stop, names=names, seed=9, rank=rank, world_size=world, epoch=1)
        iterator = iter(mixed)
        seen += [i for _ in range(k) for i in ids(next(iterator))]
        parts.append(mixed.state_dict())
    merged = json.loads(json.dumps(tfr_torch.elastic_state(json.loads(json.dumps(parts)))))
    rest, counts = [], []
    for rank in range(new_world):
        mixed = mixture(files, stop=stop, names=names, seed=9, rank=rank, world_size=new_world)
        mixed.load_state_dict(merged)
        items = list(mixed)
        for item in items:
            check_item(item)
        got = flat(items)
        rest += got
        counts.append(len(got))
    assert len(set(counts)) == 1, counts
    both = Counter(seen + rest)
    assert all(n == 1 for n in both.values()), [i for i, n in both.items() if n > 1]
    missing = set(good_ids(names)) - set(both)
    if stop == "all":
        by_dataset = Counter(i // 1000 for i in missing)
        assert all(n < new_world for n in by_dataset.values()), sorted(missing)
        if new_world == 1:
            assert not missing


# ----- caches over heterogeneous mixtures, and mixtures of caches over them --------------------------------------


@pytest.mark.parametrize("where", ["memory", "folder"])
def test_a_cache_of_a_heterogeneous_mixture_replays_and_resumes_its_epochs(files, tmp_path, where):
    """Epoch 0 reads the mixture (GZIP, unindexed, skipping, with locations) and keeps it; epoch 1 replays it
    shuffled. A state after random k of either epoch (through JSON) resumes the rest; the replayed items still
    carry their locations and the transform's key; len() is the mixture's."""
    names = ("plain", "gz", "bad")  # with known lengths

    def make(root="full"):
        folder = str(tmp_path / root) if where == "folder" else None
        return CachedDataset(mixture(files, names=names, seed=4), folder, shuffle=True, seed=1)

    cached = make()
    assert len(cached) == len(good_ids(names)) + 1
    full = {}
    for epoch in (0, 1):
        cached.set_epoch(epoch)
        items = list(cached)
        for item in items:
            check_item(item)
        full[epoch] = [signature(x) for x in items]
        assert sorted(i for s in full[epoch] for i in s[0]) == good_ids(names)
    assert full[0] != full[1]
    rng = random.Random(where)
    for epoch in (0, 1):
        for k in (0, len(full[epoch]), *rng.sample(range(len(full[epoch])), 2)):
            # epoch 0 is a first epoch (a fresh folder: one holding parts replays them), epoch 1 replays
            root = f"e0-{k}" if epoch == 0 else "full"
            first = cached if where == "memory" and epoch == 1 else make(root)
            first.set_epoch(epoch)
            iterator = iter(first)
            head = [signature(next(iterator)) for _ in range(k)]
            state = json.loads(json.dumps(first.state_dict()))
            second = make(root)
            second.load_state_dict(state)
            assert head + [signature(x) for x in second] == full[epoch], (epoch, k)


@pytest.mark.parametrize("where", ["memory", "folder"])
def test_a_mixture_of_heterogeneous_caches_resumes_in_its_read_and_replayed_epochs(files, tmp_path, where):
    def make(root="full"):
        caches = {name: CachedDataset(dataset, None if where == "memory" else str(tmp_path / root / name),
                                      shuffle=name == "raw", seed=2)
                  for name, dataset in components(files).items()}
        return MixedDataset(caches, WEIGHTS, seed=6)

    mixed = make()
    full = {epoch: run(mixed, epoch) for epoch in (0, 1, 2)}
    for epoch in full:
        assert sorted(i for s in full[epoch] for i in s[0]) == good_ids()
    rng = random.Random(where)
    for epoch in (0, 1, 2):
        k = rng.randrange(1, len(full[epoch]))
        # epoch 0 reads (a fresh cache), the later ones replay (a memory cache keeps its parts in this process)
        root = "e0" if epoch == 0 else "full"
        first = make(root) if epoch == 0 or where == "folder" else mixed
        first.set_epoch(epoch)
        iterator = iter(first)
        head = [signature(next(iterator)) for _ in range(k)]
        state = json.loads(json.dumps(first.state_dict()))
        second = make(root)
        second.load_state_dict(state)
        assert head + [signature(x) for x in second] == full[epoch], (epoch, k)


# ----- DataLoader workers -----------------------------------------------------------------------------------------


def test_stateful_dataloader_resumes_a_heterogeneous_mixture_of_two_ranks(files, tmp_path):
    """Two simulated ranks, each a StatefulDataLoader with 2 workers over the mixture with every kind of component
    (batched ones of different sizes): stopped after k batches, its state through torch.save, a new loader
    yields exactly the rest of the epoch, and the next epoch whole."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    for rank in range(2):
        def make(rank=rank):
            return mixture(files, batch=BATCHES, seed=8, rank=rank, world_size=2)

        full = flat(StatefulDataLoader(make(), batch_size=None, num_workers=2))
        loader = StatefulDataLoader(make(), batch_size=None, num_workers=2)
        iterator = iter(loader)
        k = 3 + rank
        head = flat(next(iterator) for _ in range(k))
        state = roundtrip(loader.state_dict(), "torch", tmp_path)
        del iterator
        dataset = make()
        again = StatefulDataLoader(dataset, batch_size=None, num_workers=2)
        again.load_state_dict(state)
        assert head + flat(again) == full


# ----- torchdata.nodes --------------------------------------------------------------------------------------------


def gzip_with_a_bad_record(folder, name, first, count, bad):
    """A GZIP file of ids first..first+count-1 whose record `bad` (a position) has corrupt data, with its index
    and seek points; the offset of the bad record (in the decompressed stream)."""
    plain = str(folder / f"{name}.plain")
    with tfr_torch.TFRecordWriter(plain) as writer:
        for i in range(first, first + count):
            writer.write_example({"id": i})
    data = bytearray(open(plain, "rb").read())
    record = len(data) // count
    data[bad * record + 14] ^= 0x01
    path = str(folder / f"{name}.tfrecord.gz")
    open(path, "wb").write(gzip.compress(bytes(data)))
    tfr_torch.build_index(path, path + ".idx")
    return path, bad * record


def node_records(batch):
    return [i for record in batch for i in ids(record)]


@pytest.mark.parametrize("world", [1, 2])
def test_weighted_tfrecord_nodes_of_every_kind_resume_through_torch_save(files, tmp_path, world):
    """MultiNodeWeightedSampler over TFRecordNodes that differ in every option (GZIP with a bad record skipped
    and locations, unindexed with a transform, indexed shuffled): each rank's epochs hold every good record of
    its share once, and a Loader state after random k (through torch.save) resumes the rest and the next epoch."""
    from torchdata.nodes import Batcher, Loader, MultiNodeWeightedSampler

    from tfr_torch.nodes import TFRecordNode

    gz, _ = gzip_with_a_bad_record(tmp_path, "gzbad", 5000, 16, 6)
    record = len(gzip.decompress(open(gz, "rb").read())) // 16
    gz_where = {5000 + i: f"{gz}:{i * record}" for i in range(16)}

    def make(rank):
        nodes = {"gz": TFRecordNode(gz, SPEC, index="auto", on_error="skip", location_key="where", shuffle=True,
                                    seed=1, rank=rank, world_size=world),
                 "raw": TFRecordNode(files["raw"], SPEC, transform=doubled, rank=rank, world_size=world),
                 "plain": TFRecordNode(files["plain"], SPEC, index="auto", shuffle=True, seed=2, rank=rank,
                                       world_size=world)}
        mixed = MultiNodeWeightedSampler(nodes, {"gz": 2.0, "raw": 1.0, "plain": 1.0},
                                         stop_criteria="ALL_DATASETS_EXHAUSTED", seed=3)
        return Loader(Batcher(mixed, 4, drop_last=False))

    seen, seen_next = Counter(), Counter()
    for rank in range(world):
        loader = make(rank)
        full = [[node_records(b) for b in loader] for _ in range(2)]
        for batch in iter(make(rank)):
            for record in batch:  # each node's options: locations in "gz" only, the transform in "raw" only
                assert ("where" in record) == (int(record["id"]) >= 5000)
                assert ("twice" in record) == (2000 <= int(record["id"]) < 3000)
                assert "where" not in record or record["where"] == gz_where[int(record["id"])]
        seen.update(i for b in full[0] for i in b)
        seen_next.update(i for b in full[1] for i in b)
        rng = random.Random(rank)
        for epoch in (0, 1):
            k = rng.randrange(1, len(full[epoch]))
            loader = make(rank)
            for _ in range(epoch):
                list(loader)
            iterator = iter(loader)
            head = [node_records(next(iterator)) for _ in range(k)]
            # torch.save: MultiNodeWeightedSampler's own state holds a tensor (its generator's), JSON cannot
            state = roundtrip(loader.state_dict(), "torch", tmp_path)
            resumed = make(rank)
            resumed.load_state_dict(state)
            assert head + [node_records(b) for b in resumed] == full[epoch], (rank, epoch, k)
            if epoch == 0:
                assert [node_records(b) for b in resumed] == full[1]
    good = sorted([*range(5000, 5016)] + good_ids(("plain", "raw")))
    good.remove(5006)
    if world == 1:
        assert sorted(seen.elements()) == sorted(seen_next.elements()) == good
    else:  # the skipping node repeats a reader's first records (several ranks); the others each record once
        assert set(seen) == set(good) and all(n == 1 for i, n in seen.items() if i < 5000)


def test_errors_inside_components_name_the_file_and_the_offset(files, tmp_path):
    """A corrupt record not skipped, in a GZIP component read through seek points, raises through a mixture, a
    cache of it (memory and folder) and a TFRecordNode, naming the file and the record's offset. (Through a
    DataLoader worker: tests/test_worker_errors.py; a worker that raised costs torch 5 s to join.)"""
    from torchdata.nodes import Loader

    from tfr_torch.nodes import TFRecordNode

    gz, offset = gzip_with_a_bad_record(tmp_path, "gzraise", 5000, 8, 3)
    where = f"{gz}:{offset}"

    def mixed():
        return MixedDataset({"gz": TFRecordDataset(gz, SPEC, index="auto", shuffle=True, seed=1),
                             "plain": TFRecordDataset(files["plain"], SPEC, index="auto")}, seed=5)

    for dataset in (mixed(), CachedDataset(mixed()), CachedDataset(mixed(), tmp_path / "cache")):
        with pytest.raises(tfr_torch.TFRecordError, match="corrupt record data") as info:
            for _ in dataset:
                pass
        assert where in str(info.value)
        assert (info.value.path, info.value.offset) == (gz, offset)
    with pytest.raises(tfr_torch.TFRecordError, match="corrupt record data") as info:
        list(Loader(TFRecordNode(gz, SPEC, index="auto", shuffle=True)))
    assert where in str(info.value)
    assert not list((tmp_path / "cache").glob("part-*"))  # an epoch that raised keeps nothing


@pytest.mark.parametrize(("world", "new_world"), [(2, 1), (1, 2)])
def test_a_mixture_of_mixtures_merged_resumes_under_another_world_size(files, world, new_world):
    """elastic_state merges a mixture whose datasets are mixtures (each inner mixture's parts merged as a
    mixture's): the rest is read once by another world size."""
    def make(rank, size):
        made = nested(files, rank=rank, world_size=size)
        made.set_epoch(1)
        return made

    seen, parts = [], []
    for rank in range(world):
        mixed = make(rank, world)
        iterator = iter(mixed)
        seen += [i for _ in range(7) for i in ids(next(iterator))]
        parts.append(json.loads(json.dumps(mixed.state_dict())))
    merged = tfr_torch.elastic_state(parts)
    rest, counts = [], []
    for rank in range(new_world):
        mixed = make(rank, new_world)
        mixed.load_state_dict(merged)
        got = flat(mixed)
        rest += got
        counts.append(len(got))
    assert len(set(counts)) == 1, counts
    both = Counter(seen + rest)
    assert all(n == 1 for i, n in both.items() if i < 3000), [i for i, n in both.items() if n > 1 and i < 3000]
    missing = set(good_ids()) - set(both)
    assert all(n < new_world for n in Counter(i // 1000 for i in missing).values()), sorted(missing)


# ----- states refused by name -------------------------------------------------------------------------------------


# Fixed: elastic_state called a CachedDataset state (alone or in a mixture) one of an older tfr_torch
@pytest.mark.parametrize("kind", ["cache of a mixture", "mixture of caches"])
def test_elastic_state_refuses_cache_states_by_name(files, kind):
    if kind == "cache of a mixture":
        dataset = CachedDataset(mixture(files, names=("plain", "gz")))
    else:
        dataset = MixedDataset({n: CachedDataset(d) for n, d in components(files, ("plain", "gz")).items()})
    iterator = iter(dataset)
    next(iterator)
    with pytest.raises(ValueError, match="CachedDataset") as info:
        tfr_torch.elastic_state([dataset.state_dict()])
    assert "older tfr_torch" not in str(info.value)


# Fixed: a MixedDataset (and a CachedDataset in its first epoch) took a reader's state whose datasets' parts did
# not fit, and refused it only where the pass began (in a DataLoader worker), after the datasets before the refused
# part had loaded theirs: the next pass over that epoch silently lacked those datasets' first records.
@pytest.mark.parametrize("kind", ["mixture", "cache of a mixture", "mixture of mixtures"])
def test_a_state_whose_parts_were_edited_is_refused_at_load_and_changes_nothing(files, kind):
    def make():
        if kind == "mixture":
            return mixture(files, names=("plain", "gz"))
        if kind == "cache of a mixture":
            return CachedDataset(mixture(files, names=("plain", "gz")))
        return MixedDataset({"inner": mixture(files, names=("plain", "gz")),
                             "raw": components(files, ("raw",))["raw"]}, seed=1)

    dataset = make()
    iterator = iter(dataset)
    for _ in range(10):
        next(iterator)
    state = json.loads(json.dumps(dataset.state_dict()))
    source = state["source"] if kind == "cache of a mixture" else state
    inner = source["datasets"]["inner"] if kind == "mixture of mixtures" else source
    inner["datasets"]["gz"]["seed"] = 77  # "plain" comes first: it loaded its part before "gz" was refused
    again = make()
    with pytest.raises(ValueError, match="MixedDataset dataset 'gz': cannot resume: the saved state has seed=77, "
                                         "this dataset has 5"):
        again.load_state_dict(state)
    names = ("plain", "gz", "raw") if kind == "mixture of mixtures" else ("plain", "gz")
    assert sorted(flat(again)) == good_ids(names)  # a whole epoch: nothing was half loaded
    inner["datasets"]["gz"]["seed"] = 5
    inner["weights"] = [1.0, 1.0]
    with pytest.raises(ValueError, match=r"this state is of another mixture: weights \[1.0, 1.0\]"):
        make().load_state_dict(state)


def test_foreign_states_are_refused_by_name(files):
    cached = CachedDataset(mixture(files, names=("plain", "gz")))
    iterator = iter(cached)
    next(iterator)
    state = cached.state_dict()
    with pytest.raises(ValueError, match="not a CachedDataset state"):
        CachedDataset(mixture(files, names=("plain", "gz"))).load_state_dict(state["source"])
    with pytest.raises(ValueError, match="not a MixedDataset state"):
        mixture(files, names=("plain", "gz")).load_state_dict(state)
    with pytest.raises(ValueError, match=r"this state is of another mixture: names \['plain', 'gz'\] \(here "
                                         r"\['raw', 'gz'\]\)"):
        mixture(files, names=("raw", "gz")).load_state_dict(state["source"])


# ----- len() ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_len_of_mixtures_and_caches_of_batched_padded_components_is_what_each_rank_yields(files, tmp_path,
                                                                                           workers):
    """Components batched by different sizes, one with drop_last, one padded, one unindexed (counted for several
    ranks), over 3 ranks: len() of the mixture and of a cache of it is each rank's number of batches, in the
    read epoch and the replayed one, with DataLoader workers."""
    def make(rank):
        parts = {"plain": TFRecordDataset(files["plain"], SPEC, index="auto", batch_size=5, drop_last=True,
                                          shuffle=True, rank=rank, world_size=3),
                 "gz": TFRecordDataset(files["gz"], SPEC, index="auto", batch_size=4, pad=True, rank=rank,
                                       world_size=3),
                 "raw": TFRecordDataset(files["raw"], SPEC, batch_size=2, rank=rank, world_size=3)}
        return CachedDataset(MixedDataset(parts, [1, 2, 3], seed=1), tmp_path / "cache", shuffle=True)

    counts = []
    for rank in range(3):
        cached = make(rank)
        for epoch in (0, 1):
            cached.set_epoch(epoch)
            got = list(DataLoader(cached, batch_size=None, num_workers=workers))
            assert len(got) == len(cached) == len(cached.dataset), (rank, epoch)
            assert all(len(ids(batch)) == 5 for batch in got if ids(batch)[0] < 1000)  # drop_last
        counts.append(len(got))
    assert len(set(counts)) == 1


@pytest.mark.parametrize("k", [0, 4, "end"])
def test_stateful_dataloader_resumes_a_mixture_with_a_file_split_by_counting_workers(files, tmp_path, k):
    """One unindexed file read by 2 DataLoader workers (one rank: the workers count it together at the first
    epoch and split it by ranges) beside an indexed GZIP component; persistent workers. A state after k items
    of epoch 1, or taken at epoch 0's end right after set_epoch(1), resumes in a new loader (a new dataset, which
    has not counted) with exactly the rest of epoch 1."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        mixed = MixedDataset({"raw": TFRecordDataset(files["raw"][0], SPEC, shuffle=True, seed=3),
                              "gz": TFRecordDataset(files["gz"], SPEC, index="auto", shuffle=True)}, [1, 1], seed=2)
        return mixed

    dataset = make()
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    epoch0 = flat(loader)
    assert sorted(epoch0) == good_ids(("gz",)) + list(range(2000, 2010, 2))  # raw-0 holds the even ids
    dataset.set_epoch(1)
    if k == "end":
        head = []
        state = loader.state_dict()
    else:
        iterator = iter(loader)
        head = flat(next(iterator) for _ in range(k))
        state = loader.state_dict()
        head_rest = flat(iterator)
    state = roundtrip(state, "torch", tmp_path)
    again = StatefulDataLoader(make(), batch_size=None, num_workers=2, persistent_workers=True)
    again.load_state_dict(state)
    rest = flat(again)
    if k != "end":
        assert head + rest == head + head_rest
    assert sorted(head + rest) == sorted(epoch0)


def test_a_tfrecord_node_over_a_dataset_that_loaded_a_merged_state_reads_the_rest_and_resumes(files, tmp_path):
    """Two ranks of GZIP datasets (global shuffle through seek points) stopped mid-epoch, merged; one node over a
    one-rank dataset that loaded the merged state reads the rest once; its Loader state mid-rest (through JSON)
    resumes a new pipeline with exactly the rest of that, and then the next epoch whole."""
    from torchdata.nodes import Loader

    from tfr_torch.nodes import TFRecordNode

    def dataset(rank, world):
        made = TFRecordDataset(files["gz"], SPEC, index="auto", shuffle=True, seed=5, rank=rank, world_size=world)
        made.set_epoch(2)
        return made

    seen, parts = [], []
    for rank in range(2):
        part = dataset(rank, 2)
        iterator = iter(part)
        seen += [int(next(iterator)["id"]) for _ in range(3 + rank)]
        parts.append(part.state_dict())
    merged = json.loads(json.dumps(tfr_torch.elastic_state(parts)))

    def pipeline():
        alone = dataset(0, 1)
        alone.load_state_dict(merged)
        return Loader(TFRecordNode(alone))

    rest = [int(x["id"]) for x in pipeline()]
    assert sorted(seen + rest) == good_ids(("gz",))
    loader = pipeline()
    iterator = iter(loader)
    head = [int(next(iterator)["id"]) for _ in range(4)]
    state = json.loads(json.dumps(loader.state_dict()))
    again = Loader(TFRecordNode(dataset(0, 1)))
    again.load_state_dict(state)
    assert head + [int(x["id"]) for x in again] == rest
    whole = dataset(0, 1)
    whole.set_epoch(3)
    assert [int(x["id"]) for x in again] == [int(x["id"]) for x in whole]


# Fixed: a cache folder's manifest left out `location_key`: a folder kept without locations was replayed for a
# dataset (or a mixture's dataset) that now asks for them, its items without their "where" key (and the other way
# round, stale keys the dataset no longer asks for).
@pytest.mark.parametrize("kind", ["dataset", "mixture"])
def test_a_cache_folder_is_rebuilt_when_location_key_changes(files, tmp_path, kind):
    def make(location_key):
        plain = TFRecordDataset(files["plain"], SPEC, index="auto", location_key=location_key)
        source = plain if kind == "dataset" else MixedDataset({"plain": plain, **components(files, ("gz",))})
        return CachedDataset(source, tmp_path / "cache")

    assert all("where" not in item for item in make(None))
    with pytest.warns(UserWarning, match="location_key" if kind == "dataset" else "changed: datasets"):
        cached = make("where")
    items = [item for item in cached if ids(item)[0] < 1000]
    assert len(items) == SIZES["plain"] and all(item["where"].startswith(files["plain"][0][:-10]) for item in items)


@pytest.mark.parametrize(("world", "options"), [(1, {"batch_size": 4}), (3, {"batch_size": 3, "drop_last": True}),
                                                (3, {"batch_size": 4, "pad": True}), (2, {})])
def test_len_of_a_tfrecord_node_is_what_each_rank_yields_every_epoch(files, world, options):
    """TFRecordNode over GZIP files (global shuffle through seek points) and over unindexed ones (counted for
    several ranks): len() is what each rank yields in each of three epochs, equal on every rank."""
    from torchdata.nodes import Loader

    from tfr_torch.nodes import TFRecordNode

    for name, extra in (("gz", {"index": "auto", "shuffle": True}), ("raw", {})):
        if name == "raw" and world == 1:
            continue  # one rank does not count unindexed files: no len()
        counts = set()
        for rank in range(world):
            node = TFRecordNode(files[name], SPEC, rank=rank, world_size=world, **options, **extra)
            loader = Loader(node)
            for _ in range(3):
                counts.add(len(list(loader)))
            counts.add(len(node))
        assert len(counts) == 1, (name, counts)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_merged_mixture_with_a_skipping_component_gives_new_ranks_equal_counts(files, workers):
    """With the on_error="skip" component too (a record it skipped counts as unread: documented), the new ranks,
    read through DataLoader workers, yield as many items each, and the other components each record once."""
    seen, parts = [], []
    for rank in range(2):
        mixed = mixture(files, seed=9, rank=rank, world_size=2, epoch=1)
        iterator = iter(mixed)
        seen += [i for _ in range(20) for i in ids(next(iterator))]
        parts.append(mixed.state_dict())
    merged = tfr_torch.elastic_state(parts)
    rest, counts = [], []
    for rank in range(3):
        mixed = mixture(files, seed=9, rank=rank, world_size=3)
        mixed.load_state_dict(merged)
        got = flat(DataLoader(mixed, batch_size=None, num_workers=workers))
        rest += got
        counts.append(len(got))
    assert len(set(counts)) == 1, counts
    both = Counter(seen + rest)
    assert all(n == 1 for i, n in both.items() if i < 3000)
    assert BAD_ID not in both


# Fixed: a replayed epoch's CachedDataset state named nothing of its source, so a state of a cache of another
# mixture (other weights, datasets or options) was taken, and its count of items skipped in this source's order:
# neither the rest of the saved epoch nor refused.
@pytest.mark.parametrize("how", ["json", "torch"])
def test_a_replayed_epochs_state_of_a_cache_of_another_source_is_refused_by_name(files, tmp_path, how):
    def make(weights, seed=1, names=("plain", "gz")):
        return CachedDataset(MixedDataset(components(files, names), weights, seed=seed))

    cached = make([1, 1])
    list(cached)
    cached.set_epoch(1)
    iterator = iter(cached)
    head = [signature(next(iterator)) for _ in range(5)]
    state = roundtrip(cached.state_dict(), how, tmp_path)
    assert state["phase"] == "replay"
    with pytest.raises(ValueError, match=r"this state is of a cache of another dataset \(changed: weights\)"):
        make([5, 1]).load_state_dict(state)
    with pytest.raises(ValueError, match=r"this state is of a cache of another dataset \(changed: seed\)"):
        make([1, 1], seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match=r"this state is of a cache of another dataset \(changed: datasets, names"):
        make([1, 1], names=("plain", "raw")).load_state_dict(state)
    again = make([1, 1])  # the same source in a new process: resumed (its part read again, as in epoch 0)
    again.load_state_dict(state)
    assert head + [signature(x) for x in again] == run(make([1, 1]), 0)


def test_stateful_dataloader_resumes_a_replayed_cache_of_a_heterogeneous_mixture(files, tmp_path):
    """A folder cache of the mixture of every kind of component, read by 2 DataLoader workers (epoch 0 keeps,
    epoch 1 replays shuffled): the replayed items keep their locations and the transform's key through the
    workers' transport, and a state mid-replay (through torch.save) resumes a new loader with exactly the rest."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        return CachedDataset(mixture(files, seed=3), tmp_path / "cache", shuffle=True, seed=4)

    dataset = make()
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    epochs = []
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        items = list(loader)
        for item in items:
            check_item(item)
        epochs.append([signature(x) for x in items])
        assert sorted(i for s in epochs[-1] for i in s[0]) == good_ids()
    dataset.set_epoch(1)
    iterator = iter(loader)
    head = [signature(next(iterator)) for _ in range(17)]
    state = roundtrip(loader.state_dict(), "torch", tmp_path)
    again_dataset = make()
    again = StatefulDataLoader(again_dataset, batch_size=None, num_workers=2)
    again.load_state_dict(state)
    assert head + [signature(x) for x in again] == epochs[1]


@pytest.mark.parametrize("stop", ["first", "cycle"])
def test_every_rank_yields_as_many_items_with_heterogeneous_components_whatever_the_stop(files, stop):
    """The draws are the same on every rank and each component gives the ranks equal shares (GZIP through seek
    points, unindexed counted, a padded batched one, the skipping one repeating its first records): with 2
    DataLoader workers each rank yields as many items with stop="first" and "cycle" too."""
    counts = []
    for rank in range(2):
        parts = components(files, rank=rank, world_size=2)
        parts["gz"] = TFRecordDataset(files["gz"], SPEC, index="auto", batch_size=4, pad=True, rank=rank,
                                      world_size=2)
        mixed = MixedDataset(parts, WEIGHTS, stop=stop, seed=11)
        counts.append(len(list(DataLoader(mixed, batch_size=None, num_workers=2))))
    assert counts[0] == counts[1] > 0


def test_three_levels_a_cache_of_a_mixture_of_a_cache_of_a_mixture_resumes_every_epoch(files, tmp_path):
    """CachedDataset(folder, shuffled) over a mixture of a CachedDataset (memory) of a mixture and a dataset:
    every record once per epoch, and a state after random k (through JSON) resumes the rest, in the read epoch
    and the replayed ones."""
    def make(root):
        inner = CachedDataset(mixture(files, names=("plain", "gz"), seed=1), shuffle=True, seed=2)
        outer = MixedDataset({"inner": inner, "bad": components(files, ("bad",))["bad"]}, [2, 1], seed=3)
        return CachedDataset(outer, tmp_path / root, shuffle=True, seed=4)

    whole = make("full")
    full = [run(whole, epoch) for epoch in range(3)]
    for epoch_items in full:
        assert sorted(i for s in epoch_items for i in s[0]) == good_ids(("plain", "gz", "bad"))
    rng = random.Random(3)
    for epoch in range(3):
        k = rng.randrange(1, len(full[epoch]))
        root = "e0" if epoch == 0 else "full"
        first = make(root)
        first.set_epoch(epoch)
        iterator = iter(first)
        head = [signature(next(iterator)) for _ in range(k)]
        state = json.loads(json.dumps(first.state_dict()))
        second = make(root)
        second.load_state_dict(state)
        assert head + [signature(x) for x in second] == full[epoch], (epoch, k)
