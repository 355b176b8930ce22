"""Audit of infer_features / `tfr-torch schema` and decode_json_example (expected bytes baked in from
tf.io.decode_json_example on TensorFlow 2.21; these tests need no TensorFlow).

Checked, and found to hold: the proposed spec decodes every record it was inferred from (FixedLen for one length,
VarLen otherwise, FixedLenFeature([0]) for a key present everywhere with no values, SequenceExample context and
feature lists with allow_missing, Examples mixed with SequenceExamples, keys in only some records, GZIP files);
the printed code runs and rebuilds the spec, also for keys needing escapes; truncated and corrupt files give
`path:offset:` errors. decode_json_example matched TensorFlow on ~150 valid and invalid inputs besides the ones
below; its remaining differences are the documented, stricter ones (duplicate keys, null, trailing commas, single
quotes, bare values, "0x10", "nan", subnormals kept); deep nesting gives DecodeError at once.

Found and fixed:
- infer_features from files named a record by its number over all files ("b.tfrecord:31: record 4 ...") where it
  is record 1 of that file;
- infer_features(one_record_bytes) iterated the bytes' ints and made zero-filled records of them (a confusing
  "invalid field tag 0x0" error; bytes(10**10) for a big int item); items that are not bytes were taken likewise;
- decode_json_example: `-0` in a float_list gave +0.0 (TF: -0.0); int64 values written with a fraction or an
  exponent past 2**53 were taken, rounded (TF refuses: 1.23456789012345678e17 became ...680); float strings past
  a double's range ("1e400") were refused (TF: +-Infinity); Python-only spellings ("1_0", full-width digits) were
  taken (TF refuses); a 5,000-digit number said "use sys.set_int_max_str_digits()"; error messages quoted a
  bad value whole (a 1 MB message for 1 MB of base64).
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature
from tfr_torch.decode.spec_code import format_features
from tfr_torch.errors import DecodeError
from tfr_torch.tools.cli import main

E, S = tfr_torch.encode_example, tfr_torch.encode_sequence_example


def feature_json(kind: str, values: str, key: str = "a") -> str:
    return '{"features": {"feature": {"%s": {"%s": {"value": [%s]}}}}}' % (key, kind, values)


def schema(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["schema", *args])
    return rc, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------------------ infer_features


def test_proposed_spec_decodes_every_record_of_mixed_gzip_files(tmp_path, write_records):
    records_a = [E({"id": 1, "pair": [1, 2], "e": np.array([], np.int64)}),
                 S({"id": 2, "pair": [3, 4], "e": np.array([], np.int64), "t": [b"x"]}, {"f": [[1.0, 2.0]], "g": []})]
    records_b = [S({"id": 3, "pair": [5, 6], "e": np.array([], np.int64)}, {"f": [[3.0, 4.0]] * 3,
                                                                           "g": [[b"a"], [b"bc", b"d"]]})]
    a = write_records(str(tmp_path / "a.tfrecord.gz"), records_a, "gzip")
    b = write_records(str(tmp_path / "b.tfrecord"), records_b)
    spec = tfr_torch.infer_features([a, b])
    assert dict(spec.context) == {"id": FixedLenFeature([], torch.int64), "pair": FixedLenFeature([2], torch.int64),
                                  "e": FixedLenFeature([0], torch.int64), "t": VarLenFeature(tfr_torch.string)}
    assert dict(spec.sequence) == {"f": FixedLenSequenceFeature([2], torch.float32, allow_missing=True),
                                   "g": VarLenFeature(tfr_torch.string)}
    records = records_a + records_b
    context, lists, lengths = tfr_torch.parse_sequence_example(records, spec.context, spec.sequence)
    assert context["id"].tolist() == [1, 2, 3] and context["pair"].tolist() == [[1, 2], [3, 4], [5, 6]]
    assert context["e"].shape == (3, 0) and lengths["f"].tolist() == [0, 1, 3]
    assert lists["f"][2].tolist() == [[3.0, 4.0]] * 3
    rc, out, err = schema(a, b)
    namespace: dict = {}
    exec(out, namespace)
    assert rc == 0 and err == ""
    assert namespace["features"].context == spec.context and namespace["features"].sequence == spec.sequence
    assert "    't': tfr_torch.VarLenFeature(tfr_torch.string),  # in 1 of 3 records read" in out


def test_printed_code_round_trips_keys_that_need_escapes():
    keys = ["a'b\n\"c", "\u2028", "é", "", "# not a comment", "\\"]
    spec = tfr_torch.infer_features([E({key: i for i, key in enumerate(keys)})])
    namespace: dict = {}
    exec(format_features(spec), namespace)
    assert namespace["features"] == dict(spec) and set(spec) == set(keys)


def test_errors_name_the_record_by_its_number_in_its_file(tmp_path, write_records):
    """Fixed: the record number counted over all files while path and offset were those of its file."""
    a = write_records(str(tmp_path / "a.tfrecord"), [E({"id": i}) for i in range(3)])
    b = write_records(str(tmp_path / "b.tfrecord"), [E({"id": 9}), tfr_torch.serialize_tensor(np.zeros(2, np.float32))])
    c = write_records(str(tmp_path / "c.tfrecord"), [b"\xff\xff\xff"])
    with pytest.raises(DecodeError) as exc:
        tfr_torch.infer_features([a, b])
    assert (exc.value.path, exc.value.offset) == (b, 31)
    assert exc.value.message.startswith("record 1 is a serialize_tensor payload (float32 [2])")
    rc, _, err = schema(a, c)
    assert rc == 1 and err == f"{c}:0: record 0 is not a tf.train.Example: byte 0 ends inside a varint\n"
    # from an iterable, the record number is its position there
    with pytest.raises(DecodeError, match=r"^record 2 is not a tf.train.Example"):
        tfr_torch.infer_features([E({"id": 1}), b"", b"\xff\xff\xff"])


@pytest.mark.parametrize("one", [E({"a": 1}), bytearray(E({"a": 1})), memoryview(E({"a": 1}))],
                         ids=["bytes", "bytearray", "memoryview"])
def test_one_serialized_record_is_refused_not_iterated(one):
    """Fixed: its ints were taken as records, bytes(n) making n zero bytes ("invalid field tag 0x0")."""
    with pytest.raises(TypeError) as exc:
        tfr_torch.infer_features(one)
    assert str(exc.value) == (f"infer_features: expected paths or an iterable of serialized records, got one "
                              f"{type(one).__name__} of 14 bytes; pass a list of records ([record])")


def test_items_that_are_not_bytes_are_refused():
    """Fixed: an int item became that many zero bytes (bytes(0) an empty Example, bytes(10**10) 10 GB)."""
    with pytest.raises(TypeError, match=r"^infer_features: record 1 has type int \(10000000000\); expected a "
                                        r"serialized record \(bytes\)$"):
        tfr_torch.infer_features([E({"a": 1}), 10**10])
    spec = tfr_torch.infer_features(np.array([E({"a": 1}), E({"a": 2})], dtype=object))  # still taken
    assert dict(spec) == {"a": FixedLenFeature([], torch.int64)}


def test_truncated_file_error_names_file_and_offset(tmp_path, write_records):
    path = write_records(str(tmp_path / "t.tfrecord"), [E({"id": i}) for i in range(3)])
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:-3])
    rc, out, err = schema(path)
    assert rc == 1 and out == ""
    assert err.startswith(f"{path}:62: truncated record: its header says 15 bytes of data")


# ------------------------------------------------------------------------------------- decode_json_example

# (JSON, tf.io.decode_json_example's bytes on TensorFlow 2.21, in hex)
TF_BYTES = [
    (feature_json("floatList", "-0"), "0a0e0a0c0a0161120712050d00000080"),  # Fixed: was +0.0
    (feature_json("floatList", "-0, 0, -0.0"), "0a180a160a0161121112" + "0f0d000000800d000000000d00000080"),
    (feature_json("floatList", '"Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "-1e-400"'),
     "0a270a250a01611220121e0d0000807f0d000080ff0d0000807f0d000080ff0d000000000d00000080"),  # Fixed: "1e400"
    (feature_json("int64List", "1e15"), "0a120a100a0161120b1a090880809aa6eaafe301"),
    (feature_json("int64List", "9007199254740992.0"), "0a120a100a0161120b1a09088080808080808010"),
    (feature_json("int64List", "-9007199254740992.0"), "0a140a120a0161120d1a0b0880808080808080f0ff01"),
    (feature_json("int64List", '"9007199254740993.0"'), "0a120a100a0161120b1a09088080808080808010"),
    (feature_json("int64List", "9007199254740993"), "0a120a100a0161120b1a09088180808080808010"),
    (feature_json("int64List", "100e-2, -0"), "0a0d0a0b0a016112061a04080108" + "00"),
    (feature_json("int64List", '"-00000000000000000000000000000000000001"'),
     "0a140a120a0161120d1a0b08ffffffffffffffffff01"),
    (feature_json("bytesList", '"_-8=", "+/8", ""'), "0a130a110a0161120c0a0a0a02ffef0a02fbff0a00"),
    ('{"features": {"feature": {"\\ud83d\\ude00": {}}}}', "0a0a0a080a04f09f98801200"),
]


@pytest.mark.parametrize(("text", "expected"), TF_BYTES)
def test_bytes_are_tensorflows(text, expected):
    assert tfr_torch.decode_json_example(text).hex() == expected


def test_long_integer_string_of_leading_zeros_is_read_as_tensorflow_reads_it():
    """TensorFlow reads "000...01" as 1; the digit check counts no leading zeros."""
    text = feature_json("int64List", '"' + "0" * 5000 + '1"')
    assert tfr_torch.decode_json_example(text).hex() == "0a0b0a090a016112041a020801"


@pytest.mark.parametrize("value", ["1e16", "-1e18", '"1e18"', "9007199254740994.0", "1.8014398509481984e16",
                                   '"1.23456789012345678e17"', "9.2233720368547758e18"])
def test_int64_written_as_a_double_past_2_53_is_refused(value):
    """Fixed: taken and rounded (1.23456789012345678e17 gave 123456789012345680); TensorFlow refuses it."""
    with pytest.raises(DecodeError, match="is written with a fraction or an exponent, so it is read as a double, "
                                          r"which is exact only up to 2\*\*53; write it as an integer$"):
        tfr_torch.decode_json_example(feature_json("int64List", value))


@pytest.mark.parametrize(("kind", "value"), [("int64List", '"1_0"'), ("floatList", '"1_0"'),
                                             ("int64List", '"\uff11"'), ("floatList", '"\uff11"')])
def test_python_only_number_spellings_are_refused(kind, value):
    """Fixed: Python's int()/float() read "1_0" as 10 and full-width digits; TensorFlow refuses both."""
    with pytest.raises(DecodeError, match=r"is not a number as TensorFlow reads one \('_' between digits, or "
                                          r"characters that are not ASCII\)$"):
        tfr_torch.decode_json_example(feature_json(kind, value))


@pytest.mark.parametrize("kind", ["int64List", "floatList"])
def test_huge_integer_literal_is_refused_with_a_clear_message(kind):
    """Fixed: the message was Python's "Exceeds the limit (4300 digits) ... use sys.set_int_max_str_digits()"."""
    with pytest.raises(DecodeError) as exc:
        tfr_torch.decode_json_example(feature_json(kind, "9" * 5000))
    assert str(exc.value) == ("decode_json_example: expected a JSON-encoded tf.train.Example: the number "
                              "99999999999999999999... has 5,000 digits: out of range for int64 and float values")


@pytest.mark.parametrize(("kind", "value"), [("bytesList", "A" * 1_000_001), ("int64List", "9" * 1_000_000),
                                             ("floatList", "x" * 1_000_000)])
def test_error_messages_do_not_quote_a_giant_value_whole(kind, value):
    """Fixed: the bad value was quoted whole (a 1 MB message)."""
    with pytest.raises(DecodeError) as exc:
        tfr_torch.decode_json_example(feature_json(kind, f'"{value}"'))
    assert len(str(exc.value)) < 600 and "characters)" in str(exc.value)


@pytest.mark.parametrize("text", ["[" * 200_000, '{"a":' * 200_000,
                                  feature_json("int64List", "[" * 100_000 + "]" * 100_000)])
def test_deep_nesting_is_a_decode_error(text):
    with pytest.raises(DecodeError, match="maximum recursion depth exceeded"):
        tfr_torch.decode_json_example(text)


@pytest.mark.parametrize("text", [feature_json("int64List", "null"), "{'features': {}}", "{features: {}}",
                                  feature_json("floatList", '"nan"'), feature_json("int64List", '"0x10"')])
def test_documented_stricter_differences_stay_decode_errors(text):
    """TensorFlow takes these (null elements as 0, single quotes, unquoted keys, "nan", "0x10" as 16); the
    module's notes list them as refused."""
    with pytest.raises(DecodeError, match="^decode_json_example: expected a JSON-encoded tf.train.Example: "):
        tfr_torch.decode_json_example(text)
