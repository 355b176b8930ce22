"""Metadata that is never trusted blindly: sidecar counts checked against the files, counts taken once, missing
files found when the dataset is built, warnings when a rank or a DataLoader worker gets nothing, and the
sidecar's metadata and class names on the datasets.

The set: ShardedWriter's shards of Examples whose int64 "id" numbers the records, with a sidecar holding the
spec, each shard's record count and byte size. A shard is then rewritten (a different count, its `.idx`
removed) the way a user regenerating one file of a set would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import IndexedTFRecordDataset, ShardedWriter, TFRecordDataset, TFRecordError

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def write_set(out_dir, counts, *, image=None):
    """Shards of `counts[i]` records each (all equal; ids numbered across shards); returns the shard paths."""
    assert len(set(counts)) == 1
    with ShardedWriter(str(out_dir), "ds", "train", records_per_shard=counts[0], features=SPEC,
                       image=image) as writer:
        for i in range(sum(counts)):
            writer.write(tfr_torch.encode_example({"id": i}))
    return writer.paths


@pytest.fixture
def rewrite(write_records):
    """rewrite(path, ids): replace a shard with one holding `ids` and drop its index, as a user regenerating one
    file would."""
    def rewrite(path, ids):
        os.remove(path + ".idx")
        write_records(path, [{"id": i} for i in ids])
    return rewrite


def ids_of(dataset, loader_kwargs=None):
    loader = DataLoader(dataset, batch_size=None, **(loader_kwargs or {}))
    out = []
    for item in loader:
        out.extend(item["id"].reshape(-1).tolist())
    return out


@pytest.fixture
def shards(tmp_path):
    return write_set(tmp_path / "set", [10, 10, 10])


# ----- a stale sidecar ----------------------------------------------------------------------------------------------

def test_fresh_sidecar_gives_counts_without_reading(shards):
    for p in shards:
        os.remove(p + ".idx")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no counting, no warning: the sidecar's counts match the files' sizes
        ds = TFRecordDataset(shards, "auto", batch_size=4)
    assert len(ds) == 8
    assert sorted(ids_of(ds)) == list(range(30))


@pytest.mark.parametrize("new_count", [7, 14])  # a shard that shrank, one that grew
def test_stale_sidecar_is_not_trusted(shards, new_count, rewrite):
    rewrite(shards[1], range(100, 100 + new_count))
    expected = sorted(list(range(10)) + list(range(100, 100 + new_count)) + list(range(20, 30)))
    with pytest.warns(UserWarning) as caught:
        ds = TFRecordDataset(shards, "auto", batch_size=5)
    message = str(caught[0].message)
    assert caught[0].filename == __file__  # at the user's line
    size = os.path.getsize(shards[1])
    assert message.startswith(f"the sidecar {os.path.dirname(shards[1])}/ds-train.tfr_torch.json does not match "
                              "1 of its 3 shards (rewritten after it was written?): ds-train.tfrecord-00001-of-00003: "
                              "the sidecar says 10 records in ")
    assert f"bytes, but the file has {size} bytes. Their records are counted now instead" in message
    total = 20 + new_count
    assert len(ds) == -(-total // 5)
    batches = list(DataLoader(ds, batch_size=None))
    assert len(batches) == len(ds)
    assert sorted(i for b in batches for i in b["id"].tolist()) == expected


@pytest.mark.parametrize("new_count", [7, 14])
def test_stale_sidecar_ranks_stay_equal(shards, new_count, rewrite):
    rewrite(shards[1], range(100, 100 + new_count))
    total = 20 + new_count
    seen = []
    per_rank = []
    for rank in range(2):
        with pytest.warns(UserWarning, match="does not match 1 of its 3 shards"):
            ds = TFRecordDataset(shards, "auto", rank=rank, world_size=2)
        got = ids_of(ds, {"num_workers": 2})
        assert len(got) == len(ds) == total // 2
        per_rank.append(len(got))
        seen.extend(got)
    assert per_rank[0] == per_rank[1]
    assert len(set(seen)) == len(seen) == 2 * (total // 2)


def test_sidecar_count_contradicting_index_uses_index(shards, rewrite):
    rewrite(shards[0], range(100, 104))
    tfr_torch.build_index(shards[0])
    with pytest.warns(UserWarning, match="ds-train.tfrecord-00000-of-00003: the sidecar says 10 records, but its "
                                         r"index \(checked against the file\) lists 4"):
        ds = TFRecordDataset(shards, "auto", index="auto")
    assert len(ds) == 24
    assert sorted(ids_of(ds)) == list(range(10, 30)) + [100, 101, 102, 103]


def test_file_changed_after_build_raises_instead_of_short_epoch(shards):
    """The counts were right at construction; the file then shrinks: reading says so rather than giving a rank
    fewer records than the others (DDP would hang)."""
    for p in shards:
        os.remove(p + ".idx")
    ds = TFRecordDataset(shards, "auto", rank=0, world_size=2)
    with tfr_torch.TFRecordWriter(shards[0]) as writer:  # same name, fewer records, after the build
        for i in range(3):
            writer.write(tfr_torch.encode_example({"id": i}))
    with pytest.raises(TFRecordError, match=r"the file ends after 3 records, but the count in the sidecar is 10 "
                                            r"and this reader was to read records 0 to 9: the file changed after "
                                            "the dataset was built"):
        list(ds)


def test_file_grown_after_build_raises(shards):
    for p in shards:
        os.remove(p + ".idx")
    ds = TFRecordDataset(shards, "auto")
    with tfr_torch.TFRecordWriter(shards[2]) as writer:
        for i in range(12):
            writer.write(tfr_torch.encode_example({"id": i}))
    with pytest.raises(TFRecordError, match=r"the file holds more records than the count in the sidecar \(10\)"):
        list(ds)


# ----- counting once --------------------------------------------------------------------------------------------

def test_a_count_once_published_stays_known_while_a_late_worker_counts_the_file_again():
    """Two DataLoader workers may both count a file neither had claimed when they looked. The claim was written into
    the count's own slot, so the late counter hid the count the other had just published: a worker that read the
    table then saw no counts and read the whole file while the other read its range of it (two records twice, seen
    in a shuffled run of test_composition_audit). The claim has its own slot now; the count is written once."""
    from tfr_torch.data.counting import FAILED, SharedCounts

    shared = SharedCounts([None, 7])
    seen_while_counting = []

    def again(f):
        seen_while_counting.append(shared.known())
        return 5

    shared._count_one(0, lambda f: 5)  # the first worker publishes
    assert shared.known() == [5, 7]
    shared._count_one(0, again)  # the late one counts it too
    assert seen_while_counting == [[5, 7]] and shared.known() == [5, 7]

    def fails(f):
        raise OSError("gone")

    with pytest.raises(OSError):
        shared._count_one(0, fails)  # a late counter that fails leaves the count standing
    assert shared.known() == [5, 7] and int(shared.claims[0]) != FAILED
    fresh = SharedCounts([None])
    with pytest.raises(OSError):
        fresh._count_one(0, fails)  # nobody's count: marked failed, for a waiting worker to count it itself
    assert fresh.known() is None and int(fresh.claims[0]) == FAILED
    assert fresh.count_shared(lambda f: 3, worker=1, workers=2) == [3]  # the waiting worker takes it over


def run_script(tmp_path, body):
    """Run `body` as a user's script in a fresh interpreter (DataLoader workers' warnings reach its stderr, as
    for a user; under pytest they would be recorded inside the workers and lost); return (script, stderr)."""
    script = tmp_path / "train.py"
    script.write_text("import torch, tfr_torch, warnings; warnings.filterwarnings('ignore', 'This DataLoader will')\n"
                      "from torch.utils.data import DataLoader\n"
                      "SPEC = {'id': tfr_torch.FixedLenFeature([], torch.int64)}\n" + textwrap.dedent(body))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return str(script), done.stdout, done.stderr


def test_workers_count_once_warn_once_and_len_uses_the_counts(tmp_path, write_corpus):
    """One file for 2 workers is split by record ranges, which needs its count: the workers count it together at
    the first epoch, warn once at the user's line, and later epochs, fresh workers and len() reuse the count."""
    paths = write_corpus(tmp_path, [9]).paths
    script, out, err = run_script(tmp_path, f"""
        ds = tfr_torch.TFRecordDataset({paths!r}, SPEC)
        try:
            len(ds)
        except TypeError as e:
            print("len:", e)
        loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
        for epoch in range(3):
            ds.set_epoch(epoch)
            print("epoch", epoch, sorted(int(item["id"]) for item in loader))
        print("len", len(ds))
        print("fresh", sorted(int(item["id"]) for item in DataLoader(ds, batch_size=None, num_workers=2)))
        """)
    assert out.splitlines()[1:] == [f"epoch {e} {list(range(9))}" for e in range(3)] + ["len 9",
                                                                                        f"fresh {list(range(9))}"]
    assert out.startswith("len: the length of this TFRecordDataset is unknown")
    assert err.count("UserWarning") == 1, err
    assert err.startswith(f"{script}:5: UserWarning: counting the records of 1 file(s) without an index (1 file(s) "
                          "for 2 readers (ranks x DataLoader workers): files are split by record ranges): the "
                          "DataLoader workers count them together once, and every later epoch and len() use the "
                          "counts;"), err


def test_counting_warning_points_at_user_line_in_main_process(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [5, 4]).paths
    with pytest.warns(UserWarning, match=r"counting the records of 2 file\(s\) without an index") as caught:
        ds = TFRecordDataset(paths, SPEC, rank=1, world_size=2)
    assert [w.filename for w in caught] == [__file__]
    assert len(ds) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the counts are kept: no second count, no second warning
        for epoch in range(3):
            ds.set_epoch(epoch)
            assert len(list(ds)) == 4


# ----- missing files and empty readers -------------------------------------------------------------------------

def test_missing_file_is_found_when_the_dataset_is_built(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [3]).paths
    missing = str(tmp_path / "nope.tfrecord")
    message = f"1 of the dataset's 2 file(s) do not exist (or are folders): {missing}"
    with pytest.raises(FileNotFoundError) as err:
        TFRecordDataset(paths + [missing], SPEC)
    assert str(err.value) == message
    with pytest.raises(FileNotFoundError) as err:
        IndexedTFRecordDataset(paths + [missing], SPEC)
    assert str(err.value) == message


def test_warns_when_every_rank_gets_nothing(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [3]).paths
    tfr_torch.build_index(paths[0])
    with pytest.warns(UserWarning) as caught:
        ds = TFRecordDataset(paths, SPEC, index="auto", rank=0, world_size=4)
    assert str(caught[0].message) == ("every rank yields nothing: 3 records for world_size=4 leaves 0 per rank "
                                      "(pass pad=True to repeat records so that each rank gets one)")
    assert caught[0].filename == __file__
    assert list(ds) == []


def test_warns_when_drop_last_leaves_no_batch(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [5]).paths
    tfr_torch.build_index(paths[0])
    with pytest.warns(UserWarning) as caught:
        TFRecordDataset(paths, SPEC, index="auto", batch_size=8, drop_last=True)
    assert str(caught[0].message) == ("this rank yields no batch: 5 records per rank for batch_size=8 with "
                                      "drop_last=True (use a smaller batch_size or drop_last=False)")


def test_no_warning_when_every_reader_has_work(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [6]).paths
    tfr_torch.build_index(paths[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = TFRecordDataset(paths, SPEC, index="auto", world_size=2, rank=0, batch_size=3, drop_last=True)
        assert len(list(ds)) == 1


def test_warns_when_dataloader_workers_get_nothing(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [2]).paths
    tfr_torch.build_index(paths[0])
    script, out, err = run_script(tmp_path, f"""
        ds = tfr_torch.TFRecordDataset({paths!r}, SPEC, index="auto")
        for epoch in range(2):
            ds.set_epoch(epoch)
            print(sorted(int(item["id"]) for item in DataLoader(ds, batch_size=None, num_workers=3)))
        """)
    assert out == "[0, 1]\n[0, 1]\n"
    assert err.count("UserWarning") == 1, err  # once, whatever the epochs
    assert err.startswith(f"{script}:5: UserWarning: DataLoader workers 2 of 3 get nothing to read: this rank has 2 "
                          "records for 3 workers (num_workers=2 would do the same work)"), err


# ----- sidecar metadata on the datasets ------------------------------------------------------------------------

def test_datasets_expose_metadata_and_classes(tmp_path):
    image = {"encoding": "png", "key": "image/encoded", "label_key": "image/class/label",
             "classes": ["cat", "dog"]}
    paths = write_set(tmp_path / "set", [4, 4], image=image)
    for ds in (TFRecordDataset(paths, "auto"), IndexedTFRecordDataset(paths, "auto")):
        assert ds.classes == ["cat", "dog"]
        assert ds.metadata["image"]["classes"] == ["cat", "dog"]
        assert ds.metadata["records"] == 8
        assert ds.metadata["name"] == "ds" and ds.metadata["split"] == "train"
    assert IndexedTFRecordDataset(paths, "auto")[5]["id"].item() == 5


def test_no_sidecar_no_metadata(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [2]).paths
    ds = TFRecordDataset(paths, SPEC)
    assert ds.metadata is None and ds.classes is None
    with pytest.raises(ValueError, match="features='auto' needs the sidecar ShardedWriter writes"):
        IndexedTFRecordDataset(paths, "auto")


def test_sidecar_json_is_what_metadata_returns(shards):
    with open(os.path.join(os.path.dirname(shards[0]), "ds-train.tfr_torch.json")) as f:
        on_disk = json.load(f)
    assert TFRecordDataset(shards, "auto").metadata == on_disk
    assert Counter(s["records"] for s in on_disk["shards"]) == {10: 3}


def test_indexed_dataset_scanning_warning_points_at_the_user_line(tmp_path, write_corpus):
    paths = write_corpus(tmp_path, [3, 2]).paths
    with pytest.warns(UserWarning) as caught:
        ds = IndexedTFRecordDataset(paths, SPEC)
    assert [w.filename for w in caught] == [__file__]
    assert str(caught[0].message) == (f"2 file(s) have no index ({paths[0]}...): scanning them now; write indexes "
                                      "with `tfr-torch index FILES` to skip this")
    assert [int(ds[i]["id"]) for i in range(len(ds))] == list(range(5))
