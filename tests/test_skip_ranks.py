"""Bad records skipped under on_error="skip" (or a callable) with several ranks: every rank still yields its share.

A rank that skipped a record used to yield one record (or batch) fewer than the others, and a DDP or XLA job
waited forever at the first collective past its end. Now a reader that came up short repeats its own first records
(kept from its first pass, or read again without reporting the bad ones twice), as `pad=True` repeats records to
fill the last ranks.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from skip_util import SPEC, corrupt, ids, write

import tfr_torch
from tfr_torch import SkippedRecordWarning, TFRecordDataset
from tfr_torch.format.index import read_index


def quiet(dataset, **loader):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRecordWarning)
        return list(DataLoader(dataset, batch_size=None, **loader) if loader else dataset)


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "global-shuffle"])
@pytest.mark.parametrize("bad", [[0], [5], [19], [3, 4, 12]])
def test_every_rank_yields_its_share_when_records_are_skipped(tmp_path, shuffle, bad):
    path = write(tmp_path / "a.tfrecord", range(20))
    corrupt(path, bad)
    ranks = [TFRecordDataset(path, SPEC, index="auto", shuffle=shuffle, seed=3, on_error="skip", rank=r,
                             world_size=2) for r in range(2)]
    got = [ids(quiet(ds)) for ds in ranks]
    assert [len(g) for g in got] == [len(ds) for ds in ranks] == [10, 10]
    good = set(range(20)) - set(bad)
    assert set(got[0]) | set(got[1]) == good  # every good record read, none of the bad ones
    for g in got:
        extra = Counter(g) - Counter(set(g))  # the repeats a short rank made
        short = len(g) - len(set(g))
        assert sum(extra.values()) == short
        assert list(extra) == [x for x in dict.fromkeys(g)][:short]  # its own first records, in its order
    assert sum(len(g) - len(set(g)) for g in got) == len(bad)
    assert len(set(got[0]) & set(got[1])) == 0  # no record of one rank's share given by the other


def test_batches_and_dataloader_workers_keep_equal_counts(tmp_path):
    paths = [write(tmp_path / f"{n}.tfrecord", range(n * 30, n * 30 + 30)) for n in range(2)]
    corrupt(paths[0], [2, 3, 29])
    for workers in (0, 2):
        loaders = [quiet(TFRecordDataset(paths, SPEC, index="auto", batch_size=4, on_error="skip", rank=r,
                                         world_size=2), num_workers=workers) for r in range(2)]
        assert [len(batches) for batches in loaders] == [8, 8]  # 30 records a rank: 7 of 4 and one of 2
        assert [[len(b["id"]) for b in batches] for batches in loaders] == [[4] * 7 + [2]] * 2
        read = set(ids(loaders[0])) | set(ids(loaders[1]))
        assert read == set(range(60)) - {2, 3, 29}


def test_gzip_files_read_by_offset_keep_equal_counts(tmp_path):
    path = write(tmp_path / "a.tfrecord.gz", range(20), gz=True)
    corrupt(path, [1, 11], gz=True)
    got = [ids(quiet(TFRecordDataset(path, SPEC, index="auto", shuffle=True, on_error="skip", rank=r,
                                     world_size=2))) for r in range(2)]
    assert [len(g) for g in got] == [10, 10]
    assert set(got[0]) | set(got[1]) == set(range(20)) - {1, 11}


def test_each_bad_record_is_reported_once(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(20))
    corrupt(path, [0, 1])
    errors = []
    got = ids(TFRecordDataset(path, SPEC, index="auto", on_error=errors.append, rank=0, world_size=2))
    assert got == [2, 3, 4, 5, 6, 7, 8, 9, 2, 3]  # the two records repeated are read again without a report
    assert len(errors) == 2
    with pytest.warns(SkippedRecordWarning) as warned:
        ids(TFRecordDataset(path, SPEC, index="auto", on_error="skip", rank=0, world_size=2))
    assert len([w for w in warned if w.category is SkippedRecordWarning]) == 2


def test_a_share_with_no_good_record_ends_short_and_one_rank_is_not_topped_up(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(8))
    corrupt(path, [0, 1, 2, 3])
    got = [ids(quiet(TFRecordDataset(path, SPEC, index="auto", on_error="skip", rank=r, world_size=2)))
           for r in range(2)]
    assert got == [[], [4, 5, 6, 7]]  # nothing good to repeat: rank 0 cannot fill its share
    one = ids(quiet(TFRecordDataset(path, SPEC, index="auto", on_error="skip")))
    assert one == [4, 5, 6, 7]  # one rank: no collective to wait at, nothing repeated (as TensorFlow)
    with pytest.raises(tfr_torch.TFRecordError, match="corrupt record data"):
        list(TFRecordDataset(path, SPEC, index="auto", rank=1, world_size=2, shuffle=True))
    with pytest.raises(tfr_torch.TFRecordError, match="corrupt record data"):
        list(TFRecordDataset(path, SPEC, index="auto", rank=0, world_size=2))


@pytest.mark.parametrize("shuffle", [False, True])
def test_resuming_at_every_position_gives_the_rest_of_the_topped_up_share(tmp_path, shuffle):
    path = write(tmp_path / "a.tfrecord", range(20))
    corrupt(path, [1, 6])

    def make():
        return TFRecordDataset(path, SPEC, index="auto", shuffle=shuffle, seed=1, batch_size=3,
                               on_error=lambda err: None, rank=0, world_size=2)

    whole = [ids([b]) for b in make()]
    assert sum(map(len, whole)) == 10
    for k in range(len(whole) + 1):
        ds = make()
        iterator = iter(ds)
        head = [ids([next(iterator)]) for _ in range(k)]
        resumed = make()
        resumed.load_state_dict(ds.state_dict())
        assert head + [ids([b]) for b in resumed] == whole


def test_an_elastic_resume_keeps_equal_counts(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(24))
    corrupt(path, [2, 14])

    def make(rank, world):
        return TFRecordDataset(path, SPEC, index="auto", on_error=lambda err: None, rank=rank, world_size=world)

    states = []
    for r in range(2):  # 2 ranks read 4 records each, then stop
        ds = make(r, 2)
        iterator = iter(ds)
        for _ in range(4):
            next(iterator)
        states.append(ds.state_dict())
    merged = tfr_torch.elastic_state(states)
    counts = []
    for r in range(3):  # resumed by 3 ranks
        ds = make(r, 3)
        ds.load_state_dict(merged)
        counts.append(len(ids(ds)))
    assert len(set(counts)) == 1


def test_a_corrupt_header_where_the_index_is_checked_is_named_as_such(tmp_path):
    """The index check reads the first, middle and last records' headers: one that fails its CRC is said to be a
    corrupt record or a stale index (it was called a stale index only), naming the offset."""
    path = write(tmp_path / "a.tfrecord", range(9))
    offset = int(read_index(path + ".idx")[4, 0])
    raw = bytearray(Path(path).read_bytes())
    raw[offset] ^= 0xFF  # the middle record's length: its header CRC fails
    Path(path).write_bytes(bytes(raw))
    with pytest.raises(tfr_torch.IndexMismatchError, match=f"offset {offset}, but the header there fails its CRC "
                                                           r"\(a corrupt record, or a stale index"):
        TFRecordDataset(path, SPEC, index="auto", on_error="skip")


def test_one_rank_keeps_the_sidecar_count_under_skip(tmp_path):
    """Only several ranks need counts numbered as reading numbers records; one rank keeps the sidecar's len()."""
    with tfr_torch.ShardedWriter(tmp_path, "ds", "train", records_per_shard=20) as writer:
        for i in range(20):
            writer.write_example({"id": i})
    (shard,) = [str(p) for p in tmp_path.glob("ds-train.tfrecord-*") if p.suffix not in (".idx", ".seek")]
    corrupt(shard, [3])
    os.remove(shard + ".idx")
    one = TFRecordDataset(shard, SPEC, on_error="skip")
    assert len(one) == 20  # the sidecar's count (bad records included): no counting pass for one rank
    assert ids(quiet(one)) == [i for i in range(20) if i != 3]
    with pytest.warns(UserWarning, match="counting the records"):
        two = TFRecordDataset(shard, SPEC, on_error="skip", rank=0, world_size=2)
    assert len(two) == 9


def _log_error(log, err):
    with open(log, "a") as f:
        f.write(f"{err.offset}\n")


@pytest.mark.parametrize("bad", [[0], [7], [12], [5, 6]])
def test_without_an_index_each_bad_record_is_reported_once_by_all_readers(tmp_path, bad):
    """Every reader of an unindexed file reads it from its start to its own records: a bad record before them was
    reported by each (once per rank and DataLoader worker); now only by the reader whose records it lies among."""
    import functools

    path = write(tmp_path / "a.tfrecord", range(13))  # 12 good records with one bad (4 a rank): all read
    corrupt(path, bad)
    offsets = sorted(int(read_index(path + ".idx")[b, 0]) for b in bad)
    os.remove(path + ".idx")
    log = tmp_path / "errors.log"
    report = functools.partial(_log_error, str(log))
    for workers in (0, 2):
        log.write_text("")
        for r in range(3):
            quiet(TFRecordDataset(path, SPEC, on_error=report, rank=r, world_size=3), num_workers=workers)
        assert sorted(int(line) for line in log.read_text().split()) == offsets, workers
