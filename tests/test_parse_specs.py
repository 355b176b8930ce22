"""Feature specs and their dtypes: bad specs and arguments raise ValueError/TypeError naming the key or the value, at
spec or compile time; the accepted dtype spellings, narrowing conversions and unknown dtypes; compile_features and
its cache. (Data errors: test_parse.py.)
"""

from __future__ import annotations

import copy
import pickle
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
    SparseFeature,
    UniformRowLength,
    VarLenFeature,
    encode_example,
    encode_sequence_example,
    parse_example,
    parse_sequence_example,
    parse_single_example,
)
from parse_util import assert_same_tensor, float32_bits

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core


# ------------------------------------------------------------------------------------- errors in specs


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


# ----------------------------------------------------------------------------------------- dtypes


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


class _TFStyleDType:
    """What TensorFlow's tf.string looks like to a spec: an object whose name is "string"."""

    name = "string"


def test_string_is_a_typed_sentinel():
    string = tfr_torch.string
    assert repr(string) == str(string) == "tfr_torch.string"
    assert string.name == "string"
    assert string == string and not string != string
    assert string != "string" and "string" != string and string not in ("string", "bytes", b"string")
    assert string != torch.float32 and torch.float32 != string and string not in (torch.float32, torch.int64)
    assert {string: 1}[string] == 1 and len({string, tfr_torch.string}) == 1
    assert pickle.loads(pickle.dumps(string)) is string
    assert copy.copy(string) is string and copy.deepcopy(string) is string
    assert type(string)() is string  # one instance only
    spec = FixedLenFeature([], "string")
    assert spec.dtype is string and pickle.loads(pickle.dumps(spec)) == spec  # as specs reach DataLoader workers
    assert VarLenFeature(_TFStyleDType()).dtype is string


@pytest.mark.parametrize("dtype", ["string", "tf.string", "bytes", bytes, str, tfr_torch.string])
def test_parse_tensor_takes_every_spelling_of_string(dtype):
    data = tfr_torch.serialize_tensor(np.array([b"a", b"bc"], dtype=object))
    assert tfr_torch.parse_tensor(data, dtype=dtype) == [b"a", b"bc"]
    with pytest.raises(DecodeError, match="the serialized tensor is int64, but dtype string was asked for"):
        tfr_torch.parse_tensor(tfr_torch.serialize_tensor(torch.arange(2)), dtype=dtype)


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


@pytest.mark.parametrize("spec, hint", [
    ("int", "is given as 'int' (the `tfrecord` package's description): write tfr_torch.FixedLenFeature([], "
            "torch.int64)"),
    (torch.float32, "is given as a bare dtype (torch.float32): write tfr_torch.FixedLenFeature([], torch.float32)"),
])
def test_another_librarys_spelling_gets_tfr_torchs(spec, hint):
    with pytest.raises(TypeError, match=re.escape(f"feature 'label' {hint}")):
        parse_example([encode_example({"label": 1})], {"label": spec})


# ----------------------------------------------------------------------------------- compile_features


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



def test_compile_features_reads_the_last_spec_and_its_plan_together(monkeypatch):
    """compile_features remembers the last spec and its plan for a quick repeat. Another thread compiling another
    spec between this call's reads of the two must not pair this spec with the other's plan."""
    from tfr_torch.decode import plan as plan_module

    mine, other = {"a": FixedLenFeature([], torch.int64)}, {"b": FixedLenFeature([], torch.int64)}
    tfr_torch.compile_features(mine)  # remembered as the last spec

    class OtherThreadCompilesAfterTheFirstRead(list):
        switched = False

        def __getitem__(self, i):
            value = super().__getitem__(i)
            if not self.switched:
                self.switched = True
                tfr_torch.compile_features(other)  # as if another thread ran right here
            return value

    monkeypatch.setattr(plan_module, "_LAST", OtherThreadCompilesAfterTheFirstRead(plan_module._LAST))
    assert list(tfr_torch.compile_features(mine).features) == ["a"]
