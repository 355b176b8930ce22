"""Hostile input (issues 14 and 16): every repro the fuzzing found, as a test with the exact user-facing answer.

Each bad input must raise a DecodeError / CorruptRecordError / TruncatedRecordError that names what is wrong and
where; never another exception, a hang, a silent wrong value or an allocation sized by the input. Where TensorFlow's
two readers (tf.io.parse_example and tf.train.Example.FromString) disagree on a record, tfr_torch's answer is the
one tfr_torch.format.strict documents, the same on every path (single, batched, large-record, both backends,
decode_example). The TensorFlow 2.21 answers behind each expected value are listed in the strict module.
"""

from __future__ import annotations

import math
import os
import re
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import DecodeError, TruncatedRecordError
from tfr_torch.format import strict
from tfr_torch.format.record_file import RecordFile
from wirebytes import EGROUP, SGROUP, header, ld, tag, varint

REGRESSIONS = os.path.join(os.path.dirname(__file__), "data", "regressions")


def example_of(*entries: bytes) -> bytes:
    """An Example whose Features message holds these raw map entries."""
    return ld(1, b"".join(ld(1, entry) for entry in entries))


def entry(key: bytes, *fields: bytes) -> bytes:
    return ld(1, key) + b"".join(fields)


F1 = b"\x1a\x03\x0a\x01\x01"  # Feature int64_list [1]
F2 = b"\x1a\x03\x0a\x01\x02"  # Feature int64_list [2]
VARLEN = {"x": tfr_torch.VarLenFeature(torch.int64)}


def _values(result) -> list:
    """The int64 values of feature x of a parse_example result, row by row."""
    x = result["x"].coalesce() if result["x"].is_sparse else result["x"]
    if x.is_sparse:
        rows = [[] for _ in range(x.shape[0])] if x.dim() == 2 else [[]]
        if x.dim() == 1:
            return [x.values().tolist()]
        for (row, _), value in zip(x.indices().t().tolist(), x.values().tolist()):
            rows[row].append(value)
        return rows
    return x.tolist()


def _all_paths_raise(record: bytes, spec: dict, message: str) -> None:
    """parse_single_example, parse_example of one record and of two (the large-record path when they are big)
    all raise DecodeError whose message contains `message` (a regular expression when it starts with '(?x)' or
    holds a group)."""
    for call in (lambda: tfr_torch.parse_single_example(record, spec),
                 lambda: tfr_torch.parse_example([record], spec),
                 lambda: tfr_torch.parse_example([record, record], spec)):
        with pytest.raises(DecodeError) as info:
            call()
        assert _contains(str(info.value), message)


def _contains(text: str, message: str) -> bool:
    return re.search(message, text) is not None if "(" in message and "|" in message else message in text


# ------------------------------------------------------------------------------------------------ issue 14

def test_issue14_1_feature_cut_inside_its_packed_run(backend, batch_path):
    """A 3-byte Feature `1a 01 0a` (int64_list whose packed run has no length) is a DecodeError naming the key."""
    record = example_of(entry(b"x", ld(2, b"\x1a\x01\x0a")))
    expected = "feature 'x': its tf.train.Feature (3 bytes) ends inside a varint (at byte 3)"
    with pytest.raises(DecodeError) as info:
        tfr_torch.decode_example(record)
    assert str(info.value) == expected
    _all_paths_raise(record, VARLEN, r"feature 'x' in (the example|example 0) is malformed: its tf\.train\.Feature "
                                     r"\(3 bytes\) ends inside a varint \(at byte 3\)$")


def test_issue14_2_map_entry_with_its_value_twice(backend, batch_path):
    """TensorFlow's parse_example rejects an entry holding two values (protobuf merges them): DecodeError on every
    path, at the entry's second value field (byte 14), naming the key."""
    record = example_of(entry(b"x", ld(2, F1), ld(2, F2))) + tfr_torch.encode_example({"pad": b"p" * 3000})
    expected = ("cannot parse 3041 bytes as a tf.train.Example: byte 14 (feature 'x') has a feature map entry whose "
                "value field appears twice (TensorFlow's parse_example rejects such a record; protobuf would merge "
                "the two values)")
    with pytest.raises(DecodeError) as info:
        tfr_torch.decode_example(record)
    assert str(info.value) == expected
    with pytest.raises(DecodeError) as info:
        tfr_torch.parse_example([record, record], VARLEN)
    assert str(info.value) == f"example 0: {expected}"
    _all_paths_raise(record, VARLEN, expected)


@pytest.mark.parametrize("record, values", [
    (example_of(entry(b"x", ld(2, F1)), entry(b"x", ld(2, F2))), [2]),  # duplicate keys: the last wins
    (ld(1, ld(1, entry(b"x", ld(2, F1)))) + ld(1, ld(1, entry(b"x", ld(2, F2)))), [2]),  # 2 Features
    (example_of(ld(2, F1) + ld(1, b"x")), [1]),  # value before key
    (example_of(entry(b"x", ld(2, F1))) + b"\x10\x05" + ld(3, b"junk"), [1]),  # unknown Example fields
    (example_of(entry(b"x", ld(2, F1 + b"\x20\x07"))), [1]),  # unknown varint field after the list
    (example_of(entry(b"x", ld(2, b"\x1a\x05\x0a\x01\x01\x10\x03"))), [1]),  # packed run + unknown field
])
def test_records_both_tensorflow_readers_accept(record, values, backend, batch_path):
    """Non-canonical records that TensorFlow's parse_example and protobuf both accept with the same values."""
    assert tfr_torch.decode_example(record)["x"].tolist() == values
    assert _values(tfr_torch.parse_example([record], VARLEN)) == [values]
    assert _values(tfr_torch.parse_example([record, record], VARLEN)) == [values, values]
    assert tfr_torch.parse_single_example(record, VARLEN)["x"].to_dense().tolist() == values


@pytest.mark.parametrize("record, message", [
    (example_of(entry(b"x", ld(2, F1 + F2))),
     "holds a second list after its first (a Feature holds one list; TensorFlow's parse_example reads the first, "
     "protobuf would merge them) (at byte 5)"),
    (example_of(entry(b"x", ld(2, b"\x1a\x05\x0a\x01\x01\x08\x02"))),
     "has more int64 values after its packed run (TensorFlow's parse_example reads only the run, protobuf would "
     "append them) (at byte 5)"),
    (example_of(entry(b"x", ld(2, b"\x20\x01" + F1))),
     "starts with field 4 (varint): expected its list first (bytes_list, float_list or int64_list) (at byte 0)"),
    (example_of(entry(b"x", ld(2, b"\x12\x07\x0a\x05\x00\x00\x80\x3f\x00"))),
     r"packed float (run|list) of 5 bytes,? (is )?not a multiple of 4"),
])
def test_features_the_two_tensorflow_readers_disagree_on(record, message, backend, batch_path):
    """Where parse_example and FromString give different values, every path raises the same DecodeError."""
    spec = {"x": tfr_torch.VarLenFeature(torch.float32 if b"\x12\x07" in record else torch.int64)}
    with pytest.raises(DecodeError) as info:
        tfr_torch.decode_example(record)
    assert _contains(str(info.value), message)
    _all_paths_raise(record, spec, message)


def test_issue14_3_row_lengths_that_wrap_around(backend, batch_path):
    """Row lengths whose int64 sum wraps to the value count are refused before any sum is taken."""
    record = tfr_torch.encode_example({"v": [1], "len": [2**62, 2**62, 2**62, 2**62 + 1]})
    spec = {"r": tfr_torch.RaggedFeature(torch.int64, value_key="v", partitions=[tfr_torch.RowLengths("len")])}
    with pytest.raises(DecodeError) as info:
        tfr_torch.parse_single_example(record, spec)
    assert str(info.value) == ("feature 'r' in the example has an invalid partition RowLengths('len'): a row length "
                               "4611686018427387904 larger than the number of values (1)")
    with pytest.raises(DecodeError, match=r"feature 'r' in example 1 has an invalid partition RowLengths"):
        tfr_torch.parse_example([tfr_torch.encode_example({"v": [1], "len": [1]}), record], spec)


@pytest.mark.parametrize("partition, values, message", [
    ("RowLengths", [-1, 4, 0], "a negative row length -1"),
    ("RowLengths", [2**63 - 1, 2**63 - 1, 2], "a row length 9223372036854775807 larger than the number of values (3)"),
    ("RowSplits", [0, 2, 1, 3], "row splits must start at 0, never decrease and end at 3; got [0, 2, 1, 3]"),
    ("RowSplits", [0, -2**63, 3], "row splits must start at 0, never decrease and end at 3; got [0, "
                                  "-9223372036854775808, 3]"),
    ("RowStarts", [0, 5, 1], "row starts must start at 0, never decrease and stay within 3; got [0, 5, 1]"),
    ("RowLimits", [2, 1, 3], "row limits must never decrease and end at 3; got [2, 1, 3]"),
    ("ValueRowIds", [0, -5, 1], "expected 3 non-negative, non-decreasing row ids; got [0, -5, 1]"),
    ("ValueRowIds", [0, 1], "expected 3 non-negative, non-decreasing row ids; got [0, 1]"),
    ("ValueRowIds", [0, 2, 1], "expected 3 non-negative, non-decreasing row ids; got [0, 2, 1]"),
])
def test_partitions_out_of_range(partition, values, message, backend):
    record = tfr_torch.encode_example({"v": [1, 2, 3], "p": values})
    spec = {"r": tfr_torch.RaggedFeature(torch.int64, value_key="v", partitions=[getattr(tfr_torch, partition)("p")])}
    with pytest.raises(DecodeError) as info:
        tfr_torch.parse_single_example(record, spec)
    assert str(info.value) == f"feature 'r' in the example has an invalid partition {partition}('p'): {message}"


@pytest.mark.parametrize("length", [2**63 - 1, 2**64 - 1, 2**40])
def test_issue14_4_read_by_offset_with_a_huge_length(tmp_path, length):
    """A length field far beyond the file is a TruncatedRecordError before anything is allocated (not an
    OverflowError or MemoryError), on RecordFile.read and through IndexedTFRecordDataset."""
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(header(length) + b"abcd" * 4)
    need = length + 16
    expected = (f"truncated record: its header says {length} bytes of data, so {need} bytes from this offset, but "
                "the file has only 28")
    with RecordFile(str(path)) as records:
        with pytest.raises(TruncatedRecordError) as info:
            records.read(0)
    assert info.value.offset == 0 and str(path) in str(info.value)
    assert expected in str(info.value)


def test_issue14_4_through_an_index(tmp_path):
    path = tmp_path / "huge.tfrecord"
    with tfr_torch.TFRecordWriter(str(path)) as writer:
        writer.write(b"good")
    good = path.read_bytes()
    path.write_bytes(good + header(2**63 - 1) + b"x" * 8)
    (tmp_path / "huge.tfrecord.idx").write_text(f"0 {len(good)}\n{len(good)} {2**62}\n")
    records = RecordFile(str(path))
    try:
        assert records.read(0) == b"good"
        with pytest.raises(TruncatedRecordError, match=r"its header says 9223372036854775807 bytes of data"):
            records.read(len(good))
        with pytest.raises(tfr_torch.CorruptRecordError, match=r"the index says 4611686018427387904"):
            records.read(len(good), 2**62)
    finally:
        records.close()


def _run_bounded(code: str, timeout: float = 120) -> str:
    """Run `code` in a fresh interpreter; a hang shows as a test failure after `timeout` seconds."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _dims(*sizes: int) -> bytes:
    return ld(2, b"".join(ld(2, b"\x08" + varint(d) if d else b"") for d in sizes))


def test_issue14_5_zero_size_tensors_are_built_from_their_shape():
    """Shapes with a zero dimension and huge others: numeric tensors come back empty at once, whatever the limit;
    a string tensor's nested lists are counted before any is built (refused by max_bytes). Run in a subprocess
    bounded in time, so a regression shows as a failure, not a stuck suite."""
    floats = (b"\x08\x01" + _dims(2**40, 0, 1)).hex()
    strings_first_zero = (b"\x08\x07" + _dims(0, 2**40)).hex()
    strings = (b"\x08\x07" + _dims(2**40, 0, 1)).hex()
    out = _run_bounded(f"""
        import tfr_torch
        t = tfr_torch.parse_tensor(bytes.fromhex("{floats}"), max_bytes=None)
        print(tuple(t.shape), t.dtype, t.numel())
        print(tfr_torch.parse_tensor(bytes.fromhex("{strings_first_zero}"), max_bytes=None))
        try:
            tfr_torch.parse_tensor(bytes.fromhex("{strings}"))
        except tfr_torch.DecodeError as e:
            print(e)
    """)
    assert out.splitlines() == [
        "(1099511627776, 0, 1) torch.float32 0",
        "[]",
        "TensorProto of 19 bytes declares shape [1099511627776, 0, 1], which decodes to about 70368744177728 bytes: "
        "more than max_bytes=268435456 (pass a larger max_bytes, or None, to parse_tensor if the data is trusted)",
    ]


def _peak_bytes(call) -> int:
    """Peak traced memory of `call` (numpy's buffers are traced), which must raise DecodeError."""
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_issue14_6_broadcast_bomb_is_refused_by_max_bytes():
    """32 bytes declaring a 988 MiB DT_DOUBLE tensor with one double_val to broadcast: DecodeError, nothing big
    allocated; a larger max_bytes (or None) lets a trusted caller have it."""
    data = b"\x08\x02" + _dims(120, 3, 6, 60000) + b"\x31" + struct.pack("<d", 1.5)
    assert len(data) == 31
    with pytest.raises(DecodeError) as info:
        tfr_torch.parse_tensor(data)
    assert str(info.value) == (
        "TensorProto of 31 bytes declares shape [120, 3, 6, 60000], which decodes to about 1036800000 bytes: more than "
        "max_bytes=268435456 (pass a larger max_bytes, or None, to parse_tensor if the data is trusted)")
    assert _peak_bytes(lambda: tfr_torch.parse_tensor(data)) < 1 << 20
    small = b"\x08\x02" + _dims(1000) + b"\x31" + struct.pack("<d", 1.5)
    with pytest.raises(DecodeError, match="decodes to about 8000 bytes: more than max_bytes=100"):
        tfr_torch.parse_tensor(small, max_bytes=100)
    assert tfr_torch.parse_tensor(small, max_bytes=8000).tolist() == [1.5] * 1000


@pytest.mark.parametrize("data, size", [
    (b"\x08\x07" + _dims(10**8) + ld(8, b"ab"), 800000064),  # one string broadcast to 10**8
    (b"\x08\x07" + _dims(1, 10**7, 10), 1440000128),  # no values: 10**8 empty strings in 10**7 + 2 lists
    (b"\x08\x09" + _dims(2**20, 2**20), 8796093022208),  # int64 zeros
    (b"\x08\x0e" + _dims(2**30), 2147483648),  # bfloat16
])
def test_tensor_bombs_stay_small(data, size):
    message = f"which decodes to about {size} bytes: more than max_bytes=268435456"
    with pytest.raises(DecodeError, match=message):
        tfr_torch.parse_tensor(data)
    assert _peak_bytes(lambda: tfr_torch.parse_tensor(data)) < 1 << 20


def test_bool_tensor_content_bytes_other_than_0_and_1_are_refused():
    """As TensorFlow 2.21's parse_tensor ("Cannot parse tensor from proto"): a bool is stored as byte 0 or 1."""
    data = b"\x08\x0a" + _dims(3) + ld(4, b"\x01\x00\xff")
    with pytest.raises(DecodeError, match=r"of dtype bool holds byte 255 at element 2 of tensor_content \(1 such\): "
                                          r"expected 0 or 1"):
        tfr_torch.parse_tensor(data)
    tensor = tfr_torch.parse_tensor(b"\x08\x0a" + _dims(3) + ld(4, b"\x01\x00\x01"))
    assert tensor.tolist() == [True, False, True]
    assert tensor.view(torch.uint8).tolist() == [1, 0, 1]


def test_tensor_content_is_never_refused():
    """A tensor stored in full decodes to its payload's size: never refused, however small max_bytes is."""
    payload = tfr_torch.serialize_tensor(torch.arange(1000, dtype=torch.int64))
    assert tfr_torch.parse_tensor(payload, max_bytes=0).tolist() == list(range(1000))
    with pytest.raises(ValueError, match=r"max_bytes must be a non-negative int or None, got -1"):
        tfr_torch.parse_tensor(payload, max_bytes=-1)


# ------------------------------------------------------------------------------------------------ issue 16

@pytest.mark.parametrize("data, message", [
    (b"\x08\x01\x12\x82\x01" + b"\x12\x00" * 65,
     "TensorProto has 65 dimensions: numpy and torch tensors hold at most 64"),
    (bytes.fromhex("0801121a1200120a08808080808080808040120a08808080808080808040"),
     "TensorProto has shape [0, 4611686018427387904, 4611686018427387904], too large for an array of float32 (even "
     "with no elements, numpy and torch need the product of its dimensions to fit in 63 bits)"),
    (b"\x08\x01" + ld(2, ld(2, b"\x08" + varint(2**64 - 1))),
     "TensorProto has a negative dimension in its shape [-1]"),
    (b"\x08\x01" + ld(2, b"\x18\x01"), "TensorProto has an unknown rank: a serialized tensor must have a known shape"),
    (b"\x08\x01" + _dims(3) + ld(4, b"\x00" * 8),
     "TensorProto of dtype float32 and shape [3] needs 12 bytes of tensor_content, found 8"),
    (b"\x08\x15", "TensorProto has dtype DT_VARIANT, which tfr_torch cannot read (expected one of float32, "),
    (b"\x08\x08" + _dims(1) + b"\x4d\x00\x00\x80\x3f",
     "TensorProto of dtype complex64 has an odd number (1) of scomplex_val entries: expected (real, imaginary) pairs"),
    (b"\x0a\x05ab", "cannot parse 4 bytes as a TensorProto"),
])
def test_issue16_1_tensor_shapes_numpy_cannot_hold(data, message):
    with pytest.raises(DecodeError) as info:
        tfr_torch.parse_tensor(data, max_bytes=None)
    assert str(info.value).startswith(message)


def test_issue16_2_value_row_ids_beyond_the_record(backend, batch_path):
    """A row id implying more rows than the record can hold is refused before np.bincount sizes anything by it."""
    spec = {"r": tfr_torch.RaggedFeature(torch.int64, value_key="v", partitions=[tfr_torch.ValueRowIds("ids")])}
    record = tfr_torch.encode_example({"v": [1], "ids": [10**12]})
    with pytest.raises(DecodeError) as info:
        tfr_torch.parse_example([record], spec)
    assert str(info.value) == (
        "feature 'r' in example 0 has an invalid partition ValueRowIds('ids'): row id 1000000000000 implies "
        "1000000000001 rows for 1 values: more than 65536 empty rows (tfr_torch.decode.ragged.MAX_EMPTY_ROWS)")
    bomb = tfr_torch.encode_example({"v": [1], "ids": [10**8]})
    assert _peak_bytes(lambda: tfr_torch.parse_example([bomb], spec)) < 4 << 20
    fine = tfr_torch.encode_example({"v": [1, 2], "ids": [0, 65537]})  # 65536 empty rows: allowed
    assert tfr_torch.parse_single_example(fine, spec)["r"].offsets().shape == (65539,)


def test_issue16_4_many_features_decode_in_linear_steps():
    """decode_example / decode_sequence_example of 10**5 one-value features: every value, with the walk of a
    non-canonical record too (the work is checked by counting, not timing: see benchmarks for speed)."""
    n = 10**5
    record = tfr_torch.encode_example({f"f{i}": i for i in range(n)})
    decoded = tfr_torch.decode_example(record)
    assert len(decoded) == n and decoded["f99999"].tolist() == [99999]
    walked = strict.walk_example(record + b"\x10\x01")  # an unknown field: not canonical, walked in Python
    assert len(walked) == n
    seq = tfr_torch.encode_sequence_example(None, {f"l{i}": [i] for i in range(n // 10)})
    context, lists = tfr_torch.decode_sequence_example(seq)
    assert context == {} and len(lists) == n // 10 and lists["l9999"][0].tolist() == [9999]


def _nested_groups(field: int, depth: int) -> bytes:
    return tag(field, SGROUP) * depth + tag(field, EGROUP) * depth


@pytest.mark.parametrize("depth", [1, 100, 1000])
@pytest.mark.parametrize("where", ["feature", "int64_list", "example", "features", "entry"])
def test_issue16_5_groups_are_refused_at_any_depth(where, depth, backend, batch_path):
    """TensorFlow's parse_example skips groups after a Feature's list but rejects them elsewhere; protobuf skips
    shallow ones and rejects deep ones. One answer: a group anywhere is a DecodeError naming where it starts."""
    groups = _nested_groups(4, depth)
    if where == "feature":
        record, at = example_of(entry(b"x", ld(2, F1 + groups))), "feature 'x': its tf.train.Feature"
    elif where == "int64_list":
        record, at = example_of(entry(b"x", ld(2, ld(3, b"\x0a\x01\x01" + groups)))), "feature 'x'"
    elif where == "example":
        record, at = example_of(entry(b"x", ld(2, F1))) + groups, "tf.train.Example: byte 14"
    elif where == "features":
        record, at = ld(1, ld(1, entry(b"x", ld(2, F1))) + groups), "tf.train.Example"
    else:
        record, at = example_of(entry(b"x", ld(2, F1)) + groups), "tf.train.Example"
    message = "has a group (field 4, wire type 3): groups are not part of tf.train.Example"
    with pytest.raises(DecodeError) as info:
        tfr_torch.decode_example(record)
    assert message in str(info.value) and at in str(info.value)
    _all_paths_raise(record, VARLEN, message)


def test_issue16_5_sequence_examples_refuse_groups_too(backend):
    record = tfr_torch.encode_sequence_example({"c": 1}, {"s": [[1], [2]]}) + _nested_groups(5, 100)
    with pytest.raises(DecodeError, match=r"byte \d+ has a group \(field 5, wire type 3\)"):
        tfr_torch.decode_sequence_example(record)
    with pytest.raises(DecodeError, match=r"has a group \(field 5, wire type 3\)"):
        tfr_torch.parse_single_sequence_example(record, {"c": tfr_torch.FixedLenFeature([], torch.int64)},
                                                {"s": tfr_torch.FixedLenSequenceFeature([], torch.int64)})


# ------------------------------------------------------------------------------------------------ one answer

_values_strategy = st.one_of(
    st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=5),
    st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=5),
    st.lists(st.binary(max_size=6), min_size=1, max_size=4),
)
_examples = st.dictionaries(st.sampled_from(["a", "b", "c"]), _values_strategy, min_size=1)


def _outcome(call):
    """A call's result as plain values, or its DecodeError's feature-level message (the record prefix differs by
    path: 'example 0: ...' against decode_example's bare message)."""
    try:
        return "ok", call()
    except DecodeError as exc:
        text = str(exc)
        return "error", text[text.find("feature '"):] if "its tf.train.Feature" in text else text.split(": ", 1)[-1]


def _kind(values) -> str:
    first = values[0]
    return "int64" if isinstance(first, int) else "float" if isinstance(first, float) else "bytes"


def _spec_of(example: dict) -> dict:
    dtypes = {"int64": torch.int64, "float": torch.float32, "bytes": tfr_torch.string}
    return {key: tfr_torch.RaggedFeature(dtypes[_kind(v)]) for key, v in example.items()}


def _plain(parsed: dict, row: int) -> dict:
    """Row `row` of a parse_example result of RaggedFeatures (nested tensors, or lists of lists for bytes), with
    NaNs made comparable."""
    out = {}
    for key, value in parsed.items():
        out[key] = _comparable(list(value[row]) if isinstance(value, list) else value.unbind()[row].tolist())
    return out


def _comparable(values: list) -> list:
    return ["nan" if isinstance(v, float) and math.isnan(v) else v for v in values]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(example=_examples, pad=st.integers(0, 3000), flip=st.tuples(st.integers(0, 10**6), st.integers(0, 255)))
def test_single_batched_and_large_record_paths_agree(example, pad, flip, batch_path):
    """For random Examples, and the same Examples with one byte changed: parse_single_example, parse_example of a
    small batch and of a large-record batch, and decode_example give the same values or the same error."""
    spec = _spec_of(example)
    record = tfr_torch.encode_example(example)
    if pad:
        record += tfr_torch.encode_example({"zz_pad": b"p" * pad})
    position, byte = flip
    mutated = bytearray(record)
    mutated[position % len(mutated)] = byte
    for data in (record, bytes(mutated)):
        single = _outcome(lambda: _plain(tfr_torch.parse_example([data], spec), 0))
        batched = _outcome(lambda: _plain(tfr_torch.parse_example([data, data, data], spec), 2))
        decoded = _outcome(lambda: {k: _comparable(list(v.tolist() if isinstance(v, np.ndarray) else v))
                                    for k, v in tfr_torch.decode_example(data).items() if k in spec})
        assert single[0] == batched[0]
        if single[0] == "ok":
            assert single[1] == batched[1]
            if decoded[0] == "ok":  # decode_example keeps any kind; parse_example checks kinds against the spec
                for key, values in decoded[1].items():
                    if key in single[1] and single[1][key]:
                        assert values == single[1][key]
        else:
            assert single[1] == batched[1]
        if data is record:
            assert single[0] == "ok" and decoded[0] == "ok"


# ------------------------------------------------------------------------------------------------ regressions

def _regression_files() -> list[str]:
    if not os.path.isdir(REGRESSIONS):
        return []
    return sorted(name for name in os.listdir(REGRESSIONS) if not name.startswith("."))


# inputs whose fix is in another part of the code base and not landed yet: name -> (exception now raised, where)
_PENDING: dict[str, tuple[type, str]] = {}


@pytest.mark.parametrize("name", _regression_files())
def test_fuzz_regressions(request, name):
    """Every crashing input the fuzz harnesses found is kept under tests/data/regressions/<target>-<name> and must
    now give only tfr_torch's own errors, the same on both backends (fuzz/targets.py checks)."""
    if name in _PENDING:
        raises, where = _PENDING[name]
        request.applymarker(pytest.mark.xfail(raises=raises, strict=False, reason=f"fix pending in {where}"))
    target = name.split("-", 1)[0]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "fuzz"))
    try:
        import targets
    finally:
        sys.path.pop(0)
    with open(os.path.join(REGRESSIONS, name), "rb") as f:
        targets.TARGETS[target](f.read())


# ------------------------------------------------------------------------------------------------ decompression bombs

def test_record_length_limit_message():
    from tfr_torch.format import limits

    limits.check_record_length(limits.MAX_RECORD_BYTES, "a.tfrecord.gz", 0, "gzip")
    with pytest.raises(DecodeError) as info:
        limits.check_record_length(2**40, "a.tfrecord.gz", 96, "gzip")
    assert str(info.value) == (
        "a.tfrecord.gz:96: the record header declares 1099511627776 bytes of data, more than the 1073741824 bytes a "
        "record in a GZIP file may hold (tfr_torch.format.limits.MAX_RECORD_BYTES; a decompression bomb or a corrupt "
        "length field: raise the limit if the data is trusted)")
    with pytest.raises(DecodeError, match=r"a record in a stream of unknown size may hold"):
        limits.check_record_length(2**40, None, 0, "none")


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_record_bomb_is_refused(tmp_path, monkeypatch, compression, inflate_thread):
    """An 8 MiB record of zeros (about 8 KiB compressed) under a 1 MiB limit: DecodeError naming the file and the
    offset, with memory bounded by the limit, not by the record."""
    from tfr_torch.format import limits

    path = str(tmp_path / f"bomb.tfrecord.{'gz' if compression == 'gzip' else 'zz'}")
    with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
        writer.write(b"small")
        writer.write(bytes(8 << 20))
    assert os.path.getsize(path) < 64 << 10
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 1 << 20)
    records = tfr_torch.read_records(path)
    assert next(records) == b"small"
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as info:
            next(records)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        records.close()
    assert str(info.value) == (
        f"{path}:21: the record header declares 8388608 bytes of data, more than the 1048576 bytes a record in a "
        f"{compression.upper()} file may hold (tfr_torch.format.limits.MAX_RECORD_BYTES; a decompression bomb or a "
        "corrupt length field: raise the limit if the data is trusted)")
    assert peak < 4 << 20


# ------------------------------------------------------------------------------------------------ index files

@pytest.mark.parametrize("text, message", [
    (b"99999999999999999999 19\n19 20\n",
     "line 1 of the index is b'99999999999999999999 19': a number larger than 2**63 - 1 (expected '<offset> <size>')"),
    (b"0 19\n19 99999999999999999999999\n",
     "line 2 of the index is b'19 99999999999999999999999': a number larger than 2**63 - 1"),
    (b"0 19\n-19 20\n", "line 2 of the index is b'-19 20': expected '<offset> <size>'"),
    (b"\xff\xfe0 19\n", "line 1 of the index is b'\\xff\\xfe0 19': expected '<offset> <size>'"),
    (b"0 19\n\n19 20\n", "line 2 of the index is b'': expected '<offset> <size>'"),
    (b"0 19\n19 9223372036854775807\n", "line 2 of the index gives offset 19 and size 9223372036854775807, which end "
                                        "beyond 2**63 - 1 bytes"),
    (b"0 19\n19 9223372036854775780\n", "the index describes 2 records ending at byte 9223372036854775799, but the "
                                        "file has 39 bytes"),
    (b"0 19\n19 20\n39 16\n", "the index describes 3 records ending at byte 55, but the file has 39 bytes"),
    (b"0 17\n17 22\n", "line 1 of the index says a record of 17 bytes starts at offset 0, but the file has a record "
                       "of 19 bytes there"),
])
def test_hostile_index_files(tmp_path, text, message):
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write(b"abc")
        writer.write(b"defg")
    with open(path + ".idx", "wb") as f:
        f.write(text)
    with pytest.raises(tfr_torch.IndexMismatchError) as info:
        tfr_torch.read_index(path + ".idx", path)
    assert message in str(info.value)


# ------------------------------------------------------------------------------------------------ against TensorFlow

def _tensorflow_cases() -> dict:
    import json

    with open(os.path.join(os.path.dirname(__file__), "data", "golden", "strict.json")) as f:
        return json.load(f)["cases"]


_TF_CASES = _tensorflow_cases()


def _tensorflow_agrees(case: dict) -> bool:
    """Both of TensorFlow's readers accept the record with the same values (a kind-less Feature, which protobuf
    shows without a kind, is parse_example's missing feature)."""
    parsed, proto = case["parse_example"], case["from_string"]
    if "error" in parsed or "error" in proto or parsed["values"] != proto["values"]:
        return False
    return parsed["kind"] == proto["kind"] or (proto["kind"] is None and not proto["values"])


# The one deliberate exception: a group is refused at any depth, though both TensorFlow readers skip a shallow one
# after a Feature's list (protobuf refuses it from about 100 deep, parse_example never): one answer whatever the
# depth (issue 16 item 5). No writer of tf.train.Example emits groups.
_STRICTER_THAN_TENSORFLOW = {"feature_groups_1"}


@pytest.mark.parametrize("name", sorted(_TF_CASES))
def test_one_answer_where_tensorflow_has_two(name, backend, batch_path):
    """Golden answers of TensorFlow 2.21's tf.io.parse_example and tf.train.Example.FromString for non-canonical
    records (tests/data/make_golden_strict.py): tfr_torch accepts a record exactly where both accept it with the
    same values, with those values, on every path; it raises DecodeError everywhere else."""
    case = _TF_CASES[name]
    record = bytes.fromhex(case["record"])
    dtype = torch.float32 if case["dtype"] == "float32" else torch.int64
    spec = {"x": tfr_torch.VarLenFeature(dtype)}
    if _tensorflow_agrees(case) and name not in _STRICTER_THAN_TENSORFLOW:
        want = case["parse_example"]["values"]
        decoded = tfr_torch.decode_example(record).get("x")
        assert (decoded.tolist() if decoded is not None else []) == want
        assert tfr_torch.parse_single_example(record, spec)["x"].to_dense().tolist() == want
        assert _values(tfr_torch.parse_example([record, record], spec)) == [want, want]
    else:
        with pytest.raises(DecodeError):
            tfr_torch.decode_example(record)
        for call in (lambda: tfr_torch.parse_single_example(record, spec),
                     lambda: tfr_torch.parse_example([record, record], spec)):
            with pytest.raises(DecodeError):
                call()
