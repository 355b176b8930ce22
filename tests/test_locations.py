"""Where a decoding error is: RecordLocation names and the attributes DecodeError declares.

- A RecordLocation example name (what the datasets pass) makes the error carry `.path` / `.offset` and start with
  "path:offset: "; a string name is only a name, even when it looks like "a:12".
- `DecodeError.key`, `.index`, `.step` (and `.position`) are None by default and set where the error is made:
  parse_example, parse_sequence_example (context and feature lists), record-level parse errors, the datasets.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import DecodeError, RecordLocation

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core

INT = tfr_torch.FixedLenFeature([], torch.int64)


def _missing_in(n: int, index: int) -> list[bytes]:
    return [tfr_torch.encode_example({"a": i} if i != index else {"b": i}) for i in range(n)]


def test_a_string_name_that_looks_like_a_location_is_only_a_name():
    with pytest.raises(DecodeError) as raised:
        tfr_torch.parse_example(_missing_in(2, 0), {"a": INT}, example_names=["a:12", "b:14"])
    err = raised.value
    assert (err.path, err.offset) == (None, None)
    assert str(err) == ("feature 'a' in example 0 (a:12) is required but missing (FixedLenFeature with shape [], "
                        "int64, and no default_value)")


def test_a_record_location_names_the_file_and_offset():
    names = [RecordLocation("x.tfrecord", 0), RecordLocation("dir/a:b.tfrecord", 12)]  # a colon in the path is fine
    with pytest.raises(DecodeError) as raised:
        tfr_torch.parse_example(_missing_in(2, 1), {"a": INT}, example_names=names)
    err = raised.value
    assert (err.path, err.offset) == ("dir/a:b.tfrecord", 12)
    assert str(err) == ("dir/a:b.tfrecord:12: feature 'a' in example 1 is required but missing (FixedLenFeature with "
                        "shape [], int64, and no default_value)")
    assert (err.key, err.index, err.step) == ("a", 1, None)


def test_record_location_is_a_value():
    location = RecordLocation("f.tfrecord", 7)
    assert str(location) == "f.tfrecord:7"
    assert location == RecordLocation("f.tfrecord", 7) and hash(location) == hash(RecordLocation("f.tfrecord", 7))
    assert pickle.loads(pickle.dumps(location)) == location
    assert not isinstance(location, tuple)
    with pytest.raises(AttributeError):
        location.offset = 8  # type: ignore[misc]


def test_decode_error_attributes_default_to_none_and_survive_pickling():
    plain = DecodeError("bad bytes")
    assert (plain.key, plain.index, plain.step, plain.position, plain.path, plain.offset) == (None,) * 6
    err = DecodeError("bad", "f.tfrecord", 3, key="k", index=2, step=1, position=9)
    back = pickle.loads(pickle.dumps(err))
    assert (back.key, back.index, back.step, back.position, back.path, back.offset, str(back)) == (
        "k", 2, 1, 9, "f.tfrecord", 3, "f.tfrecord:3: bad")


@pytest.mark.parametrize("index", [0, 3])
def test_parse_example_errors_say_key_and_index(index):
    with pytest.raises(DecodeError) as raised:
        tfr_torch.parse_example(_missing_in(5, index), {"a": INT})
    assert (raised.value.key, raised.value.index, raised.value.step) == ("a", index, None)


def test_wrong_kind_says_key_and_index():
    records = [tfr_torch.encode_example({"a": 1}), tfr_torch.encode_example({"a": 1.5})]
    with pytest.raises(DecodeError, match="holds float values but int64 values were expected") as raised:
        tfr_torch.parse_example(records, {"a": INT})
    assert (raised.value.key, raised.value.index, raised.value.step) == ("a", 1, None)


def test_value_that_does_not_fit_says_key_and_index():
    records = [tfr_torch.encode_example({"a": 1}), tfr_torch.encode_example({"a": 1000})]
    with pytest.raises(DecodeError) as raised:
        tfr_torch.parse_example(records, {"a": tfr_torch.FixedLenFeature([], torch.int8)})
    assert (raised.value.key, raised.value.index) == ("a", 1)


def test_malformed_record_says_index_and_position():
    good = tfr_torch.encode_example({"a": 1})
    bad = b"\x0a\x05\x0a\x03abc"  # a Features map entry that holds a key and no value
    names = [RecordLocation("f.tfrecord", 0), RecordLocation("f.tfrecord", 40)]
    with pytest.raises(DecodeError) as raised:
        tfr_torch.parse_example([good, bad], {"a": INT}, example_names=names)
    err = raised.value
    assert (err.path, err.offset, err.index, err.step) == ("f.tfrecord", 40, 1, None)
    assert err.position is not None and str(err).startswith("f.tfrecord:40: example 1: ")


def test_sequence_feature_errors_say_key_index_and_step():
    records = [tfr_torch.encode_sequence_example({}, {"f": [[1, 2], [3, 4]]}),
               tfr_torch.encode_sequence_example({}, {"f": [[1, 2], [3, 4], [5]]})]
    spec = {"f": tfr_torch.FixedLenSequenceFeature([2], torch.int64)}
    with pytest.raises(DecodeError) as raised:
        tfr_torch.parse_sequence_example(records, sequence_features=spec,
                                         example_names=[RecordLocation("s", 0), RecordLocation("s", 30)])
    err = raised.value
    assert (err.key, err.index, err.step, err.path, err.offset) == ("f", 1, 2, "s", 30)
    assert str(err).startswith("s:30: feature list 'f' in example 1, step 2 ")


def test_context_feature_errors_say_key_and_index():
    records = [tfr_torch.encode_sequence_example({"c": 1}, {}), tfr_torch.encode_sequence_example({}, {})]
    with pytest.raises(DecodeError) as raised:
        tfr_torch.parse_sequence_example(records, context_features={"c": INT})
    assert (raised.value.key, raised.value.index, raised.value.step) == ("c", 1, None)


def test_datasets_pass_record_locations(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(6):
            writer.write_example({"a": i} if i != 4 else {"b": i})
    offset = int(tfr_torch.read_index(tfr_torch.build_index(path), path)[4, 0])
    with pytest.raises(DecodeError) as raised:
        list(tfr_torch.TFRecordDataset(path, {"a": INT}, batch_size=3))
    err = raised.value
    assert (err.path, err.offset, err.key, err.index, err.step) == (path, offset, "a", 1, None)  # 2nd batch, row 1
    assert str(err).startswith(f"{path}:{offset}: feature 'a' in example 1 ")
    indexed = tfr_torch.IndexedTFRecordDataset(path, {"a": INT})
    with pytest.raises(DecodeError) as raised:
        indexed[4]
    err = raised.value
    assert (err.path, err.offset, err.key, err.index) == (path, offset, "a", 0)
    assert str(err).startswith(f"{path}:{offset}: feature 'a' in the example ")
    assert np.array_equal(torch.stack([indexed[i]["a"] for i in range(4)]).numpy(), np.arange(4))
