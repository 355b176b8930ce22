"""Adversarial audit of writing values into Examples and of tensor payloads (TensorFlow 2.21 parity).

What was checked (every expected byte string below was made by TensorFlow 2.21 itself, the way a TF user builds it:
`tf.train.Example(features=tf.train.Features(feature={"k": tf.train.Feature(int64_list=...)}))`,
`tf.io.serialize_tensor`, `tf.make_tensor_proto(value, dtype, shape)`; no test needs TensorFlow):

- `encode_example` (and so `TFRecordWriter.write_example` / `ShardedWriter.write_example`) for int, float, bool, str,
  bytes, numpy scalars and arrays of every dtype (uint64 at int64's edge, float64 that rounds, overflows or underflows
  in float32, double rounding of big ints, NaN payloads, float16, bfloat16, bool, str/bytes/object arrays, 0-d,
  2-D, empty, big-endian and non-contiguous arrays), torch tensors of every dtype (bfloat16, float16, uint8/16/64,
  bool, 0-d, non-contiguous, requires_grad), lists, tuples, nested lists, lists of 0-d arrays/tensors, None, dicts,
  and tf.train.Feature objects: byte-identical to TensorFlow, or a TypeError/ValueError that names the key.
- `serialize_tensor` byte for byte against `tf.io.serialize_tensor` for bool, int8-64, uint8-64, float16/32/64,
  bfloat16, complex64/128 and string, 0-d, zero-size, 5-D and non-contiguous tensors, and numpy's dtype aliases.
- `parse_tensor` of TensorFlow's `*_val` payloads (scalars broadcast to a shape, half_val for HALF and BFLOAT16,
  int_val widened for 8/16-bit ints, uint32_val/uint64_val, fewer/more values than the shape, none at all),
  tensor_content winning over `*_val`, and hostile payloads (huge or overflowing dims with tiny data, negative dims,
  content shorter/longer than the shape, wrong out_type, unknown dtypes): a DecodeError, with nothing large allocated.

Found (and fixed, see the tests marked "Fixed:"):
1. A str with no UTF-8 form (a lone surrogate), as a value, list element, numpy str array element or feature name,
   escaped as a bare UnicodeEncodeError that named no feature.
2. A list mixing floats with an int too large for a double (e.g. `[10**400, 0.5]`) escaped as OverflowError.
3. Torch tensors of dtypes numpy lacks (float8_*, complex32), quantized tensors and meta tensors raised torch's own
   errors (TypeError "Got unsupported ScalarType ...", NotImplementedError) that named no feature.
4. A list of 0-d numpy arrays or 0-d torch tensors (`[torch.tensor(1), torch.tensor(2)]`, common from `.sum()` or
   indexing) was refused as "ragged", and `[np.array(1.5), np.float32(2)]` as "mixes float and nested values".
5. A tf.train.Feature made by TensorFlow (another class of the same message, `tensorflow.Feature`) was refused with
   "cannot encode a value of type Feature"; it is now copied through its bytes (checked with TF 2.21 itself too).
6. `parse_tensor(data, float)` read Python's `float` as float64 (numpy's and torch's reading), while TensorFlow's
   `tf.as_dtype(float)`, which code ported from tf.io.parse_tensor means, is float32: now a ValueError asking for
   the width (`complex`, which TensorFlow refuses, stays complex128).
7. A float64 array holding a signalling NaN made numpy warn "invalid value encountered in cast" from inside
   encode_example (float32 overflow was already silenced, this was not).
8. parse_tensor returned empty tensors with numpy's zero strides (e.g. (0, 0, 0) for shape (2, 0, 3)), so
   `.view(torch.uint8)` on them raised; they now have torch's usual strides.

9. TF 2.21's parse_tensor refuses a bool tensor_content byte other than 0 and 1; tfr_torch read it as True (as
   tests/test_hostile.py asserted): now a DecodeError naming the byte and the element, as TensorFlow.

Deliberate differences from TensorFlow, asserted below or elsewhere: a bool is encoded as int64 (TF's Int64List
refuses bools); float32/float16 arrays keep a signalling NaN's bits exactly (TF, going through Python floats, sets
the quiet bit); parse_tensor refuses an odd scomplex_val count and `unknown_rank` (TF 2.21 drops the odd value and
ignores the flag; tests/test_hostile.py and tests/test_corruption.py assert the errors).
"""

from __future__ import annotations

import struct
import tracemalloc
from decimal import Decimal

import numpy as np
import pytest
import torch
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import tfr_torch
from tfr_torch import DecodeError, ShardedWriter, TFRecordWriter, encode_example, parse_tensor, serialize_tensor


def _f32(bits: int) -> np.ndarray:
    return np.frombuffer(struct.pack("<I", bits), np.float32).copy()


def _f16(bits: int) -> np.ndarray:
    return np.frombuffer(struct.pack("<H", bits), np.float16).copy()


def _f64(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


# tf.train.Example({"k": Feature}) as TensorFlow 2.21 serializes it, for the Feature a TF user would build
TF_EXAMPLES = {
    "int": "0a0c0a0a0a016b12051a030a0105",
    "int64_min": "0a150a130a016b120e1a0c0a0a80808080808080808001",
    "int64_max": "0a140a120a016b120d1a0b0a09ffffffffffffffff7f",
    "float": "0a0f0a0d0a016b120812060a04cdcccc3d",
    "float_overflow": "0a0f0a0d0a016b120812060a040000807f",
    "float_rounds_to_inf": "0a0f0a0d0a016b120812060a040000807f",
    "float_rounds_to_max": "0a0f0a0d0a016b120812060a04ffff7f7f",
    "float_underflow": "0a130a110a016b120c120a0a080000000000000080",
    "float_subnormal_tie": "0a130a110a016b120c120a0a080200000002000000",
    "float64_array": "0a1f0a1d0a016b121812160a14cdcccc3d0000807f000000800200000000000080",
    "double_rounding": "0a130a110a016b120c120a0a080000005a0000003f",
    "ints_and_floats": "0a170a150a016b1210120e0a0c0000803f00002040000040c0",
    "float64_nan_payload": "0a130a110a016b120c120a0a0868f5c67f0000c0ff",
    "float32_quiet_nan_payload": "0a0f0a0d0a016b120812060a044523c1ff",
    "float16_quiet_nan_payload": "0a0f0a0d0a016b120812060a040020c07f",
    "float16_array": "0a1f0a1d0a016b121812160a140000c03f00e07f470000807f0000008000008033",
    "bfloat16_tensor": "0a1b0a190a016b121412120a100000c03f00004940000000800000967e",
    "float16_0d_tensor": "0a0f0a0d0a016b120812060a0400006040",
    "bool_tensor": "0a0d0a0b0a016b12061a040a020100",
    "bool_array_2d": "0a0f0a0d0a016b12081a060a0401000001",
    "uint8_2d": "0a100a0e0a016b12091a070a05010203ff01",
    "int8_negative": "0a200a1e0a016b12191a170a1580ffffffffffffffff01ffffffffffffffffff017f",
    "uint16_tensor": "0a0f0a0d0a016b12081a060a04ffff0300",
    "uint32_max": "0a100a0e0a016b12091a070a05ffffffff0f",
    "uint64_fits": "0a150a130a016b120e1a0c0a0a00ffffffffffffffff7f",
    "uint64_tensor": "0a140a120a016b120d1a0b0a09ffffffffffffffff7f",
    "big_endian_int": "0a160a140a016b120f1a0d0a0b01feffffffffffffffff01",
    "big_endian_float": "0a0f0a0d0a016b120812060a040000c03f",
    "noncontiguous_tensor": "0a110a0f0a016b120a1a080a06000301040205",
    "noncontiguous_array": "0a1b0a190a016b121412120a100000000000000040000040400000a040",
    "zero_d_array": "0a0c0a0a0a016b12051a030a0107",
    "str_utf8": "0a150a130a016b120e0a0c0a0a68c3a96c6c6ff09f9880",
    "str_array": "0a120a100a016b120b0a090a01610a02c3a90a00",
    "bytes_with_nul": "0a120a100a016b120b0a090a0261000a000a01ff",
    "bytes_array": "0a100a0e0a016b12090a070a0261620a0163",
    "nested_ints": "0a0f0a0d0a016b12081a060a0401020304",
    "nested_strings": "0a150a130a016b120e0a0c0a01610a01620a01630a0164",
    "nested_arrays": "0a1b0a190a016b121412120a100000c03f000000400000404000009040",
    "list_of_0d_tensors": "0a0d0a0b0a016b12061a040a020102",
    "list_of_0d_arrays": "0a130a110a016b120c120a0a080000c03f00000040",
    "list_of_0d_bf16": "0a130a110a016b120c120a0a080000c03f000000c0",
    "nested_0d_arrays": "0a0f0a0d0a016b12081a060a0401020304",
    "empty_float64": "0a090a070a016b12021200",
    "empty_uint8": "0a090a070a016b12021a00",
    "empty_bytes": "0a090a070a016b12020a00",
    "empty_tensor_2d": "0a090a070a016b12021200",
    "tuple_floats": "0a130a110a016b120c120a0a080000003f0000803e",
}

# the same values as tfr_torch users pass them (built lazily: some need torch)
VALUES = {
    "int": lambda: 5,
    "int64_min": lambda: -(2**63),
    "int64_max": lambda: 2**63 - 1,
    "float": lambda: 0.1,
    "float_overflow": lambda: 1e300,
    "float_rounds_to_inf": lambda: 3.4028235677973366e38,
    "float_rounds_to_max": lambda: 3.4028235e38,
    "float_underflow": lambda: [1e-46, -1e-46],
    "float_subnormal_tie": lambda: np.array([2.0**-149 * 1.5, 2.0**-149 * 2.5]),
    "float64_array": lambda: np.array([0.1, 1e300, -1e-50, 2.0**-149 * 1.5, -0.0]),
    "double_rounding": lambda: [2**53 + 2**29 + 1, 0.5],
    "ints_and_floats": lambda: [1, 2.5, np.int8(-3)],
    "float64_nan_payload": lambda: np.array([_f64(0x7FF8DEAD0BEEF001), _f64(0xFFF0000000000001)]),
    "float32_quiet_nan_payload": lambda: _f32(0xFFC12345),
    "float16_quiet_nan_payload": lambda: _f16(0x7E01)[0],
    "float16_array": lambda: np.array([1.5, 65504, np.inf, -0.0, 2**-24], np.float16),
    "bfloat16_tensor": lambda: torch.tensor([1.5, 3.140625, -0.0, 1e38], dtype=torch.bfloat16),
    "float16_0d_tensor": lambda: torch.tensor(3.5, dtype=torch.float16),
    "bool_tensor": lambda: torch.tensor([True, False]),
    "bool_array_2d": lambda: np.eye(2, dtype=bool),
    "uint8_2d": lambda: np.array([[1, 2], [3, 255]], np.uint8),
    "int8_negative": lambda: torch.tensor([-128, -1, 127], dtype=torch.int8),
    "uint16_tensor": lambda: torch.tensor([65535, 0], dtype=torch.uint16),
    "uint32_max": lambda: np.uint32(2**32 - 1),
    "uint64_fits": lambda: np.array([0, 2**63 - 1], np.uint64),
    "uint64_tensor": lambda: torch.tensor([2**63 - 1], dtype=torch.uint64),
    "big_endian_int": lambda: np.array([1, -2], ">i4"),
    "big_endian_float": lambda: np.array([1.5], ">f8"),
    "noncontiguous_tensor": lambda: torch.arange(6).reshape(2, 3).t(),
    "noncontiguous_array": lambda: np.arange(6, dtype=np.float64).reshape(2, 3)[:, ::2],
    "zero_d_array": lambda: np.array(7, np.int16),
    "str_utf8": lambda: "h\u00e9llo\U0001f600",
    "str_array": lambda: np.array(["a", "\u00e9", ""]),
    "bytes_with_nul": lambda: [b"a\x00", bytearray(), memoryview(b"\xff")],
    "bytes_array": lambda: np.array([b"ab", b"c"]),
    "nested_ints": lambda: [[1, 2], (3, 4)],
    "nested_strings": lambda: [["a", "b"], [b"c", b"d"]],
    "nested_arrays": lambda: [np.array([1.5, 2]), torch.tensor([3.0, 4.5])],
    "list_of_0d_tensors": lambda: [torch.tensor(1), torch.tensor(2)],
    "list_of_0d_arrays": lambda: [np.array(1.5), np.float32(2)],
    "list_of_0d_bf16": lambda: (torch.tensor(1.5, dtype=torch.bfloat16), torch.tensor(-2.0, dtype=torch.bfloat16)),
    "nested_0d_arrays": lambda: [[np.array(1), np.array(2)], [torch.tensor(3), 4]],
    "empty_float64": lambda: np.array([], np.float64),
    "empty_uint8": lambda: torch.zeros(0, dtype=torch.uint8),
    "empty_bytes": lambda: np.array([], bytes),
    "empty_tensor_2d": lambda: torch.zeros(3, 0, dtype=torch.bfloat16),
    "tuple_floats": lambda: (0.5, np.float16(0.25)),
}
FIXED_CASES = {"list_of_0d_tensors", "list_of_0d_arrays", "list_of_0d_bf16", "nested_0d_arrays"}


@pytest.mark.parametrize("name", sorted(TF_EXAMPLES))
def test_encode_example_matches_tensorflow_bytes(name):
    """Each value encodes to exactly the Example TensorFlow 2.21 writes for the Feature a TF user builds.
    Fixed (list_of_0d_* and nested_0d_arrays): a list of 0-d arrays or tensors was refused as ragged or mixed."""
    assert VALUES.keys() == TF_EXAMPLES.keys()
    assert encode_example({"k": VALUES[name]()}).hex() == TF_EXAMPLES[name]


def test_write_example_of_both_writers_writes_encode_examples_bytes(tmp_path):
    """TFRecordWriter.write_example and ShardedWriter.write_example store exactly encode_example's bytes."""
    names = ["nested_ints", "bfloat16_tensor", "float64_nan_payload", "str_array", "empty_tensor_2d"]
    with TFRecordWriter(tmp_path / "a.tfrecord") as writer:
        for name in names:
            writer.write_example({"k": VALUES[name]()})
    with ShardedWriter(tmp_path / "shards", "set", records_per_shard=10) as sharded:
        for name in names:
            sharded.write_example({"k": VALUES[name]()})
    [shard] = sorted((tmp_path / "shards").glob("set-train.tfrecord-?????-of-?????"))
    expected = [TF_EXAMPLES[name] for name in names]
    assert [bytes(r).hex() for r in tfr_torch.read_records(tmp_path / "a.tfrecord")] == expected
    assert [bytes(r).hex() for r in tfr_torch.read_records(shard)] == expected


def test_deliberate_differences_from_tensorflow_are_exact():
    """A bool is an int64 (TF's Int64List refuses bools); a float32/float16 array keeps a signalling NaN's bits
    (TF sets the quiet bit on its way through Python floats: 0x7fc00001 and 0x7fc02000), the rest of its payload too."""
    assert encode_example({"k": [True, np.bool_(False)]}) == encode_example({"k": [1, 0]})
    record = encode_example({"k": np.concatenate([_f32(0x7F800001), _f16(0x7C01).astype(np.float32)])})
    assert record[-8:] == struct.pack("<II", 0x7F800001, 0x7F802000)
    assert encode_example({"k": _f16(0x7C01)})[-4:] == struct.pack("<I", 0x7F802000)


@pytest.mark.filterwarnings("error")
def test_nan_payloads_encode_without_warnings():
    """Fixed: a float64 array holding a signalling NaN made numpy warn "invalid value encountered in cast" from
    inside encode_example (the value is valid: TensorFlow stores it as float32's quiet NaN, and so does tfr_torch)."""
    assert encode_example({"k": np.array([_f64(0xFFF0000000000001)])})[-4:] == struct.pack("<I", 0xFFC00000)
    assert encode_example({"k": torch.tensor([_f64(0x7FF0000000000001)], dtype=torch.float64)})[-4:] == \
        struct.pack("<I", 0x7FC00000)


def _tf_feature_class():
    """A stand-in for tf.train.Feature: the message `tensorflow.Feature` in its own descriptor pool, so a class
    that is not tfr_torch's, as TensorFlow's own generated class is."""
    file = descriptor_pb2.FileDescriptorProto(name="standin/feature.proto", package="tensorflow", syntax="proto3")
    label, packed = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED, descriptor_pb2.FieldOptions(packed=True)
    kinds = descriptor_pb2.FieldDescriptorProto
    lists = [("BytesList", kinds.TYPE_BYTES), ("FloatList", kinds.TYPE_FLOAT), ("Int64List", kinds.TYPE_INT64)]
    for name, kind in lists:
        message = file.message_type.add(name=name)
        field = message.field.add(name="value", number=1, label=label, type=kind)
        if kind != kinds.TYPE_BYTES:
            field.options.CopyFrom(packed)
    feature = file.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate([("bytes_list", "BytesList"), ("float_list", "FloatList"),
                                                 ("int64_list", "Int64List")], start=1):
        feature.field.add(name=name, number=number, label=kinds.LABEL_OPTIONAL, type=kinds.TYPE_MESSAGE,
                          type_name=f".tensorflow.{type_name}", oneof_index=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Feature"))


def test_tf_train_feature_objects_are_encoded_as_tensorflow_does():
    """Fixed: a tf.train.Feature (TensorFlow's class, not tfr_torch's) was refused with "cannot encode a value of
    type Feature"; it is copied as is (the bytes are TensorFlow 2.21's for the same Features)."""
    feature = _tf_feature_class()
    cases = [(feature(int64_list={"value": [1, 2]}), "0a0d0a0b0a016b12061a040a020102"),
             (feature(float_list={"value": [1.5]}), "0a0f0a0d0a016b120812060a040000c03f"),
             (feature(bytes_list={"value": [b"a"]}), "0a0c0a0a0a016b12050a030a0161"),
             (feature(), "0a070a050a016b1200")]  # no kind set: present in the map, missing to parse_example
    for value, expected in cases:
        assert encode_example({"k": value}).hex() == expected


@pytest.mark.parametrize("value, message", [
    ("\ud800", r"feature 'k': string '\\ud800' cannot be encoded as UTF-8 \(surrogates not allowed at position 0\)"),
    (["ok", "a\udfff"], r"feature 'k': string 'a\\udfff' cannot be encoded as UTF-8 \(surrogates not allowed at "
                        r"position 1\); pass bytes"),
    (np.array(["x", "\ud83d"]), r"feature 'k': string '\\ud83d' cannot be encoded as UTF-8"),
    ([["a"], ["\ud800"]], r"feature 'k': string '\\ud800' cannot be encoded as UTF-8"),
])
def test_str_without_utf8_form_is_a_value_error_naming_the_key(value, message):
    """Fixed: a lone surrogate escaped as a bare UnicodeEncodeError naming no feature."""
    with pytest.raises(ValueError, match=message) as caught:
        encode_example({"k": value})
    assert not isinstance(caught.value, UnicodeError)


def test_feature_name_without_utf8_form_is_named():
    """Fixed: a feature name with a lone surrogate raised protobuf's bare UnicodeEncodeError."""
    with pytest.raises(ValueError, match=r"feature '\\udc80': string '\\udc80' cannot be encoded as UTF-8") as caught:
        encode_example({"ok": 1, "\udc80": 2})
    assert not isinstance(caught.value, UnicodeError)


def test_int_too_large_for_a_float_list_is_a_value_error_naming_the_key():
    """Fixed: `[10**400, 0.5]` escaped as OverflowError("int too large to convert to float")."""
    message = r"feature 'k': an integer of 1329 bits is too large for a float_list"
    with pytest.raises(ValueError, match=message):
        encode_example({"k": [0.5, 10**400]})
    with pytest.raises(ValueError, match=r"an integer of 1025 bits"):
        encode_example({"k": [np.float32(1), -(2**1024)]})
    # just inside a double's range: float32 inf, as TensorFlow's FloatList gives
    assert encode_example({"k": [2**1023, 0.5]})[-8:] == struct.pack("<ff", np.inf, 0.5)


@pytest.mark.parametrize("make, error, message", [
    (lambda: torch.zeros(2, dtype=torch.float8_e4m3fn), TypeError,
     r"feature 'k': cannot encode a tensor of dtype torch.float8_e4m3fn \(TFRecord features hold int64, float32 or "
     r"bytes: expected a bool, integer or floating-point tensor\)"),
    (lambda: torch.zeros(2, dtype=torch.float8_e5m2), TypeError, r"feature 'k': cannot encode a tensor of dtype "
                                                                 r"torch.float8_e5m2"),
    (lambda: torch.zeros(2, dtype=torch.complex32), TypeError, r"feature 'k': cannot encode a tensor of dtype "
                                                               r"torch.complex32"),
    (lambda: torch.quantize_per_tensor(torch.zeros(2), 0.1, 0, torch.qint8), TypeError,
     r"feature 'k': cannot encode a quantized tensor of dtype torch.qint8 \(call .dequantize\(\) first\)"),
    (lambda: torch.zeros(2, device="meta"), ValueError,
     r"feature 'k': cannot encode a tensor on the meta device: it holds no values"),
    (lambda: [torch.zeros((), dtype=torch.float8_e4m3fn)], TypeError, r"feature 'k': cannot encode a tensor of dtype"),
])
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_torch_tensors_numpy_cannot_hold_are_errors_naming_the_key(make, error, message):
    """Fixed: these raised torch's own errors ("Got unsupported ScalarType Float8_e4m3fn", NotImplementedError
    "Cannot copy out of meta tensor") that named no feature."""
    with pytest.raises(error, match=message):
        encode_example({"k": make()})


EXPECTED = "expected int, float, bytes, str, a list of them, a numpy array or a torch tensor"


@pytest.mark.parametrize("value, error, message", [
    (2**63, ValueError, r"feature 'k': integer 9223372036854775808 does not fit in int64_list"),
    ([-(2**63) - 1], ValueError, r"feature 'k': integer -9223372036854775809 does not fit in int64_list"),
    (np.uint64(2**63), ValueError, r"feature 'k': uint64 value 9223372036854775808 does not fit in int64_list"),
    (np.array([1, 2**64 - 1], np.uint64), ValueError, r"uint64 value 18446744073709551615 does not fit"),
    ([np.uint64(2**63)], ValueError, r"feature 'k': integer 9223372036854775808 does not fit in int64_list"),
    (None, TypeError, rf"feature 'k': cannot encode a value of type NoneType \({EXPECTED}\)"),
    ({"a": 1}, TypeError, r"feature 'k': cannot encode a value of type dict"),
    ({1}, TypeError, r"feature 'k': cannot encode a value of type set"),
    (1j, TypeError, r"feature 'k': cannot encode a value of type complex"),
    (Decimal(1), TypeError, r"feature 'k': cannot encode a value of type Decimal"),
    (range(3), TypeError, r"feature 'k': cannot encode a value of type range"),
    (np.array([1j]), TypeError, r"feature 'k': cannot encode values of dtype complex128"),
    (torch.tensor([1j]), TypeError, r"feature 'k': cannot encode values of dtype complex64"),
    (np.array(["2020-01-01"], "datetime64[D]"), TypeError, r"cannot encode values of dtype datetime64\[D\]"),
    ([1, None], TypeError, r"feature 'k': cannot encode a list element of type NoneType"),
    (np.array([None], object), TypeError, r"feature 'k': cannot encode a list element of type NoneType"),
    ([1, "a"], TypeError, r"feature 'k': a list mixes bytes and int values; one feature holds one kind"),
    (np.array([1, b"a"], object), TypeError, r"feature 'k': a list mixes bytes and int values"),
    ([1.5, [2.0]], TypeError, r"feature 'k': a list mixes float and nested values"),
    ([[1, 2], [3]], TypeError, r"feature 'k': nested lists must be rectangular"),
    ([[1, [2]], [3, [4]]], TypeError, r"feature 'k': nested lists must be rectangular"),
    ([], TypeError, r"feature 'k': an empty list has no type; pass a typed empty array"),
    ([[]], TypeError, r"feature 'k': an empty list has no type"),
    (np.array([], object), TypeError, r"feature 'k': an empty list has no type"),
])
def test_values_without_one_meaning_are_errors_naming_the_key(value, error, message):
    with pytest.raises(error, match=message):
        encode_example({"k": value})


# tf.io.serialize_tensor(x) on TensorFlow 2.21, for the same values as SERIALIZE_VALUES
TF_TENSORS = {
    "bool": "080a120812020801120208032203010001",
    "i8": "08061204120208022202ff02",
    "i16": "08051204120208022204d4fe0200",
    "i32": "0803120812020801120208012204fbffffff",
    "i64": "080912041202080222100000000000000080ffffffffffffff7f",
    "u8": "08041204120208022202ff00",
    "u16": "08111204120208012202ffff",
    "u32": "08161204120208012204ffffffff",
    "u64": "08171204120208012208ffffffffffffffff",
    "f16": "08131204120208022204003e0080",
    "f32": "08011208120208021202080122080000c03f000000c0",
    "f64": "0802120022089a9999999999b93f",
    "bf16": "080e1204120208022204c03f4940",
    "c64": "080812041202080122080000803f00000040",
    "c128": "0812120812020801120208022220000000000000f03f00000000000000c000000000000000000000000000000840",
    "str": "08071208120208021202080242016142004202ff00420378797a",
    "str0": "0807120042026869",
    "str_empty": "08071206120012020803",
    "scalar_i": "08031200220407000000",
    "empty_f": "0801120a12020802120012020803",
    "empty_i64": "080912021200",
    "u_str": "08071204120208014202c3a9",
    "npS_nul": "080712041202080242016142026263",
    "nc": "080512081202080312020802220c000003000100040002000500",
    "shape5": "08041214120208011202080112020801120208011202080222020000",
    "big_dim": "08011207120308ac021200",
}
SERIALIZE_VALUES = {
    "bool": lambda: torch.tensor([[True, False, True]]),
    "i8": lambda: torch.tensor([-1, 2], dtype=torch.int8),
    "i16": lambda: np.array([-300, 2], np.int16),
    "i32": lambda: torch.tensor([[-5]], dtype=torch.int32),
    "i64": lambda: torch.tensor([-(2**63), 2**63 - 1]),
    "u8": lambda: torch.tensor([255, 0], dtype=torch.uint8),
    "u16": lambda: torch.tensor([65535], dtype=torch.uint16),
    "u32": lambda: torch.tensor([2**32 - 1], dtype=torch.uint32),
    "u64": lambda: np.array([2**64 - 1], np.uint64),
    "f16": lambda: torch.tensor([1.5, -0.0], dtype=torch.float16),
    "f32": lambda: torch.tensor([[1.5], [-2.0]]),
    "f64": lambda: np.float64(0.1),
    "bf16": lambda: torch.tensor([1.5, 3.140625], dtype=torch.bfloat16),
    "c64": lambda: torch.tensor([1 + 2j], dtype=torch.complex64),
    "c128": lambda: np.array([[1 - 2j, 3j]]),
    "str": lambda: np.array([[b"a", b""], [b"\xff\x00", b"xyz"]], dtype=object),
    "str0": lambda: np.array(b"hi"),
    "str_empty": lambda: np.zeros([0, 3], "S1"),
    "scalar_i": lambda: torch.tensor(7, dtype=torch.int32),
    "empty_f": lambda: torch.zeros([2, 0, 3]),
    "empty_i64": lambda: np.zeros([0], np.int64),
    "u_str": lambda: np.array(["\u00e9"]),
    "npS_nul": lambda: np.array([b"a\x00", b"bc"]),
    "nc": lambda: torch.arange(6, dtype=torch.int16).reshape(2, 3).t(),
    "shape5": lambda: torch.zeros([1, 1, 1, 1, 2], dtype=torch.uint8),
    "big_dim": lambda: np.zeros([300, 0], np.float32),
}


@pytest.mark.parametrize("name", sorted(TF_TENSORS))
def test_serialize_tensor_matches_tensorflow_bytes(name):
    """serialize_tensor == tf.io.serialize_tensor byte for byte; parse_tensor of TF's bytes gives the values back."""
    assert SERIALIZE_VALUES.keys() == TF_TENSORS.keys()
    value = SERIALIZE_VALUES[name]()
    assert serialize_tensor(value).hex() == TF_TENSORS[name]
    parsed = parse_tensor(bytes.fromhex(TF_TENSORS[name]))
    if isinstance(parsed, torch.Tensor):
        expected = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
        assert parsed.dtype == expected.dtype and parsed.shape == expected.shape
        if expected.numel():  # every bit, NaNs and -0.0 included
            assert parsed.reshape(-1).view(torch.uint8).tolist() == expected.reshape(-1).view(torch.uint8).tolist()
    else:
        assert parsed == np.asarray(value).tolist() or (name == "u_str" and parsed == [b"\xc3\xa9"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64,
                                   torch.uint16])
@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (300, 0)])
def test_parsed_empty_tensors_have_torchs_strides(dtype, shape):
    """Fixed: an empty tensor came back with numpy's zero strides, e.g. (0, 0, 0) for shape (2, 0, 3), so that
    `.view(torch.uint8)` raised "self.stride(-1) must be 1 to view Float as Byte"."""
    parsed = parse_tensor(serialize_tensor(torch.zeros(shape, dtype=dtype)))
    assert parsed.dtype == dtype and parsed.shape == shape
    assert parsed.stride() == torch.empty(shape, dtype=dtype).stride()
    assert parsed.view(torch.uint8).shape[:-1] == shape[:-1]


@pytest.mark.parametrize("alias, native", [(np.longlong, "<i8"), (np.intc, "<i4"), (np.uintc, "<u4"),
                                           (np.ulonglong, "<u8"), (np.int_, "<i8"), (np.uint, "<u8"),
                                           (np.short, "<i2"), (np.byte, "i1"), (np.half, "<f2"), (np.single, "<f4"),
                                           (np.double, "<f8"), (np.csingle, "<c8"), (np.cdouble, "<c16"),
                                           (">i8", "<i8"), (">c16", "<c16"), (">f2", "<f2"), (">u4", "<u4")])
def test_serialize_tensor_reads_numpy_dtype_aliases_and_byte_orders(alias, native):
    values = [1, 0, 3]
    assert serialize_tensor(np.array(values, dtype=alias)) == serialize_tensor(np.array(values, dtype=native))


# TensorProtos in the *_val forms as TensorFlow 2.21 writes (make_tensor_proto(value, dtype, shape)) or accepts them,
# with the values tf.io.parse_tensor gives (bfloat16 as its uint16 bits)
TF_VAL_PAYLOADS = [
    ("0801120812020802120208032a040000c03f", torch.float32, [[1.5] * 3] * 2),
    ("080112002a040000c03f", torch.float32, 1.5),
    ("08021208120208021202080332089a9999999999b9bf", torch.float64, [[-0.1] * 3] * 2),
    ("0803120812020802120208033a0af9ffffffffffffffff01", torch.int32, [[-7] * 3] * 2),
    ("0809120812020802120208035206808080808020", torch.int64, [[2**40] * 3] * 2),
    ("0804120812020802120208033a02c801", torch.uint8, [[200] * 3] * 2),
    ("0806120812020802120208033a0afdffffffffffffffff01", torch.int8, [[-3] * 3] * 2),
    ("0805120812020802120208033a0ad4fdffffffffffffff01", torch.int16, [[-300] * 3] * 2),
    ("0811120812020802120208033a03e0d403", torch.uint16, [[60000] * 3] * 2),
    ("081612081202080212020803820105ffffffff0f", torch.uint32, [[2**32 - 1] * 3] * 2),
    ("0817120812020802120208038a010affffffffffffffffff01", torch.uint64, [[2**64 - 1] * 3] * 2),
    ("080a120812020802120208035a0101", torch.bool, [[True] * 3] * 2),
    ("0813120812020802120208036a02807c", torch.float16, [[1.5] * 3] * 2),
    ("080e120812020802120208036a02c07f", torch.bfloat16, [[16320] * 3] * 2),
    ("0808120812020802120208034a080000803f00000040", torch.complex64, [[1 + 2j] * 3] * 2),
    ("081212006210000000000000084000000000000010c0", torch.complex128, 3 - 4j),
    ("08131204120208046a058078808001", torch.float16, [1.0, 2.0, 2.0, 2.0]),  # the last value fills the rest
    ("080e1204120208036a05c07fc98001", torch.bfloat16, [16320, 16457, 16457]),
    ("0801120412020803", torch.float32, [0.0, 0.0, 0.0]),  # no values: zeros
    ("08011204120208022a0c0000803f0000004000004040", torch.float32, [1.0, 2.0]),  # more values than the shape
    ("08041204120208033a0eac02ffffffffffffffffff01ff01", torch.uint8, [44, 255, 255]),  # int_val, truncated
    ("08061204120208023a0cc801fffeffffffffffffff01", torch.int8, [-56, 127]),
    ("08111204120208023a0df0a204ffffffffffffffffff01", torch.uint16, [4464, 65535]),
    ("08051204120208023a0dc0b802c0c7fdffffffffffff01", torch.int16, [-25536, 25536]),
    ("08081204120208034a100000803f000000400000404000008040", torch.complex64, [1 + 2j, 3 + 4j, 3 + 4j]),
    ("080a1204120208035a020100", torch.bool, [True, False, False]),
    ("080112041202080122040000c03f2a0400001041", torch.float32, [1.5]),  # tensor_content wins over float_val
    ("0801120212002203000000", torch.float32, []),  # no elements: tensor_content ignored
    ("08161204120208023a0105", torch.uint32, [0, 0]),  # UINT32 reads uint32_val only
    ("08091204120208023a0105", torch.int64, [0, 0]),  # INT64 reads int64_val only
]


@pytest.mark.parametrize("payload, dtype, expected", TF_VAL_PAYLOADS)
def test_parse_tensor_reads_tensorflows_val_forms(payload, dtype, expected):
    tensor = parse_tensor(bytes.fromhex(payload), dtype)
    assert tensor.dtype == dtype
    if dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16).to(torch.int32) & 0xFFFF
    assert tensor.tolist() == expected


def test_parse_tensor_reads_tensorflows_string_val_forms():
    assert parse_tensor(bytes.fromhex("08071208120208021202080342026162"), "string") == [[b"ab"] * 3] * 2
    assert parse_tensor(bytes.fromhex("0807120042026162"), tfr_torch.string) == b"ab"
    assert parse_tensor(bytes.fromhex("0807120412020802"), bytes) == [b"", b""]
    assert parse_tensor(bytes.fromhex("080712041202080222050102616263")) == [b"a", b"bc"]  # C++ tensor_content


def _dims(*sizes: int) -> bytes:
    from tfr_torch.format.wire import encode_varint, length_delimited

    return length_delimited(0x12, b"".join(length_delimited(0x12, b"\x08" + encode_varint(d & (2**64 - 1)))
                                           for d in sizes))


@pytest.mark.parametrize("data, message", [
    (b"\x08\x01" + _dims(3) + b"\x22\x08" + bytes(8),
     r"TensorProto of dtype float32 and shape \[3\] needs 12 bytes of tensor_content, found 8"),
    (b"\x08\x01" + _dims(1) + b"\x22\x08" + bytes(8), r"needs 4 bytes of tensor_content, found 8"),
    (b"\x08\x01" + _dims(2**61) + b"\x22\x04" + bytes(4),
     r"shape \[2305843009213693952\] needs 9223372036854775808 bytes of tensor_content, found 4"),
    (b"\x08\x01" + _dims(-1), r"TensorProto has a negative dimension in its shape \[-1\]"),
    (b"\x08\x06" + _dims(2**32, 2**32, 2**32), r"too large for an array of int8"),
    (b"\x08\x01" + _dims(2**32, 2**32) + b"\x2a\x04\x00\x00\x80\x3f", r"too large for an array of float32"),
    (b"\x08\x02" + _dims(2**27) + b"\x32\x08" + bytes(8),
     r"TensorProto of 21 bytes declares shape \[134217728\], which decodes to about 1073741824 bytes: more than "
     r"max_bytes=268435456"),
    (b"\x08\x06" + _dims(2**63 - 1), r"declares shape \[9223372036854775807\]"),
    (b"\x08\x07" + _dims(2**28) + b"\x42\x01x", r"declares shape \[268435456\], which decodes to about"),
    (b"\x08\x07" + _dims(2**40) + b"\x22\x04" + bytes(4), r"declares shape \[1099511627776\]"),
    (b"\x08\x07" + _dims(5) + b"\x22\x04\x01\x01\x01\x01",
     r"string has 5 elements but only 4 bytes of tensor_content"),
    (b"\x08\x01" + _dims(*[1] * 65), r"TensorProto has 65 dimensions: numpy and torch tensors hold at most 64"),
    (b"\x08\x15" + _dims(1), r"TensorProto has dtype DT_VARIANT, which tfr_torch cannot read"),
    (b"\x08\xe7\x07" + _dims(1), r"TensorProto has dtype 999, which tfr_torch cannot read"),
    (b"\xff\xff", r"cannot parse 2 bytes as a TensorProto: its protobuf wire format is corrupt"),
])
def test_hostile_tensor_payloads_are_decode_errors_without_big_allocations(data, message):
    with pytest.raises(DecodeError, match=message):
        parse_tensor(data)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            parse_tensor(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_zero_size_shapes_with_huge_dimensions_stay_empty():
    """As TensorFlow: a dimension of 0 makes the tensor empty whatever the others are (while numpy can hold it)."""
    tensor = parse_tensor(b"\x08\x06" + _dims(0, 2**62))
    assert tensor.shape == (0, 2**62) and tensor.dtype == torch.int8 and tensor.numel() == 0


def test_wrong_out_type_is_a_decode_error():
    data = serialize_tensor(torch.ones(2))
    with pytest.raises(DecodeError, match=r"type mismatch: the serialized tensor is float32, but dtype float64 was "
                                          r"asked for"):
        parse_tensor(data, torch.float64)
    with pytest.raises(DecodeError, match=r"the serialized tensor is float32, but dtype string was asked for"):
        parse_tensor(data, tfr_torch.string)
    assert parse_tensor(data, "tf.float32").tolist() == [1.0, 1.0]
    assert parse_tensor(data, "float").tolist() == [1.0, 1.0]  # TensorFlow's name: float32


@pytest.mark.parametrize("dtype, message", [
    (float, r"dtype float is ambiguous \(float64 to numpy and torch, float32 to TensorFlow\): name the width"),
])
def test_python_float_as_out_type_is_refused_not_read_as_float64(dtype, message):
    """Fixed: parse_tensor(data, float) took numpy's reading (float64), so a float32 tensor from TensorFlow, where
    tf.as_dtype(float) is float32, raised a type mismatch, and a float64 one passed."""
    for data in (serialize_tensor(torch.ones(1)), serialize_tensor(torch.ones(1, dtype=torch.float64))):
        with pytest.raises(ValueError, match=message):
            parse_tensor(data, dtype)
    # complex has one meaning (complex128 to numpy and torch; TensorFlow's as_dtype refuses it)
    assert parse_tensor(serialize_tensor(torch.ones(1, dtype=torch.complex128)), complex).dtype == torch.complex128


def test_bool_tensor_content_other_than_0_and_1_is_refused_as_tensorflow_does():
    """Fixed: TF 2.21's parse_tensor refuses a DT_BOOL tensor_content byte other than 0 or 1 ('Cannot parse tensor
    from proto'); tfr_torch read it as True."""
    with pytest.raises(DecodeError):
        parse_tensor(b"\x08\x0a" + _dims(2) + b"\x22\x02\x02\x00")
