"""infer_features from files: records sampled from every file (a per-file budget), what the proposal is based on,
keys not every record carries; record_kind; the spec `reshard` writes into its sidecar. Then (on both backends)
infer_features from records, files and globs, its errors, and `tfr-torch schema`, whose printed code gives the spec."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import FixedLenFeature, VarLenFeature, encode_example, parse_example
from tfr_torch.decode.record_kinds import record_kind
from tfr_torch.decode.spec_code import format_features
from tfr_torch.errors import DecodeError

REPO = Path(__file__).resolve().parent.parent


def examples(n, start=0, **extra):
    return [tfr_torch.encode_example({"id": start + i, **extra}) for i in range(n)]


def test_every_file_is_sampled_and_a_short_files_share_goes_to_the_next(tmp_path, write_records):
    write_records(tmp_path / "a.tfrecord", examples(2))  # short: 2 of its share of 4
    write_records(tmp_path / "b.tfrecord", examples(100, 100))
    write_records(tmp_path / "c.tfrecord", examples(100, 200, late=[1.0, 2.0]))  # only the last file has "late"
    spec = tfr_torch.infer_features(str(tmp_path / "*.tfrecord"), max_records=12)
    assert spec == {"id": FixedLenFeature([], torch.int64), "late": VarLenFeature(torch.float32)}
    # a: 2 records (budget 4), b: 10 // 2 = 5, c: the remaining 5
    assert (spec.records_read, spec.files_total, spec.files_to_end, spec.per_file) == (12, 3, 1, 5)
    assert spec.present == {"id": 12, "late": 5}
    assert spec.describe() == "Proposed from 12 records of 3 files (at most 5 from each; 1 read to the end)"


def test_at_least_one_record_from_each_file(tmp_path, write_records):
    paths = [write_records(tmp_path / f"{i}.tfrecord", examples(3, **({"x": 1} if i == 4 else {}))) for i in range(5)]
    spec = tfr_torch.infer_features(paths, max_records=2)
    assert spec.records_read == 5 and spec.present == {"id": 5, "x": 1}
    assert spec["x"] == VarLenFeature(torch.int64)


def test_all_records_read_is_said_so(tmp_path, write_records):
    paths = [write_records(tmp_path / "a.tfrecord", examples(3)), write_records(tmp_path / "b.tfrecord", examples(4))]
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


def test_sequence_example_files_get_a_sequence_spec(tmp_path, write_records):
    """SequenceExamples get a SequenceFeatures (tests/test_sequence_features.py has the rules); it was an error."""
    path = write_records(tmp_path / "s.tfrecord", [tfr_torch.encode_sequence_example({"id": 1}, {"tok": [[1], [2]]})])
    spec = tfr_torch.infer_features(path)
    assert spec == tfr_torch.SequenceFeatures({"id": FixedLenFeature([], torch.int64)},
                                              {"tok": tfr_torch.FixedLenSequenceFeature([], torch.int64)})
    assert (spec.records_read, spec.files_total, spec.present, spec.list_present) == (1, 1, {"id": 1}, {"tok": 1})


def test_reshard_sidecar_spec_sees_keys_of_later_files(tmp_path, write_records):
    from tfr_torch.tools.reshard import reshard

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        write_records(src / f"logs-{i:05d}-of-00003.tfrecord",
                      examples(600, 1000 * i, **({"late": 1} if i == 2 else {})))
    paths = reshard(sorted(map(str, src.iterdir())), str(tmp_path / "out"), shard_size="1MB")
    assert paths == [f"{tmp_path}/out/logs-train.tfrecord-00000-of-00001"]
    sidecar = json.loads((tmp_path / "out" / "logs-train.tfr_torch.json").read_text())
    assert sidecar["records"] == 1800
    assert sidecar["features"] == {"id": {"kind": "FixedLen", "shape": [], "dtype": "int64"},
                                   "late": {"kind": "VarLen", "dtype": "int64"}}
    dataset = tfr_torch.TFRecordDataset(paths, features="auto", batch_size=600)
    batches = list(dataset)
    assert sum(len(b["id"]) for b in batches) == 1800


# ------------------------------------------------------------------ from records, from files and globs; the CLI

def _infer_records() -> list[bytes]:
    return [encode_example({"id": 0, "emb": [0.5, 1.5], "name": b"a", "tokens": [1, 2, 3], "maybe": 1.0,
                            "words": [b"x"]}),
            encode_example({"id": 1, "emb": [2.5, 3.5], "name": b"b", "tokens": [4], "words": [b"y", b"z"]}),
            encode_example({"id": 2, "emb": [4.5, 5.5], "name": b"c", "tokens": np.array([], dtype=np.int64),
                            "words": [b"w"]})]


INFERRED = {
    "emb": FixedLenFeature([2], torch.float32),
    "id": FixedLenFeature([], torch.int64),
    "maybe": VarLenFeature(torch.float32),
    "name": FixedLenFeature([], tfr_torch.string),
    "tokens": VarLenFeature(torch.int64),
    "words": VarLenFeature(tfr_torch.string),
}


@pytest.mark.usefixtures("backend")  # on the reference and the compiled core
def test_infer_features_from_records():
    spec = tfr_torch.infer_features(_infer_records())
    assert spec == INFERRED
    out = parse_example(_infer_records(), spec)  # and the proposal parses the records it came from
    assert out["id"].tolist() == [0, 1, 2]
    assert out["name"] == [b"a", b"b", b"c"]


@pytest.mark.usefixtures("backend")  # on the reference and the compiled core
def test_infer_features_kind_conflict_names_key():
    records = [encode_example({"a": 1, "b": 1}), encode_example({"a": 1, "b": 1.0})]
    with pytest.raises(DecodeError) as raised:
        tfr_torch.infer_features(records)
    assert str(raised.value) == "feature 'b' holds float and int64 values in different records; a spec needs one kind"


@pytest.mark.usefixtures("backend")  # on the reference and the compiled core
def test_infer_features_reads_at_most_max_records():
    def records():
        yield encode_example({"a": 1, "b": [1.0, 2.0]})
        yield encode_example({"a": 2, "b": [3.0, 4.0]})
        raise AssertionError("infer_features read past max_records")

    assert tfr_torch.infer_features(records(), max_records=2) == {"a": FixedLenFeature([], torch.int64),
                                                                  "b": FixedLenFeature([2], torch.float32)}
    assert tfr_torch.infer_features(records(), max_records=1) == {"a": FixedLenFeature([], torch.int64),
                                                                  "b": FixedLenFeature([2], torch.float32)}
    with pytest.raises(ValueError, match=r"max_records must be a positive int, got 0"):
        tfr_torch.infer_features(records(), max_records=0)
    with pytest.raises(ValueError, match=r"infer_features found no records"):
        tfr_torch.infer_features([])


@pytest.mark.usefixtures("backend")  # on the reference and the compiled core
def test_infer_features_stops_reading_files_at_max_records(tmp_path, write_records):
    path = tmp_path / "a.tfrecord"
    records = [encode_example({"a": 1}), encode_example({"a": [1, 2]}), b"not an example"]
    write_records(path, records)
    assert tfr_torch.infer_features(path, max_records=1) == {"a": FixedLenFeature([], torch.int64)}
    assert tfr_torch.infer_features(str(path), max_records=2) == {"a": VarLenFeature(torch.int64)}
    with pytest.raises(DecodeError, match=r"record 2 is not a tf.train.Example") as raised:
        tfr_torch.infer_features(path)
    # a data error from a file says where: the file and the record's byte offset (12-byte header, 4-byte footer)
    assert raised.value.path == str(path)
    assert raised.value.offset == sum(16 + len(r) for r in records[:2])
    assert str(raised.value).startswith(f"{path}:{raised.value.offset}: ")


@pytest.mark.usefixtures("backend")  # on the reference and the compiled core
def test_infer_features_from_file_and_glob(tmp_path, write_records):
    records = _infer_records()
    one = write_records(tmp_path / "one.tfrecord", records[:2])
    write_records(tmp_path / "two.tfrecord", records[2:])
    from_file = tfr_torch.infer_features(one)
    assert from_file["tokens"] == VarLenFeature(torch.int64)
    assert from_file["words"] == VarLenFeature(tfr_torch.string)
    assert from_file["maybe"] == VarLenFeature(torch.float32)  # missing from record 1
    assert tfr_torch.infer_features(str(tmp_path / "*.tfrecord")) == INFERRED
    assert tfr_torch.infer_features([str(tmp_path / "one.tfrecord"), str(tmp_path / "two.tfrecord")]) == INFERRED


@pytest.mark.usefixtures("backend")  # on the reference and the compiled core
def test_schema_cli_prints_code_giving_the_inferred_spec(tmp_path, write_records):
    records = _infer_records() + [encode_example({"id": 3, "emb": [0.0, 0.0], "name": b"d", "tokens": [1],
                                                  "words": [b"q"], "odd 'key'\n": [1, 2]})]
    path = write_records(tmp_path / "data.tfrecord", records)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "tfr_torch", "schema", str(path)], capture_output=True, text=True,
                            cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr
    namespace: dict[str, Any] = {}
    exec(result.stdout, namespace)  # noqa: S102 - the CLI's output is meant to be pasted as code
    assert namespace["features"] == tfr_torch.infer_features(path)
    assert namespace["features"]["odd 'key'\n"] == VarLenFeature(torch.int64)
