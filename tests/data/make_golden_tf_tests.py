"""Generate golden outputs of TensorFlow's own tests of its parsing, decode_raw, decode_json_example,
parse_tensor and TFRecord ops, under tests/data/golden/tf_tests/.

Run by hand, from the repository root, with a Python that has real TensorFlow (tensorflow-cpu 2.21 was used) and
numpy:

    /work/tfvenv/bin/python tests/data/make_golden_tf_tests.py

The cases re-express, one by one, the inputs and specs of these TensorFlow test files (no TensorFlow test code
is copied; each case's inputs are rebuilt here and TensorFlow 2.21 is run on them; what it returned or raised is
the golden output, not the expectation written in TF's test):

  tensorflow/python/kernel_tests/io_ops/parsing_ops_test.py        (ParseExampleTest, ParseSingleExampleTest,
      ParseSequenceExampleTest, DecodeRawTest, DecodeJSONExampleTest, ParseTensorOpTest,
      ParseTensorVariantRegressionTest)
  tensorflow/python/kernel_tests/io_ops/parse_single_example_op_test.py   (ParseExampleTest, ParseSingleExampleTest)
  tensorflow/python/kernel_tests/decode_raw_op_test.py             (DecodeRawOpTest)
  tensorflow/python/lib/io/tf_record_test.py                       (the writer / iterator tests)

A case is named "tf:<file>:<Class.method>" with "#<n>" for the n-th call of one test method (TF's tests loop
over inputs or call their helper several times). Random inputs of TF's tests (np.random.rand defaults, the
larger-batch test) come from a seeded generator here. The test methods left out, and why, are listed in
tests/test_tf_tests_golden.py's docstring.

The script never imports tfr_torch. It deletes and rewrites ``tests/data/golden/tf_tests/`` and is
deterministic (protos serialized with ``deterministic=True``; gzip files with mtime 0; TF eager on CPU); it
runs every case twice and checks that the outputs agree.

Files written: ``cases.json`` (a list of cases) and ``manifest.json`` (sha256, sizes, versions).

Every case has "name", "source" (the TF file), "api" and either "expected" (what TF returned) or "error"
({"type", "message", "core"} as in make_golden_parse.py). By api:

* "parse_example", "parse_single_example", "parse_sequence_example", "parse_single_sequence_example": exactly the
  schema of tests/data/golden/parse/cases.json (make_golden_parse.py's docstring), plus "example_names": a list
  of names (batch forms) / one name (single forms) / null, passed to TF as TF's test passed them.
* "decode_raw": {"inputs": [hex, ...] (a list) | "input": hex (a scalar), "dtype": TF dtype name,
  "little_endian": bool, "fixed_length": int | null}; expected {"dtype", "shape", "values"} with values flat
  row-major in make_golden.py's tensor encoding (float16 as uint16 bits, float32/64 as bit patterns, complex as
  [real_bits, imag_bits], bool as true/false).
* "decode_json_example": {"input": a JSON string or nested lists of them}; expected {"shape", "values":
  [hex of each serialized Example, row-major]}.
* "parse_tensor": {"record": hex (or "records": [hex, ...], a vector, as TF's shape-check case), "out_type"};
  expected {"dtype", "shape", "values"} as for decode_raw.
* "serialize_tensor": {"dtype", "shape", "values"} (the input array, value-encoded); expected {"serialized": hex}.
* "tf_record_write": {"compression": "" | "ZLIB" | "GZIP", "records": [hex, ...] | "record_recipe"}; expected
  {"file": hex} or, for large files, {"file_sha256", "file_size"}.
* "tf_record_read": {"compression", "file": hex | "file_recipe"}; expected {"records": [hex, ...]} or
  {"records_sha256": [...], "records_size": [...]}; or "error" (TF's DataLossError, ...).
* "tf_record_writer_ops": {"compression", "ops": [["write", hex] | ["flush"] | ["close"], ...]}; expected
  {"outcomes": [null | TF's exception class name, one per op], "file": hex of the file after the ops}.

A "record_recipe" / "file_recipe" is {"text": hex, "repeat": n} (a record of `text` repeated n times; TF's
5 MB records) with, for files, "wrap": "zlib" | "gzip" | "none": the uncompressed TFRecord file of that one
record, compressed by Python's zlib.compress / gzip (mtime 0).
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import zlib
from importlib import metadata

import numpy as np
import tensorflow as tf
from google.protobuf import json_format

import make_golden_parse as mgp  # the spec / output encodings and proto helpers (same folder)
from make_golden_parse import P, URL, Fixed, FixedSeq, Ragged, Sparse, VarLen, byt, ex, flist, flt, i64, seqex

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "golden", "tf_tests")

PARSING = "tensorflow/python/kernel_tests/io_ops/parsing_ops_test.py"
SINGLE = "tensorflow/python/kernel_tests/io_ops/parse_single_example_op_test.py"
RAW = "tensorflow/python/kernel_tests/decode_raw_op_test.py"
RECORD = "tensorflow/python/lib/io/tf_record_test.py"
EXTRA = "extra"  # not from a TF test: decode_json_example's edge cases, where TF's JSON reader is unusual
SHORT = {PARSING: "parsing_ops_test", SINGLE: "parse_single_example_op_test", RAW: "decode_raw_op_test",
         RECORD: "tf_record_test", EXTRA: "decode_json_example"}

RNG = np.random.default_rng(20240611)

CASES = []
COUNTS = {}


def name_of(source, method):
    base = "tf:%s:%s" % (SHORT[source], method)
    COUNTS[base] = COUNTS.get(base, 0) + 1
    return base, COUNTS[base]


def add(source, method, api, **fields):
    base, n = name_of(source, method)
    CASES.append(dict(name=base, n=n, source=source, api=api, **fields))


def finish_names():
    """'#n' only where a method gave more than one case."""
    for c in CASES:
        n = c.pop("n")
        if COUNTS[c["name"]] > 1:
            c["name"] = "%s#%d" % (c["name"], n)
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names)


def rand_bytes(shape):
    """np.random.rand(...).astype(bytes) of TF's tests, from a seeded generator: decimal strings."""
    return np.asarray(RNG.random(shape)).astype(bytes).tolist()


def rand_f32(shape):
    return RNG.random(shape).astype(np.float32)


def ser(m):
    return mgp.ser(m)


# ------------------------------------------------------------------------------------------ parse cases

def parse_case(source, method, api, records, names=None, **specs):
    records = [ser(r) for r in records]
    add(source, method, api, description="", records=[r.hex() for r in records], example_names=names, **specs)


def batch(source, method, records, features, names=None):
    parse_case(source, method, "parse_example", records, names, features=features)


def single(source, method, record, features, name=None):
    parse_case(source, method, "parse_single_example", [record], name, features=features)


def seq_batch(source, method, records, context, sequence, names=None):
    parse_case(source, method, "parse_sequence_example", records, names, context_features=context,
               sequence_features=sequence)


def seq_single(source, method, record, context, sequence, name=None):
    parse_case(source, method, "parse_single_sequence_example", [record], name, context_features=context,
               sequence_features=sequence)


def seq_both(method, record, context, sequence, name=None):
    """TF's ParseSequenceExampleTest._testBoth: the single form, then a batch of one."""
    seq_single(PARSING, method, record, context, sequence, name)
    seq_batch(PARSING, method, [record], context, sequence, None if name is None else [name])


def defaults_abc():
    return Fixed([1, 3], "int64", [0, 42, 0]), Fixed([3, 3], "string", rand_bytes((3, 3)))


def sparse_examples():
    return [ex(st_c=flt([3, 4])), ex(st_c=flt([])), ex(st_d=tf.train.Feature()),
            ex(st_c=flt([1, 2, -1]), st_d=byt([b"hi"]))]


def sparse_feature_examples():
    return [ex(val=flt([3, 4]), idx=i64([5, 10])), ex(val=flt([]), idx=i64([])), ex(val=tf.train.Feature()),
            ex(val=flt([1, 2, -1]), idx=i64([0, 9, 3]))]


def sparse_3d_examples():
    return [ex(val=flt([3, 4]), idx0=i64([5, 10]), idx1=i64([0, 2])),
            ex(val=flt([]), idx0=i64([]), idx1=i64([])), ex(val=tf.train.Feature()),
            ex(val=flt([1, 2, -1]), idx0=i64([0, 9, 3]), idx1=i64([1, 0, 2]))]


BNAME = "b*has+a:tricky_name"


def dense_examples():
    return [ex(**{"a": flt([1, 1]), BNAME: byt([b"b0_str"])}), ex(**{"a": flt([-1, -1]), BNAME: byt([b""])})]


def dense_concat_records():
    pairs = [(ex(a=flt([10, 10])), ex(**{"a": flt([1, 1]), BNAME: byt([b"b0_str"])})),
             (ex(**{BNAME: byt([b"b100"])}), ex(**{"a": flt([-1, -1]), BNAME: byt([b"b1"])}))]
    return [ser(m) + ser(n) for m, n in pairs]


def varlen_dense_examples():
    return [ex(c=i64([2])), ex(a=flt([1, 1]), b=byt([b"b0_str", b"b1_str"])),
            ex(a=flt([-1, -1, 2, 2]), b=byt([b"b1"])), ex(a=flt([]), c=i64([3]))]


def ragged_examples():
    return [ex(rt_values=flt([3, 4, 5, 6]), rt_splits=i64([0, 1, 4]), rt_lengths=i64([1, 3]), rt_starts=i64([0, 1]),
               rt_limits=i64([1, 4]), rt_rowids=i64([0, 1, 1, 1])),
            ex(rt_values=flt([]), rt_splits=i64([0]), rt_lengths=i64([]), rt_starts=i64([]), rt_limits=i64([]),
               rt_rowids=i64([])),
            ex(rt_values=tf.train.Feature(), rt_splits=i64([0]), rt_lengths=tf.train.Feature(),
               rt_starts=tf.train.Feature(), rt_limits=tf.train.Feature(), rt_rowids=tf.train.Feature()),
            ex(rt_values=flt([1, 2, -1, 8, 9, 5]), rt_splits=i64([0, 3, 3, 5, 6]), rt_lengths=i64([3, 0, 2, 1]),
               rt_starts=i64([0, 3, 3, 5]), rt_limits=i64([3, 3, 5, 6]), rt_rowids=i64([0, 0, 0, 2, 2, 3]))]


def ragged_specs():
    rv = "rt_values"
    return {"rt1": Ragged("float32", rv, [P("RowSplits", "rt_splits")]),
            "rt2": Ragged("float32", rv, [P("RowLengths", "rt_lengths")]),
            "rt3": Ragged("float32", rv, [P("RowStarts", "rt_starts")]),
            "rt4": Ragged("float32", rv, [P("RowLimits", "rt_limits")]),
            "rt5": Ragged("float32", rv, [P("ValueRowIds", "rt_rowids")]),
            "uniform1": Ragged("float32", rv, [URL(2)]),
            "uniform2": Ragged("float32", rv, [URL(2), P("RowSplits", "rt_splits")])}


def parse_example_tests(src):
    """ParseExampleTest of parsing_ops_test.py (batch forms) and of parse_single_example_op_test.py (which runs
    the same inputs one example at a time through parse_single_example)."""
    in_batch = src == PARSING

    def run(method, records, features, names=None):
        if in_batch:
            batch(src, "ParseExampleTest." + method, records, features, names)
        else:
            for r in records:
                single(src, "ParseExampleTest." + method, r, features)

    a, b = defaults_abc()
    run("testEmptySerializedWithAllDefaults", [b""] * (2 if in_batch else 1),
        {"st_a": VarLen("int64"), "a": a, "b": b, "c:has_a_tricky_name": Fixed([2], "float32", rand_f32(2).tolist())},
        [] if in_batch else None)
    a, b = defaults_abc()
    no_c = {"st_a": VarLen("int64"), "a": a, "b": b, "c": Fixed([2], "float32")}
    run("testEmptySerializedWithoutDefaultsShouldFail", [ex(c=tf.train.Feature())], no_c, ["in1"] if in_batch else None)
    run("testEmptySerializedWithoutDefaultsShouldFail", [b"", b""] if in_batch else [b""], no_c,
        ["in1", "in2"] if in_batch else None)
    run("testDenseNotMatchingShapeShouldFail",
        [ex(a=flt([1, 1, 3])), ex(a=flt([-1, -1]))] if in_batch else [ex(a=flt([-1, -1]))],
        {"a": Fixed([1, 3], "float32")}, ["passing", "failing"] if in_batch else None)
    run("testDenseDefaultNoShapeShouldFail", [ex(a=flt([1, 1, 3]))],
        {"a": {"kind": "FixedLen", "shape": None, "dtype": "float32", "default_value": None}},
        ["failing"] if in_batch else None)
    run("testSerializedContainingSparse", sparse_examples(), {"st_c": VarLen("float32"), "st_d": VarLen("string")})
    run("testSerializedContainingSparseFeature", sparse_feature_examples(),
        {"sp": Sparse(["idx"], "val", "float32", [13])})
    run("testSerializedContainingSparseFeatureReuse",
        [ex(val1=flt([3, 4]), val2=flt([5, 6]), idx=i64([5, 10])), ex(val1=flt([]), idx=i64([]))],
        {"sp1": Sparse("idx", "val1", "float32", 13), "sp2": Sparse("idx", "val2", "float32", 7, True)})
    run("testSerializedContaining3DSparseFeature", sparse_3d_examples(),
        {"sp": Sparse(["idx0", "idx1"], "val", "float32", [13, 3])})
    dense = {"a": Fixed([1, 2, 1], "float32"), BNAME: Fixed([1, 1, 1, 1], "string")}
    run("testSerializedContainingDense", dense_examples(), dense)
    run("testSerializedContainingDenseWithConcat", dense_concat_records(), dense)
    run("testSerializedContainingDenseScalar", [ex(a=flt([1])), ex()], {"a": Fixed([1], "float32", -1.0)})
    run("testSerializedContainingDenseWithDefaults", [ex(a=flt([1, 1])), ex(b=byt([b"b1"])), ex(b=tf.train.Feature())],
        {"a": Fixed([1, 2, 1], "float32", [3.0, -3.0]), "b": Fixed([1, 1, 1, 1], "string", b"tmp_str")})
    a = Fixed([1, 3], "int64", [1, 2, 3] if in_batch else [[1, 2, 3]])
    b = Fixed([3, 3], "string", rand_bytes((3, 3)))
    run("testSerializedContainingSparseAndSparseFeatureAndDenseWithNoDefault",
        [ex(c=flt([3, 4]), val=byt([b"a", b"b"]), idx=i64([0, 3])), ex(c=flt([1, 2]), val=byt([b"c"]), idx=i64([7]))],
        {"st_a": VarLen("int64"), "sp": Sparse("idx", "val", "string", 13), "a": a, "b": b, "c": Fixed([2], "float32")},
        ["in1", "in2"] if in_batch else None)
    run("testSerializedContainingSparseAndSparseFeatureWithReuse",
        [ex(val=byt([b"a", b"b"]), idx=i64([0, 3])), ex(val=byt([b"c", b"d"]), idx=i64([7, 1]))],
        {"idx": VarLen("int64"), "sp": Sparse(["idx"], "val", "string", [13])}, ["in1", "in2"] if in_batch else None)
    if in_batch:
        for size in (1, 10, 20, 100, 256):  # _testSerializedContainingVarLenDenseLargerBatch, seeded here
            records = []
            for i in range(size):
                strs = [b"foo%d" % i, b"bar%d" % i]
                if i and RNG.random() < 0.25:
                    strs.pop()
                if i and RNG.random() < 0.25 and strs:
                    strs.pop()
                records.append(ex(a=i64([i]), b=byt(strs)))
            batch(src, "ParseExampleTest.testSerializedContainingVarLenDenseLargerBatch", records,
                  {"a": FixedSeq([], "int64", True, -1), "b": FixedSeq([], "string", True, b"default")})
    names = ["in1", "in2", "in3", "in4"] if in_batch else None
    recs = varlen_dense_examples()
    full = {"a": FixedSeq([2, 1], "float32", True), "b": FixedSeq([1, 1, 1], "string", True),
            "c": FixedSeq([], "int64", True), "d": FixedSeq([], "string", True)}
    method = "ParseExampleTest.testSerializedContainingVarLenDense"
    run("testSerializedContainingVarLenDense", recs, full, names)
    run("testSerializedContainingVarLenDense", recs, dict(full, a=FixedSeq([2, 1], "float32", True, -2.0)), names)
    bad_b = {"a": FixedSeq([2, 1], "float32", True), "b": FixedSeq([2, 1, 1], "string", True)}
    if in_batch:
        batch(src, method, recs, bad_b, names)
    else:
        single(src, method, recs[2], bad_b)
    empty = recs if in_batch else [b""]
    run("testSerializedContainingVarLenDense", empty,
        {"a": FixedSeq([2, 1], "float32", True, []), "b": FixedSeq([2, 1, 1], "string", True)}, names)
    run("testSerializedContainingVarLenDense", empty,
        {"a": Fixed([None, 2, 1], "float32"), "b": FixedSeq([2, 1, 1], "string", True)}, names)
    run("testSerializedContainingVarLenDense", empty, {"c": Fixed([1, None], "int64", [[1]])}, names)
    run("testSerializedContainingVarLenDense", empty, dict(full, c=FixedSeq([], "int64", False)), names)
    if not in_batch:
        return
    rt_recs = [ex(rt_c=flt([3, 4])), ex(rt_c=flt([])), ex(rt_d=tf.train.Feature()),
               ex(rt_c=flt([1, 2, -1]), rt_d=byt([b"hi"]))]
    rt_spec = {"rt_c": Ragged("float32"), "rt_d": Ragged("string", row_splits_dtype="int64")}
    batch(src, "ParseExampleTest.testSerializedContainingRaggedFeatureWithNoPartitions", rt_recs, rt_spec)
    batch(src, "ParseExampleTest.testSerializedContainingRaggedFeatureWithNoPartitions", rt_recs * 64, rt_spec)
    batch(src, "ParseExampleTest.testSerializedContainingRaggedFeature", ragged_examples(), ragged_specs())
    batch(src, "ParseExampleTest.testSerializedContainingNestedRaggedFeature",
          [ex(rt_values=flt([1, 2, 3, 4, 5, 6, 7]), lengths_axis2=i64([1, 2, 0, 1]), lengths_axis3=i64([1, 2, 1, 3]),
              splits_axis3=i64([0, 1, 3, 4, 7])),
           ex(rt_values=flt([1, 2, 3, 4, 5, 6, 7, 8]), lengths_axis2=i64([2, 3]), lengths_axis3=i64([3, 1, 1, 1, 2]),
              splits_axis3=i64([0, 3, 4, 5, 6, 8]))],
          {"rt1": Ragged("float32", "rt_values", [URL(2), P("RowLengths", "lengths_axis2"),
                                                  P("RowSplits", "splits_axis3")], "int64")})
    batch(src, "ParseExampleTest.testSerializedContainingMisalignedRaggedFeatureRowLengths",
          [ex(rt_values=flt([]), rt_lengths=i64([5])), ex(rt_values=flt([1, 2, 3, 4, 5]), rt_lengths=i64([]))],
          {"rt": Ragged("float32", "rt_values", [P("RowLengths", "rt_lengths")], validate=True)})


def parse_single_example_tests(src):
    a = Fixed([1, 3], "int64", [1, 2, 3])
    b = Fixed([3, 3], "string", rand_bytes((3, 3)))
    record = ex(c=flt([3, 4]), d=flt([0.0, 1.0]), val=byt([b"a", b"b"]), idx=i64([0, 3]), st_a=flt([3.0, 4.0]))
    spec = {"st_a": VarLen("float32"), "sp": Sparse(["idx"], "val", "string", [13]), "a": a, "b": b,
            "c": Fixed([2], "float32"), "d": FixedSeq([], "float32", True)}
    method = "ParseSingleExampleTest.testSingleExampleWithSparseAndSparseFeatureAndDense"
    if src == PARSING:
        single(src, method, record, spec, "in1")
    single(src, method, record, spec)
    if src == SINGLE:
        single(src, "ParseSingleExampleTest.testExampleLongerThanSpec", ex(a=byt([b"a", b"b"])),
               {"a": Fixed([1], "string")})
        return
    record = ex(c=flt([3, 4]), d=flt([0.0, 1.0]), val=byt([b"a", b"b"]), idx=i64([0, 3]), st_a=flt([3.0, 4.0]),
                rt_1d=flt([3.0, 4.0]), rt_values=flt([5, 6, 7]), rt_splits=i64([0, 1, 1, 3]),
                rt_lengths=i64([1, 0, 2]), rt_starts=i64([0, 1, 1]), rt_limits=i64([1, 1, 3]),
                rt_rowids=i64([0, 2, 2]), rt_splits2=i64([0, 2, 3]))
    rv = "rt_values"
    spec = dict(spec, b=Fixed([3, 3], "string", rand_bytes((3, 3))), rt_1d=Ragged("float32"),
                rt_2d_with_splits=Ragged("float32", rv, [P("RowSplits", "rt_splits")]),
                rt_2d_with_lengths=Ragged("float32", rv, [P("RowLengths", "rt_lengths")]),
                rt_2d_with_starts=Ragged("float32", rv, [P("RowStarts", "rt_starts")]),
                rt_2d_with_limits=Ragged("float32", rv, [P("RowLimits", "rt_limits")]),
                rt_2d_with_rowids=Ragged("float32", rv, [P("ValueRowIds", "rt_rowids")]),
                rt_2d_with_uniform_row_length=Ragged("float32", rv, [URL(1)]),
                rt_3d=Ragged("float32", rv, [P("RowSplits", "rt_splits2"), P("RowSplits", "rt_splits")]),
                rt_3d_with_uniform_row_length=Ragged("float32", rv, [URL(1), P("RowSplits", "rt_splits")]))
    single(src, "ParseSingleExampleTest.testSingleExampleWithAllFeatureTypes", record, spec, "in1")


def parse_sequence_example_tests():
    m = "ParseSequenceExampleTest."
    seq_single(PARSING, m + "testFixedLenSequenceFeatureInvalidShapes", seqex(), None,
               {"a": FixedSeq([0], "float32")})
    seq_single(PARSING, m + "testFixedLenSequenceFeatureInvalidShapes", seqex(), None,
               {"a": FixedSeq([-1], "float32")})
    a, b = Fixed([1, 3], "int64", [[1, 2, 3]]), Fixed([3, 3], "string", rand_bytes((3, 3)))
    seq_both(m + "testSequenceExampleWithSparseAndDenseContext",
             seqex(context={"c": flt([3, 4]), "st_a": flt([3.0, 4.0])}),
             {"st_a": VarLen("float32"), "a": a, "b": b, "c": Fixed([2], "float32")}, None, "in1")
    seq_both(m + "testSequenceExampleWithMultipleSizeFeatureLists",
             seqex(feature_lists={"a": flist(i64([-1, 0, 1]), i64([2, 3, 4]), i64([5, 6, 7]), i64([8, 9, 10])),
                                  "b": flist(byt([b"r00", b"r01", b"r10", b"r11"])),
                                  "c": flist(flt([3, 4]), flt([-1, 2]))}),
             None, {"a": FixedSeq([1, 3], "int64"), "b": FixedSeq([2, 2], "string"), "c": FixedSeq([2], "float32"),
                    "d": FixedSeq([5], "float32", True)}, "in1")
    lists = seqex(feature_lists={"a": flist(i64([3, 4]), i64([1, 0])),
                                 "st_a": flist(flt([3.0, 4.0]), flt([5.0]), flt([])),
                                 "st_b": flist(byt([b"a"]), byt([]), byt([]), byt([b"b", b"c"]))})
    spec = {"st_a": VarLen("float32"), "st_b": VarLen("string"), "st_c": VarLen("int64"), "a": FixedSeq([2], "int64")}
    seq_both(m + "testSequenceExampleWithoutDebugName", lists, None, spec)
    seq_both(m + "testSequenceExampleWithSparseAndDenseFeatureLists", lists, None, spec, "in1")
    seq_both(m + "testSequenceExampleWithEmptyFeatureInFeatureLists",
             seqex(feature_lists={"st_a": flist(flt([3.0, 4.0]), tf.train.Feature(), flt([5.0]))}), None,
             {"st_a": VarLen("float32")}, "in1")
    a2 = {"a": FixedSeq([2], "int64")}
    seq_both(m + "testSequenceExampleListWithInconsistentDataFails",
             seqex(feature_lists={"a": flist(i64([-1, 0]), flt([2, 3]))}), None, a2, "in1")
    seq_both(m + "testSequenceExampleListWithWrongDataTypeFails",
             seqex(feature_lists={"a": flist(flt([2, 3]))}), None, a2, "in1")
    seq_both(m + "testSequenceExampleListWithWrongSparseDataTypeFails",
             seqex(feature_lists={"a": flist(i64([3, 4]), i64([1, 2]), flt([2.0, 3.0]))}), None, a2, "in1")
    seq_both(m + "testSequenceExampleListWithWrongShapeFails",
             seqex(feature_lists={"a": flist(i64([2, 3]), i64([2, 3, 4]))}), None, a2, "in1")
    seq_both(m + "testSequenceExampleListWithWrongShapeFails2",
             seqex(feature_lists={"a": flist(i64([2]), i64([2, 3, 4]))}), None, a2, "in1")
    seq_both(m + "testSequenceExampleWithMissingFeatureListFails", seqex(feature_lists={}), None, a2, "in1")
    seq_batch(PARSING, m + "testSequenceExampleBatch",
              [seqex(feature_lists={"a": flist(i64([-1, 0, 1]), i64([2, 3, 4]), i64([5, 6, 7]), i64([8, 9, 10]))}),
               seqex(context={"c": flt([7])}, feature_lists={"a": flist(i64([21, 2, 11])), "b": flist(i64([5]))})],
              {"c": Fixed([], "float32", -1.0)},
              {"a": FixedSeq([1, 3], "int64"), "b": FixedSeq([], "int64", True), "d": FixedSeq([5], "float32", True)},
              ["in1", "in2"])
    recs = [seqex(context={"a": flt([3, 4])}, feature_lists={"b": flist(flt([5]), flt([3])),
                                                              "c": flist(i64([6, 7, 8, 9]))}),
            seqex(context={"a": flt([9])}, feature_lists={"b": flist(), "c": flist(i64([]), i64([1, 2, 3]))}),
            seqex(feature_lists={"b": flist(flt([1]), flt([1, 2]), flt([1, 2, 3]))}),
            seqex(context={"a": tf.train.Feature()}, feature_lists={"b": flist(tf.train.Feature()),
                                                                    "c": flist(i64([3, 3, 3]))})]
    ctx, sq = {"a": Ragged("float32")}, {"b": Ragged("float32"), "c": Ragged("int64", row_splits_dtype="int64")}
    method = m + "testSerializedContainingRaggedFeatureWithNoPartitions"
    seq_batch(PARSING, method, recs, ctx, sq)
    seq_single(PARSING, method, recs[0], ctx, sq)
    seq_batch(PARSING, method, recs * 64, ctx, sq)
    recs = [seqex(context={"a_values": flt([1, 2, 3, 4, 5, 6, 7]), "a_lengths_axis2": i64([1, 2, 0, 1]),
                           "a_lengths_axis3": i64([1, 2, 1, 3]), "a_splits_axis3": i64([0, 1, 3, 4, 7])},
                  feature_lists={"b_values": flist(flt([1, 2, 3, 4]), flt([2, 4, 6])),
                                 "b_splits": flist(i64([0, 1, 4]), i64([0, 2, 3]))}),
            seqex(),
            seqex(context={"a_values": flt([1, 2, 3, 4, 5, 6, 7, 8]), "a_lengths_axis2": i64([2, 3]),
                           "a_lengths_axis3": i64([3, 1, 1, 1, 2]), "a_splits_axis3": i64([0, 3, 4, 5, 6, 8])},
                  feature_lists={"b_values": flist(flt([9, 8, 7, 6, 5]), flt([4, 3, 2, 1]), flt([0])),
                                 "b_splits": flist(i64([0, 1, 4, 5]), i64([0, 4]), i64([0, 1]))})]
    ctx = {"a": Ragged("float32", "a_values", [URL(2), P("RowLengths", "a_lengths_axis2"),
                                               P("RowSplits", "a_splits_axis3")], "int64")}
    sq = {"b": Ragged("float32", "b_values", [P("RowSplits", "b_splits")]),
          "c": Ragged("float32", "b_values", [URL(1)])}
    seq_batch(PARSING, m + "testSerializedContainingNestedRaggedFeature", recs, ctx, sq)
    seq_single(PARSING, m + "testSerializedContainingNestedRaggedFeature", recs[0], ctx, sq)
    seq_both(m + "testSerializedContainingMisalignedNestedRaggedFeature",
             seqex(feature_lists={"b_values": flist(flt([1, 2, 3, 4]), flt([2, 4, 6])),
                                  "b_splits": flist(i64([0, 1, 4]))}), None,
             {"b": Ragged("float32", "b_values", [P("RowSplits", "b_splits")], validate=True)})
    seq_batch(PARSING, m + "testFixedLenSequenceFeatureZeroDimDoesNotCrash", [seqex()], None,
              {"a": FixedSeq([0], "float32", True)})


def run_parse(case):
    """make_golden_parse.run_case with example_names passed as TF's test passed them."""
    names = case.get("example_names")
    if names is None:
        return mgp.run_case(case)
    records = [bytes.fromhex(h) for h in case["records"]]
    api = case["api"]
    try:
        if api == "parse_example":
            out = tf.io.parse_example(tf.constant(records, dtype=tf.string, shape=[len(records)]),
                                      mgp.to_tf_spec(case["features"]), example_names=names)
            return {"expected": mgp.enc_dict(out)}
        if api == "parse_single_example":
            out = tf.io.parse_single_example(tf.constant(records[0]), mgp.to_tf_spec(case["features"]),
                                             example_names=names)
            return {"expected": mgp.enc_dict(out)}
        if api == "parse_sequence_example":
            ctx, fl, lengths = tf.io.parse_sequence_example(
                tf.constant(records, dtype=tf.string, shape=[len(records)]),
                context_features=mgp.to_tf_spec(case["context_features"]),
                sequence_features=mgp.to_tf_spec(case["sequence_features"]), example_names=names)
            return {"expected": {"context": mgp.enc_dict(ctx), "feature_lists": mgp.enc_dict(fl),
                                 "lengths": mgp.enc_dict(lengths)}}
        if api == "parse_single_sequence_example":
            ctx, fl = tf.io.parse_single_sequence_example(
                tf.constant(records[0]), context_features=mgp.to_tf_spec(case["context_features"]),
                sequence_features=mgp.to_tf_spec(case["sequence_features"]), example_name=names)
            return {"expected": {"context": mgp.enc_dict(ctx), "feature_lists": mgp.enc_dict(fl)}}
    except Exception as e:  # the error is the golden output
        return {"error": mgp.enc_error(e)}
    raise ValueError(api)


# -------------------------------------------------------------------------------------- tensor encodings

BITS = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64,
        "complex64": np.uint32, "complex128": np.uint64}


def enc_array(arr, dtype):
    arr = np.ascontiguousarray(arr)
    if dtype in ("complex64", "complex128"):
        return arr.reshape(-1).view(BITS[dtype]).reshape(-1, 2).tolist()
    if dtype in BITS:
        return arr.reshape(-1).view(BITS[dtype]).tolist()
    return arr.reshape(-1).tolist()


def enc_tf_tensor(t):
    dt = t.dtype.name
    if dt == "string":
        return {"dtype": dt, "shape": list(t.shape), "values": [bytes(v).hex() for v in t.numpy().reshape(-1)]}
    return {"dtype": dt, "shape": [int(d) for d in t.shape], "values": enc_array(t.numpy(), dt)}


# ------------------------------------------------------------------------------------------ decode_raw

def raw(source, method, inputs, dtype, little_endian=True, fixed_length=None):
    fields = {"dtype": dtype, "little_endian": little_endian, "fixed_length": fixed_length}
    if isinstance(inputs, bytes):
        fields["input"] = inputs.hex()
    else:
        fields["inputs"] = [v.hex() for v in inputs]
    add(source, method, "decode_raw", **fields)


def decode_raw_tests():
    m = "DecodeRawTest."
    raw(PARSING, m + "testDecodeRawV1EqualLength", [b"string1", b"string2"], "uint8")
    raw(PARSING, m + "testDecodeRawV2FallbackEqualLength", [b"string1", b"string2"], "uint8")
    raw(PARSING, m + "testDecodeRawV1VariableLength", [b"string", b"longer_string"], "uint8")
    raw(PARSING, m + "testDecodeRawV2FallbackVariableLength", [b"string", b"longer_string"], "uint8")
    raw(PARSING, m + "testDecodeRawV2VariableLength", [b"string", b"longer_string"], "uint8", fixed_length=8)
    raw(PARSING, m + "testDecodeRawInvalidFixedLengthSize", [b"1"], "float32", fixed_length=7)
    raw(PARSING, m + "testDecodeRawExtendedInputBytesLittleEndian", [b"\x01\x23"], "int32", True, 8)
    raw(PARSING, m + "testDecodeRawExtendedInputBytesBigEndian", [b"\x01\x23"], "int32", False, 8)
    m = "DecodeRawOpTest."
    raw(RAW, m + "testToUint8", [b"A", b"a"], "uint8")
    raw(RAW, m + "testToUint8", [b"wer", b"XYZ"], "uint8")
    raw(RAW, m + "testToUint8", [b"short", b"longer"], "uint8")
    raw(RAW, m + "testToInt16", [b"AaBC"], "uint16")
    raw(RAW, m + "testToInt16", [b"123", b"456"], "int16")
    raw(RAW, m + "testEndianness", [b"\x01\x02\x03\x04"], "int32", True)
    raw(RAW, m + "testEndianness", [b"\x01\x02\x03\x04"], "int32", False)
    raw(RAW, m + "testEndianness", [b"\x00\x00\x80?\x00\x00\x00@"], "complex64", True)
    raw(RAW, m + "testEndianness", [b"?\x80\x00\x00@\x00\x00\x00"], "complex64", False)
    raw(RAW, m + "testToFloat16", [np.array([1, -2, -3, 4], dtype="<f2").tobytes()], "float16")
    raw(RAW, m + "testToBool", [np.array([True, False, False, True], dtype="<b1").tobytes()], "bool")
    raw(RAW, m + "testToComplex64", [np.array([1 + 1j, 2 - 2j, -3 + 3j, -4 - 4j], dtype="<c8").tobytes()],
        "complex64")
    raw(RAW, m + "testToComplex128", [np.array([1 + 1j, 2 - 2j, -3 + 3j, -4 - 4j], dtype="<c16").tobytes()],
        "complex128")
    for n in range(3):
        raw(RAW, m + "testEmptyStringInput", [b""] * n, "float16")
    raw(RAW, m + "testToUInt16", [b"\xff\xee\xdd\xcc"], "uint16")
    raw(RAW, m + "testToUInt16", [b"123", b"456"], "uint16")


def run_raw(case):
    data = [bytes.fromhex(h) for h in case["inputs"]] if "inputs" in case else bytes.fromhex(case["input"])
    try:
        out = tf.io.decode_raw(tf.constant(data, dtype=tf.string), getattr(tf, case["dtype"]),
                               little_endian=case["little_endian"], fixed_length=case["fixed_length"])
        return {"expected": enc_tf_tensor(out)}
    except Exception as e:
        return {"error": mgp.enc_error(e)}


# --------------------------------------------------------------------------------- decode_json_example

def to_json_nested(v):
    if isinstance(v, list):
        return [to_json_nested(x) for x in v]
    return json_format.MessageToJson(v)


def json_case(method, examples):
    add(PARSING, "DecodeJSONExampleTest." + method, "decode_json_example", input=to_json_nested(examples))


def json_text_case(method, text):
    add(PARSING, "DecodeJSONExampleTest." + method, "decode_json_example", input=text)


def decode_json_example_tests():
    json_case("testEmptyTensor", [])
    json_case("testEmptyTensor", [[], [], []])
    json_case("testEmptyExamples", [tf.train.Example(), tf.train.Example(), tf.train.Example()])
    json_case("testDenseFeaturesScalar", ex(a=flt([1, 1, 3])))
    json_case("testDenseFeaturesVector", [ex(a=flt([1, 1, 3])), ex(a=flt([-1, -1, 2]))])
    json_case("testDenseFeaturesMatrix", [[ex(a=flt([1, 1, 3]))], [ex(a=flt([-1, -1, 2]))]])
    json_case("testSparseFeatures", [ex(st_c=flt([3, 4])), ex(st_c=flt([])), ex(st_d=tf.train.Feature()),
                                     ex(st_c=flt([1, 2, -1]), st_d=byt([b"hi"]))])
    json_case("testSerializedContainingBytes", [ex(**{"a": flt([1, 1]), BNAME: byt([b"b0_str"])}),
                                                ex(**{"a": flt([-1, -1]), BNAME: byt([b"b1"])})])
    json_text_case("testInvalidSyntax", ["{]"])
    # Not from TF's tests: edge cases of TF's JSON reader, named "tf:decode_json_example:<what>"
    one = '{"features": {"feature": {"a": %s}}}'
    for what, text in (
            ("keys_in_json_order_numbers_unpacked",
             '{"features": {"feature": {"b": {"int64List": {"value": ["1", -1]}}, "a": {"floatList": '
             '{"value": [2, "NaN", "-Infinity", -0.0]}}}}}'),
            ("original_field_names", one % '{"int64_list": {"value": [1, "-9223372036854775808", 1e3]}}'),
            ("float32_max_as_message_to_json_writes_it",
             one % '{"floatList": {"value": [3.4028235e+38, "3.4028235e38"]}}'),
            ("float_too_large", one % '{"floatList": {"value": [3.5e38]}}'),
            ("float_subnormal", one % '{"floatList": {"value": [1e-40]}}'),
            ("float_lowercase_nan", one % '{"floatList": {"value": ["nan"]}}'),
            ("int64_out_of_range", one % '{"int64List": {"value": [9223372036854775808]}}'),
            ("int64_fraction", one % '{"int64List": {"value": [1.5]}}'),
            ("int64_bool", one % '{"int64List": {"value": [true]}}'),
            ("int64_hex_string", one % '{"int64List": {"value": ["0x10"]}}'),
            ("bytes_base64_forms", one % '{"bytesList": {"value": ["aGk=", "aGk", "_-8", "a+/b", "", "YR=="]}}'),
            ("bytes_base64_bad_padding", one % '{"bytesList": {"value": ["aGk=="]}}'),
            ("bytes_base64_bad_character", one % '{"bytesList": {"value": ["!!"]}}'),
            ("unicode_key", '{"features": {"feature": {"\\u00e9": {"int64List": {"value": [1]}}, "": {}}}}'),
            ("nulls", '{"features": {"feature": {"a": {"int64List": null}, "b": {"int64List": {"value": null}}}}}'),
            ("features_null", '{"features": null}'),
            ("feature_map_null", '{"features": {"feature": null}}'),
            ("feature_null", one % 'null'),
            ("feature_list_not_object", one % '[]'),
            ("features_list_not_object", '{"features": []}'),
            ("top_level_list", '[]'),
            ("unknown_field", '{"features": {}, "unknown": 1}'),
            ("two_kinds", one % '{"int64List": {"value": [1]}, "floatList": {"value": [1]}}'),
            ("duplicate_map_key", '{"features": {"feature": {"a": {}, "a": {}}}}'),
            ("duplicate_field", '{"features": {"feature": {"a": {}}}, "features": {"feature": {"b": {}}}}'),
            ("bare_value_for_list", one % '{"int64List": {"value": 1}}'),
            ("nested_list_for_list", one % '{"int64List": {"value": [[1]]}}'),
            ("trailing_comma", '{"features": {},}'),
            ("trailing_data", '{"features": {}} x'),
            ("empty_string", ""),
            ("nan_literal", one % '{"floatList": {"value": [NaN]}}')):
        add(EXTRA, what, "decode_json_example", input=text)


def run_json(case):
    try:
        out = tf.io.decode_json_example(tf.constant(case["input"], dtype=tf.string))
        values = np.asarray(out.numpy(), dtype=object).reshape(-1)  # a scalar's .numpy() is bytes
        return {"expected": {"shape": list(out.shape), "values": [bytes(v).hex() for v in values]}}
    except Exception as e:
        # protobuf's C++ JSON errors put random runs of spaces between words (so that no one depends on their
        # text): one space each here, so that the golden file is the same from run to run
        return {"error": {k: " ".join(v.split()) for k, v in mgp.enc_error(e).items()}}


# ------------------------------------------------------------------------------- parse / serialize tensor

def parse_tensor_tests():
    m = "ParseTensorOpTest."
    f = rand_f32((3, 4, 5))
    u = (RNG.random((3, 4, 5)) * 255).astype(np.uint8)  # TF's rand(...).astype(uint8) is all zeros; keep values
    for arr, dtype, method in ((f, "float32", "testToFloat32"), (u, "uint8", "testToUint8")):
        record = tf.make_tensor_proto(arr).SerializeToString()
        add(PARSING, m + method, "parse_tensor", record=record.hex(), out_type=dtype)
        add(PARSING, m + method, "serialize_tensor", dtype=dtype, shape=list(arr.shape), values=enc_array(arr, dtype))
    record = tf.make_tensor_proto(u).SerializeToString()
    add(PARSING, m + "testTypeMismatch", "parse_tensor", record=record.hex(), out_type="uint16")
    add(PARSING, m + "testInvalidInput", "parse_tensor", record=b"bogus".hex(), out_type="uint16")
    add(PARSING, m + "testInvalidInput", "parse_tensor", records=[b"bogus".hex()], out_type="uint16")
    from tensorflow.core.framework import tensor_pb2
    outer = tensor_pb2.TensorProto()
    outer.dtype = tf.variant.as_datatype_enum
    outer.tensor_shape.dim.add().size = 1
    v = outer.variant_val.add()
    v.type_name = "tensorflow::TensorList"
    leaf = v.tensors.add()
    leaf.dtype = tf.float32.as_datatype_enum
    leaf.tensor_shape.dim.add().size = 1
    add(PARSING, "ParseTensorVariantRegressionTest.testMalformedVariantTensorListDoesNotCrash", "parse_tensor",
        record=outer.SerializeToString().hex(), out_type="variant")


def run_tensor(case):
    try:
        if case["api"] == "serialize_tensor":
            dt = np.dtype(case["dtype"])
            values = np.asarray(case["values"], dtype=BITS.get(case["dtype"], dt)).view(dt).reshape(case["shape"])
            return {"expected": {"serialized": tf.io.serialize_tensor(tf.constant(values)).numpy().hex()}}
        data = bytes.fromhex(case["record"]) if "record" in case else [bytes.fromhex(h) for h in case["records"]]
        out = tf.io.parse_tensor(tf.constant(data), getattr(tf, case["out_type"]))
        return {"expected": enc_tf_tensor(out)}
    except Exception as e:
        return {"error": mgp.enc_error(e)}


# ------------------------------------------------------------------------------------------ TFRecord

# The record text of TF's large-record tests (any text does; TF's is a poem, this is the same length class)
TEXT = b"".join(b"line %03d of the text repeated into a large record, as tf_record_test does\n" % i for i in range(8))
COMPRESSION = {"": tf.io.TFRecordOptions(compression_type=""), "ZLIB": tf.io.TFRecordOptions(compression_type="ZLIB"),
               "GZIP": tf.io.TFRecordOptions(compression_type="GZIP")}


def record_name(f, r):
    return b"Record %d of file %d" % (r, f)


def frame_with_tf(records, compression=""):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f")
        with tf.io.TFRecordWriter(path, COMPRESSION[compression]) as w:
            for r in records:
                w.write(r)
        with open(path, "rb") as fh:
            return fh.read()


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as g:
        g.write(data)
    return buf.getvalue()


def recipe_record(recipe):
    return bytes.fromhex(recipe["text"]) * recipe["repeat"]


def recipe_file(recipe):
    plain = frame_with_tf([recipe_record(recipe)])
    return {"zlib": zlib.compress, "gzip": gzip_bytes, "none": lambda b: b}[recipe["wrap"]](plain)


def tf_record_tests():
    big = {"text": TEXT.hex(), "repeat": 8000}  # about 5 MB, as TF's tests
    for comp in ("", "ZLIB", "GZIP"):
        method = {"": "TFRecordWriterTest.testWriteReadZLibFiles", "ZLIB": "TFRecordWriterTest.testWriteReadZLibFiles",
                  "GZIP": "TFRecordWriterTest.testWriteReadGzipFiles"}[comp]
        for f in range(2):
            add(RECORD, method, "tf_record_write", compression=comp,
                records=[record_name(f, r).hex() for r in range(7)])
    plain = frame_with_tf([b"small record"])
    flushed = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS)
    out = b""
    for c in plain:
        out += flushed.compress(bytes([c])) + flushed.flush(zlib.Z_FULL_FLUSH)
    out += flushed.flush(zlib.Z_FULL_FLUSH) + flushed.flush(zlib.Z_FULL_FLUSH) + flushed.flush(zlib.Z_FINISH)
    add(RECORD, "TFRecordWriterZlibTest.testZLibFlushRecord", "tf_record_read", compression="ZLIB", file=out.hex())
    foobar = frame_with_tf([b"foo", b"bar"])
    add(RECORD, "TFRecordWriterZlibTest.testZlibReadWrite", "tf_record_read", compression="ZLIB",
        file=zlib.compress(foobar).hex())
    add(RECORD, "TFRecordWriterZlibTest.testZlibReadWriteLarge", "tf_record_read", compression="ZLIB",
        file_recipe=dict(big, wrap="zlib"))
    add(RECORD, "TFRecordWriterZlibTest.testGzipReadWrite", "tf_record_read", compression="GZIP",
        file=gzip_bytes(foobar).hex())
    add(RECORD, "TFRecordIteratorTest.testIterator", "tf_record_write", compression="ZLIB",
        records=[record_name(0, r).hex() for r in range(7)])
    add(RECORD, "TFRecordIteratorTest.testWriteZlibRead", "tf_record_write", compression="ZLIB",
        records=[b"foo".hex(), b"bar".hex()])
    add(RECORD, "TFRecordIteratorTest.testWriteZlibReadLarge", "tf_record_write", compression="ZLIB",
        record_recipe=big)
    add(RECORD, "TFRecordIteratorTest.testWriteGzipRead", "tf_record_write", compression="GZIP",
        records=[b"foo".hex(), b"bar".hex()])
    add(RECORD, "TFRecordIteratorTest.testBadFile", "tf_record_read", compression="",
        file=frame_with_tf([b"123"])[:14].hex())
    for comp, cls in (("", "TFRecordWriterCloseAndFlushTests"), ("GZIP", "TFRecordWriterCloseAndFlushGzipTests"),
                      ("ZLIB", "TFRecordWriterCloseAndFlushZlibTests")):
        rec = lambda r: (b"Record %d" % r).hex()  # noqa: E731
        ops = {"testWriteAndRead": [["write", rec(r)] for r in range(20)] + [["close"]],
               "testDoubleClose": [["write", rec(0)], ["close"], ["close"]],
               "testFlushAfterCloseIsError": [["write", rec(0)], ["close"], ["flush"]],
               "testWriteAfterClose": [["write", rec(0)], ["close"], ["write", rec(1)]]}
        for method, seq in ops.items():
            add(RECORD, "%s.%s" % (cls, method), "tf_record_writer_ops", compression=comp, ops=seq)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def run_record(case):
    comp = case["compression"]
    try:
        if case["api"] == "tf_record_write":
            records = ([recipe_record(case["record_recipe"])] if "record_recipe" in case
                       else [bytes.fromhex(h) for h in case["records"]])
            data = frame_with_tf(records, comp)
            if len(data) > 100000:
                return {"expected": {"file_sha256": sha(data), "file_size": len(data)}}
            return {"expected": {"file": data.hex()}}
        if case["api"] == "tf_record_read":
            data = recipe_file(case["file_recipe"]) if "file_recipe" in case else bytes.fromhex(case["file"])
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "f")
                with open(path, "wb") as fh:
                    fh.write(data)
                records = list(tf.compat.v1.io.tf_record_iterator(path, COMPRESSION[comp]))
            if sum(map(len, records)) > 100000:
                return {"expected": {"records_sha256": [sha(r) for r in records],
                                     "records_size": [len(r) for r in records]}}
            return {"expected": {"records": [r.hex() for r in records]}}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "f")
            writer = tf.io.TFRecordWriter(path, COMPRESSION[comp])
            outcomes = []
            for op in case["ops"]:
                try:
                    if op[0] == "write":
                        writer.write(bytes.fromhex(op[1]))
                    else:
                        getattr(writer, op[0])()
                    outcomes.append(None)
                except Exception as e:  # the outcome is the golden output
                    outcomes.append(type(e).__name__)
            writer.close()
            with open(path, "rb") as fh:
                return {"expected": {"outcomes": outcomes, "file": fh.read().hex()}}
    except Exception as e:
        return {"error": mgp.enc_error(e)}


# ------------------------------------------------------------------------------------------------ main

RUNNERS = {"parse_example": run_parse, "parse_single_example": run_parse, "parse_sequence_example": run_parse,
           "parse_single_sequence_example": run_parse, "decode_raw": run_raw, "decode_json_example": run_json,
           "parse_tensor": run_tensor, "serialize_tensor": run_tensor, "tf_record_write": run_record,
           "tf_record_read": run_record, "tf_record_writer_ops": run_record}


# TF 2.21 kills the process on these (a FixedLenSequenceFeature of shape [0] divides by zero: TF issue 123476; a
# malformed variant TensorProto segfaults; both fixed after 2.21, which is why TF has the tests): they run in a
# child process, and the signal is the golden outcome.
CRASHES = {"tf:parsing_ops_test:ParseTensorVariantRegressionTest.testMalformedVariantTensorListDoesNotCrash",
           "tf:parsing_ops_test:ParseSequenceExampleTest.testFixedLenSequenceFeatureInvalidShapes#1",
           "tf:parsing_ops_test:ParseSequenceExampleTest.testFixedLenSequenceFeatureZeroDimDoesNotCrash"}


def run_in_child(case):
    code = ("import json, sys; sys.path.insert(0, %r); import make_golden_tf_tests as g; "
            "print(json.dumps(g.RUNNERS[%r](json.loads(sys.stdin.read()))))" % (HERE, case["api"]))
    child = subprocess.run([sys.executable, "-c", code], input=json.dumps(case), capture_output=True, text=True)
    if child.returncode < 0:
        sig = signal.Signals(-child.returncode).name
        message = "TensorFlow %s killed the process with %s" % (tf.__version__, sig)
        return {"error": {"type": "crash", "message": message, "core": message}}
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def run(case):
    if case["name"] in CRASHES:
        return run_in_child(case)
    return RUNNERS[case["api"]](case)


def build_cases():
    parse_example_tests(PARSING)
    parse_single_example_tests(PARSING)
    parse_sequence_example_tests()
    decode_raw_tests()
    decode_json_example_tests()
    parse_tensor_tests()
    parse_example_tests(SINGLE)
    parse_single_example_tests(SINGLE)
    tf_record_tests()
    finish_names()
    for c in CASES:
        c.update(run(c))
    return CASES


def main():
    tf.config.set_visible_devices([], "GPU")
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    cases = build_cases()
    mgp.dump_json(os.path.join(OUT, "cases.json"), cases)
    again = [dict(c, **run(c)) for c in cases]
    changed = [c["name"] for c, d in zip(cases, again)
               if json.dumps(c, sort_keys=True) != json.dumps(d, sort_keys=True)]
    assert not changed, changed
    with open(os.path.join(OUT, "cases.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    per_file = {}
    for c in cases:
        per_file[c["source"]] = per_file.get(c["source"], 0) + 1
    manifest = {
        "generator": "tests/data/make_golden_tf_tests.py",
        "versions": {"tensorflow": tf.__version__, "numpy": np.__version__,
                     "protobuf": metadata.version("protobuf"), "python": sys.version.split()[0]},
        "files": {"cases.json": {"sha256": digest, "size": os.path.getsize(os.path.join(OUT, "cases.json")),
                                 "cases": len(cases), "cases_per_tf_file": per_file}},
    }
    mgp.dump_json(os.path.join(OUT, "manifest.json"), manifest)
    print("wrote %d cases (%d errors) to %s: %s" % (len(cases), sum("error" in c for c in cases), OUT, per_file))


if __name__ == "__main__":
    main()
