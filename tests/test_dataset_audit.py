"""Audit of the datasets' exactly-once contract: every record read once per epoch across DataLoader workers and
distributed ranks.

Audited: `TFRecordDataset` (files with and without indexes, GZIP, empty files, shuffling through the index or a
shuffle buffer, `batch_size` / `drop_last` / `pad`, `set_epoch`, `len()`, `state_dict` / `load_state_dict` with the
same layout, `on_error`, files that changed after the dataset was built, files named twice) and
`IndexedTFRecordDataset` with `ElasticDistributedSampler`, ranks given explicitly or through RANK / WORLD_SIZE.
Resuming under another layout (data/elastic.py), MixedDataset and CachedDataset are audited elsewhere.

Records are Examples whose int64 "id" names them. Ranks are simulated with rank=/world_size= (one dataset per rank).
DataLoader workers are simulated in this process as a fork makes them (a shallow copy of the rank's dataset per
worker, its shared-memory tensors shared) while `get_worker_info` answers (worker, num_workers); a few tests run real
DataLoader / StatefulDataLoader workers.
"""

from __future__ import annotations

import copy
import glob
import gzip
import os
import shutil
import tempfile
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import tfr_torch
import tfr_torch.data.dataset as dataset_module
import tfr_torch.data.resumable as resumable_module
from tfr_torch import (
    ElasticDistributedSampler,
    IndexedTFRecordDataset,
    IndexMismatchError,
    SkippedRecordWarning,
    TFRecordDataset,
    TFRecordError,
)
from tfr_torch.format.index import read_index

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])

# plain / gz: no index; idx / gz-idx: every file indexed (gz-idx with seek points: a global shuffle through them);
# mixed: only the even-numbered files indexed
STORAGES = ["plain", "idx", "gz", "gz-idx", "mixed"]

_ROOT = Path(tempfile.mkdtemp(prefix="tfr-dataset-audit-"))
_CORPORA: dict[tuple, tuple[list[str], str | None, list[int]]] = {}


def teardown_module() -> None:
    shutil.rmtree(_ROOT, ignore_errors=True)


def write(path, ids, gz=False, index=False, pad=1):
    with tfr_torch.TFRecordWriter(str(path), compression="gzip" if gz else None) as writer:
        for i in ids:
            writer.write_example({"id": i, "pad": b"x" * (i % 5 + pad)})
    if index:
        tfr_torch.build_index(str(path))
    return str(path)


def corpus(counts, storage):
    """(paths, index argument, ids in file order) of files holding `counts` records, written once per key."""
    key = (tuple(counts), storage)
    if key not in _CORPORA:
        folder = _ROOT / f"c{len(_CORPORA)}"
        folder.mkdir()
        gz = storage.startswith("gz")
        paths, ids, first = [], [], 0
        for f, n in enumerate(counts):
            indexed = storage in ("idx", "gz-idx") or (storage == "mixed" and f % 2 == 0)
            name = f"part-{f}.tfrecord" + (".gz" if gz else "")
            paths.append(write(folder / name, range(first, first + n), gz=gz, index=indexed))
            ids.extend(range(first, first + n))
            first += n
        _CORPORA[key] = (paths, None if storage in ("plain", "gz") else "auto", ids)
    return _CORPORA[key]


def make(c, rank=0, world=1, **options):
    paths, index, _ = c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # counting files without an index, idle ranks and workers
        return TFRecordDataset(paths, SPEC, index=index, rank=rank, world_size=world, shared_memory=False, **options)


class _Info:
    """What torch's get_worker_info() gives in DataLoader worker `id` of `num_workers`."""

    def __init__(self, id, num_workers, base_seed):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, base_seed + id, None


@contextmanager
def as_worker(worker, workers, base_seed=1000):
    info = None if workers == 0 else _Info(worker, workers, base_seed)
    with mock.patch.object(dataset_module, "get_worker_info", lambda: info), \
            mock.patch.object(resumable_module, "get_worker_info", lambda: info), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def ids_of(item):
    return item["id"].reshape(-1).tolist()


def readers(ds, workers):
    """One rank's readers: the dataset (0 workers: the main process) or a copy per worker, as a fork makes them."""
    return [ds] if workers == 0 else [copy.copy(ds) for _ in range(workers)]


def read_readers(ds, workers, base_seed=1000):
    """Items (lists of ids) of each reader of one rank, in order."""
    out = []
    for w, reader in enumerate(readers(ds, workers)):
        with as_worker(w, workers, base_seed):
            out.append([ids_of(item) for item in reader])
    return out


def flat(items):
    return [i for item in items for i in item]


# ----- a fresh epoch: exactly once, equal ranks, len() -------------------------------------------------------------

layouts = st.fixed_dictionaries({
    "counts": st.lists(st.integers(0, 9), min_size=1, max_size=5),
    "storage": st.sampled_from(STORAGES),
    "world": st.integers(1, 4),
    "workers": st.integers(0, 3),
    "batch_size": st.sampled_from([None, 1, 7]),
    "drop_last": st.booleans(),
    "pad": st.booleans(),
    "shuffle": st.booleans(),
    "epoch": st.integers(0, 2),
})


@settings(max_examples=120, **SETTINGS)
@given(layouts)
def test_every_record_once_per_epoch_equal_ranks_and_len(layout):
    c = corpus(layout["counts"], layout["storage"])
    _, _, all_ids = c
    world, workers, batch = layout["world"], layout["workers"], layout["batch_size"]
    options = {k: layout[k] for k in ("batch_size", "drop_last", "pad", "shuffle")}
    per_rank, lengths = [], []
    for rank in range(world):
        ds = make(c, rank, world, shuffle_buffer=3, seed=11, **options)
        ds.set_epoch(layout["epoch"])
        per_rank.append(read_readers(ds, workers))
        try:
            lengths.append(len(ds))
        except TypeError:
            lengths.append(None)
        again = make(c, rank, world, shuffle_buffer=3, seed=11, **options)
        again.set_epoch(layout["epoch"])
        assert read_readers(again, workers, base_seed=5000) == per_rank[-1]  # the same order in another run
    items = [[item for reader in rank_items for item in reader] for rank_items in per_rank]
    assert len({len(x) for x in items}) == 1  # every rank the same number of items or batches: no DDP hang
    for n, got in zip(lengths, items):
        assert n is None or n == len(got)
    got = Counter(i for rank_items in items for item in rank_items for i in item)
    n = len(all_ids)
    whole_files = world == 1 and lengths[0] is None  # files dealt out whole: each worker drops its own last batch
    if batch is not None and layout["drop_last"]:
        assert max(got.values(), default=1) == 1 or (world > 1 and layout["pad"])
        assert set(got) <= set(all_ids)
        if not whole_files:  # only the last partial batch of each rank is left out
            quota = n if world == 1 else (-(-n // world) if layout["pad"] else n // world)
            assert sum(got.values()) == quota // batch * batch * world
    elif world == 1:
        assert got == Counter(all_ids)
    elif layout["pad"]:
        quota = -(-n // world)
        assert set(got) == set(all_ids) and sum(got.values()) == quota * world
        assert max(got.values(), default=0) <= -(-quota * world // max(n, 1))
    else:
        assert max(got.values(), default=1) == 1 and sum(got.values()) == n // world * world


# ----- resuming with the same layout, at every position -------------------------------------------------------------


@settings(max_examples=50, **SETTINGS)
@given(layouts)
def test_state_dict_at_every_position_resumes_exactly_the_rest(layout):
    c = corpus(layout["counts"], layout["storage"])
    world, workers = layout["world"], min(layout["workers"], 2)
    options = {k: layout[k] for k in ("batch_size", "drop_last", "pad", "shuffle")}
    rank = world - 1  # the last rank: the one that pads or holds the remainder
    ds = make(c, rank, world, shuffle_buffer=3, seed=3, **options)
    ds.set_epoch(layout["epoch"])
    whole = read_readers(ds, workers)
    for w, items in enumerate(whole):
        for k in range(len(items) + 1):
            ds = make(c, rank, world, shuffle_buffer=3, seed=3, **options)
            ds.set_epoch(layout["epoch"])
            reader = readers(ds, workers)[w]
            with as_worker(w, workers):
                iterator = iter(reader)
                head = [ids_of(next(iterator)) for _ in range(k)]
                if k == len(items):
                    assert next(iterator, None) is None  # the state right at the end of the epoch
                state = reader.state_dict()
            resumed = make(c, rank, world, shuffle_buffer=3, seed=3, **options)
            loaded = readers(resumed, workers)[w]
            with as_worker(w, workers, base_seed=7000):
                loaded.load_state_dict(state)
                assert loaded.state_dict() == state  # saving again before the first item loses nothing
                rest = [ids_of(item) for item in loaded]
            assert head + rest == items


def test_state_dict_right_after_set_epoch_resumes_the_whole_next_epoch():
    c = corpus([5, 0, 8], "idx")
    ds = make(c, shuffle=True, batch_size=3)
    list(ds)  # epoch 0 read to its end
    ds.set_epoch(1)
    state = ds.state_dict()  # before the first item of epoch 1
    assert (state["epoch"], state["yielded"]) == (1, 0)
    resumed = make(c, shuffle=True, batch_size=3)
    resumed.load_state_dict(state)
    fresh = make(c, shuffle=True, batch_size=3)
    fresh.set_epoch(1)
    assert [ids_of(b) for b in resumed] == [ids_of(b) for b in fresh]


def test_shuffled_order_changes_with_the_epoch_and_repeats_with_the_seed():
    for storage in ("idx", "plain"):
        c = corpus([20, 0, 13], storage)
        orders = []
        for epoch in (0, 1, 2):
            ds = make(c, shuffle=True, shuffle_buffer=8, seed=4)
            ds.set_epoch(epoch)
            orders.append([int(x["id"]) for x in ds])
            again = make(c, shuffle=True, shuffle_buffer=8, seed=4)
            again.set_epoch(epoch)
            assert [int(x["id"]) for x in again] == orders[-1]
            assert sorted(orders[-1]) == c[2]
        assert len({tuple(o) for o in orders}) == 3
        other = make(c, shuffle=True, shuffle_buffer=8, seed=5)
        assert [int(x["id"]) for x in other] != orders[0]


# ----- on_error ------------------------------------------------------------------------------------------------------


def corrupt_data(path, record, gz=False, index=None):
    """Flip a byte of record `record`'s data (its data CRC then fails); returns the record's offset."""
    table = read_index(index or path + ".idx")
    offset, size = (int(v) for v in table[record])
    if gz:
        raw = bytearray(gzip.decompress(Path(path).read_bytes()))
        raw[offset + size - 5] ^= 0xFF
        Path(path).write_bytes(gzip.compress(bytes(raw)))
        os.remove(path + ".idx")
        os.remove(path + ".idx.seek")  # build_index writes seek points beside a GZIP file's index
        tfr_torch.build_index(path)  # the index frames records without checking their data
    else:
        raw = bytearray(Path(path).read_bytes())
        raw[offset + size - 5] ^= 0xFF
        Path(path).write_bytes(bytes(raw))
    return offset


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("bad", [0, 17, 39])
def test_global_shuffle_skips_a_corrupt_record_under_on_error_skip(tmp_path, gz, bad):
    # Fixed: a shuffle through the index (records read by offset) ignored on_error and raised at the first
    # corrupt record; now it skips it (warning) or hands it to the callable, as reading in order does
    path = write(tmp_path / ("a.tfrecord" + (".gz" if gz else "")), range(40), gz=gz, index=True, pad=300)
    offset = corrupt_data(path, bad, gz)
    for group in (1, 64 << 20):  # records read one by one, and a group at a time (read_many)
        ds = TFRecordDataset(path, SPEC, index="auto", shuffle=True, on_error="skip", max_group_bytes=group)
        assert ds.state_dict()["global_shuffle"]  # records read by offset through the index (and seek points)
        with pytest.warns(SkippedRecordWarning, match=f"{path}:{offset}: corrupt record data"):
            got = [int(x["id"]) for x in ds]
        assert sorted(got) == [i for i in range(40) if i != bad]
        errors = []
        ds = TFRecordDataset(path, SPEC, index="auto", shuffle=True, on_error=errors.append, max_group_bytes=group)
        assert [int(x["id"]) for x in ds] == got
        assert [(e.path, e.offset, e.skipped_records) for e in errors] == [(path, offset, 1)]
        with pytest.raises(TFRecordError, match="corrupt record data"):
            list(TFRecordDataset(path, SPEC, index="auto", shuffle=True, max_group_bytes=group))
    for k in (0, 5, 20, 39):  # resumed past the skipped record or before it: exactly the rest
        ds = TFRecordDataset(path, SPEC, index="auto", shuffle=True, on_error=lambda err: None)
        iterator = iter(ds)
        head = [int(next(iterator)["id"]) for _ in range(k)]
        resumed = TFRecordDataset(path, SPEC, index="auto", shuffle=True, on_error=lambda err: None)
        resumed.load_state_dict(ds.state_dict())
        assert head + [int(x["id"]) for x in resumed] == got


@pytest.mark.parametrize("index", [None, "auto"])
@pytest.mark.parametrize("bad", [0, 4, 9])
def test_skip_in_order_then_resume_at_every_position(tmp_path, index, bad):
    path = write(tmp_path / "a.tfrecord", range(10), index=True)
    corrupt_data(path, bad)
    ds = TFRecordDataset(path, SPEC, index=index, on_error=lambda err: None, batch_size=3)
    whole = [ids_of(b) for b in ds]
    assert flat(whole) == [i for i in range(10) if i != bad]
    for k in range(len(whole) + 1):
        ds = TFRecordDataset(path, SPEC, index=index, on_error=lambda err: None, batch_size=3)
        iterator = iter(ds)
        head = [ids_of(next(iterator)) for _ in range(k)]
        resumed = TFRecordDataset(path, SPEC, index=index, on_error=lambda err: None, batch_size=3)
        resumed.load_state_dict(ds.state_dict())
        assert head + [ids_of(b) for b in resumed] == whole


def test_on_error_callable_hears_of_each_bad_record_once(tmp_path):
    # Fixed: files without an index counted for several ranks (at construction) handed each bad record to the
    # on_error callable (or warned) while counting, and again when a rank read it
    path = write(tmp_path / "a.tfrecord", range(10), index=True)
    offset = corrupt_data(path, 7)
    os.remove(path + ".idx")
    errors = []
    ranks = [TFRecordDataset(path, SPEC, on_error=errors.append, rank=r, world_size=2) for r in range(2)]
    assert errors == []  # counting says nothing
    got = [[int(x["id"]) for x in ds] for ds in ranks]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 8]]  # the 9 good records: 4 per rank, the last one dropped
    assert [(e.path, e.offset) for e in errors] == [(path, offset)]
    with warnings.catch_warnings(record=True) as warned:  # "skip": the warning comes from the reading rank only
        warnings.simplefilter("always")
        quiet = TFRecordDataset(path, SPEC, on_error="skip", rank=0, world_size=2)
        assert [int(x["id"]) for x in quiet] == [0, 1, 2, 3]
        loud = TFRecordDataset(path, SPEC, on_error="skip", rank=1, world_size=2)
        assert [int(x["id"]) for x in loud] == [4, 5, 6, 8]
    skipped = [str(w.message) for w in warned if w.category is SkippedRecordWarning]
    assert len(skipped) == 1 and f"{path}:{offset}: corrupt record data" in skipped[0]


# ----- files that changed or are named twice -----------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("world", [1, 2])
def test_an_indexed_file_that_shrank_after_the_dataset_was_built_raises_naming_it(tmp_path, gz, world):
    # Fixed: read in order through its index, a file that lost its last records after the dataset was built (its
    # index checked then) gave fewer records silently: one rank fewer than the others (DDP waits forever)
    name = "a.tfrecord" + (".gz" if gz else "")
    path = write(tmp_path / name, range(10), gz=gz, index=True)
    other = write(tmp_path / "b.tfrecord", range(10, 20), index=True)
    ranks = [TFRecordDataset([path, other] if world == 1 else path, SPEC, index="auto", rank=r, world_size=world)
             for r in range(world)]
    shutil.copy(path + ".idx", tmp_path / "keep.idx")
    write(tmp_path / name, range(6), gz=gz)  # rewritten shorter (its index kept)
    shutil.copy(tmp_path / "keep.idx", path + ".idx")
    with pytest.raises(IndexMismatchError) as raised:
        [int(x["id"]) for x in ranks[-1]]
    err = raised.value
    assert err.path == path and err.offset == read_index(path + ".idx")[6, 0]
    assert "the file ends after " in str(err) and "its index lists 10 records" in str(err)
    assert "changed after the dataset was built" in str(err)
    with pytest.raises(IndexMismatchError, match="stale"):  # built again: refused at once
        TFRecordDataset(path, SPEC, index="auto")


def test_a_file_named_twice_is_said(tmp_path):
    # Fixed: a file named twice (a glob and a path that name it both) was read twice per epoch without a word
    path = write(tmp_path / "a.tfrecord", range(3), index=True)
    write(tmp_path / "b.tfrecord", range(3, 5), index=True)
    with pytest.warns(UserWarning, match=r"1 file\(s\) are named more than once .*a.tfrecord \(2 times\)"):
        ds = TFRecordDataset([str(tmp_path / "*.tfrecord"), path], SPEC, index="auto")
    assert sorted(int(x["id"]) for x in ds) == [0, 0, 1, 1, 2, 2, 3, 4]  # as asked: each naming read
    with pytest.warns(UserWarning, match=r"named more than once .*a.tfrecord \(2 times\)"):
        indexed = IndexedTFRecordDataset([path, os.path.join(str(tmp_path), ".", "a.tfrecord")], SPEC)
    assert len(indexed) == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TFRecordDataset(sorted(glob.glob(str(tmp_path / "*.tfrecord"))), SPEC, index="auto")


# ----- IndexedTFRecordDataset with the library's sampler -----------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_indexed_dataset_with_elastic_sampler_reads_every_record_once(world, drop_last, shuffle):
    paths, _, all_ids = corpus([4, 0, 7, 2], "idx")
    ds = IndexedTFRecordDataset(paths, SPEC)
    assert len(ds) == len(all_ids)
    per_rank = []
    for rank in range(world):
        sampler = ElasticDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=2,
                                            drop_last=drop_last)
        sampler.set_epoch(1)
        got = [int(ds[i]["id"]) for i in sampler]
        assert len(got) == len(sampler)
        ref = torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=2,
                                                  drop_last=drop_last)
        ref.set_epoch(1)
        assert got == [all_ids[i] for i in ref]
        per_rank.append(got)
        for k in (0, len(got) // 2, len(got)):  # resumed at the start, the middle, the end
            first = ElasticDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=2,
                                              drop_last=drop_last)
            first.set_epoch(1)
            iterator = iter(first)
            head = [next(iterator) for _ in range(k)]
            second = ElasticDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=2,
                                               drop_last=drop_last)
            second.load_state_dict(first.state_dict())
            assert [all_ids[i] for i in head + list(second)] == got
    assert len({len(x) for x in per_rank}) == 1
    counted = Counter(flat(per_rank))
    n = len(all_ids)
    if drop_last:
        assert max(counted.values()) == 1 and sum(counted.values()) == n // world * world
    else:
        assert set(counted) == set(all_ids) and sum(counted.values()) == -(-n // world) * world


def test_ranks_from_the_environment_split_as_given_ones(monkeypatch):
    c = corpus([6, 0, 5], "plain")
    given_ranks = [[int(x["id"]) for x in make(c, r, 3, shuffle=True)] for r in range(3)]
    for r in range(3):
        monkeypatch.setenv("RANK", str(r))
        monkeypatch.setenv("WORLD_SIZE", "3")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = TFRecordDataset(c[0], SPEC, shuffle=True, shared_memory=False)
        assert (ds.rank, ds.world_size) == (r, 3)
        assert [int(x["id"]) for x in ds] == given_ranks[r]
        indexed = IndexedTFRecordDataset(corpus([6, 0, 5], "idx")[0], SPEC)
        sampler = ElasticDistributedSampler(indexed)
        assert (sampler.rank, sampler.num_replicas) == (r, 3)
    assert len(set(flat(given_ranks))) == len(flat(given_ranks)) == 9  # 11 records: 3 per rank, 2 dropped


# ----- real DataLoader workers --------------------------------------------------------------------------------------


def test_real_workers_yield_what_the_main_process_yields_and_len_batches():
    c = corpus([9, 0, 4, 11], "idx")
    main = make(c, batch_size=7, shuffle=True)
    main.set_epoch(2)
    in_process = [ids_of(b) for b in DataLoader(main, batch_size=None, num_workers=0)]
    workers = make(c, batch_size=7, shuffle=True)
    workers.set_epoch(2)
    loader = DataLoader(workers, batch_size=None, num_workers=2)
    in_workers = [ids_of(b) for b in loader]
    assert len(in_workers) == len(in_process) == len(workers) == 4  # 24 records in batches of 7
    assert sorted(flat(in_workers)) == sorted(flat(in_process)) == c[2]


def test_stateful_loader_saved_at_the_end_of_an_epoch_resumes_nothing_then_whole_epochs():
    from torchdata.stateful_dataloader import StatefulDataLoader

    c = corpus([9, 0, 4, 11], "plain")  # no index: counted when built (two ranks), split by record ranges
    ds = make(c, rank=1, world=2, batch_size=2, shuffle=True, shuffle_buffer=4)
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
    iterator = iter(loader)
    first = [ids_of(next(iterator)) for _ in range(len(ds))]
    state = loader.state_dict()  # after the last batch, before the loader is asked for another
    del iterator
    again = make(c, rank=1, world=2, batch_size=2, shuffle=True, shuffle_buffer=4)
    resumed = StatefulDataLoader(again, batch_size=None, num_workers=2)
    resumed.load_state_dict(state)
    assert [ids_of(b) for b in resumed] == []  # the epoch was over
    again.set_epoch(1)
    second = [ids_of(b) for b in resumed]
    assert len(second) == len(first) == len(again) == 6  # 12 of the 24 records for rank 1
    assert flat(second) != flat(first)  # another epoch, another order
    rank0 = make(c, rank=0, world=2, batch_size=2, shuffle=True, shuffle_buffer=4)
    rank0.set_epoch(1)
    assert sorted(flat(second) + flat(ids_of(b) for b in rank0)) == c[2]
