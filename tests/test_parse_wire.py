"""Non-canonical wire encodings (unpacked lists, split runs, oneof overrides, unknown fields, repeated map entries):
each decodes exactly as a full protobuf parse (decode_example) does, or, where TensorFlow's parse_example and
protobuf disagree, is refused with a DecodeError naming the key and the byte offset on every path. The records are
built by hand (tests/wirebytes.py).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    DecodeError,
    FixedLenFeature,
    VarLenFeature,
    encode_example,
    parse_example,
    parse_single_example,
)
from parse_util import assert_same_tensor, float32_bits, sparse_rows
from wirebytes import (
    bytes_feature,
    f32,
    float_feature,
    int64_feature,
    ld,
    packed_floats,
    packed_ints,
    raw_example,
    unpacked_floats,
    unpacked_ints,
)

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core


# ----------------------------------------------------------------- non-canonical wire encodings


INTS = [1, -1, 0, 2**63 - 1, -(2**63), 300, 2**40]
FLOAT_BITS = [0x3FC00000, 0x80000000, 0x7FC00001, 0xFF800000, 0x00000001, 0x40490FDB]

NON_CANONICAL = {
    "unpacked-int64": int64_feature(unpacked_ints(INTS)),
    "unpacked-float": float_feature(unpacked_floats(FLOAT_BITS)),
    "float-two-packed-runs": float_feature(packed_floats(FLOAT_BITS[:2]) + packed_floats(FLOAT_BITS[2:])),
    "int64-two-packed-runs": int64_feature(packed_ints(INTS[:3]) + packed_ints(INTS[3:])),
    "int64-packed-then-unpacked": int64_feature(packed_ints(INTS[:2]) + unpacked_ints(INTS[2:])),
    "float-unpacked-then-packed": float_feature(unpacked_floats(FLOAT_BITS[:1]) + packed_floats(FLOAT_BITS[1:])),
    "two-float-lists-merge": float_feature(packed_floats(FLOAT_BITS[:3])) + float_feature(
        packed_floats(FLOAT_BITS[3:])),
    "float-then-int64-last-wins": float_feature(packed_floats(FLOAT_BITS)) + int64_feature(packed_ints(INTS)),
    "int64-then-float-last-wins": int64_feature(packed_ints(INTS)) + float_feature(packed_floats(FLOAT_BITS)),
    "int64-then-bytes-last-wins": int64_feature(packed_ints(INTS)) + bytes_feature(ld(1, b"x") + ld(1, b"")),
    "bytes-then-float-last-wins": bytes_feature(ld(1, b"x")) + float_feature(packed_floats(FLOAT_BITS)),
    "unknown-fields-in-feature": b"\x38\x05" + int64_feature(packed_ints(INTS)) + ld(9, b"junk") + b"\x45" + f32(1),
    "unknown-fields-in-float-list": float_feature(b"\x10\x01" + packed_floats(FLOAT_BITS) + ld(5, b"zz")),
    "unknown-fields-in-bytes-list": bytes_feature(ld(1, b"ab") + b"\x10\x07" + ld(1, b"\x00c")),
    "empty-float-list-with-empty-run": float_feature(ld(1, b"")),
    "empty-int64-list": int64_feature(b""),
    "long-packed-int64": int64_feature(packed_ints([2**40 + i for i in range(40)])),  # multi-byte lengths
    "long-unpacked-float": float_feature(unpacked_floats(list(range(0x3F800000, 0x3F800000 + 50)))),
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
    odd = raw_example({"f": raw})
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
    odd = raw_example({"i": NON_CANONICAL["unpacked-int64"], "x": NON_CANONICAL["unpacked-float"]})
    spec = {"i": FixedLenFeature([7], torch.int64), "x": FixedLenFeature([2, 3], torch.float32)}
    out = parse_example([canonical, odd], spec)
    assert_same_tensor(out["i"][1], out["i"][0])
    assert_same_tensor(out["x"][1], out["x"][0])
    assert out["i"][0].tolist() == INTS
    assert float32_bits(out["x"][0].numpy()) == FLOAT_BITS
    # an unpacked list of another kind is checked against the spec like any other kind
    flipped = raw_example({"i": NON_CANONICAL["unpacked-float"]})
    with pytest.raises(DecodeError, match=r"feature 'i' in example 1 holds float values but int64 values were"):
        parse_example([canonical, flipped], {"i": FixedLenFeature([7], torch.int64)})


@pytest.mark.usefixtures("batch_path")
def test_kind_less_feature_counts_as_missing():
    records = [raw_example({"f": b""}), encode_example({"g": 1}), encode_example({"f": [1.0, 2.0]})]
    out = parse_example(records, {"f": FixedLenFeature([2], torch.float32, default_value=[7.0, 8.0])})
    assert out["f"].tolist() == [[7.0, 8.0], [7.0, 8.0], [1.0, 2.0]]
    with pytest.raises(DecodeError, match=r"feature 'f' in example 0 is required but missing"):
        parse_example(records, {"f": FixedLenFeature([2], torch.float32)})


@pytest.mark.usefixtures("batch_path")
def test_repeated_map_entry_last_wins():
    record = ld(1, ld(1, ld(1, b"f") + ld(2, int64_feature(packed_ints([1, 2])))) +
                ld(1, ld(1, b"f") + ld(2, int64_feature(packed_ints([3, 4, 5])))))
    assert tfr_torch.decode_example(record)["f"].tolist() == [3, 4, 5]
    assert parse_single_example(record, {"f": FixedLenFeature([3], torch.int64)})["f"].tolist() == [3, 4, 5]
    _assert_parse_matches_decode_example([record], "f")
