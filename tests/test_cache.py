"""CachedDataset: the first full epoch is kept (memory or a local folder) and replayed; every item exactly once per
epoch for any number of DataLoader workers and ranks; nothing kept from an abandoned epoch; a folder made from
other files or settings is rebuilt, never replayed."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import CachedDataset, TFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64), "x": tfr_torch.FixedLenFeature([3], torch.float32),
        "name": tfr_torch.FixedLenFeature([], tfr_torch.string)}
N = 23

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture
def files(tmp_path, write_corpus):
    """Two indexed files, ids 0-9 and 10-22."""
    return write_corpus(tmp_path, [10, 13], lambda i: {"id": i, "x": [i, i + 0.5, -i], "name": f"r{i}"},
                        index=True).paths


class Counting(TFRecordDataset):
    """A TFRecordDataset that counts how many records it decodes (in this process)."""

    decoded = 0

    def _batches(self, records, plan, *options):
        for batch in super()._batches(records, plan, *options):
            type(self).decoded += len(batch["id"])
            yield batch


def ids(items):
    return [i for batch in items for i in batch["id"].tolist()]


def test_memory_cache_replays_without_reading(files):
    Counting.decoded = 0
    ds = CachedDataset(Counting(files, SPEC, index="auto", batch_size=5))
    first = list(ds)
    assert Counting.decoded == N and ds.cached()
    for epoch in range(1, 3):
        ds.set_epoch(epoch)
        again = list(ds)
        assert Counting.decoded == N  # nothing read or decoded again
        assert [b["id"].tolist() for b in again] == [b["id"].tolist() for b in first]
        assert all(torch.equal(a["x"], b["x"]) and a["name"] == b["name"] for a, b in zip(first, again))
    assert len(ds) == 5


def test_items_changed_in_place_never_change_the_cache(files):
    ds = CachedDataset(TFRecordDataset(files, SPEC, index="auto", batch_size=4))
    for batch in ds:
        batch["x"].zero_()  # a training step normalising in place
    for batch in ds:
        assert batch["x"].abs().sum() > 0 or batch["id"].tolist() == [0]
        batch["x"].zero_()
    assert sorted(ids(ds)) == list(range(N))
    assert sum(b["x"].abs().sum().item() for b in ds) > 0


def test_abandoned_epoch_keeps_nothing(files):
    Counting.decoded = 0
    ds = CachedDataset(Counting(files, SPEC, index="auto", batch_size=5))
    for _ in ds:
        break
    assert not ds.cached()
    assert sorted(ids(ds)) == list(range(N))
    assert ds.cached()


def test_shuffled_replay_is_a_new_permutation_each_epoch(files):
    ds = CachedDataset(TFRecordDataset(files, SPEC, index="auto"), shuffle=True, seed=3)
    orders = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        orders.append([int(item["id"]) for item in ds])
    assert orders[0] == list(range(N))  # the first epoch reads the files in order
    assert all(sorted(o) == list(range(N)) for o in orders)
    assert len({tuple(o) for o in orders[1:]}) == 3
    ds.set_epoch(2)
    assert [int(item["id"]) for item in ds] == orders[2]  # deterministic from (seed, epoch)


def test_transform_runs_every_epoch_after_the_cache(files):
    calls = []
    ds = CachedDataset(TFRecordDataset(files, SPEC, index="auto", batch_size=8),
                       transform=lambda b: calls.append(len(b["id"])) or b["id"] * 2)
    assert [t.tolist() for t in ds] == [[2 * i for i in range(k, min(k + 8, N))] for k in range(0, N, 8)]
    list(ds)
    assert calls == [8, 8, 7] * 2


@pytest.mark.parametrize("workers", [0, 2])
def test_disk_cache_with_dataloader_workers(files, tmp_path, workers):
    folder = tmp_path / "cache"
    ds = CachedDataset(Counting(files, SPEC, index="auto", batch_size=4), folder)
    for epoch in range(3):
        ds.set_epoch(epoch)
        got = ids(DataLoader(ds, batch_size=None, num_workers=workers))
        assert Counter(got) == Counter(range(N))
    parts = sorted(n for n in os.listdir(folder) if n.startswith("part-"))
    expected = [f"part-rank0of1-worker{w}of{max(workers, 1)}.pt" for w in range(max(workers, 1))]
    assert parts == expected
    # a new CachedDataset over the same files and settings (a later run) replays the folder
    Counting.decoded = 0
    again = CachedDataset(Counting(files, SPEC, index="auto", batch_size=4), folder)
    assert Counter(ids(DataLoader(again, batch_size=None, num_workers=workers))) == Counter(range(N))
    if workers == 0:
        assert Counting.decoded == 0


def test_ranks_keep_their_own_parts(files, tmp_path):
    folder = tmp_path / "cache"
    seen = []
    for rank in range(2):
        ds = CachedDataset(TFRecordDataset(files, SPEC, index="auto", rank=rank, world_size=2), folder)
        first = [int(x["id"]) for x in ds]
        assert [int(x["id"]) for x in ds] == first
        seen += first
    assert sorted(seen) == list(range(N - 1))  # 23 records, 2 ranks: 11 each, the remainder dropped
    assert sorted(n for n in os.listdir(folder) if n.startswith("part-")) == [
        "part-rank0of2-worker0of1.pt", "part-rank1of2-worker0of1.pt"]


def test_changed_files_rebuild_the_folder(files, tmp_path):
    folder = tmp_path / "cache"
    ds = CachedDataset(TFRecordDataset(files, SPEC, index="auto"), folder)
    assert len(list(ds)) == N and ds.cached()
    with tfr_torch.TFRecordWriter(files[0]) as writer:  # the data changed since the cache was made
        writer.write(tfr_torch.encode_example({"id": 100, "x": [0.0, 0.0, 0.0], "name": "new"}))
    tfr_torch.build_index(files[0])
    with pytest.warns(UserWarning) as caught:
        ds = CachedDataset(TFRecordDataset(files, SPEC, index="auto"), folder)
    assert str(caught[0].message) == (f"the cache in {folder} was made from another dataset (changed: files): its 1 "
                                      "part(s) are removed and the next epoch reads the dataset again")
    assert caught[0].filename == __file__
    assert not ds.cached()
    assert sorted(int(x["id"]) for x in ds) == list(range(10, N)) + [100]
    with pytest.warns(UserWarning, match=r"changed: batch_size\)"):
        CachedDataset(TFRecordDataset(files, SPEC, index="auto", batch_size=2), folder)


def test_arguments_are_checked(files, tmp_path):
    with pytest.raises(TypeError) as err:
        CachedDataset(tfr_torch.IndexedTFRecordDataset(files, SPEC))
    assert str(err.value) == ("CachedDataset caches an IterableDataset (such as TFRecordDataset), got "
                              "IndexedTFRecordDataset; a map-style dataset can be cached by indexing it into a list")
    with pytest.raises(ValueError, match="the cache folder must be a local folder, got 's3://bucket/cache'"):
        CachedDataset(TFRecordDataset(files, SPEC), "s3://bucket/cache")


def test_disk_cache_keeps_sparse_ragged_and_string_results(tmp_path):
    path = str(tmp_path / "v.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(1, 6):
            writer.write(tfr_torch.encode_example({"v": list(range(i)), "s": [b"a"] * i}))
    spec = {"v": tfr_torch.VarLenFeature(torch.int64), "s": tfr_torch.VarLenFeature(tfr_torch.string),
            "r": tfr_torch.RaggedFeature(torch.int64, value_key="v")}
    ds = CachedDataset(TFRecordDataset(path, spec, batch_size=2), tmp_path / "cache")
    first, again = list(ds), list(ds)
    assert ds.cached() and len(first) == len(again) == 3
    for a, b in zip(first, again):
        assert torch.equal(a["v"].to_dense(), b["v"].to_dense())
        assert a["s"] == b["s"]
        assert [t.tolist() for t in a["r"].unbind()] == [t.tolist() for t in b["r"].unbind()]


def test_docs_tf_data_examples_run(tmp_path, monkeypatch):
    """The "From tf.data" guide's example (docs/guides/from-tf-data.md) runs as written, over a small set like the one
    it describes."""
    import re
    from pathlib import Path

    import numpy as np

    text = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "from-tf-data.md").read_text()
    block = re.search(r"```python\n(import itertools\n.*?)```", text, re.S)
    assert block, "the tf.data guide lost its examples"
    monkeypatch.chdir(tmp_path)
    os.mkdir("data")
    for f in range(2):
        with tfr_torch.TFRecordWriter(f"data/train-{f}.tfrecord") as writer:
            for i in range(20 * f, 20 * f + 20):
                writer.write(tfr_torch.encode_example({"pixels": np.full((8, 8), i, np.uint8).tobytes(),
                                                       "tokens": np.arange(i % 5 + 1), "label": i}))
    scope: dict = {"__name__": "readme"}
    try:
        exec(compile(block.group(1), "docs/guides/from-tf-data.md", "exec"), scope)
    finally:
        from loader_util import shut_down_loaders

        shut_down_loaders(scope)
    pixels, tokens, lengths, labels = scope["first_two"][0]
    assert pixels.shape == (16, 8, 8) and pixels.dtype == torch.float32
    assert torch.equal(pixels[:, 0, 0] * 255, labels.float())
    assert torch.equal(lengths, labels % 5 + 1)
    assert sorted(scope["odd_labels"]) == list(range(1, 40, 2))
    assert sorted(os.listdir("cache")) == ["check-rank0of1-worker0of2.json", "check-rank0of1-worker1of2.json",
                                           "part-rank0of1-worker0of2.pt", "part-rank0of1-worker1of2.pt",
                                           "tfr_torch-cache.json"]


@pytest.mark.parametrize("folder", [None, "cache"])
def test_replay_in_persistent_workers_needs_no_files(files, tmp_path, folder):
    """After the first epoch the files can go (the object-storage case): later epochs come from the cache."""
    ds = CachedDataset(TFRecordDataset(files, SPEC, index="auto", batch_size=3),
                       None if folder is None else tmp_path / folder, shuffle=True)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    assert Counter(ids(loader)) == Counter(range(N))
    for path in files:
        os.remove(path)
    for epoch in range(1, 3):
        ds.set_epoch(epoch)
        assert Counter(ids(loader)) == Counter(range(N))
