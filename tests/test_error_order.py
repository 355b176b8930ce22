"""Where a corrupt record's error comes in the stream (on_error="raise"): after every item before it in the
reading order, as TensorFlow yields every record before a bad one. Records are read, CRC-checked and decoded a block
at a time (32 rows when decoding; a group of the epoch's order in the global shuffle), so a block holding a bad
record gives its good prefix first, then the error naming the bad record's file and offset. Batches (batch_size) are
the unit: the batch holding the bad record raises, every batch before it comes first (tf.data's batch() the same).

Checked for plain and GZIP files, read in file order and in the global shuffle (index and seek points), raw
records, decoded rows (also with a location_key), in the main process and in a DataLoader worker."""

from __future__ import annotations

import gzip

import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch

N = 100
SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}


def _records() -> list[bytes]:
    # records of different sizes, so offsets are not a multiple of one size
    return [tfr_torch.encode_example({"id": i, "pad": b"x" * (i % 7)}) for i in range(N)]


def _write(folder, bad: int, compression: str) -> tuple[str, int]:
    """A file of N records whose record `bad` has one data byte flipped; (its path, the bad record's offset in
    the uncompressed stream)."""
    plain = folder / "plain.tfrecord"
    with tfr_torch.TFRecordWriter(str(plain)) as writer:
        for record in _records():
            writer.write(record)
    data = bytearray(plain.read_bytes())
    offset = sum(len(r) + 16 for r in _records()[:bad])
    data[offset + 12 + 3] ^= 0x10  # inside the record's data: its data CRC fails, its header is good
    path = folder / ("bad.tfrecord.gz" if compression == "GZIP" else "bad.tfrecord")
    path.write_bytes(gzip.compress(bytes(data)) if compression == "GZIP" else bytes(data))
    tfr_torch.build_index(str(path))
    return str(path), offset


def _ids(item) -> list[int]:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return [int(tfr_torch.parse_single_example(bytes(item), SPEC)["id"])]
    return torch.as_tensor(item["id"]).reshape(-1).tolist()


def _order(shuffle: bool) -> list[int]:
    """The reading order of a good file's ids with these options (the bad file's is the same)."""
    if not shuffle:
        return list(range(N))
    # the order depends only on the record count, seed and epoch: read it from a good file of N records
    return _good_order


_good_order: list[int] = []


@pytest.fixture(scope="module", autouse=True)
def _shuffled_order(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    path = folder / "good.tfrecord"
    with tfr_torch.TFRecordWriter(str(path)) as writer:
        for record in _records():
            writer.write(record)
    tfr_torch.build_index(str(path))
    _good_order[:] = [i for item in tfr_torch.TFRecordDataset(str(path), SPEC, index="auto", shuffle=True, seed=3)
                      for i in _ids(item)]
    assert sorted(_good_order) == list(range(N)) and _good_order != list(range(N))


def _iterate(dataset, workers: int) -> tuple[list[int], BaseException]:
    got: list[int] = []
    items = dataset if workers == 0 else DataLoader(dataset, batch_size=None, num_workers=workers)
    with pytest.raises(tfr_torch.TFRecordError) as err:
        for item in items:
            got.extend(_ids(item))
    return got, err.value


CASES = [(position, what, 0) for position in (0, 1, 40, 70, 99) for what in ("raw", "rows", "rows with locations")]
CASES += [(40, what, 1) for what in ("raw", "rows")]  # in a DataLoader worker


@pytest.mark.parametrize("position,what,workers", CASES)
@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "global shuffle"])
@pytest.mark.parametrize("compression", ["", "GZIP"], ids=["plain", "gzip"])
def test_every_item_before_a_corrupt_record_comes_first(tmp_path, compression, shuffle, what, workers, position):
    """Fixed: the rows decoded ROW_CHUNK at a time lost the good records of the bad record's chunk (up to 31), and
    the global shuffle lost every record of the bad record's group that its order put before it."""
    order = _order(shuffle)
    bad = order[position]
    path, offset = _write(tmp_path, bad, compression)
    features = None if what == "raw" else SPEC
    key = "where" if what == "rows with locations" else None
    dataset = tfr_torch.TFRecordDataset(path, features, index="auto", shuffle=shuffle, seed=3, location_key=key)
    got, err = _iterate(dataset, workers)
    assert got == order[:position]
    assert isinstance(err, tfr_torch.CorruptRecordError)
    assert err.path == path and err.offset == offset


@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "global shuffle"])
@pytest.mark.parametrize("compression", ["", "GZIP"], ids=["plain", "gzip"])
def test_batches_before_the_bad_one_come_first(tmp_path, compression, shuffle):
    """Batches: the one holding the bad record raises (none of its records come out), every batch before it comes
    whole, in order."""
    order = _order(shuffle)
    bad = order[45]
    path, offset = _write(tmp_path, bad, compression)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=shuffle, seed=3, batch_size=8)
    got, err = _iterate(dataset, 0)
    assert got == order[:40]
    assert err.offset == offset


def test_skip_still_leaves_out_exactly_the_bad_record(tmp_path):
    """on_error="skip" in the global shuffle of a GZIP file: the order without the bad record, one warning."""
    order = _order(True)
    bad = order[10]
    path, _ = _write(tmp_path, bad, "GZIP")
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=3, on_error="skip")
    with pytest.warns(UserWarning):
        got = [i for item in dataset for i in _ids(item)]
    assert got == [i for i in order if i != bad]
