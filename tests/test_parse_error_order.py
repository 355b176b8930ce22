"""The order in which parse_example reports a batch's problems (tfr_torch/decode/plan.py, "Error order"): every
record's wire format first, record by record, then the values feature by feature, with the same message on both
backends, for small records and for records of 2 KB and more (which the reference reads another way)."""

from __future__ import annotations

import random

import pytest
import torch

import tfr_torch
from tfr_torch import _native
from tfr_torch.errors import DecodeError, TFRecordError
from wirebytes import bytes_feature, int64_feature, ld, packed_ints, raw_example, varint

SPEC = {"a": tfr_torch.FixedLenFeature([2], torch.int64), "b": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "c": tfr_torch.VarLenFeature(torch.int64), "pad": tfr_torch.FixedLenFeature([], tfr_torch.string)}
UNKNOWN_FIELD = ld(1, b"x") + varint(2 << 3) + varint(5)  # a BytesList with field 2: TensorFlow rejects it
ONE_VALUE = ld(1, b"x")  # a BytesList of one value
CUT_VARINT = int64_feature(ld(1, b"\xff"))  # a packed int64 list ending inside a varint

B_UNKNOWN = ("feature 'b' in example {i} is malformed: its tf.train.Feature (7 bytes) has field 2 (varint) in its "
             "bytes_list (expected only values) (at byte 5)")
C_CUT = "feature 'c' in example {i} is malformed: the packed int64 list ends inside a varint"


def _record(pad: int, a=(1, 2), b=ONE_VALUE, c=None, cut=None) -> bytes:
    features = {"a": int64_feature(packed_ints(a)), "b": bytes_feature(b), "pad": bytes_feature(ld(1, bytes(pad)))}
    if c is not None:
        features["c"] = c
    record = raw_example(features)
    return record if cut is None else record[:cut]


@pytest.fixture(params=[10, 2048], ids=["small records", "records of 2 KB"])
def pad(request):
    return request.param


def _message(records, spec=SPEC) -> str:
    with pytest.raises(DecodeError) as caught:
        tfr_torch.parse_example(records, spec)
    return str(caught.value)


def test_a_malformed_feature_comes_before_an_earlier_records_value_count(backend, pad):
    """The case of issue 28: the compiled core named 'a' (3 values) while the reference named 'b'."""
    records = [_record(pad, a=(1, 2, 3)), _record(pad, b=UNKNOWN_FIELD)]
    assert _message(records) == B_UNKNOWN.format(i=1)


def test_a_malformed_feature_comes_before_a_value_count_of_the_same_record(backend, pad):
    assert _message([_record(pad, a=(1, 2, 3), b=UNKNOWN_FIELD), _record(pad)]) == B_UNKNOWN.format(i=0)


def test_a_malformed_numeric_feature_of_an_earlier_record_comes_first(backend, pad):
    records = [_record(pad, c=CUT_VARINT), _record(pad, b=UNKNOWN_FIELD)]
    assert _message(records) == C_CUT.format(i=0)


def test_within_a_record_the_spec_order_decides(backend, pad):
    records = [_record(pad, c=CUT_VARINT, b=UNKNOWN_FIELD), _record(pad)]
    assert _message(records) == B_UNKNOWN.format(i=0)
    reordered = {"c": SPEC["c"], "b": SPEC["b"], "a": SPEC["a"]}
    assert _message(records, reordered) == C_CUT.format(i=0)


def test_a_malformed_feature_comes_before_a_later_record_that_is_not_an_example(backend, pad):
    records = [_record(pad, b=UNKNOWN_FIELD), _record(pad, cut=20)]
    assert _message(records) == B_UNKNOWN.format(i=0)


def test_a_record_that_is_not_an_example_comes_before_a_later_malformed_feature(backend, pad):
    records = [_record(pad, cut=20), _record(pad, b=UNKNOWN_FIELD)]
    length, left = {10: (48, 18), 2048: (2090, 17)}[pad]  # the features message, and what follows its length
    assert _message(records) == ("example 0: cannot parse 20 bytes as a tf.train.Example: byte 1 has a features "
                                 f"message of {length} bytes but only {left} bytes remain in its message")


def test_a_record_that_is_not_bytes_comes_after_an_earlier_malformed_feature(backend, pad):
    records = [_record(pad, b=UNKNOWN_FIELD), 7]
    assert _message(records) == B_UNKNOWN.format(i=0)
    with pytest.raises(TypeError, match="example 1: a serialized record must be bytes, got int"):
        tfr_torch.parse_example([_record(pad), 7], SPEC)


# ---------------------------------------------------------------------------------------------- differential


def _mutated_batch(rnd: random.Random, big: bool) -> list[bytes]:
    """1-5 records of 2 KB and more (or small): in one a bytes_list with an unknown or broken field, in another
    a FixedLenFeature with a wrong value count; sometimes a Feature of another kind or a record cut short."""
    unknown = [b"\x10\x05", b"\x1a\x02ab", b"\x15\x00\x00\x00\x00", b"\x10", b"\x1a\x09ab", b"\x0b\x0c", b"\x12\x01"]
    n = rnd.randint(1, 5)
    wrong_count, broken = rnd.randrange(n), rnd.randrange(n)
    records = []
    for i in range(n):
        values = ld(1, b"x" * rnd.randrange(5))
        if i == broken:
            extra = rnd.choice(unknown)
            values = values + extra if rnd.random() < 0.5 else extra + values
        roll = rnd.random()
        features = [("a", int64_feature(packed_ints(range(2 if i != wrong_count else rnd.choice([1, 3]))))),
                    ("b", bytes_feature(values)),
                    ("c", int64_feature(packed_ints([1, 2] if roll < 0.8 else [1])) if roll < 0.9
                     else ld(2, ld(1, bytes(8)))),
                    ("pad", bytes_feature(ld(1, bytes(rnd.randrange(1800, 2600) if big else rnd.randrange(300))))),
                    ]
        rnd.shuffle(features)
        record = raw_example(dict(features))
        records.append(record[: rnd.randrange(len(record))] if rnd.random() < 0.1 else record)
    return records


def _outcome(records, spec) -> str:
    try:
        tfr_torch.parse_example(records, spec)
    except (TFRecordError, ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@pytest.mark.skipif(not _native.available(), reason=f"the compiled core is not built: {_native.import_error}")
@pytest.mark.parametrize("big", [False, True], ids=["small records", "records of 2 KB"])
def test_both_backends_name_the_same_first_problem_of_mutated_batches(big):
    specs = [SPEC, {"b": tfr_torch.VarLenFeature(tfr_torch.string), "a": SPEC["a"], "c": SPEC["c"]},
             {"c": tfr_torch.FixedLenFeature([2], torch.int64), "b": SPEC["b"], "a": SPEC["a"]}]
    rnd = random.Random(28)
    previous = tfr_torch.backend()
    try:
        for _ in range(150):
            records = _mutated_batch(rnd, big)
            for spec in specs:
                tfr_torch.set_backend("python")
                reference = _outcome(records, spec)
                tfr_torch.set_backend("native")
                assert _outcome(records, spec) == reference, (records, list(spec))
    finally:
        tfr_torch.set_backend(previous)
