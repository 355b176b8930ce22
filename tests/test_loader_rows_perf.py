"""The faster per-record paths of the DataLoader rows give exactly what the plain paths give: records read by offset
in runs (RecordFile.read_many), IndexedTFRecordDataset.__getitems__ (one read, rows made as their final type, names
made only when asked for), ExamplePlan.rows / iter_rows(row_type=...), and TFRecordDataset's per-record items in
DataLoader workers. Equality only: speed lives in benchmarks/."""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.data.transport import Batch
from tfr_torch.errors import CorruptRecordError, DecodeError
from tfr_torch.format.location import RecordLocation
from tfr_torch.format.record_file import RecordFile

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64), "data": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "vec": tfr_torch.FixedLenFeature([3], torch.float32)}


def _example(i):
    return {"id": i, "data": bytes([i % 251]) * (i * 37 % 3000), "vec": [float(i), i + 0.5, -i]}


@pytest.fixture
def corpus(tmp_path, write_records):
    """Two indexed files of 30 and 25 Examples (ids 0..54)."""
    first = write_records(str(tmp_path / "a.tfrecord"), [_example(i) for i in range(30)], index=True)
    second = write_records(str(tmp_path / "b.tfrecord"), [_example(i) for i in range(30, 55)], index=True)
    return [first, second]


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _same(got[key], want[key])
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    else:
        assert got == want


def _in_worker(monkeypatch):
    import tfr_torch.data.dataset as dataset_module
    import tfr_torch.data.indexed as indexed_module

    info = types.SimpleNamespace(id=0, num_workers=1, seed=0, dataset=None)
    monkeypatch.setattr(indexed_module, "get_worker_info", lambda: info)
    monkeypatch.setattr(dataset_module, "get_worker_info", lambda: info)


# ----- records read by offset in runs ------------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["file order", "reversed", "runs and gaps", "repeated", "shuffled"])
def test_read_many_in_any_order_gives_each_record_as_read_alone(corpus, backend, order):
    index = tfr_torch.IndexedTFRecordDataset(corpus[0]).offsets[0]
    rows = list(range(30))
    if order == "reversed":
        rows.reverse()
    elif order == "runs and gaps":
        rows = [0, 1, 2, 5, 6, 7, 8, 20, 3, 4, 29]
    elif order == "repeated":
        rows = [4, 4, 5, 5, 6, 7, 7]
    elif order == "shuffled":
        random.Random(3).shuffle(rows)
    with RecordFile(corpus[0]) as f:
        want = [f.read(int(index[r, 0]), int(index[r, 1])) for r in rows]
        got = f.read_many(index[rows, 0], index[rows, 1])
    assert got == want


def test_a_corrupt_record_inside_a_run_raises_what_it_raises_alone(tmp_path, write_records, backend):
    path = write_records(str(tmp_path / "c.tfrecord"), [_example(i) for i in range(10)], index=True)
    index = tfr_torch.IndexedTFRecordDataset(path).offsets[0]
    with open(path, "r+b") as f:  # one data byte of record 6
        f.seek(int(index[6, 0]) + 12)
        byte = f.read(1)
        f.seek(int(index[6, 0]) + 12)
        f.write(bytes([byte[0] ^ 0xFF]))
    with RecordFile(path) as f:
        assert f.read_many(index[2:6, 0], index[2:6, 1]) == [f.read(int(o), int(n)) for o, n in index[2:6].tolist()]
        with pytest.raises(CorruptRecordError) as alone:
            f.read(int(index[6, 0]), int(index[6, 1]))
        with pytest.raises(CorruptRecordError) as together:
            f.read_many(index[3:9, 0], index[3:9, 1])
    assert str(together.value) == str(alone.value)
    assert together.value.offset == alone.value.offset == int(index[6, 0])


# ----- IndexedTFRecordDataset.__getitems__ ------------------------------------------------------------------------

@pytest.mark.parametrize("worker", [False, True])
@pytest.mark.parametrize("features", [SPEC, None])
@pytest.mark.parametrize("location_key", [None, "where"])
def test_getitems_equals_each_item(corpus, monkeypatch, backend, worker, features, location_key):
    if features is None and location_key is not None:
        pytest.skip("location_key needs decoded items")
    if worker:
        _in_worker(monkeypatch)
    ds = tfr_torch.IndexedTFRecordDataset(corpus, features, location_key=location_key)
    for indices in ([0, 1, 2, 3], list(range(10, 30)), [28, 29, 30, 31], [54, 3, 40, 3, -1], list(range(55))[::-1],
                    [np.int64(5), np.int32(6)]):
        got = ds.__getitems__(indices)
        want = [ds[i] for i in indices]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
            if features is not None:
                assert type(g) is (Batch if worker and tfr_torch.data.transport.shared_memory_available() else dict)


def test_getitems_with_a_transform_gets_plain_dicts(corpus, monkeypatch):
    _in_worker(monkeypatch)
    seen = []
    ds = tfr_torch.IndexedTFRecordDataset(corpus, SPEC, transform=lambda row: seen.append(type(row)) or row)
    ds.__getitems__([1, 2, 3])
    assert seen == [dict, dict, dict]


def test_getitems_refuses_what_getitem_refuses(corpus):
    ds = tfr_torch.IndexedTFRecordDataset(corpus, SPEC)
    for bad in ([1, 55], [1, -56], [1, True], [1, 2.0]):
        with pytest.raises((IndexError, TypeError)) as together:
            ds.__getitems__(bad)
        with pytest.raises(type(together.value)) as alone:
            for i in bad:
                ds[i]
        assert str(together.value) == str(alone.value)


def test_a_record_that_does_not_decode_is_named_by_its_location(tmp_path, write_records, backend):
    records = [tfr_torch.encode_example(_example(i)) for i in range(6)]
    records[4] = tfr_torch.encode_example({"id": [1, 2], "data": b"", "vec": [0.0, 0.0, 0.0]})  # two ids
    path = write_records(str(tmp_path / "bad.tfrecord"), records, index=True)
    ds = tfr_torch.IndexedTFRecordDataset(path, SPEC)
    with pytest.raises(DecodeError) as alone:
        ds[4]
    with pytest.raises(DecodeError) as together:
        ds.__getitems__([2, 3, 4, 5])
    assert str(together.value) == str(alone.value)
    assert (together.value.path, together.value.offset) == (path, ds.locate(4)[1])


# ----- ExamplePlan.rows / iter_rows --------------------------------------------------------------------------------

@pytest.mark.parametrize("row_type", [dict, Batch])
def test_rows_are_each_records_parse_single_example(backend, row_type):
    records = [tfr_torch.encode_example(_example(i)) for i in range(7)]
    plan = tfr_torch.compile_features(SPEC)
    for rows in (list(plan.rows(records, row_type=row_type)), list(plan.iter_rows(records, row_type=row_type))):
        assert len(rows) == 7
        for row, record in zip(rows, records):
            assert type(row) is row_type
            _same(dict(row), tfr_torch.parse_single_example(record, SPEC))


def test_rows_of_an_empty_spec_are_empty_dicts(backend):
    records = [tfr_torch.encode_example(_example(i)) for i in range(3)]
    assert list(tfr_torch.compile_features({}).rows(records)) == [{}, {}, {}]
    assert list(tfr_torch.compile_features({}).iter_rows(records)) == [{}, {}, {}]


@pytest.mark.parametrize("row_type", [dict, Batch])
def test_rows_before_a_bad_record_come_out_then_its_error(backend, row_type):
    records = [tfr_torch.encode_example(_example(i)) for i in range(5)]
    records[3] = b"\xff\xff not an Example"
    names = [RecordLocation("f", 100 * i) for i in range(5)]
    plan = tfr_torch.compile_features(SPEC)
    with pytest.raises(DecodeError) as alone:
        plan.parse(records[3:4], names[3:4], single=True)
    for rows in (plan.rows(records, names, row_type=row_type), plan.iter_rows(records, names, row_type=row_type)):
        got = []
        with pytest.raises(DecodeError) as together:
            for row in rows:
                got.append(row)
        assert [int(row["id"]) for row in got] == [0, 1, 2]
        assert all(type(row) is row_type for row in got)
        assert str(together.value) == str(alone.value)


# ----- TFRecordDataset's per-record items ----------------------------------------------------------------------------

@pytest.mark.parametrize("location_key", [None, "where"])
@pytest.mark.parametrize("transform", [None, "add"])
def test_per_record_items_in_a_worker_equal_the_ones_in_the_process(corpus, monkeypatch, backend, location_key,
                                                                    transform):
    seen = []

    def add(row):
        seen.append(type(row))
        row["extra"] = 1
        return row

    ds = tfr_torch.TFRecordDataset(corpus, SPEC, index="auto", location_key=location_key,
                                   transform=add if transform else None)
    want = list(ds)
    assert all(type(row) is dict for row in want)
    _in_worker(monkeypatch)
    seen.clear()
    got = list(ds)
    assert len(got) == len(want) == 55
    shm = tfr_torch.data.transport.shared_memory_available()
    for g, w in zip(got, want):
        _same(dict(g), dict(w))
        assert type(g) is (Batch if shm else dict)
    if transform:
        assert seen and set(seen) == {dict}  # a transform gets plain dicts, as before


def test_per_record_items_resume_where_the_state_says(corpus, monkeypatch):
    _in_worker(monkeypatch)
    ds = tfr_torch.TFRecordDataset(corpus, SPEC, index="auto")
    it = iter(ds)
    first = [int(next(it)["id"]) for _ in range(37)]
    state = ds.state_dict()
    again = tfr_torch.TFRecordDataset(corpus, SPEC, index="auto")
    again.load_state_dict(state)
    rest = [int(row["id"]) for row in again]
    assert first + rest == list(range(55))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("dataset", ["iterable", "indexed"])
def test_collated_batches_through_dataloader_workers(corpus, workers, dataset):
    if dataset == "iterable":
        ds = tfr_torch.TFRecordDataset(corpus, SPEC, index="auto")
    else:
        ds = tfr_torch.IndexedTFRecordDataset(corpus, SPEC)
    got = list(DataLoader(ds, batch_size=8, num_workers=workers))
    assert all(type(batch) is dict for batch in got)
    ids = sorted(i for batch in got for i in batch["id"].tolist())
    assert ids == list(range(55))
    for batch in got:
        assert batch["id"].dtype == torch.int64 and batch["vec"].dtype == torch.float32
        assert batch["vec"].shape == (len(batch["id"]), 3)
        for i, data, vec in zip(batch["id"].tolist(), batch["data"], batch["vec"].tolist()):
            assert data == _example(i)["data"] and vec == _example(i)["vec"]
