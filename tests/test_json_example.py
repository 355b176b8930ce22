"""decode_json_example: structure of the result, round trips through protobuf's JSON, exact error messages.

TensorFlow's own outputs and errors for it are golden cases in tests/test_tf_tests_golden.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from google.protobuf import json_format

import tfr_torch
from tfr_torch.format._proto import example_pb2

EXAMPLE = {"label": 3, "ids": np.array([-1, 2**63 - 1], dtype=np.int64), "score": np.float32(1.5),
           "name": b"\xff\x00cat", "empty": np.array([], dtype=np.float32)}


def to_json(serialized: bytes) -> str:
    return json_format.MessageToJson(example_pb2.Example.FromString(serialized))


def test_round_trip_through_protobuf_json():
    serialized = tfr_torch.encode_example(EXAMPLE)
    back = tfr_torch.decode_json_example(to_json(serialized))
    assert isinstance(back, bytes)
    decoded = tfr_torch.decode_example(back)
    assert decoded.keys() == EXAMPLE.keys()
    assert decoded["ids"].tolist() == [-1, 2**63 - 1]
    assert decoded["name"] == [b"\xff\x00cat"]
    assert decoded["score"].tolist() == [1.5]
    assert decoded["empty"].dtype == np.float32 and decoded["empty"].size == 0


def test_bytes_written_as_tensorflow_writes_them():
    """Keys in JSON order, numbers one tag each (not packed): the bytes tf.io.decode_json_example gives."""
    text = '{"features": {"feature": {"b": {"int64List": {"value": ["1", -1]}}, "a": {"floatList": {"value": [2]}}}}}'
    assert tfr_torch.decode_json_example(text) == (
        b"\n$\n\x14\n\x01b\x12\x0f\x1a\r\x08\x01\x08" + b"\xff" * 9 + b"\x01"
        + b"\n\x0c\n\x01a\x12\x07\x12\x05\r\x00\x00\x00@")  # what TensorFlow 2.21 gave


def test_structure_follows_the_input():
    one = '{"features": {}}'
    assert tfr_torch.decode_json_example(one) == b"\n\x00"
    assert tfr_torch.decode_json_example(one.encode()) == b"\n\x00"
    assert tfr_torch.decode_json_example([]) == []
    assert tfr_torch.decode_json_example([[], []]) == [[], []]
    assert tfr_torch.decode_json_example((one, ["{}"])) == [b"\n\x00", [b""]]
    out = tfr_torch.decode_json_example(np.array([[one], ["{}"]], dtype=object))
    assert isinstance(out, np.ndarray) and out.dtype == object and out.shape == (2, 1)
    assert out.tolist() == [[b"\n\x00"], [b""]]
    assert tfr_torch.decode_json_example(np.array(one)).tolist() == b"\n\x00"


def test_float32_largest_value_round_trips():
    text = to_json(tfr_torch.encode_example({"f": np.array([np.finfo(np.float32).max], dtype=np.float32)}))
    assert "3.4028235e+38" in text
    assert tfr_torch.decode_example(tfr_torch.decode_json_example(text))["f"].tolist() == [
        float(np.finfo(np.float32).max)]


@pytest.mark.parametrize(("text", "reason"), [
    ("{]", "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("[]", "expected a JSON object for tensorflow.Example, got []"),
    ('{"features": {"feature": {"a": null}}}', "feature 'a' is null; expected a JSON object (tensorflow.Feature)"),
    ('{"features": {}, "features": {}}', "the key 'features' appears twice in one object"),
    ('{"features": {"feature": {"a": {"bytesList": {"value": ["!!"]}}}}}',
     "corrupt base64 in a bytes_list value: '!!'"),
    ('{"features": {"feature": {"a": {"floatList": {"value": [NaN]}}}}}',
     'NaN is not JSON (protobuf spells it as the string "NaN")'),
])
def test_bad_json_raises_decode_error_naming_the_item(text, reason):
    with pytest.raises(tfr_torch.DecodeError) as info:
        tfr_torch.decode_json_example(["{}", text])
    assert str(info.value) == f"decode_json_example: item 1: expected a JSON-encoded tf.train.Example: {reason}"
    assert info.value.index == 1
    with pytest.raises(tfr_torch.DecodeError) as info:
        tfr_torch.decode_json_example(text)
    assert str(info.value) == f"decode_json_example: expected a JSON-encoded tf.train.Example: {reason}"
    assert info.value.index is None


def test_not_an_example_names_what_protobuf_found():
    with pytest.raises(tfr_torch.DecodeError, match=r"^decode_json_example: item 0: expected a JSON-encoded "
                       r"tf\.train\.Example: Message type \"tensorflow\.Example\" has no field named \"foo\""):
        tfr_torch.decode_json_example([json.dumps({"foo": 1})])


def test_bytes_that_are_not_utf8():
    with pytest.raises(tfr_torch.DecodeError) as info:
        tfr_torch.decode_json_example([b'{"a\xff": 1}'])
    assert str(info.value) == ("decode_json_example: item 0: expected a JSON-encoded tf.train.Example, got bytes "
                               "that are not UTF-8 (invalid start byte at byte 3)")


def test_nested_items_are_numbered_in_row_major_order():
    with pytest.raises(tfr_torch.DecodeError, match=r"^decode_json_example: item 3: ") as info:
        tfr_torch.decode_json_example([["{}", "{}"], ["{}", "{"]])
    assert info.value.index == 3


@pytest.mark.parametrize(("value", "message"), [
    (1, "decode_json_example: expected a JSON string (str or bytes) or a (nested) list of them, got int: 1"),
    ({"features": {}}, "decode_json_example: expected a JSON string (str or bytes) or a (nested) list of them, "
                       "got dict: {'features': {}}"),
    (["{}", None], "decode_json_example: item 1: expected a JSON string (str or bytes), got NoneType: None"),
    (np.array([1.0]), "decode_json_example: expected an array of JSON strings, got dtype float64"),
])
def test_bad_arguments_raise_type_error_naming_the_value(value, message):
    with pytest.raises(TypeError) as info:
        tfr_torch.decode_json_example(value)
    assert str(info.value) == message
