"""Parity of tfr_torch's parse_example family with TensorFlow 2.21, value by value.

The goldens are tests/data/golden/parse/cases.json, written by tests/data/make_golden_parse.py (its docstring
describes the JSON schema). Each case gives serialized records, a feature spec in JSON form, and either TF's
outputs or the error TF raised. Values are compared in the goldens' encoding: ints as ints, float32 as uint32
bit patterns (so NaN and -0.0 are exact), bytes as lowercase hex.

Where tfr_torch intentionally differs from TensorFlow (always-validated ragged partitions, checked SparseFeature
indices, per-step FixedLenSequenceFeature counts, fewer spec conflicts), the case is listed in `OVERRIDES` with
the documented behaviour we assert instead, and a comment saying why.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tfr_torch

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core

CASES_PATH = Path(__file__).parent / "data" / "golden" / "parse" / "cases.json"
with open(CASES_PATH, encoding="utf-8") as _f:
    CASES = json.load(_f)
CASES_BY_NAME = {c["name"]: c for c in CASES}

DTYPES = {"float32": torch.float32, "int64": torch.int64, "string": tfr_torch.string}
SPLITS_DTYPES = {"int32": torch.int32, "int64": torch.int64}
PARTITIONS = {
    "RowLengths": tfr_torch.RowLengths,
    "RowSplits": tfr_torch.RowSplits,
    "RowStarts": tfr_torch.RowStarts,
    "RowLimits": tfr_torch.RowLimits,
    "ValueRowIds": tfr_torch.ValueRowIds,
}


# ------------------------------------------------------------------------------------------ JSON -> specs


def _unhex(v: Any) -> Any:
    return [_unhex(x) for x in v] if isinstance(v, list) else bytes.fromhex(v)


def decode_default(dtype: str, value: Any) -> Any:
    """A default_value in the JSON value encoding -> what a tfr_torch spec takes (numpy for numbers, keeping
    NaN payloads and -0.0 exact; nested lists of bytes for strings)."""
    if value is None:
        return None
    if dtype == "float32":
        return np.asarray(value, dtype=np.uint32).view(np.float32)
    if dtype == "int64":
        return np.asarray(value, dtype=np.int64)
    return _unhex(value)


def build_feature(spec: dict) -> Any:
    kind, dtype = spec["kind"], DTYPES[spec["dtype"]]
    if kind == "FixedLen":
        return tfr_torch.FixedLenFeature(spec["shape"], dtype, decode_default(spec["dtype"], spec["default_value"]))
    if kind == "VarLen":
        return tfr_torch.VarLenFeature(dtype)
    if kind == "Sparse":
        index_key = spec["index_key"] if isinstance(spec["index_key"], str) else tuple(spec["index_key"])
        size = spec["size"] if isinstance(spec["size"], int) else tuple(spec["size"])
        return tfr_torch.SparseFeature(index_key, spec["value_key"], dtype, size, spec["already_sorted"])
    if kind == "Ragged":
        parts = [tfr_torch.UniformRowLength(p["length"]) if p["type"] == "UniformRowLength"
                 else PARTITIONS[p["type"]](p["key"]) for p in spec["partitions"]]
        return tfr_torch.RaggedFeature(dtype, value_key=spec["value_key"], partitions=tuple(parts),
                                       row_splits_dtype=SPLITS_DTYPES[spec["row_splits_dtype"]],
                                       validate=spec["validate"])
    if kind == "FixedLenSequence":
        return tfr_torch.FixedLenSequenceFeature(spec["shape"], dtype, allow_missing=spec["allow_missing"],
                                                 default_value=decode_default(spec["dtype"], spec["default_value"]))
    raise AssertionError(f"unknown spec kind {kind!r}")


def build_spec(spec: dict | None) -> dict | None:
    return None if spec is None else {key: build_feature(s) for key, s in spec.items()}


def run_case(case: dict) -> dict:
    """Run tfr_torch on a case; return the outputs shaped like the golden "expected" entry."""
    records = [bytes.fromhex(h) for h in case["records"]]
    api = case["api"]
    if api == "parse_example":
        return tfr_torch.parse_example(records, build_spec(case["features"]))
    if api == "parse_single_example":
        return tfr_torch.parse_single_example(records[0], build_spec(case["features"]))
    if api == "parse_sequence_example":
        ctx, fl, lengths = tfr_torch.parse_sequence_example(
            records, build_spec(case["context_features"]), build_spec(case["sequence_features"]))
        return {"context": ctx, "feature_lists": fl, "lengths": lengths}
    if api == "parse_single_sequence_example":
        ctx, fl = tfr_torch.parse_single_sequence_example(
            records[0], build_spec(case["context_features"]), build_spec(case["sequence_features"]))
        return {"context": ctx, "feature_lists": fl}
    raise AssertionError(f"unknown api {api!r}")


# ---------------------------------------------------------------------------------- result -> JSON encoding

TORCH_OF = {"float32": torch.float32, "int64": torch.int64, "int32": torch.int32}


def enc_numeric(t: torch.Tensor, dtype: str) -> Any:
    """A numeric tensor -> nested lists in the value encoding (float32 as bit patterns)."""
    assert isinstance(t, torch.Tensor), f"expected a torch tensor, got {type(t).__name__}"
    assert t.dtype == TORCH_OF[dtype], f"dtype {t.dtype}, expected {dtype}"
    arr = t.detach().contiguous().numpy()
    return arr.view(np.uint32).tolist() if dtype == "float32" else arr.tolist()


def enc_bytes(value: Any) -> Any:
    """Nested lists of bytes -> nested lists of hex (checking every leaf is bytes)."""
    if isinstance(value, list):
        return [enc_bytes(v) for v in value]
    assert type(value) is bytes, f"expected bytes, got {type(value).__name__}: {value!r}"
    return value.hex()


def flatten(value: Any, shape: list[int]) -> list:
    """Check that nested lists `value` are shaped `shape`; return the leaves row-major."""
    if not shape:
        assert not isinstance(value, list), f"expected a leaf, got a list of length {len(value)}"
        return [value]
    assert isinstance(value, list), f"expected a list of length {shape[0]}, got {type(value).__name__}"
    assert len(value) == shape[0], f"expected a list of length {shape[0]}, got {len(value)}"
    out: list = []
    for v in value:
        out.extend(flatten(v, shape[1:]))
    return out


def split_nested(values: list, nested_splits: list[list[int]]) -> list:
    for splits in reversed(nested_splits):
        values = [values[splits[i] : splits[i + 1]] for i in range(len(splits) - 1)]
    return values


def splits_of_lists(value: list, depth: int) -> tuple[list[list[int]], list]:
    """Nested lists with `depth` ragged levels under the outer list -> (nested row splits, the items at depth)."""
    nested = []
    for _ in range(depth):
        assert all(isinstance(v, list) for v in value), f"expected lists, got {value!r}"
        splits = [0]
        for row in value:
            splits.append(splits[-1] + len(row))
        nested.append(splits)
        value = [item for row in value for item in row]
    return nested, value


def leaves(value: Any, depth: int) -> list:
    """The leaves of nested lists `depth` levels deep, in order."""
    for _ in range(depth):
        assert all(isinstance(v, list) for v in value), f"expected lists, got {value!r}"
        value = [item for row in value for item in row]
    return value


# -------------------------------------------------------------------------------------------- comparisons


def check_dense(exp: dict, got: Any, where: str) -> None:
    if exp["dtype"] == "string":
        assert isinstance(got, (list, bytes)), f"{where}: strings should be (nested lists of) bytes, got {type(got)}"
        flat = flatten(got, exp["shape"])
        assert [enc_bytes(v) for v in flat] == exp["values"], where
        return
    assert isinstance(got, torch.Tensor) and got.layout == torch.strided and not got.is_nested, (
        f"{where}: expected a dense tensor, got {type(got).__name__} {getattr(got, 'layout', '')}")
    assert list(got.shape) == exp["shape"], f"{where}: shape {list(got.shape)} != TF's {exp['shape']}"
    assert enc_numeric(got.reshape(-1), exp["dtype"]) == exp["values"], where


def check_sparse(exp: dict, got: Any, where: str) -> None:
    if exp["dtype"] == "string":
        if isinstance(got, tfr_torch.SparseBytes):  # SparseFeature of strings
            indices = got.indices.tolist()
            values = [enc_bytes(v) for v in got.values]
            shape = list(got.dense_shape)
            assert got.indices.dtype == torch.int64, where
        else:  # VarLenFeature of strings: lists of bytes per unit (per example; per example and step)
            ndim = len(exp["dense_shape"])
            # rebuild TF's indices from the nested lists: positions at each level
            indices, values, shape = [], [], [0] * ndim

            def walk(node, prefix):
                if len(prefix) == ndim - 1:
                    assert isinstance(node, list), f"{where}: expected a list of bytes, got {type(node)}"
                    shape[ndim - 1] = max(shape[ndim - 1], len(node))
                    for j, v in enumerate(node):
                        indices.append(prefix + [j])
                        values.append(enc_bytes(v))
                    return
                assert isinstance(node, list), f"{where}: expected a list, got {type(node)}"
                depth = len(prefix)
                shape[depth] = max(shape[depth], len(node))
                for i, child in enumerate(node):
                    walk(child, prefix + [i])

            walk(got, [])
        assert indices == exp["indices"], f"{where}: indices {indices} != TF's {exp['indices']}"
        assert values == exp["values"], where
        assert shape == exp["dense_shape"], f"{where}: dense_shape {shape} != TF's {exp['dense_shape']}"
        return
    assert isinstance(got, torch.Tensor) and got.layout == torch.sparse_coo, (
        f"{where}: expected a sparse COO tensor, got {type(got).__name__} {getattr(got, 'layout', '')}")
    # TF's indices in TF's order (SparseFeature with already_sorted=True keeps the wire order; duplicates stay)
    indices = got._indices().T.tolist()
    assert indices == exp["indices"], f"{where}: indices {indices} != TF's {exp['indices']}"
    assert enc_numeric(got._values(), exp["dtype"]) == exp["values"], where
    assert list(got.shape) == exp["dense_shape"], f"{where}: dense_shape {list(got.shape)} != TF's {exp['dense_shape']}"


def check_ragged(exp: dict, got: Any, where: str) -> None:
    dtype = exp["dtype"]
    ragged_levels = len(exp["nested_row_splits"])
    if dtype == "string":
        assert isinstance(got, list), f"{where}: ragged strings should be nested lists, got {type(got).__name__}"
    # TF's static shape: [rows, None (each ragged dimension)..., uniform inner dims]
    assert len(got) == exp["shape"][0], f"{where}: {len(got)} rows, TF's shape {exp['shape']}"
    if dtype == "string":  # nested lists of bytes: no row splits dtype to compare
        assert enc_bytes(got) == exp["as_list"], where
        splits, items = splits_of_lists(got, ragged_levels)
        assert splits == exp["nested_row_splits"], f"{where}: row splits {splits} != TF's {exp['nested_row_splits']}"
        assert len(items) == exp["flat_values_shape"][0], where
        flat = [v for item in items for v in flatten(item, exp["flat_values_shape"][1:])]
        assert enc_bytes(flat) == exp["flat_values"], where
        return
    if isinstance(got, tfr_torch.RaggedTensor):
        splits = [s.tolist() for s in got.nested_row_splits]
        assert splits == exp["nested_row_splits"], f"{where}: row splits {splits} != TF's {exp['nested_row_splits']}"
        for s in got.nested_row_splits:
            assert s.dtype == TORCH_OF[exp["row_splits_dtype"]], f"{where}: row splits dtype {s.dtype}"
        assert list(got.values.shape) == exp["flat_values_shape"], where
        assert enc_numeric(got.values.reshape(-1), dtype) == exp["flat_values"], where
        assert split_nested(enc_numeric(got.values, dtype), splits) == exp["as_list"], where
        assert enc_tree(got.to_list(), dtype) == exp["as_list"], f"{where}: to_list()"
        return
    # A torch nested tensor (one ragged dimension): its offsets are int64 whatever row_splits_dtype says, so
    # only their values are compared with TF's row splits.
    assert isinstance(got, torch.Tensor) and got.is_nested, (
        f"{where}: expected a nested (jagged) tensor or RaggedTensor, got {type(got).__name__}")
    assert ragged_levels == 1, f"{where}: a nested tensor holds one ragged dimension, TF has {ragged_levels}"
    assert got.layout == torch.jagged, where
    assert list(got.shape[2:]) == exp["shape"][2:], f"{where}: shape {got.shape} != TF's {exp['shape']}"
    assert got.offsets().tolist() == exp["nested_row_splits"][0], (
        f"{where}: offsets {got.offsets().tolist()} != TF's row splits {exp['nested_row_splits'][0]}")
    assert [enc_numeric(t, dtype) for t in got.unbind()] == exp["as_list"], where
    assert list(got.values().shape) == exp["flat_values_shape"], where
    assert enc_numeric(got.values().reshape(-1), dtype) == exp["flat_values"], where


def enc_tree(value: Any, dtype: str) -> Any:
    """Python floats/ints in nested lists (RaggedTensor.to_list) -> the value encoding."""
    if isinstance(value, list):
        return [enc_tree(v, dtype) for v in value]
    if dtype == "float32":
        return int(np.asarray(value, dtype=np.float32).view(np.uint32))
    return value


CHECKS = {"dense": check_dense, "sparse": check_sparse, "ragged": check_ragged}


def check_dict(exp: dict, got: dict, where: str) -> None:
    assert isinstance(got, dict), f"{where}: expected a dict, got {type(got).__name__}"
    assert sorted(got) == sorted(exp), f"{where}: keys {sorted(got)} != TF's {sorted(exp)}"
    for key, tensor in exp.items():
        CHECKS[tensor["type"]](tensor, got[key], f"{where}[{key!r}]")


def check_output(case: dict, expected: dict, got: dict) -> None:
    if case["api"] in ("parse_example", "parse_single_example"):
        check_dict(expected, got, "features")
        return
    assert sorted(got) == sorted(expected), f"{sorted(got)} != {sorted(expected)}"
    for part in expected:
        check_dict(expected[part], got[part], part)


# ------------------------------------------------------------------------------------------- error cases


def check_error(case: dict, raised: BaseException, exc_type: Any, names: tuple, example: int | None,
                step: int | None) -> None:
    """`names`: each entry is a feature key the message must quote ('key'), or a tuple of plain substrings one
    of which it must contain. `example` / `step`: the example index (batch forms: "example i"; single forms:
    "the example") and step ("step s") it must name, or None."""
    types = exc_type if isinstance(exc_type, tuple) else (exc_type,)
    message = str(raised)
    assert isinstance(raised, types), (
        f"raised {type(raised).__name__}: {message}; expected {' or '.join(t.__name__ for t in types)}")
    for name in names:
        if isinstance(name, tuple):
            assert any(n in message for n in name), f"message names none of {name}: {message}"
        else:
            assert f"'{name}'" in message, f"message does not name {name!r}: {message}"
    if example is not None:
        if case["api"].startswith("parse_single"):
            assert "the example" in message, f"message does not say 'the example': {message}"
        else:
            assert re.search(rf"\bexample {example}\b", message), f"message does not name example {example}: {message}"
    if step is not None:
        assert re.search(rf"\bstep {step}\b", message), f"message does not name step {step}: {message}"


# What tfr_torch raises for each case where TensorFlow raised: (exception type, names the message must hold (see
# check_error), example index it must name (or None), step (or None)). Data errors are DecodeError; errors in the
# spec itself (TF's ValueErrors, and TF's InvalidArgumentErrors about a default_value's size, which tfr_torch
# catches when it compiles the spec) are ValueError/TypeError. Message texts differ from TF's by design; only
# the key, example and step are checked (the example index is TF's "Index: i" where TF gives one).
SPEC_ERROR = (ValueError, TypeError)
D = tfr_torch.DecodeError
# A spec object rejected when it is built cannot know its key: its class name is enough there.
FIXED_SPEC = ("'f'", "FixedLenFeature")
ERRORS: dict[str, tuple] = {
    # FixedLenFeature
    "fixed_shape3_scalar_default_broadcast": (SPEC_ERROR, ("f",), None, None),  # the first of f, i, s
    "fixed_shape3_wrong_size_default": (SPEC_ERROR, ("i",), None, None),
    "fixed_missing_no_default": (D, ("f",), 0, None),
    "fixed_missing_no_default_batch": (D, ("i",), 2, None),
    **{f"fixed_wrong_count_{dt}_{how}_batch": (D, ("x",), 1, None)
       for dt in ("float32", "int64", "string") for how in ("few", "many")},
    **{f"fixed_wrong_count_{dt}_{how}_single": (D, ("x",), 0, None)
       for dt in ("float32", "int64", "string") for how in ("few", "many")},
    "fixed_wrong_count_scalar_batch": (D, ("s",), 0, None),
    "fixed_wrong_count_with_default_batch": (D, ("i",), 1, None),
    "fixed_empty_list_with_default": (D, ("f",), 0, None),
    "fixed_empty_list_with_default_batch": (D, ("i",), 1, None),
    "fixed_empty_list_no_default": (D, ("s",), 0, None),
    "fixed_wrong_dtype_float_for_int64": (D, ("i",), 0, None),
    "fixed_wrong_dtype_bytes_for_float_batch": (D, ("f",), 1, None),
    "fixed_wrong_dtype_int_for_string_with_default_batch": (D, ("s",), 0, None),
    "fixed_shape_none": (SPEC_ERROR, (FIXED_SPEC,), None, None),
    "fixed_shape_none_inner": (SPEC_ERROR, (FIXED_SPEC,), None, None),
    "fixed_kindless_feature_no_default": (D, ("f",), 0, None),
    "fixed_shape0_missing": (D, ("f",), 0, None),
    "fixed_unparseable_record_batch": (D, (), 1, None),  # a broken record: no feature key to name
    # VarLenFeature
    "varlen_wrong_dtype": (D, ("i",), 0, None),
    "varlen_wrong_dtype_batch": (D, ("s",), 2, None),
    # SparseFeature (TF raises at graph-building time on the batch totals; we check per example)
    "sparse_mismatched_lengths": (D, ("sp",), 0, None),
    "sparse_mismatched_lengths_second": (D, ("sp",), 1, None),
    "sparse_mismatched_lengths_single": (D, ("sp",), 0, None),
    "sparse_index_only": (D, ("sp",), 0, None),
    "sparse_index_wrong_dtype": (D, ("ix",), 0, None),
    # RaggedFeature
    "ragged_UniformRowLength_not_divisible_batch": (D, ("r",), 0, None),
    "ragged_UniformRowLength_not_divisible_single": (D, ("r",), 0, None),
    "ragged_bad_row_lengths_sum_single_validate": (D, ("r", "rl"), 0, None),
    "ragged_bad_row_lengths_sum_batch_validate": (D, ("r", "rl"), 0, None),
    "ragged_bad_row_splits_start_single_validate": (D, ("r", "rs"), 0, None),
    "ragged_bad_value_rowids_single_validate": (D, ("r", "rid"), 0, None),
    "ragged_bad_value_rowids_batch_validate": (D, ("r", "rid"), 0, None),
    "ragged_partition_wrong_dtype": (D, ("rl",), 0, None),
    "ragged_values_wrong_dtype": (D, ("v",), 0, None),
    "ragged_partition_missing_validate": (D, ("r", "rl"), 0, None),
    # FixedLenSequenceFeature in Examples
    "fls_allow_missing_false": (SPEC_ERROR, ("i",), None, None),
    "fls_count_not_divisible": (D, ("f",), 1, None),
    "fls_default_nonscalar": (SPEC_ERROR, ("i",), None, None),
    "fls_wrong_dtype": (D, ("i",), 0, None),
    # SequenceExamples. TF's "Index" in feature-list errors is the step.
    "seq_single_fls_default_rejected": (SPEC_ERROR, ("nope2",), None, None),
    "seq_single_missing_no_allow": (D, ("nope",), 0, None),
    # TF checks only the total (5 values, shape [2]); we check each step (intentional difference 4): step 1
    "seq_single_not_divisible": (D, ("f",), 0, 1),
    "seq_single_step_empty_scalar": (D, ("f",), 0, 1),
    "seq_single_wrong_dtype": (D, ("f",), 0, 0),
    "seq_single_wrong_dtype_varlen": (D, ("s",), 0, 0),
    "seq_single_context_missing_no_default": (D, ("nope",), 0, None),
    "seq_single_context_wrong_dtype": (D, ("len",), 0, None),
    "seq_single_both_null": (SPEC_ERROR, (("context_features",), ("sequence_features",)), None, None),
    "seq_batch_fls_default_rejected": (SPEC_ERROR, ("tok",), None, None),
    "seq_batch_missing_no_allow": (D, ("s",), 2, None),
    "seq_batch_context_missing_no_default": (D, ("n",), 1, None),
    "seq_batch_not_divisible": (D, ("f2",), 3, 1),
    "seq_batch_wrong_dtype": (D, ("tok",), 3, 1),
    "seq_batch_context_wrong_dtype": (D, ("w",), 0, None),
}


# Golden-encoded TENSORs, for the outputs we assert where TF has none (it raised).
def dense(dtype: str, shape: list, values: list) -> dict:
    return {"type": "dense", "dtype": dtype, "shape": shape, "values": values}


def sparse(dtype: str, indices: list, values: list, dense_shape: list) -> dict:
    return {"type": "sparse", "dtype": dtype, "indices": indices, "values": values, "dense_shape": dense_shape}


def ragged(dtype: str, as_list: list, nested_row_splits: list, splits_dtype: str = "int32") -> dict:
    flat = leaves(as_list, len(nested_row_splits))
    return {"type": "ragged", "dtype": dtype, "as_list": as_list, "nested_row_splits": nested_row_splits,
            "flat_values": flat, "flat_values_shape": [len(flat)], "row_splits_dtype": splits_dtype,
            "shape": [len(as_list)] + [None] * len(nested_row_splits)}


def error(exc_type: Any, names: tuple, example: int | None, step: int | None = None) -> tuple:
    return ("error", exc_type, names, example, step)


def expect(output: dict) -> tuple:
    return ("expected", output)


TAGS = [b"a".hex(), b"b".hex(), b"\xff\x00\xfe".hex()]  # the 'tags' context feature of the sequence cases

# Cases where tfr_torch intentionally differs from TensorFlow: ("error", exc type, names, example, step) where
# we raise, or ("expected", OUTPUT in the golden encoding) where we return values and TF raised.
OVERRIDES: dict[str, tuple] = {
    # Difference 1: ragged partitions are always validated. With validate=False TF returns inconsistent
    # ragged tensors here (row lengths summing to 5 over 6 values; a missing RowLengths key with values present:
    # zero rows holding 2 values); with validate=True, batched RowSplits [1, 2, 3] not starting at 0 pass
    # unchecked in TF (it keeps splits[1:]) and give [[[1, 2], [3]]].
    "ragged_bad_row_lengths_sum_single_novalidate": error(D, ("r", "rl"), 0),
    "ragged_bad_row_lengths_sum_batch_novalidate": error(D, ("r", "rl"), 0),
    "ragged_bad_row_splits_start_batch_validate": error(D, ("r", "rs"), 0),
    "ragged_partition_missing": error(D, ("r", "rl"), 0),
    "ragged_partition_missing_single": error(D, ("r", "rl"), 0),
    # Difference 2: SparseFeature indices outside [0, size) are errors (TF keeps index 12 / -1 with size 10), and
    # index/value counts must agree per example (TF pairs example 0's second index with example 1's value).
    "sparse_index_out_of_range": error(D, ("sp", "ix"), 0),
    "sparse_index_negative": error(D, ("sp", "ix"), 0),
    "sparse_mismatched_equal_totals": error(D, ("sp",), 0),
    # Difference 3: tfr_torch rejects only specs that read one wire key as different kinds (float / int64 /
    # bytes); TF also rejects these same-kind overlaps. We return each feature's correct value.
    "spec_fixed_and_ragged_same_key": expect({
        "a": dense("int64", [1], [1]),
        "r": ragged("int64", [[1]], [[0, 1]])}),
    "spec_varlen_and_ragged_same_key": expect({
        "a": sparse("int64", [[0, 0]], [1], [1, 1]),
        "r": ragged("int64", [[1]], [[0, 1]])}),
    "spec_fixed_and_varlen_value_key": expect({
        "a": dense("int64", [1], [1]),
        "sp": sparse("int64", [[0, 0]], [1], [1, 10])}),
    # (one ragged dimension: both come back as nested tensors, whose offsets are int64 whatever the spec's
    # row_splits_dtype, so the int32/int64 conflict TF rejects cannot arise)
    "spec_ragged_shared_value_key_splits_dtype_conflict": expect({
        "r": ragged("int64", [[1]], [[0, 1]]),
        "r64": ragged("int64", [[1]], [[0, 1]], "int64")}),
    "seq_single_context_varlen_ragged_same_key": expect({
        "context": {"tags": sparse("string", [[0], [1], [2]], TAGS, [3]),
                    "tags_r": dense("string", [3], TAGS)},  # no partitions in a single form: dense, as TF
        "feature_lists": {}}),
    "seq_batch_context_dense_ragged_same_key": expect({
        "context": {"n": dense("int64", [3], [3, -1, 0]),
                    "nr": ragged("int64", [[3], [], [0]], [[0, 1, 1, 2]])},
        "feature_lists": {}, "lengths": {}}),
}


# ------------------------------------------------------------------------------------------------ the test


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_parse_matches_tensorflow(case, batch_path):
    name = case["name"]
    override = OVERRIDES.get(name)
    if (override is not None and override[0] == "error") or (override is None and "error" in case):
        exc_type, names, example, step = override[1:] if override is not None else ERRORS[name]
        with pytest.raises(Exception) as info:
            run_case(case)
        check_error(case, info.value, exc_type, names, example, step)
        return
    expected = override[1] if override is not None else case["expected"]
    got = run_case(case)
    check_output(case, expected, got)


def test_golden_file_matches_manifest():
    manifest = json.loads((CASES_PATH.parent / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["files"]["cases.json"]
    assert hashlib.sha256(CASES_PATH.read_bytes()).hexdigest() == entry["sha256"]
    assert len(CASES) == entry["cases"]


def test_every_error_case_is_classified():
    """Every case TF raised on is either in ERRORS or overridden, so a regenerated golden file is noticed."""
    missing = [c["name"] for c in CASES if "error" in c and c["name"] not in OVERRIDES and c["name"] not in ERRORS]
    assert not missing
    stale = [n for n in list(ERRORS) + list(OVERRIDES) if n not in CASES_BY_NAME]
    assert not stale
    # an ERRORS entry is only for a case TF raised on (else the test would silently skip TF's values)
    assert not [n for n in ERRORS if "error" not in CASES_BY_NAME[n]]
    assert not set(ERRORS) & set(OVERRIDES)
