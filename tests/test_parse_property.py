"""A property test of the decode layer: random specs (every kind and dtype) and conforming Examples come back value
for value (floats by their bits), batched and single.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RowLengths,
    VarLenFeature,
    encode_example,
    parse_example,
    parse_single_example,
)
from parse_util import assert_same_tensor

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core


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
                if default is not None and n > 0 and draw(st.booleans()):  # (TF: an empty default is none)
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


def _assert_same_result(actual: Any, expected: Any) -> None:
    """The same decoded value, to the bit: dense and sparse tensors (indices, values, shape, coalesced flag),
    RaggedTensors, lists and bytes."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor) and expected.is_sparse:
        assert actual.is_sparse and tuple(actual.shape) == tuple(expected.shape)
        assert actual.is_coalesced() == expected.is_coalesced()
        assert_same_tensor(actual._indices(), expected._indices())
        assert_same_tensor(actual._values(), expected._values())
    elif isinstance(expected, torch.Tensor) and expected.is_nested:  # jagged: each has its own symbolic size
        assert actual.is_nested and actual.dtype == expected.dtype
        _assert_same_result(list(actual.unbind()), list(expected.unbind()))
    elif isinstance(expected, torch.Tensor):
        assert_same_tensor(actual, expected)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_same_result(a, e)
    elif hasattr(expected, "__dataclass_fields__"):
        for name in expected.__dataclass_fields__:
            _assert_same_result(getattr(actual, name), getattr(expected, name))
    else:
        assert actual == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec_and_examples())
def test_rows_of_a_batch_equal_single_parses(case):
    """Per-record datasets decode records in chunks and cut the batch into rows (FixedLen and VarLen specs): every
    row must be exactly what parse_single_example gives for its record, whatever the spec."""
    spec, _, records = case
    rows = list(tfr_torch.compile_features(spec).iter_rows(records))
    assert len(rows) == len(records)
    for row, record in zip(rows, records):
        single = parse_single_example(record, spec)
        assert list(row) == list(single)
        for key in single:
            _assert_same_result(row[key], single[key])


def test_rows_of_varlen_batches_hold_only_their_own_values():
    """The VarLen rows cut from a batch: each [len] sparse tensor holds its record's values only, empty and
    missing records included."""
    spec = {"v": tfr_torch.VarLenFeature(torch.int64), "s": tfr_torch.VarLenFeature(tfr_torch.string)}
    values = [[1, 2, 3], [], None, [7]]
    records = [encode_example({} if v is None else {"v": np.array(v, dtype=np.int64),
                                                    "s": np.array([b"x"] * len(v), dtype=bytes)}) for v in values]
    rows = list(tfr_torch.compile_features(spec).iter_rows(records))
    assert [row["v"].to_dense().tolist() for row in rows] == [[1, 2, 3], [], [], [7]]
    assert [tuple(row["v"].shape) for row in rows] == [(3,), (0,), (0,), (1,)]
    assert [row["s"] for row in rows] == [[b"x"] * 3, [], [], [b"x"]]
