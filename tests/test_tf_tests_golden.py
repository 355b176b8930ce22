"""TensorFlow's own tests of its parsing ops, decode_raw, decode_json_example, parse_tensor and TFRecord files, run on
tfr_torch against what TensorFlow 2.21 gave (tests/data/golden/tf_tests/cases.json, written by
tests/data/make_golden_tf_tests.py, which re-expresses each TF test's inputs and records TF's outputs or errors).

Every case runs on both backends. Values are compared exactly in the goldens' encoding (floats by bit pattern).
Where TF raised, tfr_torch must raise the corresponding exception (DecodeError for data, ValueError/TypeError for
specs and arguments, TruncatedRecordError for a cut file) with the exact message in ERRORS (tfr_torch's own
messages: TF's name the example by "Name: ..., Index: i", ours by "example i"; they are not meant to be equal).

TF test methods left out (none of them parses data tfr_torch could parse):
- parsing_ops_test: testRawParseExampleRejectsZeroVariableDenseDimension,
  testRawParseSingleExampleRejectsZeroVariableDenseDimension,
  testRawParseSequenceExampleRejectsZeroFeatureListDimension,
  testRawParseSingleSequenceExampleRejectsZeroFeatureListDimension: they call the raw ops (gen_parsing_ops) with
  hand-made attributes; tfr_torch has no raw-op layer (a spec of shape [0] is the public form, covered by
  testFixedLenSequenceFeatureZeroDimDoesNotCrash and testFixedLenSequenceFeatureInvalidShapes).
- parsing_ops_test: testCreateSequenceExample builds a proto and parses nothing.
- decode_raw_op_test: testShapeInference is graph-mode static shape inference.
- tf_record_test: TFRecordWriterCloseAndFlush*.testWriteAndLeaveOpen checks that a writer never closed does not
  crash the interpreter (nothing to compare); the shape checks in every _test helper (graph-mode shapes) are
  replaced by the exact shapes of the eager results.

Where tfr_torch deliberately differs from TensorFlow (OVERRIDES: what we assert instead):
- FixedLenSequenceFeature of shape [0], and a malformed variant TensorProto: TF 2.21 kills the process (SIGFPE,
  SIGSEGV; fixed in later TF, which is why TF has these tests, and where the spec is refused when it is built).
  tfr_torch takes the spec: an absent feature list gives an empty [B, 0, 0] tensor, a missing required one the
  usual DecodeError, values where a step holds none a DecodeError; a variant TensorProto is a DecodeError.
- parse_single_example of a record whose FixedLenFeature has the wrong number of values: TF's single-example op
  says "Can't parse serialized Example"; tfr_torch names the key, the counts and the shape as for a batch.
- decode_raw's fixed_length not a multiple of the dtype's size is a bad argument here (ValueError), a data error
  (InvalidArgumentError) in TF.
- parse_tensor of a vector of records (TF: "Expected `serialized` to be a scalar"): a TypeError naming the type.
- TFRecordWriter after close: TF ignores a write after close and raises FailedPreconditionError on flush;
  tfr_torch raises ValueError for both (a write that silently goes nowhere loses data).
- decode_json_example: stricter than TF's C++ JSON reader where that reader accepts what protobuf's JSON mapping
  does not define: a feature given as null, a field named twice in one object, a bare value or nested lists for
  a repeated field, trailing commas, "0x10" as an int64, "nan" in lower case (DecodeError each). Subnormal floats
  are kept (TF's kernels flush them to zero: 1e-40 becomes 0.0 there).
- The parse_example family: see tests/test_parse_golden.py's OVERRIDES (always-validated ragged partitions,
  SparseFeature indices in [0, size), per-step FixedLenSequenceFeature counts, fewer spec conflicts); here:
  a ragged feature of a SequenceExample whose values and partitions disagree raises DecodeError in the single
  form too (TF's single form fails on a shape broadcast); testSerializedContainingMisalignedRaggedFeatureRowLengths
  (row lengths [5] over 0 values, then [] over 5) raises DecodeError for example 0, as TF's test expects, where
  TF 2.21 checks only the batch's totals and returns a misaligned ragged tensor; testSerializedContainingSparse-
  FeatureReuse's index 10 in a SparseFeature of size 7 is an error here (TF keeps it).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import test_parse_golden as pg
import tfr_torch
from golden_util import tensor_values

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core

CASES_PATH = Path(__file__).parent / "data" / "golden" / "tf_tests" / "cases.json"
CASES = json.loads(CASES_PATH.read_text(encoding="utf-8"))
CASES_BY_NAME = {c["name"]: c for c in CASES}
PARSE_APIS = ("parse_example", "parse_single_example", "parse_sequence_example", "parse_single_sequence_example")


# ----------------------------------------------------------------------------------------------- running


def run_parse(case: dict) -> Any:
    names = case.get("example_names")
    if names is None:
        return pg.run_case(case)
    records = [bytes.fromhex(h) for h in case["records"]]
    api = case["api"]
    if api == "parse_example":
        return tfr_torch.parse_example(records, pg.build_spec(case["features"]), example_names=names)
    if api == "parse_single_example":
        return tfr_torch.parse_single_example(records[0], pg.build_spec(case["features"]), example_names=names)
    if api == "parse_sequence_example":
        ctx, fl, lengths = tfr_torch.parse_sequence_example(
            records, pg.build_spec(case["context_features"]), pg.build_spec(case["sequence_features"]),
            example_names=names)
        return {"context": ctx, "feature_lists": fl, "lengths": lengths}
    ctx, fl = tfr_torch.parse_single_sequence_example(
        records[0], pg.build_spec(case["context_features"]), pg.build_spec(case["sequence_features"]),
        example_name=names)
    return {"context": ctx, "feature_lists": fl}


def enc_tensor(t: Any) -> dict:
    """A torch tensor (or nested lists of bytes) in the goldens' {"dtype", "shape", "values"} encoding."""
    assert isinstance(t, torch.Tensor), f"expected a tensor, got {type(t).__name__}"
    dtype = str(t.dtype).removeprefix("torch.")
    return {"dtype": dtype, "shape": list(t.shape), "values": tensor_values(t, dtype)}


def run_raw(case: dict) -> dict:
    data = [bytes.fromhex(h) for h in case["inputs"]] if "inputs" in case else bytes.fromhex(case["input"])
    return enc_tensor(tfr_torch.decode_raw(data, case["dtype"], little_endian=case["little_endian"],
                                           fixed_length=case["fixed_length"]))


def flat_strings(value: Any) -> tuple[list[int], list[str]]:
    """Nested lists of bytes -> (shape, hex values row-major); checks the lists are rectangular."""
    if isinstance(value, bytes):
        return [], [value.hex()]
    assert isinstance(value, list), f"expected bytes or a list, got {type(value).__name__}"
    parts = [flat_strings(v) for v in value]
    inner = parts[0][0] if parts else []
    assert all(p[0] == inner for p in parts), "ragged result"
    return [len(value), *inner], [h for p in parts for h in p[1]]


def run_json(case: dict) -> dict:
    out = tfr_torch.decode_json_example(case["input"])
    shape, values = flat_strings(out)
    if not values and isinstance(case["input"], list):  # [[], [], []]: the shape of the empty lists
        shape = list(np.asarray(case["input"], dtype=object).shape)
    return {"shape": shape, "values": values}


def run_tensor(case: dict) -> dict:
    if case["api"] == "serialize_tensor":
        dtype = np.dtype(case["dtype"])
        bits = {"float32": np.uint32}.get(case["dtype"], dtype)
        array = np.asarray(case["values"], dtype=bits).view(dtype).reshape(case["shape"])
        return {"serialized": tfr_torch.serialize_tensor(torch.from_numpy(array)).hex()}
    data = bytes.fromhex(case["record"]) if "record" in case else [bytes.fromhex(h) for h in case["records"]]
    return enc_tensor(tfr_torch.parse_tensor(data, case["out_type"]))


COMPRESSION = {"": None, "ZLIB": "zlib", "GZIP": "gzip"}


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as g:
        g.write(data)
    return buf.getvalue()


def recipe_record(recipe: dict) -> bytes:
    return bytes.fromhex(recipe["text"]) * recipe["repeat"]


def write_file(path: Path, records: list[bytes], compression: str) -> bytes:
    with tfr_torch.TFRecordWriter(str(path), compression=COMPRESSION[compression]) as writer:
        for r in records:
            writer.write(r)
    return path.read_bytes()


def run_record(case: dict, tmp_path: Path) -> dict:
    comp = case["compression"]
    if case["api"] == "tf_record_write":
        records = ([recipe_record(case["record_recipe"])] if "record_recipe" in case
                   else [bytes.fromhex(h) for h in case["records"]])
        data = write_file(tmp_path / "w.tfrecord", records, comp)
        assert list(tfr_torch.read_records(str(tmp_path / "w.tfrecord"), compression=COMPRESSION[comp])) == records
        if "file_sha256" in case["expected"]:
            return {"file_sha256": hashlib.sha256(data).hexdigest(), "file_size": len(data)}
        return {"file": data.hex()}
    if case["api"] == "tf_record_read":
        if "file_recipe" in case:
            recipe = case["file_recipe"]
            plain = write_file(tmp_path / "plain.tfrecord", [recipe_record(recipe)], "")
            data = {"zlib": zlib.compress, "gzip": gzip_bytes, "none": lambda b: b}[recipe["wrap"]](plain)
        else:
            data = bytes.fromhex(case["file"])
        path = tmp_path / "r.tfrecord"
        path.write_bytes(data)
        records = list(tfr_torch.read_records(str(path), compression=COMPRESSION[comp]))
        if "records_sha256" in case["expected"]:
            return {"records_sha256": [hashlib.sha256(r).hexdigest() for r in records],
                    "records_size": [len(r) for r in records]}
        return {"records": [r.hex() for r in records]}
    path = tmp_path / "ops.tfrecord"
    writer = tfr_torch.TFRecordWriter(str(path), compression=COMPRESSION[comp])
    outcomes: list[str | None] = []
    for op in case["ops"]:
        try:
            if op[0] == "write":
                writer.write(bytes.fromhex(op[1]))
            else:
                getattr(writer, op[0])()
            outcomes.append(None)
        except ValueError as e:
            outcomes.append(f"ValueError: {e}".replace(str(path), "PATH"))
    writer.close()
    return {"outcomes": outcomes, "file": path.read_bytes().hex()}


def run(case: dict, tmp_path: Path) -> Any:
    api = case["api"]
    if api in PARSE_APIS:
        return run_parse(case)
    if api == "decode_raw":
        return run_raw(case)
    if api == "decode_json_example":
        return run_json(case)
    if api in ("parse_tensor", "serialize_tensor"):
        return run_tensor(case)
    return run_record(case, tmp_path)


# ----------------------------------------------------------------------------------- expected differences

D, V, T, TR = tfr_torch.DecodeError, ValueError, TypeError, tfr_torch.TruncatedRecordError

# (exception type, exact message) for each case where TF raised (or crashed), and where we raise and TF returned
# values: the SparseFeature index 10 with size 7 of testSerializedContainingSparseFeatureReuse (TF keeps it; an
# index outside [0, size) is an error here, as in tests/test_parse_golden.py), the misaligned row lengths of
# testSerializedContainingMisalignedRaggedFeatureRowLengths (TF 2.21 checks only the batch's totals), and the
# decode_json_example inputs only TF's C++ JSON reader takes (see the docstring). Data errors are DecodeError; spec
# and argument errors ValueError/TypeError where TF raises ValueError at graph building or InvalidArgumentError
# about a default_value's size; a cut file TruncatedRecordError ({path}: the file).

def _json_error(text: str) -> str:
    """What this Python's json module says of `text`."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} is valid JSON")

ERRORS: dict[str, tuple[type, str]] = {
    'tf:parsing_ops_test:ParseExampleTest.testEmptySerializedWithoutDefaultsShouldFail#1':
        (D, "feature 'c' in example 0 (in1) is required but missing (FixedLenFeature with shape [2], "
         'float, and no default_value)'),
    'tf:parsing_ops_test:ParseExampleTest.testEmptySerializedWithoutDefaultsShouldFail#2':
        (D, "feature 'c' in example 0 (in1) is required but missing (FixedLenFeature with shape [2], "
         'float, and no default_value)'),
    'tf:parsing_ops_test:ParseExampleTest.testDenseNotMatchingShapeShouldFail':
        (D, "feature 'a' in example 1 (failing) holds 2 float values, expected 3 (shape [1, 3])"),
    'tf:parsing_ops_test:ParseExampleTest.testDenseDefaultNoShapeShouldFail':
        (T, 'FixedLenFeature: shape must be a sequence of ints, got None'),
    'tf:parsing_ops_test:ParseExampleTest.testSerializedContainingSparseFeatureReuse':
        (D, "feature 'sp2' in example 0 has index 10 in 'idx', outside [0, 7)"),
    'tf:parsing_ops_test:ParseExampleTest.testSerializedContainingVarLenDense#3':
        (D, "feature 'b' in example 2 (in3) holds 1 bytes values, not a multiple of 2 "
         '(FixedLenSequenceFeature shape [2, 1, 1])'),
    'tf:parsing_ops_test:ParseExampleTest.testSerializedContainingVarLenDense#4':
        (V, "FixedLenSequenceFeature (a scalar default_value pads rows) 'a': default_value has 0 "
         'values, expected 1 (the number of elements of its shape)'),
    'tf:parsing_ops_test:ParseExampleTest.testSerializedContainingVarLenDense#5':
        (V, 'FixedLenFeature: shape [None, 2, 1] has an unknown dimension; for variable-length values '
         'use FixedLenSequenceFeature, VarLenFeature or RaggedFeature'),
    'tf:parsing_ops_test:ParseExampleTest.testSerializedContainingVarLenDense#6':
        (V, 'FixedLenFeature: shape [1, None] has an unknown dimension; for variable-length values use '
         'FixedLenSequenceFeature, VarLenFeature or RaggedFeature'),
    'tf:parsing_ops_test:ParseExampleTest.testSerializedContainingVarLenDense#7':
        (V, "FixedLenSequenceFeature 'c': parse_example needs allow_missing=True (as in TensorFlow: "
         "'FixedLenSequenceFeature requires allow_missing to be True')"),
    'tf:parsing_ops_test:ParseExampleTest.testSerializedContainingMisalignedRaggedFeatureRowLengths':
        (D, "feature 'rt' in example 0 has an invalid partition RowLengths('rt_lengths'): a row length "
         '5 larger than the number of values (0)'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testFixedLenSequenceFeatureInvalidShapes#1':
        (D, "feature list 'a' in the example is required but missing (FixedLenSequenceFeature with "
         'allow_missing=False)'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testFixedLenSequenceFeatureInvalidShapes#2':
        (V, 'FixedLenSequenceFeature: shape dimensions must be non-negative ints, got [-1]'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithInconsistentDataFails#1':
        (D, "feature list 'a' in the example (in1), step 1 holds float values but int64 values were "
         "expected (data types don't match)"),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithInconsistentDataFails#2':
        (D, "feature list 'a' in example 0 (in1), step 1 holds float values but int64 values were "
         "expected (data types don't match)"),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongDataTypeFails#1':
        (D, "feature list 'a' in the example (in1), step 0 holds float values but int64 values were "
         "expected (data types don't match)"),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongDataTypeFails#2':
        (D, "feature list 'a' in example 0 (in1), step 0 holds float values but int64 values were "
         "expected (data types don't match)"),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongSparseDataTypeFails#1':
        (D, "feature list 'a' in the example (in1), step 2 holds float values but int64 values were "
         "expected (data types don't match)"),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongSparseDataTypeFails#2':
        (D, "feature list 'a' in example 0 (in1), step 2 holds float values but int64 values were "
         "expected (data types don't match)"),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongShapeFails#1':
        (D, "feature list 'a' in the example (in1), step 1 holds 3 int64 values, expected 2 per step "
         '(shape [2])'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongShapeFails#2':
        (D, "feature list 'a' in example 0 (in1), step 1 holds 3 int64 values, expected 2 per step "
         '(shape [2])'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongShapeFails2#1':
        (D, "feature list 'a' in the example (in1), step 0 holds 1 int64 values, expected 2 per step "
         '(shape [2])'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleListWithWrongShapeFails2#2':
        (D, "feature list 'a' in example 0 (in1), step 0 holds 1 int64 values, expected 2 per step "
         '(shape [2])'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleWithMissingFeatureListFails#1':
        (D, "feature list 'a' in the example (in1) is required but missing (FixedLenSequenceFeature "
         'with allow_missing=False)'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSequenceExampleWithMissingFeatureListFails#2':
        (D, "feature list 'a' in example 0 (in1) is required but missing (FixedLenSequenceFeature with "
         'allow_missing=False)'),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSerializedContainingMisalignedNestedRaggedFeature#1':
        (D, "feature list 'b' in the example reads feature lists with different numbers of steps "
         "('b_splits': 1, 'b_values': 2)"),
    'tf:parsing_ops_test:ParseSequenceExampleTest.testSerializedContainingMisalignedNestedRaggedFeature#2':
        (D, "feature list 'b' in example 0 reads feature lists with different numbers of steps "
         "('b_splits': 1, 'b_values': 2)"),
    'tf:parsing_ops_test:DecodeRawTest.testDecodeRawV1VariableLength':
        (D, 'decode_raw: the items of a batch must have the same length to make one tensor: item 0 has '
         '6 bytes, item 1 has 13 (pass fixed_length= to cut or pad them, or decode them one by one)'),
    'tf:parsing_ops_test:DecodeRawTest.testDecodeRawV2FallbackVariableLength':
        (D, 'decode_raw: the items of a batch must have the same length to make one tensor: item 0 has '
         '6 bytes, item 1 has 13 (pass fixed_length= to cut or pad them, or decode them one by one)'),
    'tf:parsing_ops_test:DecodeRawTest.testDecodeRawInvalidFixedLengthSize':
        (V, 'decode_raw: fixed_length must be a non-negative multiple of 4 (the size of '
         'torch.float32), got 7'),
    'tf:decode_raw_op_test:DecodeRawOpTest.testToUint8#3':
        (D, 'decode_raw: the items of a batch must have the same length to make one tensor: item 0 has '
         '5 bytes, item 1 has 6 (pass fixed_length= to cut or pad them, or decode them one by one)'),
    'tf:decode_raw_op_test:DecodeRawOpTest.testToInt16#2':
        (D, 'decode_raw: item 0: 3 bytes is not a multiple of 2 (the size of torch.int16)'),
    'tf:decode_raw_op_test:DecodeRawOpTest.testToUInt16#2':
        (D, 'decode_raw: item 0: 3 bytes is not a multiple of 2 (the size of torch.uint16)'),
    'tf:parsing_ops_test:DecodeJSONExampleTest.testInvalidSyntax':
        (D, 'decode_json_example: item 0: expected a JSON-encoded tf.train.Example: invalid JSON: '
         'Expecting property name enclosed in double quotes: line 1 column 2 (char 1)'),
    'tf:decode_json_example:float_too_large':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         'field: Failed to parse feature field: Failed to parse value field: Float value too large '
         'at Example.features.feature[a].floatList.value[0]'),
    'tf:decode_json_example:float_lowercase_nan':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         "field: Failed to parse feature field: Failed to parse value field: Couldn't parse float "
         '"nan", use "NaN" instead at Example.features.feature[a].floatList.value[0]'),
    'tf:decode_json_example:int64_out_of_range':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         'field: Failed to parse feature field: Failed to parse value field: Value out of range: '
         '9223372036854775808'),
    'tf:decode_json_example:int64_fraction':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         "field: Failed to parse feature field: Failed to parse value field: Couldn't parse "
         'integer: 1.5 at Example.features.feature[a].int64List.value[0]'),
    'tf:decode_json_example:int64_bool':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         'field: Failed to parse feature field: Failed to parse value field: Bool value True is not '
         'acceptable for integer field at Example.features.feature[a].int64List.value[0]'),
    'tf:decode_json_example:int64_hex_string':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         'field: Failed to parse feature field: Failed to parse value field: invalid literal for '
         "int() with base 10: '0x10'"),
    'tf:decode_json_example:bytes_base64_bad_padding':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: corrupt base64 in a '
         "bytes_list value: 'aGk=='"),
    'tf:decode_json_example:bytes_base64_bad_character':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: corrupt base64 in a '
         "bytes_list value: '!!'"),
    'tf:decode_json_example:feature_null':
        (D, "decode_json_example: expected a JSON-encoded tf.train.Example: feature 'a' is null; "
         'expected a JSON object (tensorflow.Feature)'),
    'tf:decode_json_example:feature_list_not_object':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: expected a JSON object for '
         "feature 'a', got []"),
    'tf:decode_json_example:features_list_not_object':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: expected a JSON object for '
         'tensorflow.Features, got []'),
    'tf:decode_json_example:top_level_list':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: expected a JSON object for '
         'tensorflow.Example, got []'),
    'tf:decode_json_example:unknown_field':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Message type '
         '"tensorflow.Example" has no field named "unknown" at "Example".\n Available Fields(except '
         'extensions): "[\'features\']"'),
    'tf:decode_json_example:two_kinds':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         'field: Failed to parse feature field: Message type "tensorflow.Feature" should not have '
         'multiple "kind" oneof fields at "Example.features.feature[a]"'),
    'tf:decode_json_example:duplicate_map_key':
        (D, "decode_json_example: expected a JSON-encoded tf.train.Example: the key 'a' appears twice "
         'in one object'),
    'tf:decode_json_example:duplicate_field':
        (D, "decode_json_example: expected a JSON-encoded tf.train.Example: the key 'features' appears "
         'twice in one object'),
    'tf:decode_json_example:bare_value_for_list':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         'field: Failed to parse feature field: Failed to parse value field: repeated field value '
         'must be in [] which is 1 at Example.features.feature[a].int64List'),
    'tf:decode_json_example:nested_list_for_list':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: Failed to parse features '
         'field: Failed to parse feature field: Failed to parse value field: int() argument must be '
         "a string, a bytes-like object or a real number, not 'list'"),
    'tf:decode_json_example:trailing_comma':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: invalid JSON: '
         + _json_error('{"features": {},}')),  # Python's words (3.13 names the trailing comma)
    'tf:decode_json_example:trailing_data':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: invalid JSON: Extra data: '
         'line 1 column 18 (char 17)'),
    'tf:decode_json_example:empty_string':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: invalid JSON: Expecting '
         'value: line 1 column 1 (char 0)'),
    'tf:decode_json_example:nan_literal':
        (D, 'decode_json_example: expected a JSON-encoded tf.train.Example: NaN is not JSON (protobuf '
         'spells it as the string "NaN")'),
    'tf:parsing_ops_test:ParseTensorOpTest.testTypeMismatch':
        (D, 'type mismatch: the serialized tensor is uint8, but dtype uint16 was asked for'),
    'tf:parsing_ops_test:ParseTensorOpTest.testInvalidInput#1':
        (D, 'cannot parse 5 bytes as a TensorProto: its protobuf wire format is corrupt'),
    'tf:parsing_ops_test:ParseTensorOpTest.testInvalidInput#2':
        (T, 'expected a serialized TensorProto as bytes, got list'),
    'tf:parsing_ops_test:ParseTensorVariantRegressionTest.testMalformedVariantTensorListDoesNotCrash':
        (D, 'TensorProto has dtype DT_VARIANT, which tfr_torch cannot read (expected one of float32, '
         'float64, int32, uint8, int16, int8, string, complex64, int64, bool, bfloat16, uint16, '
         'complex128, float16, uint32, uint64)'),
    'tf:parse_single_example_op_test:ParseExampleTest.testEmptySerializedWithoutDefaultsShouldFail#1':
        (D, "feature 'c' in the example is required but missing (FixedLenFeature with shape [2], "
         'float, and no default_value)'),
    'tf:parse_single_example_op_test:ParseExampleTest.testEmptySerializedWithoutDefaultsShouldFail#2':
        (D, "feature 'c' in the example is required but missing (FixedLenFeature with shape [2], "
         'float, and no default_value)'),
    'tf:parse_single_example_op_test:ParseExampleTest.testDenseNotMatchingShapeShouldFail':
        (D, "feature 'a' in the example holds 2 float values, expected 3 (shape [1, 3])"),
    'tf:parse_single_example_op_test:ParseExampleTest.testDenseDefaultNoShapeShouldFail':
        (T, 'FixedLenFeature: shape must be a sequence of ints, got None'),
    'tf:parse_single_example_op_test:ParseExampleTest.testSerializedContainingSparseFeatureReuse#1':
        (D, "feature 'sp2' in the example has index 10 in 'idx', outside [0, 7)"),
    'tf:parse_single_example_op_test:ParseExampleTest.testSerializedContainingVarLenDense#9':
        (D, "feature 'b' in the example holds 1 bytes values, not a multiple of 2 "
         '(FixedLenSequenceFeature shape [2, 1, 1])'),
    'tf:parse_single_example_op_test:ParseExampleTest.testSerializedContainingVarLenDense#10':
        (V, "FixedLenSequenceFeature (a scalar default_value pads rows) 'a': default_value has 0 "
         'values, expected 1 (the number of elements of its shape)'),
    'tf:parse_single_example_op_test:ParseExampleTest.testSerializedContainingVarLenDense#11':
        (V, 'FixedLenFeature: shape [None, 2, 1] has an unknown dimension; for variable-length values '
         'use FixedLenSequenceFeature, VarLenFeature or RaggedFeature'),
    'tf:parse_single_example_op_test:ParseExampleTest.testSerializedContainingVarLenDense#12':
        (V, 'FixedLenFeature: shape [1, None] has an unknown dimension; for variable-length values use '
         'FixedLenSequenceFeature, VarLenFeature or RaggedFeature'),
    'tf:parse_single_example_op_test:ParseExampleTest.testSerializedContainingVarLenDense#13':
        (V, "FixedLenSequenceFeature 'c': parse_example needs allow_missing=True (as in TensorFlow: "
         "'FixedLenSequenceFeature requires allow_missing to be True')"),
    'tf:parse_single_example_op_test:ParseSingleExampleTest.testExampleLongerThanSpec':
        (D, "feature 'a' in the example holds 2 bytes values, expected 1 (shape [1])"),
    'tf:tf_record_test:TFRecordIteratorTest.testBadFile':
        (TR, '{path}:0: truncated record: its header says 3 bytes of data, so 19 bytes from this '
         'offset, but the file has only 14'),

}

# Cases where tfr_torch deliberately differs from what TF returned: what we return instead, in the golden
# encoding (an "error" entry in ERRORS where we raise and TF did not).
OVERRIDES: dict[str, Any] = {
    # TF's kernels run with subnormal floats flushed to zero (TF writes 0.0 for 1e-40); we keep the value
    "tf:decode_json_example:float_subnormal": {"shape": [], "values": ["0a0e0a0c0a0161120712050dc2160100"]},
    # TF 2.21 dies of SIGFPE (newer TF rejects the spec); an absent feature list of shape [0] is empty here
    "tf:parsing_ops_test:ParseSequenceExampleTest.testFixedLenSequenceFeatureZeroDimDoesNotCrash": {
        "context": {}, "feature_lists": {"a": pg.dense("float32", [1, 0, 0], [])},
        "lengths": {"a": pg.dense("int64", [1], [0])}},
}

# TFRecordWriter after close: TF raises FailedPreconditionError, tfr_torch ValueError with these messages.
WRITER_CLOSED = {"write": "ValueError: write to closed TFRecordWriter (PATH)",
                 "flush": "ValueError: flush of closed TFRecordWriter (PATH)"}


# ------------------------------------------------------------------------------------------------ the test


def check_parse_output(case: dict, expected: dict, got: Any) -> None:
    pg.check_output(case, expected, got)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_tensorflow(case, tmp_path):
    name = case["name"]
    if name in ERRORS:
        exc_type, message = ERRORS[name]
        with pytest.raises(Exception) as info:
            run(case, tmp_path)
        assert isinstance(info.value, exc_type), f"raised {type(info.value).__name__}: {info.value}"
        assert str(info.value) == message.replace("{path}", str(tmp_path / "r.tfrecord"))
        return
    assert "error" not in case or name in OVERRIDES, f"TF raised {case['error']['type']}: {case['error']['core']}"
    expected = OVERRIDES[name] if name in OVERRIDES else case["expected"]
    if case["api"] == "tf_record_writer_ops":
        assert all(o in (None, "FailedPreconditionError") for o in expected["outcomes"])
        expected = dict(expected, outcomes=[None if o is None else WRITER_CLOSED[op[0]]
                                            for o, op in zip(expected["outcomes"], case["ops"])])
    got = run(case, tmp_path)
    if case["api"] in PARSE_APIS:
        check_parse_output(case, expected, got)
    else:
        assert got == expected


def test_golden_file_matches_manifest():
    manifest = json.loads((CASES_PATH.parent / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["files"]["cases.json"]
    assert hashlib.sha256(CASES_PATH.read_bytes()).hexdigest() == entry["sha256"]
    assert len(CASES) == entry["cases"]


def test_every_difference_is_for_a_case():
    assert not [n for n in list(ERRORS) + list(OVERRIDES) if n not in CASES_BY_NAME]
    assert not set(ERRORS) & set(OVERRIDES)
