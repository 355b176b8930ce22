"""TFRecordDataset and IndexedTFRecordDataset through real DataLoaders.

The contract under test: every record arrives exactly once per epoch, whatever the number of DataLoader workers,
the (simulated) ranks, the indexes present, the compression and the shuffling; with several ranks each rank yields
the same number of records and batches (dropping the remainder, or padding with `pad=True`); shuffling is
deterministic from (seed, epoch) and `set_epoch` reaches persistent workers; `state_dict` resumes an epoch exactly;
errors say where and what.

The corpus: six files holding 0, 1, 7, 13, 20 and 6 records (47 in all, odd, so 2 and 3 ranks both leave a
remainder); record g (numbered file after file) is an Example whose int64 "id" is g, so "file order" is
`range(47)`. Raw-bytes mode maps records back to ids by their bytes.
"""

from __future__ import annotations

import math
import os
import pickle
import re
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset, random_split

import tfr_torch
from tfr_torch import CorruptRecordError, IndexedTFRecordDataset, IndexMismatchError, TFRecordDataset
from tfr_torch.format.record_file import RecordFile

pytestmark = [
    # Three workers on a two-core machine: torch warns that it may be slow; it is fine for 47 records.
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    # Several ranks without indexes count the records once at construction, with a warning saying so.
    pytest.mark.filterwarnings("ignore:counting the records:UserWarning"),
]

COUNTS = [0, 1, 7, 13, 20, 6]
N = sum(COUNTS)
FILE_OF = [f for f, count in enumerate(COUNTS) for _ in range(count)]  # file number of each record id
SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
RECORDS = [tfr_torch.encode_example({"id": g, "payload": b"x" * (g % 5)}) for g in range(N)]
ID_OF = {record: g for g, record in enumerate(RECORDS)}
assert len(ID_OF) == N

LAYOUTS = ["plain", "noindex", "partial", "gzip", "gzip-noindex"]
PARTIAL_INDEXED = {0, 2, 4}  # in the "partial" layout only these files have an index (the empty one among them)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, write_corpus):
    """layout -> the six paths, in file order."""
    root = tmp_path_factory.mktemp("corpus")
    every = set(range(len(COUNTS)))

    def files(folder, compression, indexed):
        suffix = ".gz" if compression else ""
        return write_corpus(folder, COUNTS, RECORDS.__getitem__, name="part-{}.tfrecord" + suffix,
                            compression=compression, index=indexed).paths

    return {
        "plain": files(root / "plain", None, every),
        "noindex": files(root / "noindex", None, set()),
        "partial": files(root / "partial", None, PARTIAL_INDEXED),
        "gzip": files(root / "gzip", "gzip", every),
        "gzip-noindex": files(root / "gzip-noindex", "gzip", set()),
    }


def ids(item):
    """The record ids in one yielded item: raw bytes, a list of raw records, or a decoded (batch) dict."""
    if isinstance(item, bytes):
        return [ID_OF[item]]
    if isinstance(item, list):
        return [ID_OF[record] for record in item]
    assert isinstance(item, dict) and isinstance(item["id"], torch.Tensor)
    return item["id"].reshape(-1).tolist()


def load(ds, num_workers, **loader_args):
    """Every item one DataLoader epoch yields (the dataset batches; the DataLoader does not). A comprehension,
    not list(): list() asks the loader for a length hint, which calls len(ds) in the main process."""
    return [item for item in DataLoader(ds, batch_size=None, num_workers=num_workers, **loader_args)]


def flat_ids(items):
    return [g for item in items for g in ids(item)]


def per_rank_ids(paths, world_size, num_workers, **kwargs):
    kwargs.setdefault("features", SPEC)
    kwargs.setdefault("index", "auto")
    return [flat_ids(load(TFRecordDataset(paths, rank=rank, world_size=world_size, **kwargs), num_workers))
            for rank in range(world_size)]


def check_exactly_once(per_rank, world_size, pad):
    """Equal counts per rank; one rank: every id once; drop: no id twice, N - N % ws in all; pad: every id,
    ceil(N / ws) * ws in all (so duplicates only fill)."""
    sizes = [len(r) for r in per_rank]
    assert len(set(sizes)) == 1, f"ranks yield different numbers of records: {sizes}"
    seen = Counter(g for r in per_rank for g in r)
    assert set(seen) <= set(range(N))
    if world_size == 1:
        assert seen == Counter(range(N))
    elif pad:
        assert set(seen) == set(range(N)), f"missing ids: {sorted(set(range(N)) - set(seen))}"
        assert sum(sizes) == math.ceil(N / world_size) * world_size
    else:
        assert max(seen.values()) == 1, f"duplicated ids: {[g for g, c in seen.items() if c > 1]}"
        assert sum(sizes) == N - N % world_size


# --------------------------------------------------------------------------------------------------------------
# The corpus itself


def test_indexes_of_compressed_files_hold_decompressed_offsets(corpus):
    for plain, gz in zip(corpus["plain"], corpus["gzip"]):
        with open(plain + ".idx", "rb") as a, open(gz + ".idx", "rb") as b:
            assert a.read() == b.read()
    assert [os.path.exists(p + ".idx") for p in corpus["partial"]] == [f in PARTIAL_INDEXED for f in range(6)]


# --------------------------------------------------------------------------------------------------------------
# Exactly once: layouts x shuffle x workers x ranks


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_record_exactly_once(corpus, layout, shuffle):
    for num_workers in [0, 1, 2, 3]:
        for world_size in [1, 2, 3]:
            per_rank = per_rank_ids(corpus[layout], world_size, num_workers, shuffle=shuffle, seed=5)
            try:
                check_exactly_once(per_rank, world_size, pad=False)
            except AssertionError as err:
                raise AssertionError(f"num_workers={num_workers}, world_size={world_size}: {err}") from None


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("layout", ["plain", "noindex", "gzip"])
def test_pad_fills_the_last_ranks_and_covers_everything(corpus, layout, shuffle):
    for num_workers in [0, 3]:
        for world_size in [2, 3]:
            per_rank = per_rank_ids(corpus[layout], world_size, num_workers, shuffle=shuffle, pad=True)
            try:
                check_exactly_once(per_rank, world_size, pad=True)
            except AssertionError as err:
                raise AssertionError(f"num_workers={num_workers}, world_size={world_size}: {err}") from None


def test_explicit_index_list_with_gaps(corpus):
    paths = corpus["partial"]
    index = [p + ".idx" if f in PARTIAL_INDEXED else None for f, p in enumerate(paths)]
    for world_size in [1, 3]:
        check_exactly_once(per_rank_ids(paths, world_size, 2, index=index), world_size, pad=False)
        # index=None ignores the .idx files beside the shards
        check_exactly_once(per_rank_ids(corpus["plain"], world_size, 2, index=None, shuffle=True), world_size,
                           pad=False)
    with pytest.raises(ValueError, match="2 index files for 6 TFRecord files"):
        TFRecordDataset(paths, index=index[:2])


@pytest.mark.parametrize("layout", ["plain", "noindex"])
def test_raw_records_are_the_bytes_written(corpus, layout):
    ds = TFRecordDataset(corpus[layout], index="auto")
    items = list(ds)
    assert all(type(item) is bytes for item in items)
    assert items == RECORDS
    assert Counter(flat_ids(load(ds, 2))) == Counter(range(N))


def test_paths_as_one_file_a_list_or_a_glob(corpus):
    paths = corpus["plain"]
    assert flat_ids(TFRecordDataset(paths[4], SPEC)) == list(range(21, 41))
    folder = os.path.dirname(paths[0])
    from_glob = TFRecordDataset(os.path.join(folder, "part-*.tfrecord"), SPEC, index="auto")
    assert from_glob.paths == paths
    assert flat_ids(from_glob) == list(range(N))
    assert TFRecordDataset(os.path.join(folder, "part-*"), index="auto").paths == paths  # not the .idx files
    from pathlib import Path

    assert flat_ids(TFRecordDataset([Path(p) for p in paths], SPEC)) == list(range(N))


def test_transform_applies_to_what_is_yielded(corpus):
    paths = corpus["plain"]
    assert list(TFRecordDataset(paths, SPEC, transform=lambda d: int(d["id"]) * 10)) == [10 * g for g in range(N)]
    sums = load(TFRecordDataset(paths, SPEC, batch_size=10, transform=lambda b: int(b["id"].sum())), 0)
    assert sums == [sum(range(a, min(a + 10, N))) for a in range(0, N, 10)]
    assert list(TFRecordDataset(paths, transform=len)) == [len(r) for r in RECORDS]


# --------------------------------------------------------------------------------------------------------------
# Batches and len()


@pytest.mark.parametrize("drop_last", [False, True], ids=["keep-last", "drop-last"])
@pytest.mark.parametrize("layout", ["plain", "noindex", "gzip"])
def test_batches_are_equal_per_rank_and_match_len(corpus, layout, drop_last):
    batch = 5
    for world_size in [1, 2, 3]:
        quota = N if world_size == 1 else N // world_size
        expected = quota // batch if drop_last else math.ceil(quota / batch)
        # One rank and no counts (no index, no sidecar): workers read whole files and batch them on their own,
        # as any IterableDataset does, and len() is unknown. Counts come from indexes, or, with several ranks,
        # from counting at construction.
        counts_known = layout != "noindex" or world_size > 1
        for num_workers in [0, 2, 3]:
            per_rank = []
            for rank in range(world_size):
                ds = TFRecordDataset(corpus[layout], SPEC, index="auto", batch_size=batch, drop_last=drop_last,
                                     rank=rank, world_size=world_size)
                where = f"world_size={world_size}, rank={rank}, num_workers={num_workers}"
                batches = load(ds, num_workers)  # before len(ds): it must not depend on len() having been called
                if not counts_known:
                    with pytest.raises(TypeError, match="length of this TFRecordDataset is unknown"):
                        len(ds)
                    if num_workers <= 1:
                        assert len(batches) == expected, where
                    per_rank.append(flat_ids(batches))
                    continue
                assert len(batches) == expected, where
                assert len(ds) == expected, where
                for b in batches:
                    assert set(b) == {"id"} and b["id"].dtype == torch.int64 and b["id"].dim() == 1
                    assert 1 <= len(b["id"]) <= batch and (len(b["id"]) == batch or not drop_last), where
                per_rank.append(flat_ids(batches))
            if not drop_last:
                check_exactly_once(per_rank, world_size, pad=False)
            elif not counts_known:  # each worker drops its own partial batch: no duplicates, nothing invented
                seen = Counter(g for r in per_rank for g in r)
                assert max(seen.values()) == 1 and set(seen) <= set(range(N))
            else:
                seen = Counter(g for r in per_rank for g in r)
                assert max(seen.values()) == 1 and sum(seen.values()) == expected * batch * world_size


def test_len_counts_records_without_batch_size(corpus):
    for layout in ["plain", "noindex", "gzip-noindex"]:
        paths = corpus[layout]
        if layout == "plain":
            assert len(TFRecordDataset(paths, index="auto")) == N
        else:  # one rank, no index: the count is unknown, and len() does not read every file to find it
            with pytest.raises(TypeError, match="needs record counts"):
                len(TFRecordDataset(paths, index="auto"))
        for world_size in [2, 3]:
            assert len(TFRecordDataset(paths, index="auto", rank=0, world_size=world_size)) == N // world_size
            assert len(TFRecordDataset(paths, index="auto", rank=world_size - 1, world_size=world_size,
                                       pad=True)) == math.ceil(N / world_size)
    assert len(TFRecordDataset(corpus["plain"], index="auto", batch_size=10)) == 5
    assert len(TFRecordDataset(corpus["plain"], index="auto", batch_size=10, drop_last=True)) == 4


def test_dataloader_without_batching_gives_dicts_of_tensors(corpus):
    ds = TFRecordDataset(corpus["plain"], SPEC, index="auto", batch_size=8, shuffle=True)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2, pin_memory=False))
    assert [len(b["id"]) for b in batches] == [8] * 5 + [7]
    assert all(isinstance(b, dict) and isinstance(b["id"], torch.Tensor) for b in batches)
    assert Counter(flat_ids(batches)) == Counter(range(N))
    records = load(TFRecordDataset(corpus["plain"], SPEC, index="auto"), 2)
    assert all(isinstance(r["id"], torch.Tensor) and r["id"].dim() == 0 for r in records)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs CUDA")
def test_pin_memory(corpus):
    ds = TFRecordDataset(corpus["plain"], SPEC, index="auto", batch_size=8)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2, pin_memory=True))
    assert all(b["id"].is_pinned() for b in batches)
    assert Counter(flat_ids(batches)) == Counter(range(N))


# --------------------------------------------------------------------------------------------------------------
# Shuffling


def order(paths, *, seed=0, epoch=0, num_workers=0, **kwargs):
    ds = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=seed, **kwargs)
    ds.set_epoch(epoch)
    return flat_ids(load(ds, num_workers))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shuffle_is_deterministic_in_seed_and_epoch(corpus, layout):
    paths = corpus[layout]
    for num_workers in [0, 2]:
        first = order(paths, num_workers=num_workers)
        assert sorted(first) == list(range(N))
        assert first != list(range(N))
        assert order(paths, num_workers=num_workers) == first
        assert order(paths, epoch=1, num_workers=num_workers) != first
        assert order(paths, seed=1, num_workers=num_workers) != first
        assert sorted(order(paths, epoch=1, num_workers=num_workers)) == list(range(N))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_unshuffled_is_file_order(corpus, layout):
    assert flat_ids(TFRecordDataset(corpus[layout], SPEC, index="auto")) == list(range(N))
    assert flat_ids(TFRecordDataset(corpus[layout], SPEC, index="auto", batch_size=5)) == list(range(N))


def test_indexed_shuffle_is_a_global_permutation(corpus):
    for seed in range(5):
        first = order(corpus["plain"], seed=seed)[:8]
        files = {FILE_OF[g] for g in first}
        assert len(files) >= 3, f"seed {seed}: the first records {first} come from files {files} only"


def test_unindexed_shuffle_with_a_small_buffer(corpus):
    for buffer in [0, 1, 3]:
        got = order(corpus["noindex"], seed=2, shuffle_buffer=buffer, interleave=2)
        assert sorted(got) == list(range(N))
        assert got == order(corpus["noindex"], seed=2, shuffle_buffer=buffer, interleave=2)


@pytest.mark.parametrize("layout", ["plain", "noindex"])
def test_set_epoch_reaches_persistent_workers(corpus, layout):
    ds = TFRecordDataset(corpus[layout], SPEC, index="auto", shuffle=True, seed=7)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    epoch0 = flat_ids(loader)
    ds.set_epoch(1)
    epoch1 = flat_ids(loader)
    ds.set_epoch(0)
    again = flat_ids(loader)
    assert sorted(epoch0) == sorted(epoch1) == list(range(N))
    assert epoch0 != epoch1
    assert again == epoch0
    assert epoch1 == order(corpus[layout], seed=7, epoch=1, num_workers=2)


# --------------------------------------------------------------------------------------------------------------
# Resuming from state_dict (num_workers=0, no StatefulDataLoader)


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("mode", ["raw", "record", "batch", "raw-batch"])
@pytest.mark.parametrize("layout", ["plain", "noindex", "gzip-noindex"])
def test_state_dict_resumes_the_epoch_exactly(corpus, layout, mode, shuffle):
    features = None if mode.startswith("raw") else SPEC
    batch_size = 4 if mode.endswith("batch") else None

    def make():
        return TFRecordDataset(corpus[layout], features, index="auto", shuffle=shuffle, seed=11, batch_size=batch_size,
                               shuffle_buffer=8)

    reference = make()
    reference.set_epoch(2)
    full = [ids(item) for item in reference]
    for k in [0, 1, 5, len(full) - 1, len(full)]:
        ds = make()
        ds.set_epoch(2)
        it = iter(ds)
        head = [ids(next(it)) for _ in range(k)]
        state = ds.state_dict()
        resumed = make()
        resumed.load_state_dict(state)
        rest = [ids(item) for item in resumed]
        assert head + rest == full, f"k={k}"
        assert [ids(item) for item in resumed] == full  # the next pass is the whole epoch again


def test_state_dict_survives_pickling_and_resumes_through_a_dataloader(corpus):
    ds = TFRecordDataset(corpus["plain"], SPEC, index="auto", shuffle=True, seed=1)
    full = flat_ids(ds)
    it = iter(ds)
    head = [ids(next(it)) for _ in range(10)]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    resumed = TFRecordDataset(corpus["plain"], SPEC, index="auto", shuffle=True, seed=1)
    resumed.load_state_dict(state)
    assert sum(head, []) + flat_ids(load(resumed, 0)) == full


def test_load_state_dict_refuses_another_dataset(corpus):
    paths = corpus["plain"]
    state = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=0).state_dict()
    with pytest.raises(ValueError, match="seed=0, this dataset has 1"):
        TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="files=6, this dataset has 5"):
        TFRecordDataset(paths[1:], SPEC, index="auto", shuffle=True, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle=True, this dataset has False"):
        TFRecordDataset(paths, SPEC, index="auto", seed=0).load_state_dict(state)
    # one reader's part of a larger layout resumes only that reader (merge the parts to change the layout; a
    # state of a one-reader layout is the whole epoch's and resumes anywhere: tests/test_elastic.py)
    part = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=0, rank=1, world_size=2).state_dict()
    with pytest.raises(ValueError, match=r"the saved state has world_size=2, this dataset has 3: it is one reader's "
                                         r"part \(rank 1 of 2, worker 0 of 1\) and this dataset is rank 0 of 3; to "
                                         r"resume under another layout, merge"):
        TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=0, rank=0, world_size=3).load_state_dict(part)


# --------------------------------------------------------------------------------------------------------------
# Rank and world size


def test_dataset_built_outside_the_job_refuses_to_read_inside_it(corpus, monkeypatch):
    """Built as rank 0 of 1 and read where the job says rank 1 of 2 (built before the launch, handed to the
    replicas): refused, in __iter__ and when pickled for spawned workers, instead of reading everything."""
    import pickle

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ds = TFRecordDataset(corpus["plain"], SPEC, index="auto")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    message = (r"TFRecordDataset was built as rank 0 of 1 .* but is read as rank 1 of 2 .*: built before the "
               r"distributed job started")
    with pytest.raises(RuntimeError, match=message):
        iter(ds)
    with pytest.raises(RuntimeError, match=message):
        pickle.dumps(ds)
    given = TFRecordDataset(corpus["plain"], SPEC, index="auto", rank=0, world_size=1)  # explicit: never checked
    assert len(flat_ids(given)) == N and len(pickle.loads(pickle.dumps(given))) == N


def test_rank_and_world_size_from_the_environment(corpus, monkeypatch):
    paths = corpus["plain"]
    explicit = flat_ids(TFRecordDataset(paths, SPEC, index="auto", rank=1, world_size=3))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = TFRecordDataset(paths, SPEC, index="auto")
    assert len(ds) == N // 3
    assert flat_ids(ds) == explicit
    assert flat_ids(load(ds, 2)) == flat_ids(load(TFRecordDataset(paths, SPEC, index="auto", rank=1, world_size=3), 2))
    # explicit arguments win over the environment
    assert len(TFRecordDataset(paths, SPEC, index="auto", rank=0, world_size=1)) == N


def test_rank_and_world_size_must_come_together_and_agree(corpus):
    paths = corpus["plain"]
    with pytest.raises(ValueError, match="rank=0, world_size=None"):
        TFRecordDataset(paths, index="auto", rank=0)
    with pytest.raises(ValueError, match="rank=None, world_size=2"):
        TFRecordDataset(paths, index="auto", world_size=2)
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 3\), got 3"):
        TFRecordDataset(paths, index="auto", rank=3, world_size=3)
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\), got -1"):
        TFRecordDataset(paths, index="auto", rank=-1, world_size=2)


# --------------------------------------------------------------------------------------------------------------
# Errors


def test_glob_matching_nothing_names_the_pattern(tmp_path):
    pattern = str(tmp_path / "nothing-*.tfrecord")
    with pytest.raises(FileNotFoundError, match=re.escape(f"no files match '{pattern}'")):
        TFRecordDataset(pattern)
    with pytest.raises(FileNotFoundError, match=r"nothing-\*"):
        IndexedTFRecordDataset(pattern)


def test_bad_feature_spec_fails_at_construction(corpus):
    hint = (r"feature 'id' is given as 'int64' \(a dtype name, not a spec\): write "
            r"tfr_torch.FixedLenFeature\(\[\], torch.int64\) for one value per record")
    with pytest.raises(TypeError, match=hint):
        TFRecordDataset(corpus["plain"], {"id": "int64"})
    with pytest.raises(TypeError, match=hint):
        IndexedTFRecordDataset(corpus["plain"], {"id": "int64"})
    with pytest.raises(TypeError, match="got list"):
        TFRecordDataset(corpus["plain"], [SPEC])


def test_bad_arguments_name_the_value(corpus):
    with pytest.raises(ValueError, match="got 0"):
        TFRecordDataset(corpus["plain"], batch_size=0)
    with pytest.raises(ValueError, match="got -1"):
        TFRecordDataset(corpus["plain"], shuffle_buffer=-1)
    with pytest.raises(ValueError, match="index must be None"):
        TFRecordDataset(corpus["plain"], index=corpus["plain"][0] + ".idx")


@pytest.fixture()
def corrupt_file(tmp_path, write_records):
    """A file of records 0..5 (with its index, written before the damage) whose record 3 has a flipped data
    byte: (path, byte offset of record 3)."""
    path = write_records(str(tmp_path / "corrupt.tfrecord"), RECORDS[:6], index=True)
    offset = int(tfr_torch.read_index(path + ".idx")[3, 0])
    data = bytearray(open(path, "rb").read())
    data[offset + 12 + 2] ^= 0x40
    with open(path, "wb") as f:
        f.write(data)
    return path, offset


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("index,shuffle", [(None, False), ("auto", False), ("auto", True), (None, True)])
def test_corrupt_record_raises_through_the_dataloader(corrupt_file, index, shuffle, num_workers, loader_error):
    path, offset = corrupt_file
    ds = TFRecordDataset(path, SPEC, index=index, shuffle=shuffle)
    error = loader_error(DataLoader(ds, batch_size=None, num_workers=num_workers))
    assert isinstance(error, CorruptRecordError), repr(error)
    assert f"{path}:{offset}: corrupt record data" in str(error)


def test_corrupt_record_raises_from_indexed_dataset(corrupt_file):
    path, offset = corrupt_file
    ds = IndexedTFRecordDataset(path, SPEC)
    assert int(ds[2]["id"]) == 2
    with pytest.raises(CorruptRecordError, match=f"{path}:{offset}: corrupt record data") as info:
        ds[3]
    assert (info.value.path, info.value.offset) == (path, offset)


@pytest.fixture()
def stale_file(tmp_path, write_records):
    """A file whose index was made before two more records were appended: (path, index path)."""
    path = write_records(str(tmp_path / "stale.tfrecord"), RECORDS[:4])
    index = tfr_torch.build_index(path)
    write_records(path, RECORDS[:6])
    return path, index


def test_stale_index_fails_at_construction_naming_both_files(stale_file):
    path, index = stale_file
    for make in [lambda: TFRecordDataset(path, index="auto"), lambda: TFRecordDataset([path], index=[index]),
                 lambda: IndexedTFRecordDataset(path)]:
        with pytest.raises(IndexMismatchError) as info:
            make()
        assert path in str(info.value) and f"(index file: {index})" in str(info.value)
        assert "stale index" in str(info.value)


# --------------------------------------------------------------------------------------------------------------
# IndexedTFRecordDataset


@pytest.fixture(scope="module")
def indexed(corpus):
    return IndexedTFRecordDataset(corpus["plain"], SPEC)


def test_indexed_len_and_every_record(corpus, indexed):
    assert len(indexed) == N
    assert [int(indexed[g]["id"]) for g in range(N)] == list(range(N))
    assert [int(indexed[g - N]["id"]) for g in range(N)] == list(range(N))
    raw = IndexedTFRecordDataset(corpus["plain"])
    assert [raw[g] for g in range(N)] == RECORDS
    assert raw[-1] == RECORDS[-1]
    assert IndexedTFRecordDataset(corpus["plain"], transform=lambda r: ID_OF[r])[30] == 30


def test_per_record_items_equal_single_parses_and_stop_at_a_bad_record(tmp_path):
    """Per-record mode decodes FixedLen specs in chunks (rows of a batch): each item must equal
    parse_single_example of its record; a record that does not decode ends the stream at that record, after the
    ones before it, with the error that record gives alone."""
    path = str(tmp_path / "r.tfrecord")
    good = lambda i: tfr_torch.encode_example({"id": i, "name": b"n%d" % i, "v": [i, i + 1]})  # noqa: E731
    records = [good(i) for i in range(70)]
    records[45] = tfr_torch.encode_example({"id": 45, "name": b"n45", "v": [1, 2, 3]})  # 3 values for shape [2]
    with tfr_torch.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    offset_45 = int(tfr_torch.read_index(tfr_torch.build_index(path), path)[45, 0])
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64), "name": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "v": tfr_torch.FixedLenFeature([2], torch.int16)}
    got = []
    with pytest.raises(tfr_torch.DecodeError) as info:
        for item in TFRecordDataset(path, spec):
            got.append(item)
    assert len(got) == 45
    for i, item in enumerate(got):
        one = tfr_torch.parse_single_example(records[i], spec)
        assert item["name"] == one["name"] == b"n%d" % i
        assert item["id"].dtype == torch.int64 and int(item["id"]) == i
        assert item["v"].dtype == torch.int16 and item["v"].tolist() == one["v"].tolist() == [i, i + 1]
    assert (info.value.path, info.value.offset) == (path, offset_45)
    with pytest.raises(tfr_torch.DecodeError) as alone:
        tfr_torch.parse_single_example(records[45], spec, tfr_torch.RecordLocation(path, offset_45))
    assert str(info.value) == str(alone.value)
    assert "feature 'v' in the example holds 3 int64 values, expected 2" in str(info.value)


def test_indexed_getitems_equals_items_one_by_one(tmp_path):
    """DataLoader fetches a batch of indices with __getitems__: decoded as one batch for FixedLen specs, one by
    one otherwise; either way each item equals ds[i], including defaults, shaped strings and missing features."""
    path = str(tmp_path / "g.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(12):
            values = {"id": i, "pair": [b"a%d" % i, b"b"], "f": [i / 2, -1.0, 3.0]}
            if i % 3:
                values["opt"] = [i * 10]
            writer.write(tfr_torch.encode_example(values))
    tfr_torch.build_index(path)
    dense = {"id": tfr_torch.FixedLenFeature([], torch.int64),
             "pair": tfr_torch.FixedLenFeature([2], tfr_torch.string),
             "f": tfr_torch.FixedLenFeature([3], torch.float64),
             "opt": tfr_torch.FixedLenFeature([1], torch.int32, default_value=[-7])}
    mixed = dict(dense, tokens=tfr_torch.VarLenFeature(torch.int64))
    for spec in (dense, mixed):
        ds = IndexedTFRecordDataset(path, spec)
        order = [11, 0, 5, 5, 3]
        got = ds.__getitems__(order)
        for item, i in zip(got, order):
            one = ds[i]
            assert list(item) == list(one)
            for key in dense:
                if isinstance(one[key], torch.Tensor):
                    assert item[key].dtype == one[key].dtype and torch.equal(item[key], one[key]), key
                else:
                    assert item[key] == one[key], key
        assert [int(x["opt"]) for x in got] == [110, -7, 50, 50, -7]
    assert IndexedTFRecordDataset(path).__getitems__([2, 1]) == [IndexedTFRecordDataset(path)[2],
                                                                  IndexedTFRecordDataset(path)[1]]
    batches = list(DataLoader(IndexedTFRecordDataset(path, dense), batch_size=5, num_workers=2))
    assert [i for b in batches for i in b["id"].tolist()] == list(range(12))
    assert [list(x) for x in batches[0]["pair"]] == [[b"a0", b"a1", b"a2", b"a3", b"a4"], [b"b"] * 5]  # transposed


@pytest.mark.parametrize("index", [N, N + 5, -N - 1, -N - 10])
def test_indexed_out_of_range_states_the_numbers(indexed, index):
    with pytest.raises(IndexError, match=rf"record {index} is out of range: the dataset has {N} records"):
        indexed[index]


def test_indexed_with_shuffling_dataloader_workers(indexed):
    batches = list(DataLoader(indexed, batch_size=5, shuffle=True, num_workers=2))
    got = [g for b in batches for g in b["id"].tolist()]
    assert Counter(got) == Counter(range(N))
    assert got != list(range(N))


def test_indexed_with_distributed_sampler(indexed):
    per_rank = []
    for rank in range(2):
        sampler = DistributedSampler(indexed, num_replicas=2, rank=rank, shuffle=True, seed=3)
        sampler.set_epoch(1)
        per_rank.append([g for b in DataLoader(indexed, batch_size=4, sampler=sampler) for g in b["id"].tolist()])
    assert len(per_rank[0]) == len(per_rank[1]) == math.ceil(N / 2)
    seen = Counter(per_rank[0] + per_rank[1])
    assert set(seen) == set(range(N)) and sum(seen.values()) == N + 1


def test_indexed_with_random_split_and_subset(indexed):
    a, b = random_split(indexed, [30, N - 30], generator=torch.Generator().manual_seed(0))
    got_a = [int(x["id"]) for x in a]
    got_b = [int(x["id"]) for x in b]
    assert len(got_a) == 30 and not set(got_a) & set(got_b)
    assert sorted(got_a + got_b) == list(range(N))
    subset = Subset(indexed, [5, 0, 46, 5])
    assert [int(x["id"]) for x in subset] == [5, 0, 46, 5]


@pytest.mark.parametrize("layout,missing", [("noindex", 6), ("partial", 3)])
def test_indexed_scans_files_without_an_index(corpus, layout, missing):
    with pytest.warns(UserWarning, match=f"{missing} file\\(s\\) have no index"):
        ds = IndexedTFRecordDataset(corpus[layout], SPEC)
    assert len(ds) == N
    assert [int(ds[g]["id"]) for g in range(N)] == list(range(N))


def test_indexed_refuses_compressed_files_without_seek_points(corpus, recwarn):
    with pytest.raises(ValueError, match=r"GZIP-compressed and has no seek points.*write it uncompressed for random "
                                         "access"):
        IndexedTFRecordDataset(corpus["gzip-noindex"])


def test_indexed_reads_compressed_files_through_seek_points(corpus):
    """build_index wrote seek points beside the GZIP files' indexes (with the compiled core): random access works."""
    if not all(os.path.exists(p + ".idx.seek") for p in corpus["gzip"]):
        pytest.skip("seek points are built by the compiled core")
    ds = IndexedTFRecordDataset(corpus["gzip"], SPEC)
    assert [int(ds[g]["id"]) for g in reversed(range(N))] == list(reversed(range(N)))


def test_indexed_pickles_without_its_open_files(corpus, tmp_path):
    ds = IndexedTFRecordDataset(corpus["plain"], SPEC)
    assert int(ds[20]["id"]) == 20  # opens a file handle
    copy = pickle.loads(pickle.dumps(ds))
    assert [int(copy[g]["id"]) for g in range(N)] == list(range(N))
    loader = DataLoader(ds, batch_size=8, num_workers=1, multiprocessing_context="spawn")
    assert [g for b in loader for g in b["id"].tolist()] == list(range(N))
    ds.close()
    copy.close()


def test_dataset_of_only_empty_files(tmp_path):
    path = str(tmp_path / "empty.tfrecord")
    with tfr_torch.TFRecordWriter(path):
        pass
    tfr_torch.build_index(path)
    for index in [None, "auto"]:
        ds = TFRecordDataset([path, path], SPEC, index=index, shuffle=True)
        assert load(ds, 0) == [] and load(ds, 2) == []
        if index == "auto":
            assert len(ds) == 0
    assert len(TFRecordDataset([path, path], SPEC, rank=1, world_size=2)) == 0  # counted at construction
    assert len(IndexedTFRecordDataset(path)) == 0


def _indexed_files(tmp_path, sizes=(7, 5)):
    """Files of Examples with ids counting on from 0 across them (payloads of a few KB), each indexed."""
    paths, i = [], 0
    for f, count in enumerate(sizes):
        path = str(tmp_path / f"part-{f}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for _ in range(count):
                writer.write(tfr_torch.encode_example({"id": i, "data": bytes([i % 251]) * (3000 + 101 * i)}))
                i += 1
        tfr_torch.build_index(path)
        paths.append(path)
    return paths


SPEC_ID_DATA = {"id": tfr_torch.FixedLenFeature([], torch.int64),
                "data": tfr_torch.FixedLenFeature([], tfr_torch.string)}


def test_indexed_getitems_reads_each_file_together_in_the_callers_order(tmp_path, backend):
    """__getitems__ reads the records of each file in one call (RecordFile.read_many) and gives them back in the
    order asked, negative numbers and repeats included, each equal to ds[i] and named by its own location."""
    ds = IndexedTFRecordDataset(_indexed_files(tmp_path), SPEC_ID_DATA)
    order = [11, 0, 5, 7, -1, 3, 3, np.int64(8), -12]
    got = ds.__getitems__(order)
    assert [int(item["id"]) for item in got] == [11, 0, 5, 7, 11, 3, 3, 8, 0]
    for item, i in zip(got, order):
        assert item["data"] == ds[int(i)]["data"]
    second = [9, 7, 11, 7]  # all from the second file
    assert [item["data"] for item in ds.__getitems__(second)] == [ds[i]["data"] for i in second]
    table = ds.offsets[1]
    with ds._handle(1) as handle:
        assert handle.read_many(table[[3, 0], 0], table[[3, 0], 1]) == [handle.read(int(table[3, 0])),
                                                                          handle.read(int(table[0, 0]))]


def test_indexed_getitems_raises_what_the_first_bad_item_raises(tmp_path, backend):
    """A bad index (bool, out of range) or a damaged record: the error that the first bad one in the caller's
    order gives alone, as reading them one by one did."""
    paths = _indexed_files(tmp_path)
    ds = IndexedTFRecordDataset(paths, SPEC_ID_DATA)
    with pytest.raises(TypeError, match="record numbers are ints, got bool"):
        ds.__getitems__([1, True])
    with pytest.raises(IndexError, match="record 12 is out of range: the dataset has 12 records"):
        ds.__getitems__([1, 12])
    offsets = ds.offsets
    data = bytearray(open(paths[1], "rb").read())
    data[int(offsets[1][2, 0]) + 40] ^= 1  # record 9 (third of the second file): its data CRC fails
    data[int(offsets[1][4, 0]) + 99] ^= 1  # record 11 too
    open(paths[1], "wb").write(bytes(data))
    damaged = IndexedTFRecordDataset(paths, SPEC_ID_DATA)
    for order, bad in (([0, 11, 9], 11), ([9, 11, 1], 9), ([2, 9], 9)):
        with pytest.raises(tfr_torch.TFRecordError) as many:
            damaged.__getitems__(order)
        with pytest.raises(tfr_torch.TFRecordError) as alone:
            damaged[bad]
        assert (str(many.value), many.value.offset) == (str(alone.value), alone.value.offset)
    assert [int(x["id"]) for x in damaged.__getitems__([8, 0, 10])] == [8, 0, 10]


def test_read_many_never_allocates_what_a_lying_index_claims(tmp_path, backend):
    """Sizes from a forged index: records that would end past the file are not allocated; `read` reports them."""
    import tracemalloc

    path = _indexed_files(tmp_path, (4,))[0]
    handle = RecordFile(path)
    table = tfr_torch.read_index(path + ".idx")
    sizes = table[:, 1].copy()
    sizes[1] = 1 << 40
    tracemalloc.start()
    try:
        with pytest.raises(tfr_torch.TFRecordError, match="index says 1099511627776"):
            handle.read_many(table[:, 0], sizes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
