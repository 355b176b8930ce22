"""SequenceFeatures: tf.train.SequenceExample records in the datasets (TFRecordDataset batched and per record,
shuffled, through DataLoader workers, IndexedTFRecordDataset, torchdata's ExampleDecoder), equal to
parse_sequence_example / parse_single_sequence_example on the same records (those are checked against TensorFlow in
test_parse_golden.py); errors naming the file and offset; the spec checked where it is written; infer_features'
proposal for SequenceExamples (TensorFlow's golden file included) and `tfr-torch schema`'s code for it; the sidecar
that ShardedWriter writes and features="auto" reads back; reshard keeping the spec."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SequenceFeatures,
    VarLenFeature,
    encode_sequence_example,
    parse_sequence_example,
    parse_single_sequence_example,
)
from tfr_torch.decode.spec_code import format_features
from tfr_torch.errors import DecodeError
from golden_util import golden

SPEC = SequenceFeatures(
    context={"id": FixedLenFeature([], torch.int64), "name": FixedLenFeature([], tfr_torch.string),
             "tags": VarLenFeature(tfr_torch.string)},
    sequence={"frame": FixedLenSequenceFeature([2], torch.float32, allow_missing=True),
              "token": FixedLenSequenceFeature([], torch.int64, allow_missing=True)})
SPARSE_SPEC = SequenceFeatures(context={"id": FixedLenFeature([], torch.int64)},
                               sequence={"words": VarLenFeature(tfr_torch.string),
                                         "token": RaggedFeature(torch.int64)})


def record(i: int) -> bytes:
    """Record i: T = i % 5 steps (0 included), the lists present but for every 7th record."""
    steps = i % 5
    lists = {} if i % 7 == 3 else {"frame": [[float(i), float(t)] for t in range(steps)],
                                   "token": [[i * 10 + t] for t in range(steps)],
                                   "words": [np.array([b"w%d" % t] * (t % 3), dtype=bytes) for t in range(steps)]}
    return encode_sequence_example({"id": i, "name": b"n%d" % i, "tags": np.array([b"t"] * (i % 3), dtype=bytes)},
                                   lists)


def write(path, records, index=True):
    with tfr_torch.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    if index:
        tfr_torch.build_index(str(path), str(path) + ".idx")
    return str(path)


def same(a, b) -> None:
    """Equal nested results: tensors (dense or sparse) by value and dtype, lists, bytes and dicts."""
    if isinstance(a, torch.Tensor) and a.is_nested:  # jagged: its rows
        assert isinstance(b, torch.Tensor) and b.is_nested and a.dtype == b.dtype
        assert [t.tolist() for t in a.unbind()] == [t.tolist() for t in b.unbind()]
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        if a.is_sparse:
            a, b = a.coalesce(), b.coalesce()
            assert torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())
        else:
            assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for key in a:
            same(a[key], b[key])
    elif isinstance(a, (list, tuple)) and not isinstance(a, tfr_torch.RaggedTensor):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, tfr_torch.RaggedTensor):
        assert isinstance(b, tfr_torch.RaggedTensor)
        assert a.to_list() == b.to_list()
    else:
        assert a == b


def expected_batch(records, spec):
    context, lists, lengths = parse_sequence_example(records, spec.context, spec.sequence)
    return {"context": context, "feature_lists": lists, "lengths": lengths}


def expected_row(data, spec):
    context, lists = parse_single_sequence_example(data, spec.context, spec.sequence)
    return {"context": context, "feature_lists": lists}


# ------------------------------------------------------------------------------------------------ the spec


def test_the_spec_is_checked_where_it_is_written():
    with pytest.raises(TypeError, match="context feature 'id' is given as 'int'"):
        SequenceFeatures(context={"id": "int"})
    with pytest.raises(TypeError, match="sequence feature 'x' is given as a bare dtype"):
        SequenceFeatures(sequence={"x": torch.int64})
    with pytest.raises(TypeError, match="context must be a dict"):
        SequenceFeatures(context=[("id", FixedLenFeature([], torch.int64))])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="both are empty"):
        SequenceFeatures()
    with pytest.raises((TypeError, ValueError), match="context_features"):  # TF takes none in the context either
        SequenceFeatures(context={"x": FixedLenSequenceFeature([], torch.int64, allow_missing=True)})


def test_the_spec_compares_pickles_and_reads_back_from_its_repr():
    import pickle

    assert pickle.loads(pickle.dumps(SPEC)) == SPEC
    assert SPEC != SequenceFeatures(context=SPEC.context)
    rebuilt = eval(repr(SPEC), {"SequenceFeatures": SequenceFeatures, "FixedLenFeature": FixedLenFeature,
                               "VarLenFeature": VarLenFeature, "FixedLenSequenceFeature": FixedLenSequenceFeature,
                               "torch": torch, "tfr_torch": tfr_torch})
    assert rebuilt == SPEC


# ------------------------------------------------------------------------------------------------ datasets


@pytest.mark.parametrize("spec", [SPEC, SPARSE_SPEC], ids=["dense", "sparse"])
def test_batches_are_parse_sequence_examples(tmp_path, backend, spec):
    records = [record(i) for i in range(23)]
    path = write(tmp_path / "s.tfrecord", records)
    batches = list(tfr_torch.TFRecordDataset(path, spec, batch_size=8))
    assert [len(b["context"]["id"]) for b in batches] == [8, 8, 7]
    for k, batch in enumerate(batches):
        same(batch, expected_batch(records[8 * k: 8 * k + 8], spec))
    assert len(list(tfr_torch.TFRecordDataset(path, spec, batch_size=8, drop_last=True))) == 2


@pytest.mark.parametrize("spec", [SPEC, SPARSE_SPEC], ids=["rows-cut-from-a-batch", "record-by-record"])
def test_records_are_parse_single_sequence_examples(tmp_path, backend, spec):
    records = [record(i) for i in range(23)]
    path = write(tmp_path / "s.tfrecord", records)
    rows = list(tfr_torch.TFRecordDataset(path, spec))
    assert len(rows) == len(records)
    for row, data in zip(rows, records):
        same(row, expected_row(data, spec))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.integers(-5, 5)), min_size=2, max_size=9),
       st.booleans())
def test_rows_cut_from_a_batch_equal_each_record_alone(shapes, with_default):
    """iter_rows' fast path (one batch, each list cut to its record's steps) against each record parsed alone."""
    records = [encode_sequence_example({"id": v, "s": b"x" * steps},
                                       {} if missing else {"v": [[v, t] for t in range(steps)],
                                                           "b": [[b"%d" % t] for t in range(steps)]})
               for steps, missing, v in shapes]
    spec = SequenceFeatures(
        context={"id": FixedLenFeature([], torch.int64),
                 "s": FixedLenFeature([], tfr_torch.string, default_value=b"" if with_default else None)},
        sequence={"v": FixedLenSequenceFeature([2], torch.int64, allow_missing=True),
                  "b": FixedLenSequenceFeature([], tfr_torch.string, allow_missing=True)})
    plan = spec.plan()
    assert plan._sliceable
    names = [f"r{i}" for i in range(len(records))]
    for row, data in zip(plan.iter_rows(records, names), records):
        same(row, expected_row(data, spec))


def test_workers_and_shuffle_read_every_record_once_with_its_values(tmp_path):
    records = [record(i) for i in range(60)]
    paths = [write(tmp_path / f"s{k}.tfrecord", records[k::3]) for k in range(3)]
    by_id = {i: records[i] for i in range(60)}
    for shuffle in (False, True):
        dataset = tfr_torch.TFRecordDataset(paths, SPEC, batch_size=7, shuffle=shuffle, index="auto")
        seen = []
        for batch in DataLoader(dataset, batch_size=None, num_workers=2):
            ids = batch["context"]["id"].tolist()
            seen += ids
            same(batch, expected_batch([by_id[i] for i in ids], SPEC))  # the values travel intact
        assert sorted(seen) == list(range(60))
        if shuffle:
            assert seen != sorted(seen)


def test_a_bad_record_is_named_by_file_and_offset(tmp_path, backend):
    records = [record(i) for i in range(6)]
    records[4] = encode_sequence_example({"id": 4, "name": b"n"}, {"token": [[1], [2, 3]]})  # a step of 2 values
    path = write(tmp_path / "s.tfrecord", records)
    offset = sum(len(r) + 16 for r in records[:4])
    with pytest.raises(DecodeError) as raised:
        list(tfr_torch.TFRecordDataset(path, SPEC, batch_size=3))
    assert (raised.value.path, raised.value.offset) == (path, offset) and "'token'" in str(raised.value)
    rows = tfr_torch.TFRecordDataset(path, SPEC)
    got = []
    with pytest.raises(DecodeError) as raised:
        for row in rows:
            got.append(int(row["context"]["id"]))
    assert got == [0, 1, 2, 3]  # the rows before it come out (iter_rows falls back to one at a time)
    assert (raised.value.path, raised.value.offset) == (path, offset)


def test_a_required_feature_list_missing_is_an_error_naming_it(tmp_path):
    spec = SequenceFeatures(sequence={"token": FixedLenSequenceFeature([], torch.int64)})  # allow_missing=False
    path = write(tmp_path / "s.tfrecord", [record(0), record(3)])  # record 3 has no feature lists
    with pytest.raises(DecodeError, match="'token'.*required but missing") as raised:
        list(tfr_torch.TFRecordDataset(path, spec, batch_size=2))
    assert raised.value.offset == len(record(0)) + 16


def test_indexed_dataset_and_nodes_decoder(tmp_path):
    records = [record(i) for i in range(12)]
    path = write(tmp_path / "s.tfrecord", records)
    indexed = tfr_torch.IndexedTFRecordDataset(path, SPEC)
    same(indexed[5], expected_row(records[5], SPEC))
    for row, i in zip(indexed.__getitems__([9, 2, 11]), [9, 2, 11]):
        same(row, expected_row(records[i], SPEC))
    pytest.importorskip("torchdata.nodes")
    from tfr_torch.nodes import ExampleDecoder

    decode = ExampleDecoder(SPEC)
    same(decode(records[:4]), expected_batch(records[:4], SPEC))
    same(decode(records[7]), expected_row(records[7], SPEC))


def test_cached_dataset_replays_sequence_batches(tmp_path):
    records = [record(i) for i in range(20)]
    path = write(tmp_path / "s.tfrecord", records)
    for directory in (None, tmp_path / "cache"):
        cached = tfr_torch.CachedDataset(tfr_torch.TFRecordDataset(path, SPARSE_SPEC, batch_size=8), directory)
        first, second = list(cached), list(cached)  # the second epoch is replayed
        assert len(first) == len(second) == 3
        for k, (a, b) in enumerate(zip(first, second)):
            same(a, expected_batch(records[8 * k: 8 * k + 8], SPARSE_SPEC))
            same(b, a)


# ------------------------------------------------------------------------------------------------ infer_features


def test_infer_proposes_fixed_where_every_step_holds_the_same_count():
    records = [encode_sequence_example({"id": i, "opt": np.ones(i % 2, np.float32)},
                                       {"frame": [[0.5, 1.5]] * i,              # 2 values a step: FixedLen [2]
                                        "tok": [[1] * (t + 1) for t in range(i)],  # steps differ: VarLen
                                        **({"late": [[b"x"]]} if i > 2 else {})})  # not in every record
               for i in range(5)]
    spec = tfr_torch.infer_features(records)
    assert isinstance(spec, SequenceFeatures)
    assert spec.context == {"id": FixedLenFeature([], torch.int64), "opt": VarLenFeature(torch.float32)}
    assert spec.sequence == {"frame": FixedLenSequenceFeature([2], torch.float32),
                             "late": FixedLenSequenceFeature([], tfr_torch.string, allow_missing=True),
                             "tok": VarLenFeature(torch.int64)}
    assert (spec.records_read, spec.present, spec.list_present) == (5, {"id": 5, "opt": 5},  # [] is present
                                                                    {"frame": 5, "late": 2, "tok": 5})
    parse_sequence_example(records, spec.context, spec.sequence)  # the proposal reads what it came from


def test_infer_lists_without_values_and_examples_among_sequence_examples():
    records = [tfr_torch.encode_example({"id": 1}),  # an Example: a SequenceExample without feature lists
               encode_sequence_example({"id": 2}, {"none": [], "empty": [np.array([], np.int64)] * 2, "x": [[1]]})]
    spec = tfr_torch.infer_features(records)
    assert spec.sequence == {"empty": VarLenFeature(torch.int64),  # steps of 0 values: not a shape [0]
                             "x": FixedLenSequenceFeature([], torch.int64, allow_missing=True)}
    assert spec.empty_lists == ["none"]
    assert spec.context == {"id": FixedLenFeature([], torch.int64)}


def test_infer_refuses_a_list_of_two_kinds():
    records = [encode_sequence_example({}, {"x": [[1]]}), encode_sequence_example({}, {"x": [[1.0]]})]
    with pytest.raises(DecodeError, match="feature list 'x' holds float and int64 values"):
        tfr_torch.infer_features(records)


def test_infer_on_tensorflows_golden_file_and_its_printed_code():
    path = str(golden("sequence_examples.tfrecord"))  # written by TensorFlow 2.21 (tests/data/make_golden.py)
    spec = tfr_torch.infer_features(path)
    assert spec.sequence["scores"] == FixedLenSequenceFeature([2], torch.float32, allow_missing=True)
    assert spec.sequence["tokens"] == VarLenFeature(torch.int64)
    assert spec.sequence["empty_steps"] == VarLenFeature(torch.float32)
    assert spec.empty_lists == ["also_empty", "empty_list"]
    code = format_features(spec)
    namespace: dict = {}
    exec(code, namespace)
    assert namespace["features"] == spec
    assert "# 'also_empty': no step of any record read holds values" in code
    assert "'scores': tfr_torch.FixedLenSequenceFeature([2], torch.float32, allow_missing=True)," in code
    rows = list(tfr_torch.TFRecordDataset(path, spec))  # and the proposal reads the whole file
    assert len(rows) == 5 and rows[0]["feature_lists"]["scores"].shape == (3, 2)


def test_schema_prints_sequence_features(tmp_path):
    from test_cli import run

    path = write(tmp_path / "s.tfrecord", [record(i) for i in range(10)], index=False)
    rc, out, err = run("schema", path)
    assert (rc, err) == (0, "")
    assert "features = tfr_torch.SequenceFeatures(" in out
    namespace: dict = {}
    exec(out, namespace)
    assert namespace["features"] == tfr_torch.infer_features(path)


# ------------------------------------------------------------------------------------------------ the sidecar


def test_sharded_writer_stores_the_spec_and_auto_reads_it_back(tmp_path):
    records = [record(i) for i in range(20)]
    with tfr_torch.ShardedWriter(tmp_path, "seq", "train", records_per_shard=8, features=SPEC) as writer:
        for data in records:
            writer.write(data)
    sidecar = json.loads((tmp_path / "seq-train.tfr_torch.json").read_text())
    assert sorted(sidecar["features"]) == ["id", "name", "tags"]  # the context: what an Example reader can use
    assert sorted(sidecar["sequence_features"]) == ["frame", "token"]
    dataset = tfr_torch.TFRecordDataset(writer.paths, "auto", batch_size=20)
    assert dataset.features == SPEC
    (batch,) = list(dataset)
    same(batch, expected_batch(records, SPEC))


def test_a_sidecar_spec_that_is_not_one_is_named(tmp_path):
    with tfr_torch.ShardedWriter(tmp_path, "seq", "train", features=SPEC) as writer:
        writer.write(record(1))
    car = tmp_path / "seq-train.tfr_torch.json"
    data = json.loads(car.read_text())
    data["sequence_features"]["frame"] = {"kind": "FixedLenSequence", "shape": [2]}  # no dtype
    car.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"{car}: the features spec it stores cannot be read"):
        tfr_torch.TFRecordDataset(writer.paths, "auto")
    data["sequence_features"] = ["frame"]
    car.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a dict of feature entries"):
        tfr_torch.TFRecordDataset(writer.paths, "auto")


def test_writers_write_sequence_examples(tmp_path):
    with tfr_torch.TFRecordWriter(tmp_path / "one.tfrecord") as w:
        w.write_sequence_example({"id": 1}, {"token": [[4], [5]]})
    with tfr_torch.ShardedWriter(tmp_path, "set", "train", features=SPEC) as sharded:
        sharded.write_sequence_example({"id": 1}, {"token": [[4], [5]]})
    expected = encode_sequence_example({"id": 1}, {"token": [[4], [5]]})
    assert list(tfr_torch.read_records(tmp_path / "one.tfrecord")) == [expected]
    assert list(tfr_torch.read_records(sharded.paths[0])) == [expected]


def test_example_sidecars_are_unchanged(tmp_path):
    with tfr_torch.ShardedWriter(tmp_path, "ex", "train", features={"id": FixedLenFeature([], torch.int64)}) as w:
        w.write_example({"id": 1})
    assert "sequence_features" not in json.loads((tmp_path / "ex-train.tfr_torch.json").read_text())


def test_tfds_folders_refuse_sequence_examples(tmp_path):
    with pytest.raises(ValueError, match="TensorFlow Datasets folders hold tf.train.Example records"):
        tfr_torch.ShardedWriter(tmp_path, "seq", "train", features=SPEC, tfds={"version": "1.0.0"})


def test_reshard_keeps_a_sequence_spec(tmp_path):
    from tfr_torch.tools.reshard import reshard

    records = [record(i) for i in range(30)]
    random.Random(0).shuffle(records)
    src = write(tmp_path / "old.tfrecord", records, index=False)
    out = reshard([src], str(tmp_path / "new"), shard_size="1KB")
    assert len(out) > 1
    dataset = tfr_torch.TFRecordDataset(out, "auto", batch_size=30)
    assert isinstance(dataset.features, SequenceFeatures)
    (batch,) = list(dataset)
    same(batch, expected_batch(records, dataset.features))
    with pytest.raises(ValueError, match="TensorFlow Datasets folders hold tf.train.Example"):
        reshard([src], str(tmp_path / "tfds"), tfds=True)


# ------------------------------------------------------------------------------------------------ integrations


def _sequence_shards(tmp_path):
    with tfr_torch.ShardedWriter(tmp_path / "seq", "seq", "train", features=SPEC) as writer:
        for i in range(4):
            writer.write(record(i))
    return writer.paths


def test_hugging_face_loads_sequence_examples_as_parse_single_sequence_example(tmp_path):
    pytest.importorskip("datasets")
    from tfr_torch import hf

    paths = _sequence_shards(tmp_path)
    for n, features in enumerate(("auto", SPEC)):
        rows = list(hf.load(paths, features, split="train", cache_dir=str(tmp_path / f"cache{n}")))
        assert len(rows) == 4
        for i, row in enumerate(rows):
            context, lists = tfr_torch.parse_single_sequence_example(record(i), SPEC.context, SPEC.sequence)
            assert row["context"]["id"] == int(context["id"]) and row["context"]["name"] == context["name"]
            assert row["context"]["tags"] == list(context["tags"])
            assert np.allclose(np.asarray(row["feature_lists"]["frame"], dtype=np.float32).reshape(-1, 2),
                               lists["frame"].numpy())
            assert list(row["feature_lists"]["token"]) == lists["token"].tolist()


def test_ray_reads_sequence_examples_and_refuses_to_write_them(tmp_path):
    pytest.importorskip("ray.data")
    from tfr_torch.ray.datasink import TFRecordDatasink
    from tfr_torch.ray.datasource import TFRecordDatasource

    paths = _sequence_shards(tmp_path)
    assert isinstance(TFRecordDatasource(paths, "auto").features, SequenceFeatures)
    assert TFRecordDatasource(paths, SPEC).features == SPEC
    with pytest.raises(TypeError, match="writes rows as tf.train.Example records"):
        TFRecordDatasink(str(tmp_path / "out"), "x", "train", "1MB", None, features=SPEC)


def test_printed_code_keeps_defaults():
    spec = {"a": FixedLenFeature([2], torch.int64, default_value=[1, 2]),
            "s": FixedLenFeature([], tfr_torch.string, default_value=b"x"),
            "q": FixedLenSequenceFeature([], torch.float32, allow_missing=True, default_value=0.5)}
    namespace: dict = {}
    exec(format_features(spec), namespace)
    assert namespace["features"] == spec
