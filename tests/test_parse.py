"""The decode layer's data errors, as users meet them in parse_example and friends: every error names the feature
key and the example ("example 3", "step 1") and, when `example_names` are RecordLocations (as the datasets
pass them), carries `.path` / `.offset` and starts with "path:offset: "; integers that do not fit the spec's dtype
are data errors too.

The rest of the decode layer's tests, by topic:
- test_parse_specs.py: bad specs and arguments (ValueError/TypeError naming the key or the value, at spec or compile
  time), dtypes (the accepted spellings, narrowing conversions, unknown dtypes), compile_features and its cache;
- test_parse_results.py: result shapes and types of each spec kind in batch and single forms (empty batches
  included), to_padded, nested (jagged) tensors, RaggedTensor, SparseBytes, large records;
- test_parse_wire.py: non-canonical wire encodings decode exactly as a full protobuf parse (decode_example) does,
  or are refused on every path;
- test_parse_property.py: random specs and conforming Examples come back value for value (floats by their bits);
- test_infer.py: infer_features and `tfr-torch schema` (from records and files);
- parity with TensorFlow's values: test_parse_golden.py.
The tests marked with the `batch_path` fixture run on every path a batch can take (tests/conftest.py).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    DecodeError,
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RowLengths,
    RowLimits,
    RowSplits,
    RowStarts,
    SparseFeature,
    UniformRowLength,
    ValueRowIds,
    VarLenFeature,
    encode_example,
    encode_sequence_example,
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
)
from wirebytes import raw_example

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core


# ----------------------------------------------------------------------------------------------- helpers


def located_names(n: int, index: int) -> list[tfr_torch.RecordLocation]:
    """Example names as the datasets pass them: RecordLocations; example `index` is file.tfrecord at 1234."""
    names = [tfr_torch.RecordLocation("other.tfrecord", 100 + 10 * i) for i in range(n)]
    names[index] = tfr_torch.RecordLocation("file.tfrecord", 1234)
    return names


def assert_located_error(parse, n: int, index: int, key: str | None, *fragments: str, what: str = "feature",
                         step: int | None = None) -> DecodeError:
    """`parse(example_names)` raises DecodeError for example `index` of `n`: without names, the message names the
    key, the example (and step) and holds each fragment, with no path; with RecordLocation names, the same message
    is prefixed by "file.tfrecord:1234: " and `.path` / `.offset` are set."""
    with pytest.raises(DecodeError) as plain:
        parse(None)
    message = str(plain.value)
    if key is not None:
        assert f"{what} {key!r}" in message, message
    assert re.search(rf"\bexample {index}\b", message), message
    if step is not None:
        assert re.search(rf"\bexample {index}, step {step}\b", message), message
    for fragment in fragments:
        assert fragment in message, message
    assert plain.value.path is None and plain.value.offset is None

    with pytest.raises(DecodeError) as located:
        parse(located_names(n, index))
    err = located.value
    assert str(err).startswith("file.tfrecord:1234: "), str(err)
    assert err.path == "file.tfrecord"
    assert err.offset == 1234
    assert str(err) == "file.tfrecord:1234: " + message
    return err


# --------------------------------------------------------------------------- 1. errors users meet: data


GOOD = {"label": 1, "x": [1.0, 2.0, 3.0], "ints": [1, 2, 3], "text": b"abc", "seq": [1.0, 2.0, 3.0, 4.0],
        "idx": [0, 4], "val": [0.5, 1.5], "vals": [1, 2, 3, 4, 5, 6], "lens": [2, 0, 4]}

PARTITION_ERRORS = [
    # (partition, bad partition values for vals = [1..6], message fragments)
    (RowLengths("part"), [2, 2], ["invalid partition RowLengths('part')", "row lengths sum to 4, expected 6"]),
    (RowLengths("part"), [7, -1], ["invalid partition RowLengths('part')", "negative row length -1"]),
    (RowSplits("part"), [0, 2, 5], ["invalid partition RowSplits('part')", "end at 6", "[0, 2, 5]"]),
    (RowSplits("part"), [1, 6], ["invalid partition RowSplits('part')", "start at 0", "[1, 6]"]),
    (RowSplits("part"), [0, 4, 2, 6], ["invalid partition RowSplits('part')", "never decrease", "[0, 4, 2, 6]"]),
    (RowStarts("part"), [1, 3], ["invalid partition RowStarts('part')", "start at 0", "[1, 3]"]),
    (RowStarts("part"), [0, 4, 2], ["invalid partition RowStarts('part')", "never decrease", "[0, 4, 2]"]),
    (RowStarts("part"), [0, 7], ["invalid partition RowStarts('part')", "within 6", "[0, 7]"]),
    (RowLimits("part"), [2, 5], ["invalid partition RowLimits('part')", "end at 6", "[2, 5]"]),
    (RowLimits("part"), [4, 2, 6], ["invalid partition RowLimits('part')", "never decrease", "[4, 2, 6]"]),
    (ValueRowIds("part"), [0, 0, 1], ["invalid partition ValueRowIds('part')", "expected 6", "[0, 0, 1]"]),
    (ValueRowIds("part"), [0, 1, 0, 1, 2, 2], ["invalid partition ValueRowIds('part')", "non-decreasing",
                                               "[0, 1, 0, 1, 2, 2]"]),
    (ValueRowIds("part"), [-1, 0, 0, 0, 0, 0], ["invalid partition ValueRowIds('part')", "non-negative"]),
]

def error_case(name: str, spec: dict, bad: dict, key: str, *fragments: str, good: dict | None = None):
    """A batch of three good records (GOOD, updated by `good`) and a bad one; the error names `key` and holds each
    fragment."""
    return pytest.param(spec, bad, key, fragments, {**GOOD, **(good or {})}, id=name)


PARTITION_GOOD = {RowLengths: [2, 0, 4], RowSplits: [0, 2, 2, 6], RowStarts: [0, 2, 2], RowLimits: [2, 2, 6],
                  ValueRowIds: [0, 0, 2, 2, 2, 2]}

EXAMPLE_ERRORS = [
    error_case("missing-required", {"label": FixedLenFeature([], torch.int64)}, {"x": [1.0, 2.0, 3.0]}, "label",
               "is required but missing", "FixedLenFeature with shape []", "no default_value"),
    error_case("float-for-int64", {"label": FixedLenFeature([], torch.int64)}, {"label": 1.5}, "label",
               "holds float values but int64 values were expected"),
    error_case("bytes-for-float", {"x": FixedLenFeature([3], torch.float32)}, {"x": [b"a", b"b", b"c"]}, "x",
               "holds bytes values but float values were expected"),
    error_case("int64-for-string", {"text": FixedLenFeature([], tfr_torch.string)}, {"text": 7}, "text",
               "holds int64 values but bytes values were expected"),
    error_case("varlen-wrong-kind", {"ints": VarLenFeature(torch.int64)}, {"ints": [0.5]}, "ints",
               "holds float values but int64 values were expected"),
    error_case("ragged-wrong-kind", {"ints": RaggedFeature(torch.int32)}, {"ints": [b"x"]}, "ints",
               "holds bytes values but int64 values were expected"),
    error_case("too-few", {"x": FixedLenFeature([3], torch.float32)}, {"x": [1.0, 2.0]}, "x",
               "holds 2 float values, expected 3", "shape [3]"),
    error_case("too-many", {"x": FixedLenFeature([3], torch.float32)}, {"x": [1.0, 2.0, 3.0, 4.0]}, "x",
               "holds 4 float values, expected 3", "shape [3]"),
    error_case("empty-list-with-default", {"ints": FixedLenFeature([3], torch.int64, default_value=[7, 8, 9])},
               {"ints": np.array([], dtype=np.int64)}, "ints",
               "holds an empty list, expected 3 int64 values", "even with a default_value"),
    error_case("sequence-not-divisible", {"seq": FixedLenSequenceFeature([2], torch.float32, allow_missing=True)},
               {"seq": [1.0, 2.0, 3.0, 4.0, 5.0]}, "seq", "holds 5 float values, not a multiple of 2", "shape [2]"),
    error_case("sparse-index-too-large", {"sp": SparseFeature("idx", "val", torch.float32, 5)},
               {"idx": [0, 7], "val": [0.5, 1.5]}, "sp", "has index 7 in 'idx', outside [0, 5)"),
    error_case("sparse-index-negative", {"sp": SparseFeature("idx", "val", torch.float32, 5)},
               {"idx": [-1, 2], "val": [0.5, 1.5]}, "sp", "has index -1 in 'idx', outside [0, 5)"),
    error_case("sparse-count-mismatch", {"sp": SparseFeature("idx", "val", torch.float32, 5)},
               {"idx": [0, 1, 2], "val": [0.5, 1.5]}, "sp", "has 3 indices in 'idx' but 2 values in 'val'"),
    error_case("sparse-2d-count-mismatch", {"sp": SparseFeature(["idx", "ints"], "val", torch.float32, [5, 5])},
               {"idx": [0, 1], "ints": [1], "val": [0.5, 1.5]}, "sp", "has 1 indices in 'ints' but 2 values in 'val'",
               good={"ints": [1, 2]}),
    error_case("ragged-uniform-row-length",
               {"r": RaggedFeature(torch.int64, value_key="vals", partitions=[UniformRowLength(4)])},
               {"vals": [1, 2, 3, 4, 5, 6]}, "r", "holds 6 values, not a multiple of the UniformRowLength 4",
               good={"vals": [1, 2, 3, 4, 5, 6, 7, 8]}),
    error_case("ragged-outer-uniform-row-length",
               {"r": RaggedFeature(torch.int64, value_key="vals",
                                   partitions=[UniformRowLength(4), RowLengths("lens")])},
               {"vals": [1, 2, 3, 4, 5, 6], "lens": [6]}, "r", "has 1 rows, not a multiple of UniformRowLength 4",
               good={"vals": [1, 2, 3, 4, 5, 6, 7, 8], "lens": [2, 2, 2, 2]}),
] + [
    error_case(f"ragged-{type(p).__name__}-{j}", {"r": RaggedFeature(torch.int64, value_key="vals", partitions=[p])},
               {"vals": [1, 2, 3, 4, 5, 6], "part": bad}, "r", *fragments, good={"part": PARTITION_GOOD[type(p)]})
    for j, (p, bad, fragments) in enumerate(PARTITION_ERRORS)
]


@pytest.mark.parametrize("spec, bad, key, fragments, good", EXAMPLE_ERRORS)
@pytest.mark.usefixtures("batch_path")
def test_example_error_names_key_example_and_location(spec, bad, key, fragments, good):
    parse_example([encode_example(good)], spec)  # the good record is fine
    records = [encode_example(good)] * 3 + [encode_example(bad)]
    assert_located_error(lambda names: parse_example(records, spec, example_names=names), 4, 3, key, *fragments)


@pytest.mark.usefixtures("batch_path")
def test_first_bad_example_is_reported():
    spec = {"x": FixedLenFeature([2], torch.float32)}
    records = [encode_example({"x": [1.0, 2.0]}), encode_example({"x": [1.0]}), encode_example({"x": [1.0]})]
    assert_located_error(lambda names: parse_example(records, spec, example_names=names), 3, 1, "x",
                         "holds 1 float values, expected 2")


@pytest.mark.usefixtures("batch_path")
def test_unparseable_record_names_example():
    records = [encode_example(GOOD)] * 3 + [b"\xff\xff\xff"]
    spec = {"label": FixedLenFeature([], torch.int64)}
    assert_located_error(lambda names: parse_example(records, spec, example_names=names), 4, 3, None,
                         "cannot parse 3 bytes as a tf.train.Example")


def test_unparseable_sequence_example_names_example():
    records = [encode_sequence_example({"c": 1}, {"f": [[1]]})] * 3 + [b"\x0a\x05ab"]
    assert_located_error(
        lambda names: parse_sequence_example(records, sequence_features={"f": VarLenFeature(torch.int64)},
                                             example_names=names),
        4, 3, None, "cannot parse 4 bytes as a tf.train.SequenceExample")


@pytest.mark.parametrize("raw, kind, fragment", [
    (b"\x12\x05\x0a\x03abc", torch.float32, "a packed float list of 3 bytes is not a multiple of 4"),
    (b"\x1a\x03\x0a\x01\x80", torch.int64, "ends inside a varint"),
    (b"\x12\x05\x0a\x07abc", torch.float32,
     "its tf.train.Feature (7 bytes) has a packed float run of 7 bytes but only 3 bytes remain"),
], ids=["float-payload", "int64-varint", "feature"])
@pytest.mark.usefixtures("batch_path")
def test_malformed_feature_names_key_and_example(raw, kind, fragment):
    good = encode_example({"f": [1.0] if kind == torch.float32 else [1]})
    records = [good] * 3 + [raw_example({"f": raw})]
    err = assert_located_error(lambda names: parse_example(records, {"f": VarLenFeature(kind)}, example_names=names),
                               4, 3, "f", "is malformed", fragment)
    assert isinstance(err, ValueError)  # DecodeError is a ValueError too


@pytest.mark.usefixtures("batch_path")
def test_plain_example_names_appear_in_message():
    records = [encode_example({"a": 1}), encode_example({"b": 1})]
    with pytest.raises(DecodeError) as raised:
        parse_example(records, {"a": FixedLenFeature([], torch.int64)}, example_names=["first", "second"])
    assert str(raised.value) == ("feature 'a' in example 1 (second) is required but missing (FixedLenFeature with "
                                 "shape [], int64, and no default_value)")
    assert raised.value.path is None and raised.value.offset is None


@pytest.mark.usefixtures("batch_path")
def test_empty_example_names_mean_no_names_as_in_tensorflow():
    """TensorFlow's testEmptySerializedWithAllDefaults passes example_names=[]: zero names is no names."""
    spec = {"a": FixedLenFeature([], torch.int64, default_value=3)}
    assert parse_example([b"", b""], spec, example_names=[])["a"].tolist() == [3, 3]
    context, lists, _ = tfr_torch.parse_sequence_example(
        [b"", b""], {"a": FixedLenFeature([], torch.int64, default_value=3)}, example_names=[])
    assert context["a"].tolist() == [3, 3] and lists == {}
    with pytest.raises(DecodeError) as raised:
        parse_example([b"", encode_example({"a": [1, 2]})], spec, example_names=())
    assert str(raised.value) == "feature 'a' in example 1 holds 2 int64 values, expected 1 (shape [])"
    with pytest.raises(ValueError) as bad:
        parse_example([b"", b""], spec, example_names=["only one"])
    assert str(bad.value) == "example_names has 1 names for 2 records"


def test_single_example_errors_say_the_example():
    record = encode_example({"a": [1, 2, 3]})
    spec = {"a": FixedLenFeature([2], torch.int64)}
    with pytest.raises(DecodeError) as raised:
        parse_single_example(record, spec)
    assert str(raised.value) == "feature 'a' in the example holds 3 int64 values, expected 2 (shape [2])"
    with pytest.raises(DecodeError) as raised:
        parse_single_example(record, spec, example_names=tfr_torch.RecordLocation("file.tfrecord", 1234))
    assert str(raised.value) == ("file.tfrecord:1234: feature 'a' in the example holds 3 int64 values, expected 2 "
                                 "(shape [2])")
    assert (raised.value.path, raised.value.offset) == ("file.tfrecord", 1234)
    with pytest.raises(DecodeError, match=r"feature 'a' in the example \(my record\) holds 3 int64 values"):
        parse_single_example(record, spec, example_names="my record")


# ----------------------------------------------------------------------------- SequenceExample errors


def _sequences(bad: bytes) -> list[bytes]:
    good = encode_sequence_example({"c": 1}, {"f": [[1, 2], [3, 4]], "g": [[1.0], [2.0, 3.0]]})
    return [good] * 3 + [bad]


def test_sequence_feature_list_missing_without_allow_missing():
    records = _sequences(encode_sequence_example({"c": 1}, {"g": [[1.0]]}))
    spec = {"f": FixedLenSequenceFeature([2], torch.int64)}
    assert_located_error(lambda names: parse_sequence_example(records, sequence_features=spec, example_names=names),
                         4, 3, "f", "is required but missing", "allow_missing=False", what="feature list")
    # allowed with allow_missing=True: zero steps
    _, lists, lengths = parse_sequence_example(
        records, sequence_features={"f": FixedLenSequenceFeature([2], torch.int64, allow_missing=True)})
    assert lengths["f"].tolist() == [2, 2, 2, 0]
    assert lists["f"].shape == (4, 2, 2)
    assert lists["f"][3].tolist() == [[0, 0], [0, 0]]


def test_sequence_step_with_wrong_count_names_the_step():
    records = _sequences(encode_sequence_example({"c": 1}, {"f": [[1, 2], [3], [5, 6]]}))
    spec = {"f": FixedLenSequenceFeature([2], torch.int64)}
    assert_located_error(lambda names: parse_sequence_example(records, sequence_features=spec, example_names=names),
                         4, 3, "f", "holds 1 int64 values, expected 2 per step", "shape [2]", what="feature list",
                         step=1)


def test_sequence_step_with_wrong_kind_names_the_step():
    records = _sequences(encode_sequence_example({"c": 1}, {"g": [[1.0], [2.0], [b"x"]]}))
    spec = {"g": VarLenFeature(torch.float32)}
    assert_located_error(lambda names: parse_sequence_example(records, sequence_features=spec, example_names=names),
                         4, 3, "g", "holds bytes values but float values were expected", what="feature list", step=2)


def test_sequence_context_error_names_context_feature():
    records = _sequences(encode_sequence_example({"c": 1.5}, {"f": [[1, 2]]}))
    spec = {"c": FixedLenFeature([], torch.int64)}
    assert_located_error(lambda names: parse_sequence_example(records, context_features=spec, example_names=names),
                         4, 3, "c", "holds float values but int64 values were expected", what="context feature")


def test_sequence_ragged_lists_with_different_step_counts():
    good = encode_sequence_example(None, {"v": [[1, 2], [3]], "n": [[2], [0, 1]]})
    bad = encode_sequence_example(None, {"v": [[1, 2], [3]], "n": [[2]]})
    spec = {"r": RaggedFeature(torch.int64, value_key="v", partitions=[RowLengths("n")])}
    parse_sequence_example([good], sequence_features=spec)
    assert_located_error(
        lambda names: parse_sequence_example([good] * 3 + [bad], sequence_features=spec, example_names=names),
        4, 3, "r", "different numbers of steps", "'v': 2", "'n': 1", what="feature list")


def test_single_sequence_example_error_has_location():
    record = encode_sequence_example({"c": 1}, {"f": [[1, 2], [3]]})
    with pytest.raises(DecodeError) as raised:
        parse_single_sequence_example(record, sequence_features={"f": FixedLenSequenceFeature([2], torch.int64)},
                                      example_name=tfr_torch.RecordLocation("file.tfrecord", 1234))
    assert str(raised.value) == ("file.tfrecord:1234: feature list 'f' in the example, step 1 holds 1 int64 values, "
                                 "expected 2 per step (shape [2])")
    assert (raised.value.path, raised.value.offset) == ("file.tfrecord", 1234)


# ------------------------------------------------------------------------- integers that do not fit the dtype


OVERFLOWS = [(torch.uint8, 300), (torch.bool, 2), (torch.uint8, -1), (torch.int32, 2**40), (torch.int8, 128),
             (torch.int16, -40000), (torch.bool, -1)]


def _overflow_specs(dtype):
    return {
        "fixed": ({"k": FixedLenFeature([], dtype)}, lambda v: {"k": v}),
        "varlen": ({"k": VarLenFeature(dtype)}, lambda v: {"k": [0, v]}),
        "ragged": ({"k": RaggedFeature(dtype)}, lambda v: {"k": [0, v]}),
        "sequence": ({"k": FixedLenSequenceFeature([], dtype, allow_missing=True)}, lambda v: {"k": [0, v]}),
        "sparse": ({"k": SparseFeature("i", "v", dtype, 4)}, lambda v: {"i": [0, 1], "v": [0, v]}),
    }


@pytest.mark.parametrize("kind", ["fixed", "varlen", "ragged", "sequence", "sparse"])
@pytest.mark.parametrize("dtype, value", OVERFLOWS)
def test_int_that_does_not_fit_names_key_and_value(kind, dtype, value):
    spec, features = _overflow_specs(dtype)[kind]
    records = [encode_example(features(0)), encode_example(features(value))]
    with pytest.raises(DecodeError) as raised:
        parse_example(records, spec)
    message = str(raised.value)
    assert "feature 'k'" in message
    assert f"value {value} does not fit in {dtype}" in message
    with pytest.raises(DecodeError, match=f"value {value} does not fit in"):
        parse_single_example(records[1], spec)


@pytest.mark.parametrize("kind", ["fixed", "varlen", "ragged", "sequence", "sparse"])
@pytest.mark.usefixtures("batch_path")
def test_int_that_does_not_fit_names_example_and_location(kind):
    """The overflow error is a data error like the others: it names the example and carries path and offset."""
    spec, features = _overflow_specs(torch.uint8)[kind]
    records = [encode_example(features(0))] * 3 + [encode_example(features(300))]
    assert_located_error(lambda names: parse_example(records, spec, example_names=names), 4, 3, "k",
                         "value 300 does not fit in torch.uint8")
