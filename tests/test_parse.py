"""The decode layer as users meet it: parse_example and friends, their errors, dtypes and result types.

Parity with TensorFlow's values lives in test_parse_golden.py; this file covers what TensorFlow's goldens cannot:
- every data error names the feature key and the example ("example 3", "step 1") and, when `example_names` are
  RecordLocations (as the datasets pass them), carries `.path` / `.offset` and starts with "path:offset: ";
- bad specs raise ValueError/TypeError naming the key or the value, at spec or compile time;
- dtypes: the accepted spellings, narrowing conversions, values that do not fit, unknown dtypes;
- result shapes and types of each spec kind in batch and single forms (empty batches included), to_padded,
  nested (jagged) tensors, RaggedTensor, SparseBytes;
- non-canonical wire encodings (unpacked lists, split runs, oneof overrides, unknown fields) decode exactly as a
  full protobuf parse (decode_example) does;
- compile_features' cache, infer_features and `tfr-torch schema`;
- a property test: random specs and conforming Examples come back value for value (floats by their bits);
- the tests marked with the `batch_path` fixture run twice: also with every batch taking the path parse_example
  takes for large records (each record parsed in full, its features taken at once).
"""

from __future__ import annotations

import math
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core

REPO = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------------------------- helpers


def located_names(n: int, index: int) -> list[tfr_torch.RecordLocation]:
    """Example names as the datasets pass them: RecordLocations; example `index` is file.tfrecord at 1234."""
    names = [tfr_torch.RecordLocation("other.tfrecord", 100 + 10 * i) for i in range(n)]
    names[index] = tfr_torch.RecordLocation("file.tfrecord", 1234)
    return names


def assert_located_error(parse, n: int, index: int, key: str | None, *fragments: str, what: str = "feature",
                         step: int | None = None) -> DecodeError:
    """`parse(example_names)` raises DecodeError for example `index` of `n`: without names, the message names the
    key, the example (and step) and holds each fragment, with no path; with "path:offset" names, the same message
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


def float32_bits(values: Any) -> list[int]:
    return np.asarray(values, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
             torch.float64: torch.int64}


def assert_same_tensor(actual: Any, expected: torch.Tensor) -> None:
    """Same dtype, shape and bits (floats compared by bit pattern, so NaN and -0.0 are exact)."""
    assert isinstance(actual, torch.Tensor), type(actual)
    assert actual.dtype == expected.dtype
    assert tuple(actual.shape) == tuple(expected.shape)
    view = _INT_VIEW.get(expected.dtype)
    if view is not None:
        assert torch.equal(actual.contiguous().view(view), expected.contiguous().view(view)), (actual, expected)
    else:
        assert torch.equal(actual, expected), (actual, expected)


def sparse_rows(sparse: torch.Tensor, batch: int) -> list[torch.Tensor]:
    """The values of each example of a 2-D VarLenFeature result, checking their positions run 0..n-1."""
    sparse = sparse.coalesce()
    indices, values = sparse.indices(), sparse.values()
    rows = []
    for i in range(batch):
        mine = indices[0] == i
        assert indices[1][mine].tolist() == list(range(int(mine.sum())))
        rows.append(values[mine])
    return rows


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


def _raw_example(features: dict[str, bytes]) -> bytes:
    """A serialized tf.train.Example whose Features are given as raw tf.train.Feature bytes."""
    entries = b"".join(_ld(1, _ld(1, key.encode()) + _ld(2, raw)) for key, raw in features.items())
    return _ld(1, entries)


@pytest.mark.parametrize("raw, kind, fragment", [
    (b"\x12\x05\x0a\x03abc", torch.float32, "a packed float list of 3 bytes is not a multiple of 4"),
    (b"\x1a\x03\x0a\x01\x80", torch.int64, "ends inside a varint"),
    (b"\x12\x05\x0a\x07abc", torch.float32, "its tf.train.Feature (7 bytes) has a packed float run of 7 bytes but only 3 bytes remain"),
], ids=["float-payload", "int64-varint", "feature"])
@pytest.mark.usefixtures("batch_path")
def test_malformed_feature_names_key_and_example(raw, kind, fragment):
    good = encode_example({"f": [1.0] if kind == torch.float32 else [1]})
    records = [good] * 3 + [_raw_example({"f": raw})]
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


# ----------------------------------------------------------------------- 1. errors users meet: specs


def test_fixed_len_sequence_feature_needs_allow_missing_in_parse_example():
    spec = {"seq": FixedLenSequenceFeature([2], torch.float32)}
    message = r"FixedLenSequenceFeature 'seq': parse_example needs allow_missing=True"
    with pytest.raises(ValueError, match=message):
        parse_example([encode_example({"seq": [1.0, 2.0]})], spec)
    with pytest.raises(ValueError, match=message):
        tfr_torch.compile_features(spec)  # at spec compile time, before any record is read


@pytest.mark.parametrize("make, fragment", [
    (lambda: FixedLenFeature([2], torch.int64, default_value=[1, 2, 3]), "default_value has 3 values, expected 2"),
    (lambda: FixedLenFeature([2, 2], torch.float32, default_value=[1.0, 2.0]),
     "default_value has 2 values, expected 4"),
    (lambda: FixedLenFeature([], torch.int64, default_value=[1, 2]), "default_value has 2 values, expected 1"),
    (lambda: FixedLenFeature([2], tfr_torch.string, default_value=[b"a"]), "default_value has 1 values, expected 2"),
    (lambda: FixedLenSequenceFeature([2], torch.int64, allow_missing=True, default_value=[1, 2]),
     "default_value has 2 values, expected 1"),
], ids=["too-many", "too-few-2d", "list-for-scalar", "string", "sequence-not-scalar"])
def test_default_value_with_wrong_count(make, fragment):
    with pytest.raises(ValueError) as raised:
        parse_example([encode_example({"k": 1})], {"my_key": make()})
    assert "'my_key'" in str(raised.value)
    assert fragment in str(raised.value)


@pytest.mark.parametrize("make", [
    lambda: FixedLenFeature([None], torch.float32),
    lambda: FixedLenFeature([2, None], torch.float32),
    lambda: FixedLenSequenceFeature([None], torch.float32, allow_missing=True),
], ids=["fixed", "fixed-2d", "sequence"])
def test_unknown_dimension_is_refused(make):
    with pytest.raises(ValueError, match=r"shape \[.*None\] has an unknown dimension.*VarLenFeature or RaggedFeature"):
        make()


def test_example_names_must_match_the_batch():
    records = [encode_example({"a": 1}), encode_example({})]
    spec = {"a": FixedLenFeature([], torch.int64)}
    for bad_names in (["file.tfrecord:0"], ["a", "b", "c"]):
        with pytest.raises(ValueError) as raised:
            parse_example(records, spec, example_names=bad_names)
        assert "example_names" in str(raised.value)
        assert f"{len(bad_names)}" in str(raised.value) and "2" in str(raised.value)


def test_default_value_that_does_not_fit_the_dtype_is_a_spec_error():
    """A default is part of the spec: it is checked when the spec is compiled, not blamed on an example."""
    with pytest.raises(ValueError) as raised:
        tfr_torch.compile_features({"small": FixedLenFeature([], torch.uint8, default_value=300)})
    assert not isinstance(raised.value, DecodeError)
    assert "'small'" in str(raised.value) and "default_value" in str(raised.value) and "300" in str(raised.value)


@pytest.mark.parametrize("make, error, message", [
    (lambda: FixedLenFeature([], torch.int64, default_value="x"), TypeError,
     "FixedLenFeature 'k': default_value 'x' is not a int64 value"),
    (lambda: FixedLenFeature([], tfr_torch.string, default_value=5), TypeError,
     "FixedLenFeature 'k': a string default_value holds bytes or str, got 5"),
    (lambda: RaggedFeature(torch.int64, partitions=[UniformRowLength(0)]), ValueError,
     "RaggedFeature 'k': UniformRowLength needs a positive length, got 0"),
    (lambda: FixedLenSequenceFeature([2], torch.int64), ValueError,
     "FixedLenSequenceFeature 'k': parse_example needs allow_missing=True"),
], ids=["int-default", "string-default", "uniform-row-length", "sequence-allow-missing"])
def test_spec_errors_found_at_compile_name_the_key(make, error, message):
    with pytest.raises(error) as raised:
        tfr_torch.compile_features({"k": make()})
    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.parametrize("make, error, message", [
    (lambda: FixedLenFeature([-1], torch.int64), ValueError,
     "FixedLenFeature: shape dimensions must be non-negative ints, got [-1]"),
    (lambda: FixedLenFeature("ab", torch.int64), ValueError, "FixedLenFeature: shape dimensions must be non-negative"),
    (lambda: FixedLenFeature(None, torch.int64), TypeError,
     "FixedLenFeature: shape must be a sequence of ints, got None"),
    (lambda: SparseFeature(["a", "b"], "v", torch.int64, 3), ValueError,
     "SparseFeature: index_key ['a', 'b'] and size 3 must have the same number of entries"),
    (lambda: SparseFeature("a", "v", torch.int64, -2), ValueError,
     "SparseFeature: size must be non-negative ints, got -2"),
    (lambda: RaggedFeature(torch.int64, row_splits_dtype=torch.int16), ValueError,
     "RaggedFeature: row_splits_dtype must be int32 or int64, got torch.int16"),
    (lambda: RaggedFeature(torch.int64, partitions=["lengths"]), TypeError,
     "RaggedFeature: partitions must be RowLengths, RowSplits, RowStarts, RowLimits, ValueRowIds or UniformRowLength, "
     "got 'lengths'"),
], ids=["negative-dim", "text-shape", "no-shape", "sparse-keys-vs-size", "sparse-size", "splits-dtype", "partition"])
def test_spec_argument_errors(make, error, message):
    with pytest.raises(error) as raised:
        make()
    assert str(raised.value).startswith(message), str(raised.value)


def test_two_specs_reading_one_key_as_different_kinds():
    spec = {"tokens": VarLenFeature(torch.int64), "as_floats": RaggedFeature(torch.float32, value_key="tokens")}
    with pytest.raises(ValueError) as raised:
        parse_example([encode_example({"tokens": [1, 2]})], spec)
    assert str(raised.value) == ("features: feature 'tokens' reads key 'tokens' as int64 but 'as_floats' reads it "
                                 "as float")
    # a SparseFeature's index key read as bytes by another spec
    spec = {"sp": SparseFeature("idx", "val", torch.float32, 4), "idx": VarLenFeature(tfr_torch.string)}
    with pytest.raises(ValueError, match=r"feature 'sp' reads key 'idx' as int64 but 'idx' reads it as bytes"):
        tfr_torch.compile_features(spec)
    # the same kind is fine: int64 and a narrower int dtype both read int64_list
    out = parse_example([encode_example({"tokens": [1, 2]})],
                        {"tokens": VarLenFeature(torch.int64), "small": RaggedFeature(torch.int8, value_key="tokens")})
    assert out["small"].unbind()[0].tolist() == [1, 2]


@pytest.mark.usefixtures("batch_path")
def test_non_bytes_record_is_a_type_error():
    records = [encode_example({"a": 1})] * 3 + ["not bytes"]
    with pytest.raises(TypeError) as raised:
        parse_example(records, {"a": FixedLenFeature([], torch.int64)})
    assert str(raised.value) == "example 3: a serialized record must be bytes, got str"
    with pytest.raises(TypeError, match=r"example 1: a serialized record must be bytes, got int"):
        parse_sequence_example([encode_sequence_example({"a": 1}), 5],
                               context_features={"a": VarLenFeature(torch.int64)})
    # bytes-likes are fine
    out = parse_example([bytearray(records[0]), memoryview(records[0]), np.bytes_(records[0])],
                        {"a": FixedLenFeature([], torch.int64)})
    assert out["a"].tolist() == [1, 1, 1]


@pytest.mark.parametrize("record", [encode_example({"a": 1}), bytearray(encode_example({"a": 1}))],
                         ids=["bytes", "bytearray"])
def test_single_record_to_parse_example_points_to_parse_single_example(record):
    with pytest.raises(TypeError) as raised:
        parse_example(record, {"a": FixedLenFeature([], torch.int64)})
    assert "sequence of records" in str(raised.value)
    assert "parse_single_example" in str(raised.value)


def test_bad_spec_objects_are_type_errors():
    with pytest.raises(TypeError, match=r"features 'a': expected one of FixedLenFeature, .*got 3"):
        parse_example([encode_example({"a": 1})], {"a": 3})
    with pytest.raises(TypeError, match=r"feature 'a' is given as the string 'int 64': expected a feature spec"):
        parse_example([encode_example({"a": 1})], {"a": "int 64"})
    with pytest.raises(TypeError, match=r"feature 'a' is given as 'int64' \(a dtype name, not a spec\)"):
        parse_example([encode_example({"a": 1})], {"a": "int64"})
    with pytest.raises(TypeError, match=r"features must be a dict of feature names to specs, got list"):
        parse_example([encode_example({"a": 1})], [FixedLenFeature([], torch.int64)])
    with pytest.raises(TypeError, match=r"sequence_features 'f': expected one of .*got FixedLenFeature"):
        parse_sequence_example([], sequence_features={"f": FixedLenFeature([], torch.int64)})


# ----------------------------------------------------------------------------------------- 2. dtypes


@pytest.mark.parametrize("given_dtype, expected", [
    (torch.float32, torch.float32), (torch.int64, torch.int64),
    ("float32", torch.float32), ("int64", torch.int64), ("string", tfr_torch.string),
    ("tf.float32", torch.float32), ("tf.int64", torch.int64), ("tf.string", tfr_torch.string),
    (tfr_torch.string, tfr_torch.string), (bytes, tfr_torch.string), (str, tfr_torch.string),
    ("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float64", torch.float64), ("int32", torch.int32),
    ("uint8", torch.uint8), ("bool", torch.bool), ("tf.bool", torch.bool),
])
def test_accepted_dtype_spellings(given_dtype, expected):
    spec = FixedLenFeature([2], given_dtype)
    assert spec.dtype == expected
    assert VarLenFeature(given_dtype).dtype == expected
    values = {torch.float32: [1.5, -2.0], torch.float16: [1.5, -2.0], torch.bfloat16: [1.5, -2.0],
              torch.float64: [1.5, -2.0], tfr_torch.string: [b"a", b"bc"]}.get(expected, [1, 0])
    out = parse_example([encode_example({"k": values})], {"k": spec})["k"]
    if expected == tfr_torch.string:
        assert out == [[b"a", b"bc"]]
    else:
        assert out.dtype == expected
        assert out.tolist() == [values if expected != torch.bool else [True, False]]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool])
def test_int64_narrows_to_smaller_int_dtypes(dtype):
    info = (0, 1) if dtype == torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    values = [info[0], 0, 1, info[1]]
    records = [encode_example({"k": values})]
    expected = torch.tensor(values).to(dtype)
    assert_same_tensor(parse_example(records, {"k": FixedLenFeature([4], dtype)})["k"], expected[None])
    assert_same_tensor(parse_single_example(records[0], {"k": FixedLenFeature([4], dtype)})["k"], expected)
    padded, lengths = tfr_torch.to_padded(parse_example(records, {"k": VarLenFeature(dtype)})["k"])
    assert_same_tensor(padded, expected[None])
    assert lengths.tolist() == [4]
    assert_same_tensor(parse_example(records, {"k": RaggedFeature(dtype)})["k"].unbind()[0], expected)
    seq = parse_example(records, {"k": FixedLenSequenceFeature([2], dtype, allow_missing=True)})["k"]
    assert_same_tensor(seq, expected.reshape(1, 2, 2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_float32_converts_to_other_float_dtypes(dtype):
    values = np.array([1.5, 0.1, -0.0, 65504.0, np.inf, 1e-30], dtype=np.float32)
    records = [encode_example({"k": values})]
    expected = torch.from_numpy(values).to(dtype)
    assert_same_tensor(parse_example(records, {"k": FixedLenFeature([6], dtype)})["k"], expected[None])
    assert_same_tensor(parse_single_example(records[0], {"k": FixedLenFeature([2, 3], dtype)})["k"],
                       expected.reshape(2, 3))
    padded, _ = tfr_torch.to_padded(parse_example(records, {"k": VarLenFeature(dtype)})["k"])
    assert_same_tensor(padded, expected[None])
    assert_same_tensor(parse_single_example(records[0], {"k": RaggedFeature(dtype)})["k"], expected)
    if dtype == torch.float64:  # exact: every float32 is a float64
        assert parse_example(records, {"k": FixedLenFeature([6], dtype)})["k"][0].tolist() == values.tolist()


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


@pytest.mark.parametrize("dtype, shown", [
    (torch.complex64, "torch.complex64"), (torch.uint16, "torch.uint16"), ("int4", "'int4'"),
    ("tf.complex64", "'tf.complex64'"), (None, "None"), ("float128", "'float128'"),
])
def test_unknown_dtype_is_a_value_error_naming_it(dtype, shown):
    for make in (lambda: FixedLenFeature([], dtype), lambda: VarLenFeature(dtype), lambda: RaggedFeature(dtype),
                 lambda: SparseFeature("i", "v", dtype, 3),
                 lambda: FixedLenSequenceFeature([], dtype, allow_missing=True)):
        with pytest.raises(ValueError) as raised:
            make()
        assert shown in str(raised.value), str(raised.value)


def test_unknown_dtype_object_is_named():
    thing = object()
    with pytest.raises(ValueError) as raised:
        FixedLenFeature([], thing)
    assert repr(thing) in str(raised.value)
    assert "tfr_torch.string" in str(raised.value)  # says what would be accepted


# ------------------------------------------------------------------------- 3. result shapes and types


def test_empty_batch_for_every_spec_kind():
    spec = {
        "fixed": FixedLenFeature([], torch.int64),
        "fixed23": FixedLenFeature([2, 3], torch.float32),
        "fixed_str": FixedLenFeature([2], tfr_torch.string),
        "var": VarLenFeature(torch.float32),
        "var_str": VarLenFeature(tfr_torch.string),
        "sparse": SparseFeature("i", "v", torch.float32, 5),
        "sparse2": SparseFeature(["i", "j"], "v", torch.float32, [5, 6]),
        "sparse_str": SparseFeature("i", "s", tfr_torch.string, 5),
        "ragged": RaggedFeature(torch.int64),
        "ragged_str": RaggedFeature(tfr_torch.string, value_key="s"),
        "ragged2": RaggedFeature(torch.int32, value_key="r", partitions=[RowLengths("n")]),
        "seq": FixedLenSequenceFeature([3], torch.uint8, allow_missing=True),
    }
    out = parse_example([], spec)
    assert set(out) == set(spec)
    assert_same_tensor(out["fixed"], torch.zeros(0, dtype=torch.int64))
    assert_same_tensor(out["fixed23"], torch.zeros(0, 2, 3))
    assert out["fixed_str"] == []
    for key, shape in [("var", (0, 0)), ("sparse", (0, 5)), ("sparse2", (0, 5, 6))]:
        assert out[key].layout == torch.sparse_coo
        assert out[key].shape == shape
        assert out[key].dtype == torch.float32
        assert out[key]._nnz() == 0
    assert out["var_str"] == []
    assert isinstance(out["sparse_str"], tfr_torch.SparseBytes)
    assert out["sparse_str"].dense_shape == (0, 5) and out["sparse_str"].values == []
    assert out["sparse_str"].to_list() == []
    assert out["ragged"].layout == torch.jagged and out["ragged"].dtype == torch.int64
    assert out["ragged"].unbind() == ()
    assert out["ragged_str"] == []
    assert isinstance(out["ragged2"], tfr_torch.RaggedTensor)
    assert len(out["ragged2"]) == 0 and out["ragged2"].to_list() == []
    assert_same_tensor(out["seq"], torch.zeros(0, 0, 3, dtype=torch.uint8))


def test_empty_batch_of_sequence_examples():
    context, lists, lengths = parse_sequence_example(
        [], context_features={"c": FixedLenFeature([2], torch.float32), "cv": VarLenFeature(torch.int64)},
        sequence_features={"f": FixedLenSequenceFeature([2], torch.int64, allow_missing=True),
                           "v": VarLenFeature(torch.int64), "s": VarLenFeature(tfr_torch.string),
                           "r": RaggedFeature(torch.float32)})
    assert_same_tensor(context["c"], torch.zeros(0, 2))
    assert context["cv"].shape == (0, 0)
    assert_same_tensor(lists["f"], torch.zeros(0, 0, 2, dtype=torch.int64))
    assert_same_tensor(lengths["f"], torch.zeros(0, dtype=torch.int64))
    assert lists["v"].layout == torch.sparse_coo and lists["v"].shape == (0, 0, 0)
    assert lists["s"] == []
    assert isinstance(lists["r"], tfr_torch.RaggedTensor) and lists["r"].to_list() == []
    assert set(lengths) == {"f"}


@pytest.mark.usefixtures("batch_path")
def test_all_missing_varlen():
    records = [encode_example({"other": 1})] * 3
    out = parse_example(records, {"v": VarLenFeature(torch.float32), "s": VarLenFeature(tfr_torch.string)})
    assert out["v"].layout == torch.sparse_coo and out["v"].shape == (3, 0) and out["v"]._nnz() == 0
    padded, lengths = tfr_torch.to_padded(out["v"], -1.0)
    assert_same_tensor(padded, torch.zeros(3, 0))
    assert lengths.tolist() == [0, 0, 0]
    assert out["s"] == [[], [], []]
    single = parse_single_example(records[0], {"v": VarLenFeature(torch.float32)})["v"]
    assert single.shape == (0,) and single._nnz() == 0


@pytest.mark.usefixtures("batch_path")
def test_fixed_len_2x3_numeric_and_strings():
    numbers = np.arange(6, dtype=np.int64).reshape(2, 3)
    words = [[b"a", b"b", b"c"], [b"d", b"e", b"f"]]
    default_words = [[b"1", b"2", b"3"], [b"4", b"5", b"6"]]
    records = [encode_example({"n": numbers, "w": words}), encode_example({"n": numbers + 10})]
    spec = {"n": FixedLenFeature([2, 3], torch.int64),
            "w": FixedLenFeature([2, 3], tfr_torch.string, default_value=default_words)}
    out = parse_example(records, spec)
    assert_same_tensor(out["n"], torch.from_numpy(np.stack([numbers, numbers + 10])))
    assert out["w"] == [words, default_words]
    single = parse_single_example(records[0], spec)
    assert_same_tensor(single["n"], torch.from_numpy(numbers))
    assert single["w"] == words
    # scalar strings come back as bytes, [n] as a list
    record = encode_example({"s": "héllo", "l": [b"x", b"y"]})
    spec = {"s": FixedLenFeature([], tfr_torch.string), "l": FixedLenFeature([2], tfr_torch.string)}
    assert parse_single_example(record, spec) == {"s": "héllo".encode(), "l": [b"x", b"y"]}
    assert parse_example([record, record], spec) == {"s": ["héllo".encode()] * 2, "l": [[b"x", b"y"]] * 2}


@pytest.mark.usefixtures("batch_path")
def test_fixed_len_defaults_fill_missing_examples():
    records = [encode_example({"x": [1.0, 2.0], "id": 7}), encode_example({})]
    spec = {"x": FixedLenFeature([2], torch.float32, default_value=[-1.0, -0.0]),
            "id": FixedLenFeature([], torch.int64, default_value=-1),
            "t": FixedLenFeature([2], torch.float32, default_value=torch.tensor([0.5, 0.25])),
            "a": FixedLenFeature([2], torch.int32, default_value=np.array([3, 4]))}
    out = parse_example(records, spec)
    assert_same_tensor(out["x"], torch.tensor([[1.0, 2.0], [-1.0, -0.0]]))
    assert out["id"].tolist() == [7, -1]
    assert out["t"].tolist() == [[0.5, 0.25], [0.5, 0.25]]
    assert_same_tensor(out["a"], torch.tensor([[3, 4], [3, 4]], dtype=torch.int32))


@pytest.mark.parametrize("dtype, shape, default", [
    (torch.float32, [0], []), (torch.int64, [2, 0], [[], []]), (torch.uint8, [0, 3], []),
    (tfr_torch.string, [2, 0], [[], []]),
])
def test_zero_size_fixed_len_with_default(dtype, shape, default):
    """A zero-size FixedLenFeature holds no values; missing or present (as an empty list), it gives [B, *shape]."""
    wire = {tfr_torch.string: bytes, torch.float32: np.float32}.get(dtype, np.int64)
    empty = np.array([], dtype=wire)
    records = [encode_example({"z": empty}), encode_example({}), encode_example({"other": 1})]
    out = parse_example(records, {"z": FixedLenFeature(shape, dtype, default_value=default)})["z"]
    single = parse_single_example(records[1], {"z": FixedLenFeature(shape, dtype, default_value=default)})["z"]
    if dtype == tfr_torch.string:
        assert out == [default] * 3 and single == default
    else:
        assert_same_tensor(out, torch.zeros(3, *shape, dtype=dtype))
        assert_same_tensor(single, torch.zeros(*shape, dtype=dtype))


def test_varlen_to_padded_2d():
    records = [encode_example({"t": [1, 2, 3]}), encode_example({"t": [4]}), encode_example({}),
               encode_example({"t": np.array([], dtype=np.int64)})]
    sparse = parse_example(records, {"t": VarLenFeature(torch.int64)})["t"]
    assert sparse.layout == torch.sparse_coo and sparse.shape == (4, 3)
    assert sparse.coalesce().indices().tolist() == [[0, 0, 0, 1], [0, 1, 2, 0]]
    values, lengths = tfr_torch.to_padded(sparse, -1)
    assert_same_tensor(values, torch.tensor([[1, 2, 3], [4, -1, -1], [-1, -1, -1], [-1, -1, -1]]))
    assert_same_tensor(lengths, torch.tensor([3, 1, 0, 0]))
    values, _ = tfr_torch.to_padded(sparse)
    assert values.tolist() == [[1, 2, 3], [4, 0, 0], [0, 0, 0], [0, 0, 0]]
    single = parse_single_example(records[0], {"t": VarLenFeature(torch.int64)})["t"]
    assert single.shape == (3,) and single.to_dense().tolist() == [1, 2, 3]
    strings = parse_example([encode_example({"s": [b"a", b"b"]}), encode_example({})],
                            {"s": VarLenFeature(tfr_torch.string)})["s"]
    assert strings == [[b"a", b"b"], []]
    with pytest.raises(TypeError, match=r"to_padded expects a sparse COO tensor .*got list"):
        tfr_torch.to_padded(strings)


def test_varlen_to_padded_3d_from_sequence_example():
    records = [encode_sequence_example({"id": 0}, {"f": [[1, 2], [3, 4]]}),
               encode_sequence_example({"id": 1}, {}),
               encode_sequence_example({"id": 2}, {"f": [[1, 2, 5], [3]]})]
    context, lists, lengths = parse_sequence_example(records, context_features={"id": FixedLenFeature([], torch.int64)},
                                                     sequence_features={"f": VarLenFeature(torch.int64)})
    assert context["id"].tolist() == [0, 1, 2]
    assert lengths == {}
    sparse = lists["f"]
    assert sparse.layout == torch.sparse_coo and sparse.shape == (3, 2, 3)
    values, step_lengths = tfr_torch.to_padded(sparse, -1)
    assert_same_tensor(values, torch.tensor([[[1, 2, -1], [3, 4, -1]],
                                             [[-1, -1, -1], [-1, -1, -1]],
                                             [[1, 2, 5], [3, -1, -1]]]))
    assert_same_tensor(step_lengths, torch.tensor([[2, 2], [0, 0], [3, 1]]))
    _, single = parse_single_sequence_example(records[2], sequence_features={"f": VarLenFeature(torch.int64)})
    assert single["f"].shape == (2, 3)
    assert tfr_torch.to_padded(single["f"], -1)[0].tolist() == [[1, 2, 5], [3, -1, -1]]


def test_fixed_len_sequence_feature_in_sequence_example():
    records = [encode_sequence_example(None, {"f": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "s": [[b"a"], [b"b"]]}),
               encode_sequence_example(None, {"f": [[7.0, 8.0]], "s": [[b"c"]]})]
    spec = {"f": FixedLenSequenceFeature([2], torch.float32), "s": FixedLenSequenceFeature([], tfr_torch.string)}
    _, lists, lengths = parse_sequence_example(records, sequence_features=spec)
    assert_same_tensor(lists["f"], torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
                                                 [[7.0, 8.0], [0.0, 0.0], [0.0, 0.0]]]))
    assert lists["s"] == [[b"a", b"b"], [b"c", b""]]
    assert lengths["f"].tolist() == [3, 1] and lengths["s"].tolist() == [2, 1]
    _, single = parse_single_sequence_example(records[1], sequence_features=spec)
    assert_same_tensor(single["f"], torch.tensor([[7.0, 8.0]]))
    assert single["s"] == [b"c"]
    with pytest.raises(ValueError, match=r"FixedLenSequenceFeature 'f': a default_value is not allowed"):
        parse_sequence_example(records, sequence_features={
            "f": FixedLenSequenceFeature([2], torch.float32, default_value=0.0)})


def test_fixed_len_sequence_feature_in_example():
    records = [encode_example({"s": [1, 2, 3, 4]}), encode_example({"s": [5, 6]}), encode_example({})]
    spec = {"s": FixedLenSequenceFeature([2], torch.int64, allow_missing=True, default_value=-1)}
    out = parse_example(records, spec)["s"]
    assert_same_tensor(out, torch.tensor([[[1, 2], [3, 4]], [[5, 6], [-1, -1]], [[-1, -1], [-1, -1]]]))
    assert_same_tensor(parse_single_example(records[1], spec)["s"], torch.tensor([[5, 6]]))
    assert_same_tensor(parse_single_example(records[2], spec)["s"], torch.zeros(0, 2, dtype=torch.int64))


def test_ragged_without_partitions_is_a_jagged_nested_tensor():
    records = [encode_example({"a": [1, 2, 3]}), encode_example({"a": [4]}), encode_example({}),
               encode_example({"a": np.array([], dtype=np.int64)})]
    out = parse_example(records, {"a": RaggedFeature(torch.int64)})["a"]
    assert out.is_nested and out.layout == torch.jagged
    assert out.dtype == torch.int64
    assert [t.tolist() for t in out.unbind()] == [[1, 2, 3], [4], [], []]
    single = parse_single_example(records[0], {"a": RaggedFeature(torch.int64)})["a"]
    assert not single.is_nested  # one example: dense, as TensorFlow gives it
    assert_same_tensor(single, torch.tensor([1, 2, 3]))
    words = parse_example([encode_example({"w": [b"x", b"y"]}), encode_example({})],
                          {"w": RaggedFeature(tfr_torch.string)})
    assert words["w"] == [[b"x", b"y"], []]
    # value_key reads another feature; UniformRowLength innermost gives uniform inner dimensions
    out = parse_example([encode_example({"v": [1, 2, 3, 4, 5, 6]}), encode_example({"v": [7, 8]})],
                        {"r": RaggedFeature(torch.int64, value_key="v", partitions=[UniformRowLength(2)])})["r"]
    assert out.layout == torch.jagged
    assert [t.tolist() for t in out.unbind()] == [[[1, 2], [3, 4], [5, 6]], [[7, 8]]]


@pytest.mark.usefixtures("batch_path")
def test_ragged_with_two_levels_is_a_ragged_tensor():
    records = [encode_example({"v": [1.0, 2.0, 3.0, 4.0, 5.0], "inner": [2, 0, 3], "outer": [2, 1]}),
               encode_example({"v": [6.0], "inner": [1], "outer": [0, 1]}),
               encode_example({})]
    spec = {"r": RaggedFeature(torch.float32, value_key="v", partitions=[RowLengths("outer"), RowLengths("inner")])}
    out = parse_example(records, spec)["r"]
    assert isinstance(out, tfr_torch.RaggedTensor)
    assert out.ragged_rank == 3 and len(out) == 3
    assert out.to_list() == [[[[1.0, 2.0], []], [[3.0, 4.0, 5.0]]], [[], [[6.0]]], []]
    assert out.values.dtype == torch.float32
    assert all(s.dtype == torch.int32 for s in out.nested_row_splits)
    assert out.row_splits.tolist() == [0, 2, 4, 4]
    # every partition type gives the same tensor
    for partition, data in [(RowSplits, [0, 2, 2, 5]), (RowStarts, [0, 2, 2]), (RowLimits, [2, 2, 5]),
                            (ValueRowIds, [0, 0, 2, 2, 2])]:
        r = parse_single_example(encode_example({"v": [1, 2, 3, 4, 5], "p": data}),
                                 {"r": RaggedFeature(torch.int64, value_key="v", partitions=[partition("p")],
                                                     row_splits_dtype=torch.int64)})["r"]
        assert [t.tolist() for t in r.unbind()] == [[1, 2], [], [3, 4, 5]], partition
    words = parse_example([encode_example({"w": [b"a", b"b", b"c"], "n": [1, 2]})],
                          {"r": RaggedFeature(tfr_torch.string, value_key="w", partitions=[RowLengths("n")])})
    assert words["r"] == [[[b"a"], [b"b", b"c"]]]


def test_ragged_feature_lists_in_sequence_example():
    empty = np.array([], dtype=np.int64)
    records = [encode_sequence_example(None, {"f": [[1, 2], empty, [3]]}), encode_sequence_example(None, {"f": [[4]]})]
    _, lists, _ = parse_sequence_example(records, sequence_features={"f": RaggedFeature(torch.int64)})
    assert isinstance(lists["f"], tfr_torch.RaggedTensor)
    assert lists["f"].to_list() == [[[1, 2], [], [3]], [[4]]]
    _, single = parse_single_sequence_example(records[0], sequence_features={"f": RaggedFeature(torch.int64)})
    assert single["f"].layout == torch.jagged
    assert [t.tolist() for t in single["f"].unbind()] == [[1, 2], [], [3]]


@pytest.mark.usefixtures("batch_path")
def test_sparse_feature_sorts_by_index_unless_already_sorted():
    # the order of the stored entries is what already_sorted is about: read it with _indices() / _values(), which
    # (unlike indices()) torch allows on a tensor not marked coalesced (duplicate indices are legal, as in TF)
    records = [encode_example({"i": [3, 1, 2], "v": [1.0, 2.0, 3.0]}), encode_example({"i": [0], "v": [9.0]})]
    out = parse_example(records, {"s": SparseFeature("i", "v", torch.float32, 5)})["s"]
    assert out.layout == torch.sparse_coo and out.shape == (2, 5)
    assert out._indices().tolist() == [[0, 0, 0, 1], [1, 2, 3, 0]]
    assert out._values().tolist() == [2.0, 3.0, 1.0, 9.0]
    assert out.to_dense().tolist() == [[0.0, 2.0, 3.0, 1.0, 0.0], [9.0, 0.0, 0.0, 0.0, 0.0]]
    kept = parse_example(records, {"s": SparseFeature("i", "v", torch.float32, 5, already_sorted=True)})["s"]
    assert kept._indices().tolist() == [[0, 0, 0, 1], [3, 1, 2, 0]]
    assert kept._values().tolist() == [1.0, 2.0, 3.0, 9.0]
    single = parse_single_example(records[0], {"s": SparseFeature("i", "v", torch.float32, 5)})["s"]
    assert single.shape == (5,) and single._indices().tolist() == [[1, 2, 3]]
    # two index keys: sorted row-major
    two = parse_single_example(encode_example({"i": [1, 0, 1], "j": [0, 2, 1], "v": [1, 2, 3]}),
                               {"s": SparseFeature(["i", "j"], "v", torch.int64, [2, 3])})["s"]
    assert two.shape == (2, 3)
    assert two._indices().tolist() == [[0, 1, 1], [2, 0, 1]]
    assert two._values().tolist() == [2, 1, 3]


@pytest.mark.usefixtures("batch_path")
def test_string_sparse_feature_gives_sparse_bytes():
    records = [encode_example({"i": [3, 1], "w": [b"c", b"a"]}), encode_example({"i": [0], "w": [b"z"]})]
    out = parse_example(records, {"s": SparseFeature("i", "w", tfr_torch.string, 4)})["s"]
    assert isinstance(out, tfr_torch.SparseBytes)
    assert out.dense_shape == (2, 4)
    assert out.indices.tolist() == [[0, 1], [0, 3], [1, 0]]
    assert out.values == [b"a", b"c", b"z"]
    assert out.to_list() == [[b"", b"a", b"", b"c"], [b"z", b"", b"", b""]]
    assert out.to_list(default=b"?") == [[b"?", b"a", b"?", b"c"], [b"z", b"?", b"?", b"?"]]
    single = parse_single_example(records[0], {"s": SparseFeature("i", "w", tfr_torch.string, 4)})["s"]
    assert single.dense_shape == (4,) and single.to_list() == [b"", b"a", b"", b"c"]


# ----------------------------------------------------------------- 4. non-canonical wire encodings


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s are 10-byte varints
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _packed_ints(values) -> bytes:
    return _ld(1, b"".join(_varint(v) for v in values))


def _unpacked_ints(values) -> bytes:
    return b"".join(b"\x08" + _varint(v) for v in values)


def _f32(bits: int) -> bytes:
    return struct.pack("<I", bits)


def _packed_floats(bits) -> bytes:
    return _ld(1, b"".join(_f32(b) for b in bits))


def _unpacked_floats(bits) -> bytes:
    return b"".join(b"\x0d" + _f32(b) for b in bits)


def _int64_feature(list_body: bytes) -> bytes:
    return _ld(3, list_body)


def _float_feature(list_body: bytes) -> bytes:
    return _ld(2, list_body)


def _bytes_feature(list_body: bytes) -> bytes:
    return _ld(1, list_body)


INTS = [1, -1, 0, 2**63 - 1, -(2**63), 300, 2**40]
FLOAT_BITS = [0x3FC00000, 0x80000000, 0x7FC00001, 0xFF800000, 0x00000001, 0x40490FDB]

NON_CANONICAL = {
    "unpacked-int64": _int64_feature(_unpacked_ints(INTS)),
    "unpacked-float": _float_feature(_unpacked_floats(FLOAT_BITS)),
    "float-two-packed-runs": _float_feature(_packed_floats(FLOAT_BITS[:2]) + _packed_floats(FLOAT_BITS[2:])),
    "int64-two-packed-runs": _int64_feature(_packed_ints(INTS[:3]) + _packed_ints(INTS[3:])),
    "int64-packed-then-unpacked": _int64_feature(_packed_ints(INTS[:2]) + _unpacked_ints(INTS[2:])),
    "float-unpacked-then-packed": _float_feature(_unpacked_floats(FLOAT_BITS[:1]) + _packed_floats(FLOAT_BITS[1:])),
    "two-float-lists-merge": _float_feature(_packed_floats(FLOAT_BITS[:3])) + _float_feature(
        _packed_floats(FLOAT_BITS[3:])),
    "float-then-int64-last-wins": _float_feature(_packed_floats(FLOAT_BITS)) + _int64_feature(_packed_ints(INTS)),
    "int64-then-float-last-wins": _int64_feature(_packed_ints(INTS)) + _float_feature(_packed_floats(FLOAT_BITS)),
    "int64-then-bytes-last-wins": _int64_feature(_packed_ints(INTS)) + _bytes_feature(_ld(1, b"x") + _ld(1, b"")),
    "bytes-then-float-last-wins": _bytes_feature(_ld(1, b"x")) + _float_feature(_packed_floats(FLOAT_BITS)),
    "unknown-fields-in-feature": b"\x38\x05" + _int64_feature(_packed_ints(INTS)) + _ld(9, b"junk") + b"\x45" + _f32(1),
    "unknown-fields-in-float-list": _float_feature(b"\x10\x01" + _packed_floats(FLOAT_BITS) + _ld(5, b"zz")),
    "unknown-fields-in-bytes-list": _bytes_feature(_ld(1, b"ab") + b"\x10\x07" + _ld(1, b"\x00c")),
    "empty-float-list-with-empty-run": _float_feature(_ld(1, b"")),
    "empty-int64-list": _int64_feature(b""),
    "long-packed-int64": _int64_feature(_packed_ints([2**40 + i for i in range(40)])),  # multi-byte lengths
    "long-unpacked-float": _float_feature(_unpacked_floats(list(range(0x3F800000, 0x3F800000 + 50)))),
    "no-kind": b"",
    "no-kind-unknown-field-only": b"\x38\x01",
}

_SPEC_OF_KIND = {"int64": torch.int64, "float": torch.float32, "bytes": tfr_torch.string}


def _kind_of(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        return "bytes"
    return "float" if value.dtype == np.float32 else "int64"


def _assert_parse_matches_decode_example(records: list[bytes], key: str) -> None:
    decoded = [tfr_torch.decode_example(r).get(key) for r in records]
    kinds = {_kind_of(v) for v in decoded} - {None}
    assert len(kinds) <= 1
    kind = kinds.pop() if kinds else "int64"
    dtype = _SPEC_OF_KIND[kind]
    out = parse_example(records, {key: VarLenFeature(dtype)})[key]
    rows = out if dtype == tfr_torch.string else sparse_rows(out, len(records))
    for i, (row, want) in enumerate(zip(rows, decoded)):
        if want is None:
            assert len(row) == 0, i
        elif dtype == tfr_torch.string:
            assert row == list(want), i
        elif dtype == torch.float32:
            assert float32_bits(row.numpy()) == float32_bits(want), i
        else:
            assert row.tolist() == want.tolist(), i
        single = parse_single_example(records[i], {key: VarLenFeature(dtype)})[key]
        if dtype == tfr_torch.string:
            assert single == ([] if want is None else list(want))
        else:
            assert_same_tensor(single.coalesce().values(), torch.as_tensor(row))


# Encodings where TensorFlow's parse_example and protobuf (tf.train.Example.FromString) disagree or one of them
# refuses (checked with TensorFlow 2.21): every tfr_torch path raises DecodeError naming the key and the byte
# offset (format/strict.py holds the rules)
REJECTED = {
    "float-two-packed-runs": "has more float values after its packed run",
    "int64-two-packed-runs": "has more int64 values after its packed run",
    "int64-packed-then-unpacked": "has more int64 values after its packed run",
    "float-unpacked-then-packed": "has field 1 (length-delimited) among its unpacked float values",
    "two-float-lists-merge": "holds a second list after its first",
    "float-then-int64-last-wins": "holds a second list after its first",
    "int64-then-float-last-wins": "holds a second list after its first",
    "int64-then-bytes-last-wins": "holds a second list after its first",
    "bytes-then-float-last-wins": "holds a second list after its first",
    "unknown-fields-in-feature": "starts with field 7 (varint): expected its list first",
    "unknown-fields-in-float-list": "has field 2 (varint) first in its float list",
    "unknown-fields-in-bytes-list": "has field 2 (varint) in its bytes_list",
    "no-kind-unknown-field-only": "starts with field 7 (varint): expected its list first",
}


@pytest.mark.parametrize("name", list(NON_CANONICAL))
@pytest.mark.usefixtures("batch_path")
def test_non_canonical_feature_decodes_as_protobuf_does(name):
    raw = NON_CANONICAL[name]
    odd = _raw_example({"f": raw})
    if name in REJECTED:
        _assert_every_path_rejects(odd, raw, REJECTED[name])
        return
    # alone, and mixed with canonical records of the same kind (the batch takes both paths)
    _assert_parse_matches_decode_example([odd], "f")
    decoded = tfr_torch.decode_example(odd).get("f")
    canonical_value = {None: np.array([5], dtype=np.int64), "int64": np.array([5, -5], dtype=np.int64),
                       "float": np.array([0.5, np.nan], dtype=np.float32),
                       "bytes": [b"canon", b""]}[_kind_of(decoded)]
    canonical = encode_example({"f": canonical_value})
    _assert_parse_matches_decode_example([canonical, odd, canonical, odd, encode_example({})], "f")


def _assert_every_path_rejects(odd: bytes, raw: bytes, detail: str) -> None:
    feature = re.escape(f"its tf.train.Feature ({len(raw)} bytes) {detail}") + r".* \(at byte \d+\)"
    with pytest.raises(DecodeError, match="feature 'f': " + feature):
        tfr_torch.decode_example(odd)
    canonical = encode_example({"g": [1, 2]})  # f missing: only record 1 is bad
    own = {0x0A: tfr_torch.string, 0x12: torch.float32, 0x1A: torch.int64}.get(raw[0])  # the first list's kind
    for dtype in (torch.int64, torch.float32, tfr_torch.string):
        spec = {"f": VarLenFeature(dtype)}
        if own is not None and dtype != own:  # told as a kind mismatch or as malformed, but told
            with pytest.raises(DecodeError, match=r"feature 'f' in example 1 (holds|is malformed)"):
                parse_example([canonical, odd, canonical], spec)
            continue
        with pytest.raises(DecodeError, match=r"feature 'f' in example 1 is malformed: " + feature):
            parse_example([canonical, odd, canonical], spec)
        with pytest.raises(DecodeError, match=r"feature 'f' in the example is malformed: " + feature):
            parse_single_example(odd, spec)


@pytest.mark.usefixtures("batch_path")
def test_non_canonical_fixed_len_equals_canonical():
    canonical = encode_example({"i": np.array(INTS, dtype=np.int64),
                                "x": np.array(FLOAT_BITS, dtype=np.uint32).view(np.float32)})
    odd = _raw_example({"i": NON_CANONICAL["unpacked-int64"], "x": NON_CANONICAL["unpacked-float"]})
    spec = {"i": FixedLenFeature([7], torch.int64), "x": FixedLenFeature([2, 3], torch.float32)}
    out = parse_example([canonical, odd], spec)
    assert_same_tensor(out["i"][1], out["i"][0])
    assert_same_tensor(out["x"][1], out["x"][0])
    assert out["i"][0].tolist() == INTS
    assert float32_bits(out["x"][0].numpy()) == FLOAT_BITS
    # an unpacked list of another kind is checked against the spec like any other kind
    flipped = _raw_example({"i": NON_CANONICAL["unpacked-float"]})
    with pytest.raises(DecodeError, match=r"feature 'i' in example 1 holds float values but int64 values were"):
        parse_example([canonical, flipped], {"i": FixedLenFeature([7], torch.int64)})


@pytest.mark.usefixtures("batch_path")
def test_kind_less_feature_counts_as_missing():
    records = [_raw_example({"f": b""}), encode_example({"g": 1}), encode_example({"f": [1.0, 2.0]})]
    out = parse_example(records, {"f": FixedLenFeature([2], torch.float32, default_value=[7.0, 8.0])})
    assert out["f"].tolist() == [[7.0, 8.0], [7.0, 8.0], [1.0, 2.0]]
    with pytest.raises(DecodeError, match=r"feature 'f' in example 0 is required but missing"):
        parse_example(records, {"f": FixedLenFeature([2], torch.float32)})


@pytest.mark.usefixtures("batch_path")
def test_repeated_map_entry_last_wins():
    record = _ld(1, _ld(1, _ld(1, b"f") + _ld(2, _int64_feature(_packed_ints([1, 2])))) +
                 _ld(1, _ld(1, b"f") + _ld(2, _int64_feature(_packed_ints([3, 4, 5])))))
    assert tfr_torch.decode_example(record)["f"].tolist() == [3, 4, 5]
    assert parse_single_example(record, {"f": FixedLenFeature([3], torch.int64)})["f"].tolist() == [3, 4, 5]
    _assert_parse_matches_decode_example([record], "f")


# ----------------------------------------------------------------------------------- 5. compile_features


def test_compiled_plan_parses_like_parse_example():
    spec = {"x": FixedLenFeature([2], torch.float32), "v": VarLenFeature(torch.int64),
            "r": RaggedFeature(tfr_torch.string)}
    records = [encode_example({"x": [1.0, 2.0], "v": [1, 2], "r": [b"a"]}), encode_example({"x": [3.0, 4.0]})]
    plan = tfr_torch.compile_features(spec)
    assert isinstance(plan, tfr_torch.ExamplePlan)
    got, want = plan.parse(records), parse_example(records, spec)
    assert set(got) == set(want)
    assert_same_tensor(got["x"], want["x"])
    assert torch.equal(got["v"].to_dense(), want["v"].to_dense())
    assert got["r"] == want["r"] == [[b"a"], []]
    # and with example names, errors are the same
    with pytest.raises(DecodeError, match=r"^f\.tfrecord:8: feature 'x' in example 1 is required"):
        plan.parse([records[0], encode_example({})], example_names=[tfr_torch.RecordLocation("f.tfrecord", 0),
                                                                     tfr_torch.RecordLocation("f.tfrecord", 8)])


def test_compile_features_caches_plans_of_hashable_specs():
    def spec():
        return {"x": FixedLenFeature([2], torch.float32), "y": VarLenFeature("int64")}
    assert tfr_torch.compile_features(spec()) is tfr_torch.compile_features(spec())
    other = {"x": FixedLenFeature([3], torch.float32)}
    assert tfr_torch.compile_features(spec()) is not tfr_torch.compile_features(other)


def test_spec_with_list_default_value_works_and_is_cached():
    def spec():
        return {"x": FixedLenFeature([2], torch.int64, default_value=[5, 6])}
    plan = tfr_torch.compile_features(spec())
    assert plan is tfr_torch.compile_features(spec())  # the list default is frozen, so the spec is hashable
    assert plan.parse([encode_example({})])["x"].tolist() == [[5, 6]]
    nested = {"x": FixedLenFeature([2, 2], torch.float32, default_value=[[1.0, 2.0], [3.0, 4.0]])}
    assert parse_example([encode_example({})], nested)["x"].tolist() == [[[1.0, 2.0], [3.0, 4.0]]]


def test_cache_does_not_confuse_equal_comparing_defaults():
    """0.0 == -0.0 in Python, but a default of -0.0 must give -0.0's bits, whatever was compiled before."""
    missing = [encode_example({})]
    plus = parse_example(missing, {"x": FixedLenFeature([], torch.float32, default_value=0.0)})["x"]
    minus = parse_example(missing, {"x": FixedLenFeature([], torch.float32, default_value=-0.0)})["x"]
    assert float32_bits(plus.numpy()) == [0x00000000]
    assert float32_bits(minus.numpy()) == [0x80000000]


# --------------------------------------------------------------------------------- 6. infer_features


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


def test_infer_features_from_records():
    spec = tfr_torch.infer_features(_infer_records())
    assert spec == INFERRED
    out = parse_example(_infer_records(), spec)  # and the proposal parses the records it came from
    assert out["id"].tolist() == [0, 1, 2]
    assert out["name"] == [b"a", b"b", b"c"]


def test_infer_features_kind_conflict_names_key():
    records = [encode_example({"a": 1, "b": 1}), encode_example({"a": 1, "b": 1.0})]
    with pytest.raises(DecodeError) as raised:
        tfr_torch.infer_features(records)
    assert str(raised.value) == "feature 'b' holds float and int64 values in different records; a spec needs one kind"


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


def test_infer_features_stops_reading_files_at_max_records(tmp_path):
    path = tmp_path / "a.tfrecord"
    records = [encode_example({"a": 1}), encode_example({"a": [1, 2]}), b"not an example"]
    _write(path, records)
    assert tfr_torch.infer_features(path, max_records=1) == {"a": FixedLenFeature([], torch.int64)}
    assert tfr_torch.infer_features(str(path), max_records=2) == {"a": VarLenFeature(torch.int64)}
    with pytest.raises(DecodeError, match=r"record 2 is not a tf.train.Example") as raised:
        tfr_torch.infer_features(path)
    # a data error from a file says where: the file and the record's byte offset (12-byte header, 4-byte footer)
    assert raised.value.path == str(path)
    assert raised.value.offset == sum(16 + len(r) for r in records[:2])
    assert str(raised.value).startswith(f"{path}:{raised.value.offset}: ")


def _write(path: Path, records: list[bytes]) -> Path:
    with tfr_torch.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    return path


def test_infer_features_from_file_and_glob(tmp_path):
    records = _infer_records()
    one = _write(tmp_path / "one.tfrecord", records[:2])
    _write(tmp_path / "two.tfrecord", records[2:])
    from_file = tfr_torch.infer_features(one)
    assert from_file["tokens"] == VarLenFeature(torch.int64)
    assert from_file["words"] == VarLenFeature(tfr_torch.string)
    assert from_file["maybe"] == VarLenFeature(torch.float32)  # missing from record 1
    assert tfr_torch.infer_features(str(tmp_path / "*.tfrecord")) == INFERRED
    assert tfr_torch.infer_features([str(tmp_path / "one.tfrecord"), str(tmp_path / "two.tfrecord")]) == INFERRED


def test_schema_cli_prints_code_giving_the_inferred_spec(tmp_path):
    records = _infer_records() + [encode_example({"id": 3, "emb": [0.0, 0.0], "name": b"d", "tokens": [1],
                                                  "words": [b"q"], "odd 'key'\n": [1, 2]})]
    path = _write(tmp_path / "data.tfrecord", records)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "tfr_torch", "schema", str(path)], capture_output=True, text=True,
                            cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr
    namespace: dict[str, Any] = {}
    exec(result.stdout, namespace)  # noqa: S102 - the CLI's output is meant to be pasted as code
    assert namespace["features"] == tfr_torch.infer_features(path)
    assert namespace["features"]["odd 'key'\n"] == VarLenFeature(torch.int64)


# ------------------------------------------------------------------------------- 7. property test

NUMERIC_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                  torch.int16, torch.int8, torch.uint8, torch.bool]
ALL_DTYPES = NUMERIC_DTYPES + [tfr_torch.string]
FLOAT_DTYPES = {torch.float32, torch.float16, torch.bfloat16, torch.float64}


def _int_range(dtype) -> tuple[int, int]:
    if dtype == torch.bool:
        return 0, 1
    info = torch.iinfo(dtype)
    return info.min, info.max


def _wire_values(draw, dtype, n: int) -> Any:
    """n wire values for `dtype`: a float32 array (from random bits), an int64 array in range, or bytes."""
    if dtype == tfr_torch.string:
        return draw(st.lists(st.binary(max_size=4), min_size=n, max_size=n))
    if dtype in FLOAT_DTYPES:
        bits = draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n))
        return np.array(bits, dtype=np.uint32).view(np.float32)
    lo, hi = _int_range(dtype)
    return np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype=np.int64)


def _default_values(draw, dtype, n: int) -> list:
    """n default values as users write them (Python floats, ints, bytes)."""
    if dtype == tfr_torch.string:
        return draw(st.lists(st.binary(max_size=4), min_size=n, max_size=n))
    if dtype in FLOAT_DTYPES:
        return draw(st.lists(st.floats(width=32), min_size=n, max_size=n))
    lo, hi = _int_range(dtype)
    return draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))


def _encodable(dtype, values: Any) -> Any:
    if dtype == tfr_torch.string:
        return list(values) if len(values) else np.array([], dtype=bytes)
    return values


def _as_wire_array(dtype, values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32 if dtype in FLOAT_DTYPES else np.int64)


def _to_tensor(dtype, flat: Any, shape: tuple) -> torch.Tensor:
    return torch.from_numpy(_as_wire_array(dtype, flat).copy()).to(dtype).reshape(shape)


def _nest(flat: list, shape: tuple) -> Any:
    array = np.empty(shape, dtype=object)
    for i, value in enumerate(flat):
        array.flat[i] = value
    return array.tolist()


@st.composite
def spec_and_examples(draw):
    n_specs = draw(st.integers(1, 4))
    keys = draw(st.lists(st.text(max_size=5), min_size=2 * n_specs, max_size=2 * n_specs, unique=True))
    batch = draw(st.integers(0, 6))
    spec: dict[str, Any] = {}
    checks = []  # (key, kind, dtype, details, per-example values)
    examples: list[dict[str, Any]] = [{} for _ in range(batch)]
    for j in range(n_specs):
        key, aux = keys[2 * j], keys[2 * j + 1]
        kind = draw(st.sampled_from(["fixed", "varlen", "sequence", "ragged", "ragged_rows"]))
        dtype = draw(st.sampled_from(ALL_DTYPES))
        per_example = []
        if kind == "fixed":
            shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
            n = math.prod(shape)
            default = None
            if draw(st.booleans()):
                flat_default = _default_values(draw, dtype, n)
                default = _nest(flat_default, shape) if shape else flat_default[0]
            spec[key] = FixedLenFeature(list(shape), dtype, default_value=default)
            for ex in examples:
                if default is not None and draw(st.booleans()):
                    per_example.append(None)
                    continue
                values = _wire_values(draw, dtype, n)
                ex[key] = _encodable(dtype, values)
                per_example.append(values)
            checks.append((key, kind, dtype, (shape, default), per_example))
        elif kind == "varlen":
            spec[key] = VarLenFeature(dtype)
            for ex in examples:
                values = None if draw(st.booleans()) else _wire_values(draw, dtype, draw(st.integers(0, 4)))
                if values is not None:
                    ex[key] = _encodable(dtype, values)
                per_example.append(values)
            checks.append((key, kind, dtype, None, per_example))
        elif kind == "sequence":
            shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
            n = math.prod(shape)
            default = _default_values(draw, dtype, 1)[0] if draw(st.booleans()) else None
            spec[key] = FixedLenSequenceFeature(list(shape), dtype, allow_missing=True, default_value=default)
            for ex in examples:
                values = None if draw(st.booleans()) else _wire_values(draw, dtype, n * draw(st.integers(0, 3)))
                if values is not None:
                    ex[key] = _encodable(dtype, values)
                per_example.append(values)
            checks.append((key, kind, dtype, (shape, default), per_example))
        elif kind == "ragged":
            spec[key] = RaggedFeature(dtype)
            for ex in examples:
                values = None if draw(st.booleans()) else _wire_values(draw, dtype, draw(st.integers(0, 4)))
                if values is not None:
                    ex[key] = _encodable(dtype, values)
                per_example.append(values)
            checks.append((key, kind, dtype, None, per_example))
        else:  # ragged_rows: values from `key`, row lengths from `aux`
            splits_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
            spec[key] = RaggedFeature(dtype, partitions=[RowLengths(aux)], row_splits_dtype=splits_dtype)
            for ex in examples:
                if draw(st.booleans()):
                    per_example.append(None)
                    continue
                lengths = draw(st.lists(st.integers(0, 3), max_size=3))
                values = _wire_values(draw, dtype, sum(lengths))
                ex[key] = _encodable(dtype, values)
                ex[aux] = np.array(lengths, dtype=np.int64)
                per_example.append((values, lengths))
            checks.append((key, kind, dtype, splits_dtype, per_example))
    return spec, checks, [encode_example(ex) for ex in examples]


def _check_fixed(got, dtype, details, per_example, single):
    shape, default = details
    n = math.prod(shape)
    if default is None:
        default_flat = None
    elif dtype == tfr_torch.string:
        default_flat = np.asarray(default, dtype=object).reshape(-1).tolist() if shape else [default]
    else:
        default_flat = np.asarray(default).reshape(-1).tolist()
    flats = [default_flat if v is None else list(v) for v in per_example]
    if dtype == tfr_torch.string:
        want = [_nest(f, shape) if shape else f[0] for f in flats]
        assert got == (want[0] if single else want)
        return
    rows = [_to_tensor(dtype, f, (n,)) for f in flats]
    want = torch.stack(rows).reshape(len(rows), *shape) if rows else torch.zeros(0, *shape, dtype=dtype)
    assert_same_tensor(got, want[0] if single else want)


def _check_varlen(got, dtype, per_example, single):
    rows = [[] if v is None else list(v) for v in per_example]
    if dtype == tfr_torch.string:
        assert got == (rows[0] if single else rows)
        return
    assert got.layout == torch.sparse_coo and got.dtype == dtype
    longest = max((len(r) for r in rows), default=0)
    got = got.coalesce()
    if single:
        assert got.shape == (len(rows[0]),)
        assert got.indices().tolist() == [list(range(len(rows[0])))]
        assert_same_tensor(got.values(), _to_tensor(dtype, rows[0], (len(rows[0]),)))
        return
    assert got.shape == (len(rows), longest)
    assert got.indices().tolist() == [[i for i, r in enumerate(rows) for _ in r],
                                      [p for r in rows for p in range(len(r))]]
    flat = [x for r in rows for x in r]
    assert_same_tensor(got.values(), _to_tensor(dtype, flat, (len(flat),)))
    padded, lengths = tfr_torch.to_padded(got)
    assert lengths.tolist() == [len(r) for r in rows]
    for i, r in enumerate(rows):
        assert_same_tensor(padded[i, : len(r)], _to_tensor(dtype, r, (len(r),)))


def _check_sequence(got, dtype, details, per_example, single):
    shape, default = details
    n = math.prod(shape)
    pad = default if default is not None else (b"" if dtype == tfr_torch.string else 0)
    rows = [[] if v is None else list(v) for v in per_example]
    steps = [len(r) // n if n else 0 for r in rows]
    longest = max(steps, default=0)
    padded = [r if single else r + [pad] * ((longest - s) * n) for r, s in zip(rows, steps)]
    t_of = [s if single else longest for s in steps]
    if dtype == tfr_torch.string:
        want = [_nest(p, (t, *shape)) for p, t in zip(padded, t_of)]
        assert got == (want[0] if single else want)
        return
    if single:
        assert_same_tensor(got, _to_tensor(dtype, padded[0], (t_of[0], *shape)))
        return
    want = [_to_tensor(dtype, p, (longest, *shape)) for p in padded]
    assert_same_tensor(got, torch.stack(want) if want else torch.zeros(0, 0, *shape, dtype=dtype))


def _check_ragged(got, dtype, per_example, single):
    rows = [[] if v is None else list(v) for v in per_example]
    if dtype == tfr_torch.string:
        assert got == (rows[0] if single else rows)
        return
    if single:
        assert_same_tensor(got, _to_tensor(dtype, rows[0], (len(rows[0]),)))
        return
    assert got.is_nested and got.layout == torch.jagged and got.dtype == dtype
    parts = got.unbind()
    assert len(parts) == len(rows)
    for part, r in zip(parts, rows):
        assert_same_tensor(part, _to_tensor(dtype, r, (len(r),)))


def _check_ragged_rows(got, dtype, splits_dtype, per_example, single):
    examples = [([], []) if v is None else (list(v[0]), v[1]) for v in per_example]
    nested = []
    for values, lengths in examples:
        bounds = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))).tolist()
        nested.append([values[bounds[i] : bounds[i + 1]] for i in range(len(lengths))])
    if dtype == tfr_torch.string:
        assert got == (nested[0] if single else nested)
        return
    if single:  # one ragged dimension: a nested tensor over the rows
        assert got.layout == torch.jagged and got.dtype == dtype
        parts = got.unbind()
        assert len(parts) == len(nested[0])
        for part, row in zip(parts, nested[0]):
            assert_same_tensor(part, _to_tensor(dtype, row, (len(row),)))
        return
    assert isinstance(got, tfr_torch.RaggedTensor)
    assert len(got) == len(examples)
    outer = np.concatenate(([0], np.cumsum([len(l) for _, l in examples], dtype=np.int64))).tolist()
    all_lengths = [x for _, l in examples for x in l]
    inner = np.concatenate(([0], np.cumsum(all_lengths, dtype=np.int64))).tolist()
    assert [s.tolist() for s in got.nested_row_splits] == [outer, inner]
    assert all(s.dtype == splits_dtype for s in got.nested_row_splits)
    flat = [x for values, _ in examples for x in values]
    assert_same_tensor(got.values, _to_tensor(dtype, flat, (len(flat),)))


def _check(got, kind, dtype, details, per_example, single):
    if kind == "fixed":
        _check_fixed(got, dtype, details, per_example, single)
    elif kind == "varlen":
        _check_varlen(got, dtype, per_example, single)
    elif kind == "sequence":
        _check_sequence(got, dtype, details, per_example, single)
    elif kind == "ragged":
        _check_ragged(got, dtype, per_example, single)
    else:
        _check_ragged_rows(got, dtype, details, per_example, single)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec_and_examples())
def test_random_specs_round_trip(case):
    spec, checks, records = case
    out = parse_example(records, spec)
    assert set(out) == set(spec)
    for key, kind, dtype, details, per_example in checks:
        _check(out[key], kind, dtype, details, per_example, single=False)
    for i, record in enumerate(records):
        single = parse_single_example(record, spec)
        for key, kind, dtype, details, per_example in checks:
            _check(single[key], kind, dtype, details, [per_example[i]], single=True)


def test_large_records_decode_like_small_ones():
    """Batches of large records (here ~5 KB) take another path (see batch_path); the values must not change."""
    spec = {"img": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "tags": tfr_torch.VarLenFeature(tfr_torch.string),
            "label": tfr_torch.FixedLenFeature([], torch.int64),
            "box": tfr_torch.FixedLenFeature([4], torch.float32)}
    rng = np.random.default_rng(5)
    records = [tfr_torch.encode_example({"img": rng.bytes(5000 + i), "tags": np.array([b"t%d" % j for j in range(i % 3)], dtype=bytes),
                                         "label": i * 7, "box": [i, 0.5, -1.0, 2.0]}) for i in range(9)]
    batch = tfr_torch.parse_example(records, spec)
    for i, record in enumerate(records):
        one = tfr_torch.parse_single_example(record, spec)
        assert batch["img"][i] == one["img"] and len(one["img"]) == 5000 + i
        assert batch["label"][i] == one["label"] == i * 7
        assert torch.equal(batch["box"][i], one["box"])
    assert batch["tags"] == [[b"t%d" % j for j in range(i % 3)] for i in range(9)]


@pytest.mark.parametrize("spec, hint", [
    ("int", "is given as 'int' (the `tfrecord` package's description): write tfr_torch.FixedLenFeature([], "
            "torch.int64)"),
    (torch.float32, "is given as a bare dtype (torch.float32): write tfr_torch.FixedLenFeature([], torch.float32)"),
])
def test_another_librarys_spelling_gets_tfr_torchs(spec, hint):
    with pytest.raises(TypeError, match=re.escape(f"feature 'label' {hint}")):
        parse_example([encode_example({"label": 1})], {"label": spec})
