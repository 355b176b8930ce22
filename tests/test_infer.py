"""infer_features from files: records sampled from every file (a per-file budget), what the proposal is based on,
keys not every record carries; record_kind; the spec `reshard` writes into its sidecar."""

import json

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import FixedLenFeature, VarLenFeature
from tfr_torch.decode.infer import format_features, record_kind
from tfr_torch.errors import DecodeError


def write(path, records):
    with tfr_torch.TFRecordWriter(path) as w:
        for record in records:
            w.write(record)
    return path


def examples(n, start=0, **extra):
    return [tfr_torch.encode_example({"id": start + i, **extra}) for i in range(n)]


def test_every_file_is_sampled_and_a_short_files_share_goes_to_the_next(tmp_path):
    write(tmp_path / "a.tfrecord", examples(2))  # short: 2 of its share of 4
    write(tmp_path / "b.tfrecord", examples(100, 100))
    write(tmp_path / "c.tfrecord", examples(100, 200, late=[1.0, 2.0]))  # only the last file has "late"
    spec = tfr_torch.infer_features(str(tmp_path / "*.tfrecord"), max_records=12)
    assert spec == {"id": FixedLenFeature([], torch.int64), "late": VarLenFeature(torch.float32)}
    # a: 2 records (budget 4), b: 10 // 2 = 5, c: the remaining 5
    assert (spec.records_read, spec.files_total, spec.files_to_end, spec.per_file) == (12, 3, 1, 5)
    assert spec.present == {"id": 12, "late": 5}
    assert spec.describe() == "Proposed from 12 records of 3 files (at most 5 from each; 1 read to the end)"


def test_at_least_one_record_from_each_file(tmp_path):
    paths = [write(tmp_path / f"{i}.tfrecord", examples(3, **({"x": 1} if i == 4 else {}))) for i in range(5)]
    spec = tfr_torch.infer_features(paths, max_records=2)
    assert spec.records_read == 5 and spec.present == {"id": 5, "x": 1}
    assert spec["x"] == VarLenFeature(torch.int64)


def test_all_records_read_is_said_so(tmp_path):
    paths = [write(tmp_path / "a.tfrecord", examples(3)), write(tmp_path / "b.tfrecord", examples(4))]
    spec = tfr_torch.infer_features(paths)
    assert spec.describe() == "Proposed from all 7 records of 2 files"
    assert tfr_torch.infer_features(examples(3)).describe() == "Proposed from 3 records"


def test_format_features_notes_partial_and_empty_keys(tmp_path):
    records = [tfr_torch.encode_example({"id": 1, "tags": [b"a"], "none": np.array([], np.int64)}),
               tfr_torch.encode_example({"id": 2})]
    spec = tfr_torch.infer_features(records)
    text = format_features(spec)
    assert "    'tags': tfr_torch.VarLenFeature(tfr_torch.string),  # in 1 of 2 records read" in text
    assert "    'id': tfr_torch.FixedLenFeature([], torch.int64)," in text
    namespace = {}
    exec(text, namespace)  # the printed code runs and rebuilds the spec
    assert namespace["features"] == dict(spec)
    plain = format_features({"id": FixedLenFeature([], torch.int64)})
    assert not plain.startswith("#")


def test_record_kind():
    assert record_kind(tfr_torch.encode_example({"a": 1})) == "example"
    assert record_kind(b"") == "example"
    assert record_kind(tfr_torch.serialize_tensor(np.zeros((2, 3), np.float32))) == "tensor"
    assert record_kind(tfr_torch.encode_sequence_example({}, {"t": [[1]]})) == "sequence_example"
    assert record_kind(b"\xff\xff\xff") == "raw"


def test_sequence_example_files_are_named_with_what_to_do(tmp_path):
    path = write(tmp_path / "s.tfrecord", [tfr_torch.encode_sequence_example({"id": 1}, {"tok": [[1], [2]]})])
    with pytest.raises(DecodeError) as raised:
        tfr_torch.infer_features(path)
    assert str(raised.value) == (f"{path}:0: record 0 is a tf.train.SequenceExample (feature lists 'tok'): "
                                 "infer_features proposes specs for tf.train.Example records only; write the "
                                 "context and sequence specs for parse_sequence_example by hand")


def test_reshard_sidecar_spec_sees_keys_of_later_files(tmp_path):
    from tfr_torch.tools.reshard import reshard

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        write(src / f"logs-{i:05d}-of-00003.tfrecord", examples(600, 1000 * i, **({"late": 1} if i == 2 else {})))
    paths = reshard(sorted(map(str, src.iterdir())), str(tmp_path / "out"), shard_size="1MB")
    assert paths == [f"{tmp_path}/out/logs-train.tfrecord-00000-of-00001"]
    sidecar = json.loads((tmp_path / "out" / "logs-train.tfr_torch.json").read_text())
    assert sidecar["records"] == 1800
    assert sidecar["features"] == {"id": {"kind": "FixedLen", "shape": [], "dtype": "int64"},
                                   "late": {"kind": "VarLen", "dtype": "int64"}}
    dataset = tfr_torch.TFRecordDataset(paths, features="auto", batch_size=600)
    batches = list(dataset)
    assert sum(len(b["id"]) for b in batches) == 1800
