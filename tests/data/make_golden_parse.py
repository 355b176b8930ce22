"""Generate TensorFlow golden outputs of the Example parsing ops, under
tests/data/golden/parse/.

Run by hand, from the repository root, with a Python that has real TensorFlow
(tensorflow-cpu 2.21 was used) and numpy:

    /work/tfenv/bin/python tests/data/make_golden_parse.py

The script never imports tfr_torch. It deletes and rewrites
``tests/data/golden/parse/`` and is deterministic (protos serialized with
``deterministic=True``; TF runs eagerly on CPU).

tests/data/make_golden.py rewrites only the files directly in ``tests/data/golden/``,
so the two scripts can be run in any order.

Files written:

* ``cases.json``: a list of cases, each

    {"name": str, "api": "parse_example" | "parse_single_example"
                         | "parse_sequence_example" | "parse_single_sequence_example",
     "description": str,
     "records": [hex of each serialized Example/SequenceExample]
                (exactly one for the single forms),
     "features": SPEC                  (parse_example / parse_single_example),
     "context_features": SPEC | null,  (sequence forms)
     "sequence_features": SPEC | null, (sequence forms)
     "expected": OUTPUT                (when TF succeeded)
     "error": {"type": exception class name (InvalidArgumentError, ValueError, ...),
               "message": the full message TF gave (str(e)),
               "core": the message without TF's eager "{{function_node ...}} "
                       prefix and " [Op:...]" suffix}  (when TF raised)}

  SPEC maps a feature key to one of
    {"kind": "FixedLen", "shape": [...], "dtype", "default_value": value | null}
    {"kind": "VarLen", "dtype"}
    {"kind": "Sparse", "index_key": str | [str, ...], "value_key", "dtype",
     "size": int | [int, ...], "already_sorted": bool}
    {"kind": "Ragged", "dtype", "value_key": str | null,
     "partitions": [{"type": "RowLengths"|"RowSplits"|"RowStarts"|"RowLimits"|"ValueRowIds",
                     "key": str} | {"type": "UniformRowLength", "length": int}, ...],
     "row_splits_dtype": "int32" | "int64", "validate": bool}
    {"kind": "FixedLenSequence", "shape", "dtype", "allow_missing": bool,
     "default_value": value | null}
  dtype is "float32" | "int64" | "string"; a shape entry null means None.
  ``default_value`` is a scalar or a (possibly nested) list in the value
  encoding below. Partitions are listed outermost first, as in TF.

  OUTPUT for parse_example / parse_single_example: {key: TENSOR}; for the
  sequence forms {"context": {key: TENSOR}, "feature_lists": {key: TENSOR}}
  plus "lengths": {key: TENSOR} for parse_sequence_example (its third result).

  TENSOR is one of
    {"type": "dense", "dtype", "shape", "values": flat row-major}
    {"type": "sparse", "dtype", "indices": [[...], ...], "values": [...], "dense_shape": [...]}
    {"type": "ragged", "dtype", "flat_values": flat row-major, "flat_values_shape": [...],
     "nested_row_splits": [[...], ...], "row_splits_dtype",
     "shape": rt.shape (null for ragged dimensions),
     "uniform_row_lengths": [rt.uniform_row_length at each ragged level, null if not uniform],
     "as_list": rt.to_list() with the value encoding applied to the leaves}

Value encodings (as in make_golden.py):
  int64/int32      -> JSON integers
  float32          -> IEEE bit pattern as unsigned int (np.float32(x).view(np.uint32))
  string (bytes)   -> lowercase hex strings
"""

import hashlib
import json
import os
import re
import shutil
import sys
from importlib import metadata

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "golden", "parse")

DTYPES = {"float32": tf.float32, "int64": tf.int64, "string": tf.string, "int32": tf.int32}


# --------------------------------------------------------------------------
# proto helpers
# --------------------------------------------------------------------------

def i64(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def flt(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def byt(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def ex(**features):
    return tf.train.Example(features=tf.train.Features(feature=features))


def flist(*features):
    return tf.train.FeatureList(feature=list(features))


def seqex(context=None, feature_lists=None):
    kw = {}
    if context is not None:
        kw["context"] = tf.train.Features(feature=context)
    if feature_lists is not None:
        kw["feature_lists"] = tf.train.FeatureLists(feature_list=feature_lists)
    return tf.train.SequenceExample(**kw)


def ser(msg):
    if isinstance(msg, bytes):
        return msg
    return msg.SerializeToString(deterministic=True)


# Minimal protobuf encoder for hand-made records.
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, payload):
    return varint((field << 3) | 2) + varint(len(payload)) + payload


def map_entry(key, feature_bytes):
    return ld(1, ld(1, key.encode("utf-8")) + ld(2, feature_bytes))


# --------------------------------------------------------------------------
# value encoding
# --------------------------------------------------------------------------

def f32_bits(x):
    return int(np.asarray(x, dtype=np.float32).view(np.uint32))


def enc_flat(dtype, arr):
    arr = np.asarray(arr)
    if dtype == "float32":
        return [int(v) for v in arr.astype(np.float32).reshape(-1).view(np.uint32)]
    if dtype in ("int64", "int32"):
        return [int(v) for v in arr.reshape(-1)]
    if dtype == "string":
        return [bytes(v).hex() for v in arr.reshape(-1)]
    raise ValueError(dtype)


def enc_nested(dtype, v):
    """Python value (scalar or nested list) -> JSON value encoding."""
    if isinstance(v, (list, tuple)):
        return [enc_nested(dtype, x) for x in v]
    if dtype == "float32":
        return f32_bits(v)
    if dtype in ("int64", "int32"):
        return int(v)
    if dtype == "string":
        return bytes(v).hex()
    raise ValueError(dtype)


def dec_nested(dtype, v):
    """JSON value encoding -> numpy value for TF."""
    if dtype == "float32":
        return np.asarray(v, dtype=np.uint32).view(np.float32)
    if dtype == "int64":
        return np.asarray(v, dtype=np.int64)
    if dtype == "string":
        def unhex(x):
            if isinstance(x, list):
                return [unhex(y) for y in x]
            return bytes.fromhex(x)
        return np.asarray(unhex(v), dtype=object)
    raise ValueError(dtype)


# --------------------------------------------------------------------------
# spec builders (JSON form) and conversion to TF feature objects
# --------------------------------------------------------------------------

def Fixed(shape, dtype, default=None):
    return {"kind": "FixedLen", "shape": list(shape), "dtype": dtype,
            "default_value": None if default is None else enc_nested(dtype, default)}


def VarLen(dtype):
    return {"kind": "VarLen", "dtype": dtype}


def Sparse(index_key, value_key, dtype, size, already_sorted=False):
    return {"kind": "Sparse", "index_key": index_key, "value_key": value_key, "dtype": dtype,
            "size": size, "already_sorted": already_sorted}


def Ragged(dtype, value_key=None, partitions=(), row_splits_dtype="int32", validate=False):
    return {"kind": "Ragged", "dtype": dtype, "value_key": value_key, "partitions": list(partitions),
            "row_splits_dtype": row_splits_dtype, "validate": validate}


def P(type_, key):
    return {"type": type_, "key": key}


def URL(length):
    return {"type": "UniformRowLength", "length": length}


def FixedSeq(shape, dtype, allow_missing=False, default=None):
    return {"kind": "FixedLenSequence", "shape": list(shape), "dtype": dtype, "allow_missing": allow_missing,
            "default_value": None if default is None else enc_nested(dtype, default)}


PARTITION_CLASSES = {
    "RowLengths": tf.io.RaggedFeature.RowLengths,
    "RowSplits": tf.io.RaggedFeature.RowSplits,
    "RowStarts": tf.io.RaggedFeature.RowStarts,
    "RowLimits": tf.io.RaggedFeature.RowLimits,
    "ValueRowIds": tf.io.RaggedFeature.ValueRowIds,
}


def to_tf_feature(spec):
    kind = spec["kind"]
    dt = DTYPES[spec["dtype"]]
    if kind == "FixedLen":
        dv = spec["default_value"]
        return tf.io.FixedLenFeature(spec["shape"], dt, None if dv is None else dec_nested(spec["dtype"], dv))
    if kind == "VarLen":
        return tf.io.VarLenFeature(dt)
    if kind == "Sparse":
        size = spec["size"]
        return tf.io.SparseFeature(spec["index_key"], spec["value_key"], dt, size, spec["already_sorted"])
    if kind == "Ragged":
        parts = []
        for p in spec["partitions"]:
            if p["type"] == "UniformRowLength":
                parts.append(tf.io.RaggedFeature.UniformRowLength(p["length"]))
            else:
                parts.append(PARTITION_CLASSES[p["type"]](p["key"]))
        return tf.io.RaggedFeature(dt, value_key=spec["value_key"], partitions=tuple(parts),
                                   row_splits_dtype=DTYPES[spec["row_splits_dtype"]], validate=spec["validate"])
    if kind == "FixedLenSequence":
        dv = spec["default_value"]
        return tf.io.FixedLenSequenceFeature(spec["shape"], dt, allow_missing=spec["allow_missing"],
                                             default_value=None if dv is None else dec_nested(spec["dtype"], dv))
    raise ValueError(kind)


def to_tf_spec(spec):
    if spec is None:
        return None
    return {k: to_tf_feature(v) for k, v in spec.items()}


# --------------------------------------------------------------------------
# output encoding
# --------------------------------------------------------------------------

def dtype_name(dt):
    return {"float32": "float32", "int64": "int64", "string": "string", "int32": "int32"}[dt.name]


def enc_tensor(t):
    if isinstance(t, tf.RaggedTensor):
        dt = dtype_name(t.dtype)
        uniform = []
        level = t
        while isinstance(level, tf.RaggedTensor):
            u = level.uniform_row_length
            uniform.append(None if u is None else int(u))
            level = level.values
        return {
            "type": "ragged",
            "dtype": dt,
            "flat_values": enc_flat(dt, t.flat_values.numpy()),
            "flat_values_shape": [int(d) for d in t.flat_values.shape],
            "nested_row_splits": [[int(x) for x in s.numpy()] for s in t.nested_row_splits],
            "row_splits_dtype": dtype_name(t.row_splits.dtype),
            "shape": [None if d is None else int(d) for d in t.shape.as_list()],
            "uniform_row_lengths": uniform,
            "as_list": enc_nested(dt, t.to_list()),
        }
    if isinstance(t, tf.SparseTensor):
        dt = dtype_name(t.dtype)
        return {
            "type": "sparse",
            "dtype": dt,
            "indices": [[int(x) for x in row] for row in t.indices.numpy()],
            "values": enc_flat(dt, t.values.numpy()),
            "dense_shape": [int(x) for x in t.dense_shape.numpy()],
        }
    dt = dtype_name(t.dtype)
    return {"type": "dense", "dtype": dt, "shape": [int(d) for d in t.shape], "values": enc_flat(dt, t.numpy())}


def enc_dict(d):
    return {k: enc_tensor(v) for k, v in d.items()}


_PREFIX = re.compile(r"^\{\{function_node [^}]*\}\} ")
_SUFFIX = re.compile(r" \[Op:[A-Za-z0-9_]+\]( name: .*)?$", re.S)


def enc_error(e):
    msg = str(e)
    core = getattr(e, "message", msg) if isinstance(e, tf.errors.OpError) else msg
    core = _PREFIX.sub("", core)
    core = _SUFFIX.sub("", core)
    return {"type": type(e).__name__, "message": msg, "core": core}


# --------------------------------------------------------------------------
# case collection
# --------------------------------------------------------------------------

CASES = []
NAMES = set()


def _add(name, api, description, records, **specs):
    assert name not in NAMES, name
    NAMES.add(name)
    records = [ser(r) for r in records]
    if api.startswith("parse_single"):
        assert len(records) == 1, name
    case = {"name": name, "api": api, "description": description, "records": [r.hex() for r in records]}
    case.update(specs)
    CASES.append(case)


def single(name, record, features, description=""):
    _add(name, "parse_single_example", description, [record], features=features)


def batch(name, records, features, description=""):
    _add(name, "parse_example", description, records, features=features)


def seq_single(name, record, context_features, sequence_features, description=""):
    _add(name, "parse_single_sequence_example", description, [record],
         context_features=context_features, sequence_features=sequence_features)


def seq_batch(name, records, context_features, sequence_features, description=""):
    _add(name, "parse_sequence_example", description, records,
         context_features=context_features, sequence_features=sequence_features)


def run_case(case):
    records = [bytes.fromhex(h) for h in case["records"]]
    api = case["api"]
    try:
        if api == "parse_example":
            out = tf.io.parse_example(tf.constant(records, dtype=tf.string, shape=[len(records)]),
                                      to_tf_spec(case["features"]))
            return {"expected": enc_dict(out)}
        if api == "parse_single_example":
            out = tf.io.parse_single_example(tf.constant(records[0]), to_tf_spec(case["features"]))
            return {"expected": enc_dict(out)}
        if api == "parse_sequence_example":
            ctx, fl, lengths = tf.io.parse_sequence_example(
                tf.constant(records, dtype=tf.string, shape=[len(records)]),
                context_features=to_tf_spec(case["context_features"]),
                sequence_features=to_tf_spec(case["sequence_features"]))
            return {"expected": {"context": enc_dict(ctx), "feature_lists": enc_dict(fl),
                                 "lengths": enc_dict(lengths)}}
        if api == "parse_single_sequence_example":
            ctx, fl = tf.io.parse_single_sequence_example(
                tf.constant(records[0]),
                context_features=to_tf_spec(case["context_features"]),
                sequence_features=to_tf_spec(case["sequence_features"]))
            return {"expected": {"context": enc_dict(ctx), "feature_lists": enc_dict(fl)}}
    except Exception as e:  # the error *is* the golden output
        return {"error": enc_error(e)}
    raise ValueError(api)


# --------------------------------------------------------------------------
# the cases
# --------------------------------------------------------------------------

NAN = float("nan")
INF = float("inf")
NB = b"\xff\x00\xfe"  # non-UTF-8 bytes


def fixed_len_cases():
    all3 = {"f": Fixed([], "float32"), "i": Fixed([], "int64"), "s": Fixed([], "string")}
    single("fixed_scalar_each_dtype", ex(f=flt([1.5]), i=i64([-7]), s=byt([NB])), all3)
    batch("fixed_scalar_each_dtype_batch",
          [ex(f=flt([1.5]), i=i64([-2**63]), s=byt([b""])), ex(f=flt([NAN]), i=i64([2**63 - 1]), s=byt([b"ab"])),
           ex(f=flt([-0.0]), i=i64([0]), s=byt([NB]))], all3,
          "special values: NaN, -0.0, int64 extremes, empty and non-UTF-8 strings")
    sh3 = {"f": Fixed([3], "float32"), "i": Fixed([3], "int64"), "s": Fixed([3], "string")}
    single("fixed_shape3_each_dtype", ex(f=flt([1, 2, INF]), i=i64([1, -2, 3]), s=byt([b"a", b"", b"c"])), sh3)
    batch("fixed_shape3_each_dtype_batch",
          [ex(f=flt([1, 2, 3]), i=i64([1, 2, 3]), s=byt([b"a", b"b", b"c"])),
           ex(f=flt([-1, -2, -3]), i=i64([4, 5, 6]), s=byt([b"d", b"e", b"f"]))], sh3)
    sh22 = {"f": Fixed([2, 2], "float32"), "i": Fixed([2, 2], "int64"), "s": Fixed([2, 2], "string")}
    single("fixed_shape2x2_each_dtype", ex(f=flt([1, 2, 3, 4]), i=i64([5, 6, 7, 8]), s=byt([b"a", b"b", b"c", b"d"])),
           sh22)
    batch("fixed_shape2x2_each_dtype_batch",
          [ex(f=flt([1, 2, 3, 4]), i=i64([5, 6, 7, 8]), s=byt([b"a", b"b", b"c", b"d"])),
           ex(f=flt([0.5, 0.25, 0.125, -0.0]), i=i64([-1, -2, -3, -4]), s=byt([b"w", b"x", b"y", b"z"]))], sh22)

    # defaults
    defaults = {"f": Fixed([], "float32", -1.5), "i": Fixed([], "int64", 99), "s": Fixed([], "string", b"dflt")}
    single("fixed_scalar_default_missing", ex(other=i64([1])), defaults, "all three missing -> defaults")
    batch("fixed_scalar_default_batch_mixed",
          [ex(f=flt([1.0]), i=i64([1]), s=byt([b"x"])), ex(), ex(f=flt([3.0]), s=byt([b"z"])), ex(i=i64([4]))],
          defaults, "present / missing mixed across the batch")
    batch("fixed_shape3_scalar_default_broadcast",
          [ex(f=flt([1, 2, 3])), ex()],
          {"f": Fixed([3], "float32", 7.0), "i": Fixed([3], "int64", 7), "s": Fixed([3], "string", b"q")},
          "scalar default_value for shape [3]")
    batch("fixed_shape3_full_default",
          [ex(f=flt([1, 2, 3]), i=i64([1, 2, 3]), s=byt([b"a", b"b", b"c"])), ex()],
          {"f": Fixed([3], "float32", [NAN, -0.0, 9.0]), "i": Fixed([3], "int64", [7, 8, 9]),
           "s": Fixed([3], "string", [b"x", b"", NB])})
    batch("fixed_shape2x2_nested_default",
          [ex(), ex(f=flt([1, 2, 3, 4]), i=i64([1, 2, 3, 4]))],
          {"f": Fixed([2, 2], "float32", [[1.0, 2.0], [3.0, 4.0]]), "i": Fixed([2, 2], "int64", [[5, 6], [7, 8]])})
    batch("fixed_shape2x2_flat_default",
          [ex(), ex(i=i64([1, 2, 3, 4]))],
          {"i": Fixed([2, 2], "int64", [5, 6, 7, 8])}, "flat 4-value default for shape [2,2]")
    batch("fixed_shape3_wrong_size_default",
          [ex(i=i64([1, 2, 3]))], {"i": Fixed([3], "int64", [1, 2])}, "default with 2 values for shape [3]")
    single("fixed_missing_no_default", ex(other=i64([1])), {"f": Fixed([], "float32")})
    batch("fixed_missing_no_default_batch", [ex(i=i64([1])), ex(i=i64([2])), ex(j=i64([3]))],
          {"i": Fixed([], "int64")}, "missing in example 2")
    # wrong value count: too few / too many, each dtype, batch and single (TF's messages differ)
    feats = {"float32": lambda n: flt([1.0] * n), "int64": lambda n: i64([1] * n), "string": lambda n: byt([b"v"] * n)}
    for dt, make in feats.items():
        for how, n in (("few", 2), ("many", 4)):
            batch("fixed_wrong_count_%s_%s_batch" % (dt, how), [ex(x=make(3)), ex(x=make(n))],
                  {"x": Fixed([3], dt)}, "shape [3]; example 1 has %d values" % n)
            single("fixed_wrong_count_%s_%s_single" % (dt, how), ex(x=make(n)), {"x": Fixed([3], dt)},
                   "shape [3]; %d values" % n)
    batch("fixed_wrong_count_scalar_batch", [ex(s=byt([b"a", b"b"]))], {"s": Fixed([], "string")})
    batch("fixed_wrong_count_with_default_batch", [ex(), ex(i=i64([1, 2]))], {"i": Fixed([3], "int64", [0, 0, 0])},
          "a present feature with the wrong count is an error even with a default")
    single("fixed_empty_list_with_default", ex(f=flt([])), {"f": Fixed([], "float32", 1.0)})
    batch("fixed_empty_list_with_default_batch", [ex(i=i64([1, 2])), ex(i=i64([]))],
          {"i": Fixed([2], "int64", [0, 0])})
    single("fixed_empty_list_no_default", ex(s=byt([])), {"s": Fixed([], "string")})
    single("fixed_wrong_dtype_float_for_int64", ex(i=flt([1.0])), {"i": Fixed([], "int64")})
    batch("fixed_wrong_dtype_bytes_for_float_batch", [ex(f=flt([1.0])), ex(f=byt([b"1"]))],
          {"f": Fixed([], "float32")}, "example 1 has bytes")
    batch("fixed_wrong_dtype_int_for_string_with_default_batch", [ex(s=i64([1]))],
          {"s": Fixed([], "string", b"")})
    batch("fixed_shape_none", [ex(f=flt([1.0]))], {"f": Fixed([None], "float32")})
    batch("fixed_shape_none_inner", [ex(f=flt([1.0]))], {"f": Fixed([2, None], "float32")})
    feature_no_kind = ld(1, map_entry("f", b""))  # Feature with no kind set
    single("fixed_kindless_feature_with_default", feature_no_kind, {"f": Fixed([], "float32", 2.5)},
           "hand-encoded: Feature message with no kind set")
    single("fixed_kindless_feature_no_default", feature_no_kind, {"f": Fixed([], "float32")},
           "hand-encoded: Feature message with no kind set")
    batch("fixed_shape0_empty_list", [ex(f=flt([])), ex(f=flt([]))], {"f": Fixed([0], "float32")},
          "shape [0] with empty lists")
    batch("fixed_shape0_missing", [ex()], {"f": Fixed([0], "float32")}, "shape [0], missing, no default")
    dup = ld(1, map_entry("i", ld(3, ld(1, varint(5)))) + map_entry("i", ld(3, ld(1, varint(6) + varint(7)))))
    single("fixed_duplicate_key_last_wins", dup, {"i": Fixed([2], "int64")},
           "hand-encoded: key 'i' twice, [5] then [6, 7]")
    batch("fixed_unparseable_record_batch", [ex(i=i64([1])), b"\x0a\x05\x0a\x03"], {"i": Fixed([], "int64")},
          "record 1 is a truncated proto")
    batch("spec_fixed_and_ragged_same_key", [ex(a=i64([1]))],
          {"a": Fixed([], "int64"), "r": Ragged("int64", value_key="a")}, "dense and ragged features on one key")
    batch("spec_varlen_and_ragged_same_key", [ex(a=i64([1]))],
          {"a": VarLen("int64"), "r": Ragged("int64", value_key="a")}, "sparse and ragged features on one key")
    batch("spec_fixed_and_varlen_value_key", [ex(a=i64([1]), ix=i64([0]))],
          {"a": Fixed([], "int64"), "sp": Sparse("ix", "a", "int64", 10)},
          "dense feature and a SparseFeature's value key")
    batch("spec_ragged_shared_value_key_splits_dtype_conflict", [ex(a=i64([1]))],
          {"r": Ragged("int64", value_key="a"), "r64": Ragged("int64", value_key="a", row_splits_dtype="int64")},
          "two RaggedFeatures on one value key with int32 and int64 row splits")
    batch("fixed_empty_serialized_record", [b"", ex(i=i64([3]))], {"i": Fixed([], "int64", 1)},
          "b'' is an Example with no features")


def varlen_cases():
    all3 = {"f": VarLen("float32"), "i": VarLen("int64"), "s": VarLen("string")}
    single("varlen_each_dtype", ex(f=flt([1.5, NAN, -0.0]), i=i64([3, -2**63]), s=byt([NB, b"", b"x"])), all3)
    single("varlen_missing_and_empty", ex(f=flt([])), all3, "f is an empty list, i and s are missing")
    batch("varlen_batch_varied_lengths",
          [ex(f=flt([1, 2]), i=i64([1]), s=byt([b"a", b"b", b"c"])),
           ex(f=flt([]), i=i64([])),
           ex(),
           ex(f=flt([3, 4, 5]), i=i64([2, 3, 4, 5]), s=byt([b""]))], all3,
          "lengths 2/1/3, empty lists, missing, 3/4/1")
    batch("varlen_all_missing_batch", [ex(), ex(x=i64([1]))], all3)
    single("varlen_wrong_dtype", ex(i=flt([1.0])), {"i": VarLen("int64")})
    batch("varlen_wrong_dtype_batch", [ex(s=byt([b"a"])), ex(s=byt([b"b"])), ex(s=flt([1.0]))],
          {"s": VarLen("string")}, "example 2 has floats")


def sparse_cases():
    sp = {"sp": Sparse("ix", "val", "float32", 10)}
    batch("sparse_unsorted",
          [ex(ix=i64([7, 1, 4]), val=flt([0.7, 0.1, 0.4])), ex(ix=i64([9, 0]), val=flt([0.9, 0.0]))], sp)
    batch("sparse_sorted_already_sorted_true",
          [ex(ix=i64([1, 4, 7]), val=flt([0.1, 0.4, 0.7])), ex(ix=i64([0, 9]), val=flt([0.0, 0.9]))],
          {"sp": Sparse("ix", "val", "float32", 10, already_sorted=True)})
    batch("sparse_unsorted_already_sorted_true",
          [ex(ix=i64([7, 1, 4]), val=flt([0.7, 0.1, 0.4]))],
          {"sp": Sparse("ix", "val", "float32", 10, already_sorted=True)},
          "unsorted indices but already_sorted=True (TF trusts the flag)")
    single("sparse_single_example", ex(ix=i64([3, 2]), val=i64([30, 20])), {"sp": Sparse("ix", "val", "int64", 10)})
    single("sparse_single_string", ex(ix=i64([5, 0]), val=byt([b"five", NB])),
           {"sp": Sparse("ix", "val", "string", 10)})
    batch("sparse_missing",
          [ex(ix=i64([2]), val=flt([2.0])), ex(), ex(ix=i64([]), val=flt([]))], sp,
          "example 1 missing both keys, example 2 empty lists")
    batch("sparse_multi_dim_index",
          [ex(i0=i64([2, 0, 1]), i1=i64([3, 1, 0]), v=i64([23, 1, 10])), ex(i0=i64([0]), i1=i64([0]), v=i64([0]))],
          {"sp": Sparse(["i0", "i1"], "v", "int64", [3, 4])}, "index_key list, size [3, 4]")
    batch("sparse_index_out_of_range", [ex(ix=i64([3, 12]), val=flt([3.0, 12.0]))], sp, "index 12 with size 10")
    batch("sparse_index_negative", [ex(ix=i64([-1, 3]), val=flt([-1.0, 3.0]))], sp)
    batch("sparse_duplicate_index", [ex(ix=i64([2, 2]), val=flt([1.0, 2.0]))], sp)
    batch("sparse_mismatched_lengths", [ex(ix=i64([1, 2, 3]), val=flt([1.0, 2.0]))], sp, "3 indices, 2 values")
    batch("sparse_mismatched_lengths_second", [ex(ix=i64([1]), val=flt([1.0])), ex(ix=i64([1, 2]), val=flt([]))], sp,
          "example 1: 2 indices, 0 values")
    batch("sparse_mismatched_equal_totals", [ex(ix=i64([1, 2]), val=flt([1.0])), ex(ix=i64([3]), val=flt([2.0, 3.0]))],
          sp, "per-example counts differ (2/1 and 1/2) but the batch totals agree")
    single("sparse_mismatched_lengths_single", ex(ix=i64([1, 2]), val=flt([1.0])), sp)
    batch("sparse_index_only", [ex(ix=i64([1]))], sp, "value key missing")
    batch("sparse_index_wrong_dtype", [ex(ix=flt([1.0]), val=flt([1.0]))], sp, "index on the wire as float")


def ragged_cases():
    ref = ex(v=i64([1, 2, 3, 4, 5, 6]), rl=i64([2, 0, 4]), rs=i64([0, 2, 2, 6]), rst=i64([0, 2, 2]),
             rlim=i64([2, 2, 6]), rid=i64([0, 0, 2, 2, 2, 2]))
    ref2 = ex(v=i64([7, 8, 9]), rl=i64([1, 2]), rs=i64([0, 1, 3]), rst=i64([0, 1]),
              rlim=i64([1, 3]), rid=i64([0, 1, 1]))
    all3 = {"f": Ragged("float32"), "i": Ragged("int64"), "s": Ragged("string")}
    single("ragged_no_partitions_each_dtype", ex(f=flt([1.5, NAN]), i=i64([1, 2, 3]), s=byt([NB])), all3)
    batch("ragged_no_partitions_batch",
          [ex(f=flt([1.5, NAN]), i=i64([1, 2, 3]), s=byt([NB])), ex(f=flt([])), ex(i=i64([4]), s=byt([b"", b"y"]))],
          all3, "int32 row splits; empty list, missing")
    batch("ragged_no_partitions_batch_int64_splits",
          [ex(i=i64([1, 2, 3])), ex(), ex(i=i64([4]))], {"i": Ragged("int64", row_splits_dtype="int64")})
    for ptype, key in [("RowLengths", "rl"), ("RowSplits", "rs"), ("RowStarts", "rst"), ("RowLimits", "rlim"),
                       ("ValueRowIds", "rid")]:
        spec = {"r": Ragged("int64", value_key="v", partitions=[P(ptype, key)])}
        single("ragged_%s_single" % ptype, ref, spec, "values [1..6] -> [[1,2],[],[3,4,5,6]]")
        batch("ragged_%s_batch" % ptype, [ref, ref2], spec)
    single("ragged_reference_row_lengths_same_key", ex(r=i64([1, 2, 3, 4, 5, 6]), rl=i64([2, 0, 4])),
           {"r": Ragged("int64", partitions=[P("RowLengths", "rl")])}, "value_key null: values under the feature key")
    spec = {"r": Ragged("float32", value_key="v", partitions=[URL(2)])}
    recf = ex(v=flt([1, 2, 3, 4, 5, 6]))
    single("ragged_UniformRowLength_single", recf, spec)
    batch("ragged_UniformRowLength_batch", [recf, ex(v=flt([7, 8])), ex(v=flt([]))], spec)
    batch("ragged_UniformRowLength_not_divisible_batch", [ex(v=flt([1, 2, 3]))], spec)
    single("ragged_UniformRowLength_not_divisible_single", ex(v=flt([1, 2, 3])), spec)
    # two-level combos
    two = ex(v=i64(range(12)), rl=i64([2, 0, 4]), rl4=i64([2, 0, 4, 0]), outer=i64([0, 1, 3]),
             inner=i64([1, 2, 3]))
    two2 = ex(v=i64([20, 21, 22, 23]), rl=i64([1, 1]), rl4=i64([1, 1, 0, 2]), outer=i64([0, 2]), inner=i64([2, 2]))
    spec_rl_url = {"r": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl"), URL(2)])}
    single("ragged_RowLengths_UniformRowLength_single", two, spec_rl_url,
           "values 0..11 -> 6 rows of 2 -> row lengths [2,0,4]")
    batch("ragged_RowLengths_UniformRowLength_batch", [two, two2], spec_rl_url)
    spec_url_rl = {"r": Ragged("int64", value_key="v", partitions=[URL(2), P("RowLengths", "rl4")])}
    single("ragged_UniformRowLength_RowLengths_single", ex(v=i64([1, 2, 3, 4, 5, 6]), rl4=i64([2, 0, 4, 0])),
           spec_url_rl, "row lengths [2,0,4,0] -> 4 rows -> 2 rows of 2")
    batch("ragged_UniformRowLength_RowLengths_batch",
          [ex(v=i64([1, 2, 3, 4, 5, 6]), rl4=i64([2, 0, 4, 0])), ex(v=i64([7, 8]), rl4=i64([1, 1]))], spec_url_rl)
    spec_rs_rl = {"r": Ragged("int64", value_key="v", partitions=[P("RowSplits", "outer"), P("RowLengths", "inner")])}
    rec_rs_rl = ex(v=i64([1, 2, 3, 4, 5, 6]), outer=i64([0, 1, 3]), inner=i64([1, 2, 3]))
    single("ragged_RowSplits_RowLengths_single", rec_rs_rl, spec_rs_rl)
    batch("ragged_RowSplits_RowLengths_batch",
          [rec_rs_rl, ex(v=i64([7, 8, 9, 10]), outer=i64([0, 2, 2]), inner=i64([2, 2])), ex()], spec_rs_rl,
          "third example has nothing (missing keys)")
    spec_3 = {"r": Ragged("string", value_key="v", partitions=[P("RowLengths", "a"), P("ValueRowIds", "b"), URL(1)],
                          row_splits_dtype="int64")}
    batch("ragged_three_partitions_batch",
          [ex(v=byt([b"a", b"b", b"c"]), a=i64([1, 2]), b=i64([0, 2, 2])), ex(v=byt([b"d"]), a=i64([1]), b=i64([0]))],
          spec_3, "RowLengths, ValueRowIds, UniformRowLength(1); int64 splits")
    # row_splits_dtype
    for rsd in ("int32", "int64"):
        spec = {"r": Ragged("float32", value_key="v", partitions=[P("RowLengths", "rl")], row_splits_dtype=rsd)}
        batch("ragged_row_splits_dtype_%s_batch" % rsd,
              [ex(v=flt([1, 2, 3]), rl=i64([1, 2])), ex(v=flt([4]), rl=i64([0, 1]))], spec)
        single("ragged_row_splits_dtype_%s_single" % rsd, ex(v=flt([1, 2, 3]), rl=i64([1, 2])), spec)
    batch("ragged_shared_value_key",
          [ex(v=i64([1, 2, 3, 4]), rl=i64([1, 3]), rs=i64([0, 2, 4]))],
          {"v": Ragged("int64"), "a": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl")]),
           "b": Ragged("int64", value_key="v", partitions=[P("RowSplits", "rs")])},
          "three features use value key 'v' (one under its own name)")
    # empty
    batch("ragged_empty_values",
          [ex(v=i64([]), rl=i64([0, 0])), ex(v=i64([]), rl=i64([])), ex()],
          {"r": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl")])})
    single("ragged_empty_values_single", ex(v=byt([]), rl=i64([0, 0, 0])),
           {"r": Ragged("string", value_key="v", partitions=[P("RowLengths", "rl")])})
    single("ragged_missing_single", ex(), {"r": Ragged("float32", value_key="v", partitions=[P("RowLengths", "rl")])})
    # invalid partitions
    bad_rl = ex(v=i64([1, 2, 3, 4, 5, 6]), rl=i64([2, 0, 3]))
    for validate in (False, True):
        spec = {"r": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl")], validate=validate)}
        sfx = "validate" if validate else "novalidate"
        single("ragged_bad_row_lengths_sum_single_%s" % sfx, bad_rl, spec, "row lengths sum to 5, 6 values")
        batch("ragged_bad_row_lengths_sum_batch_%s" % sfx, [bad_rl], spec, "row lengths sum to 5, 6 values")
    spec = {"r": Ragged("int64", value_key="v", partitions=[P("RowSplits", "rs")], validate=True)}
    single("ragged_bad_row_splits_start_single_validate", ex(v=i64([1, 2, 3]), rs=i64([1, 2, 3])), spec,
           "row splits do not start at 0")
    batch("ragged_bad_row_splits_start_batch_validate", [ex(v=i64([1, 2, 3]), rs=i64([1, 2, 3]))], spec,
          "row splits do not start at 0")
    spec = {"r": Ragged("int64", value_key="v", partitions=[P("ValueRowIds", "rid")], validate=True)}
    single("ragged_bad_value_rowids_single_validate", ex(v=i64([1, 2, 3]), rid=i64([1, 0, 0])), spec,
           "value_rowids not sorted")
    batch("ragged_bad_value_rowids_batch_validate", [ex(v=i64([1, 2, 3]), rid=i64([1, 0, 0]))], spec,
          "value_rowids not sorted")
    spec = {"r": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl")])}
    batch("ragged_partition_wrong_dtype", [ex(v=i64([1, 2]), rl=flt([2.0]))], spec, "row lengths on the wire as float")
    batch("ragged_values_wrong_dtype", [ex(v=flt([1.0]), rl=i64([1]))], spec)
    batch("ragged_partition_missing", [ex(v=i64([1, 2]))], spec, "no row lengths key")
    batch("ragged_partition_missing_validate", [ex(v=i64([1, 2]))],
          {"r": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl")], validate=True)},
          "no row lengths key")
    single("ragged_partition_missing_single", ex(v=i64([1, 2])), spec, "no row lengths key")


def fixed_len_sequence_in_example_cases():
    batch("fls_allow_missing_false", [ex(i=i64([1, 2]))], {"i": FixedSeq([], "int64", allow_missing=False)})
    all3 = {"f": FixedSeq([], "float32", True), "i": FixedSeq([], "int64", True), "s": FixedSeq([], "string", True)}
    batch("fls_scalar_padding_each_dtype",
          [ex(f=flt([1, 2, 3]), i=i64([1, 2, 3]), s=byt([b"a", b"b", b"c"])),
           ex(f=flt([4]), i=i64([4]), s=byt([b"d"])),
           ex(),
           ex(f=flt([5, 6]), i=i64([5, 6]), s=byt([b"e", b""]))], all3, "lengths 3, 1, missing, 2; no default")
    batch("fls_scalar_default_padding",
          [ex(f=flt([1, 2, 3]), i=i64([1, 2, 3]), s=byt([b"a", b"b", b"c"])), ex(f=flt([]), i=i64([]), s=byt([])),
           ex(f=flt([4]), i=i64([4]), s=byt([b"d"]))],
          {"f": FixedSeq([], "float32", True, NAN), "i": FixedSeq([], "int64", True, -1),
           "s": FixedSeq([], "string", True, b"pad")})
    batch("fls_shape2_padding",
          [ex(f=flt([1, 2, 3, 4]), i=i64([1, 2])), ex(f=flt([5, 6]), i=i64([3, 4, 5, 6, 7, 8])), ex()],
          {"f": FixedSeq([2], "float32", True), "i": FixedSeq([2], "int64", True, 9)})
    batch("fls_shape2x1_padding",
          [ex(i=i64([1, 2])), ex(i=i64([3, 4, 5, 6]))], {"i": FixedSeq([2, 1], "int64", True)})
    batch("fls_count_not_divisible", [ex(f=flt([1, 2])), ex(f=flt([1, 2, 3]))],
          {"f": FixedSeq([2], "float32", True)}, "example 1 has 3 values for shape [2]")
    batch("fls_all_missing", [ex(), ex(x=i64([1]))],
          {"f": FixedSeq([], "float32", True), "s": FixedSeq([2], "string", True)},
          "no example has the feature")
    batch("fls_all_empty", [ex(f=flt([])), ex(f=flt([]))], {"f": FixedSeq([3], "float32", True)})
    batch("fls_default_nonscalar", [ex(i=i64([1, 2])), ex()], {"i": FixedSeq([2], "int64", True, [7, 8])},
          "default_value [7, 8] for shape [2]")
    batch("fls_wrong_dtype", [ex(i=flt([1.0]))], {"i": FixedSeq([], "int64", True)})
    single("fls_single_example", ex(f=flt([1, 2, 3, 4])), {"f": FixedSeq([2], "float32", True)})
    single("fls_single_example_missing", ex(),
           {"f": FixedSeq([2], "float32", True), "i": FixedSeq([], "int64", True, 5)})
    batch("empty_batch_all_kinds", [],
          {"fixed": Fixed([2], "float32", [0.0, 0.0]), "fixed_nodef": Fixed([], "int64"), "var": VarLen("string"),
           "sp": Sparse("ix", "val", "float32", 10), "rag": Ragged("int64"),
           "rag2": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl")]),
           "fls": FixedSeq([3], "int64", True)}, "zero records")


def sequence_example_cases():
    rec = seqex(
        context={"len": i64([3]), "w": flt([0.5, -1.25]), "id": byt([b"seq-0"]), "tags": byt([b"a", b"b", NB]),
                 "rtags": flt([1.0, 2.0, 3.0]), "rl": i64([2, 1])},
        feature_lists={
            "tok": flist(i64([1]), i64([2]), i64([3])),
            "tok2": flist(i64([1, 2]), i64([3, 4]), i64([5, 6])),
            "f": flist(flt([0.5]), flt([NAN]), flt([-0.0])),
            "f2": flist(flt([1, 2]), flt([3, 4]), flt([5, 6])),
            "s": flist(byt([b"x"]), byt([b""]), byt([NB])),
            "s2": flist(byt([b"a", b"b"]), byt([b"c", b"d"]), byt([b"e", b"f"])),
            "rag": flist(i64([1, 2, 3]), i64([]), i64([4])),
            "ragf": flist(flt([1.5]), flt([2.5, 3.5])),
            "rl": flist(i64([1, 2]), i64([]), i64([1])),
            "empty": flist(),
        })
    ctx_spec = {"len": Fixed([], "int64"), "w": Fixed([2], "float32"), "id": Fixed([], "string"),
                "tags": VarLen("string"), "r": Ragged("float32", value_key="rtags"),
                "r2": Ragged("float32", value_key="rtags", partitions=[P("RowLengths", "rl")]),
                "opt": Fixed([], "int64", -1), "optv": VarLen("float32")}
    seq_single("seq_single_context_kinds", rec, ctx_spec, None, "context FixedLen/VarLen/Ragged; no sequence spec")
    seq_single("seq_single_context_varlen_ragged_same_key", rec,
               {"tags": VarLen("string"), "tags_r": Ragged("string", value_key="tags")}, None)
    seq_single("seq_single_fls_scalar_each_dtype", rec, None,
               {"tok": FixedSeq([], "int64"), "f": FixedSeq([], "float32"), "s": FixedSeq([], "string")})
    seq_single("seq_single_fls_shape2_each_dtype", rec, None,
               {"tok2": FixedSeq([2], "int64"), "f2": FixedSeq([2], "float32"), "s2": FixedSeq([2], "string")})
    seq_single("seq_single_fls_shape2x1", rec, None, {"tok2": FixedSeq([2, 1], "int64")})
    seq_single("seq_single_varlen", rec, {"len": Fixed([], "int64")},
               {"rag": VarLen("int64"), "ragf": VarLen("float32"), "s2": VarLen("string"), "empty": VarLen("int64")},
               "VarLen in feature_lists; 'empty' has zero steps")
    seq_single("seq_single_ragged", rec, None,
               {"rag": Ragged("int64"), "ragf": Ragged("float32", row_splits_dtype="int64"),
                "s_r": Ragged("string", value_key="s2"), "empty": Ragged("int64")})
    seq_single("seq_single_ragged_partition", rec, None,
               {"r": Ragged("int64", value_key="rag", partitions=[P("RowLengths", "rl")])},
               "RaggedFeature with a RowLengths partition in feature_lists")
    seq_single("seq_single_ragged_uniform", rec, None,
               {"r": Ragged("int64", value_key="tok2", partitions=[URL(2)])},
               "RaggedFeature with UniformRowLength in feature_lists")
    seq_single("seq_single_missing_allow_missing", rec, None,
               {"nope": FixedSeq([], "int64", allow_missing=True), "nope2": FixedSeq([2], "float32", True),
                "empty": FixedSeq([], "int64")},
               "'nope' missing, 'empty' present with zero steps")
    seq_single("seq_single_fls_default_rejected", rec, None, {"nope2": FixedSeq([2], "float32", True, 1.0)},
               "default_value on a sequence FixedLenSequenceFeature")
    seq_single("seq_single_missing_no_allow", rec, None, {"nope": FixedSeq([], "int64")})
    seq_single("seq_single_not_divisible", seqex(feature_lists={"f": flist(flt([1, 2]), flt([3, 4, 5]))}), None,
               {"f": FixedSeq([2], "float32")}, "step 1 has 3 values for shape [2]")
    seq_single("seq_single_step_empty_scalar", seqex(feature_lists={"f": flist(flt([1]), flt([]))}), None,
               {"f": FixedSeq([], "float32")}, "step 1 is an empty list")
    seq_single("seq_single_wrong_dtype", rec, None, {"f": FixedSeq([], "int64")})
    seq_single("seq_single_wrong_dtype_varlen", rec, None, {"s": VarLen("float32")})
    seq_single("seq_single_context_missing_no_default", rec, {"nope": Fixed([], "float32")}, None)
    seq_single("seq_single_context_wrong_dtype", rec, {"len": Fixed([], "float32")}, None)
    seq_single("seq_single_empty_proto", b"", {"c": Fixed([], "int64", 3), "cv": VarLen("string")},
               {"fl": FixedSeq([2], "float32", True), "vl": VarLen("int64"), "rg": Ragged("string")},
               "SequenceExample b'' with everything missing")
    seq_single("seq_single_both_null", rec, None, None)

    recs = [
        seqex(context={"id": byt([b"a"]), "n": i64([3]), "w": flt([0.5, 1.5]), "tags": byt([b"t1", b"t2"])},
              feature_lists={"tok": flist(i64([1]), i64([2]), i64([3])),
                             "f2": flist(flt([1, 2]), flt([3, 4]), flt([5, 6])),
                             "v": flist(i64([1, 2]), i64([])),
                             "r": flist(flt([0.5]), flt([]), flt([1.5, 2.5])),
                             "s": flist(byt([b"x"]))}),
        seqex(context={"id": byt([b"b"])},
              feature_lists={"tok": flist(i64([4])),
                             "f2": flist(),
                             "v": flist(i64([3]), i64([4, 5, 6]), i64([7])),
                             "r": flist(flt([3.5])),
                             "s": flist(byt([b"y"]), byt([b"z"]), byt([b""]))}),
        seqex(context={"id": byt([b"c"]), "n": i64([0]), "w": flt([2.5]), "tags": byt([b""])},
              feature_lists={"tok": flist(i64([5]), i64([6])),
                             "f2": flist(flt([7, 8]))}),
    ]
    seq_batch("seq_batch_varied_lengths", recs,
              {"id": Fixed([], "string"), "n": Fixed([], "int64", -1), "tags": VarLen("string"),
               "nr": Ragged("float32", value_key="w")},
              {"tok": FixedSeq([], "int64"), "f2": FixedSeq([2], "float32"), "v": VarLen("int64"),
               "vr": Ragged("float32", value_key="r", row_splits_dtype="int64"),
               "s": FixedSeq([], "string", allow_missing=True)},
              "3 sequences with 3/1/2 steps etc.; lengths dict")
    seq_batch("seq_batch_zero_padding", recs, None,
              {"tok": FixedSeq([], "int64"), "f2": FixedSeq([2], "float32"), "s": FixedSeq([], "string", True),
               "nope": FixedSeq([], "int64", True)}, "'nope' in no example; 's' missing in example 2")
    seq_batch("seq_batch_fls_default_rejected", recs, None, {"tok": FixedSeq([], "int64", default=-9)})
    seq_batch("seq_batch_context_dense_ragged_same_key", recs,
              {"n": Fixed([], "int64", -1), "nr": Ragged("int64", value_key="n")}, None)
    seq_batch("seq_batch_missing_no_allow", recs, None, {"s": FixedSeq([], "string")},
              "example 2 has no 's' list")
    seq_batch("seq_batch_context_only", recs, {"id": Fixed([], "string"), "n": Fixed([], "int64", 7)}, None)
    seq_batch("seq_batch_context_missing_no_default", recs, {"n": Fixed([], "int64")}, None,
              "example 1 has no 'n'")
    seq_batch("seq_batch_not_divisible", recs + [seqex(feature_lists={"f2": flist(flt([1, 2]), flt([1]))})], None,
              {"f2": FixedSeq([2], "float32", True)}, "example 3, step 1 has 1 value for shape [2]")
    seq_batch("seq_batch_wrong_dtype", recs + [seqex(feature_lists={"tok": flist(i64([1]), flt([1]))})], None,
              {"tok": FixedSeq([], "int64", True)}, "example 3, step 1 has floats")
    seq_batch("seq_batch_context_wrong_dtype", recs, {"w": VarLen("int64")}, None)
    seq_batch("seq_batch_ragged_partition", [
        seqex(feature_lists={"v": flist(i64([1, 2, 3]), i64([4])), "rl": flist(i64([1, 2]), i64([0, 1]))}),
        seqex(feature_lists={"v": flist(i64([5, 6])), "rl": flist(i64([2]))})], None,
        {"r": Ragged("int64", value_key="v", partitions=[P("RowLengths", "rl")])},
        "RowLengths partition in feature_lists, batched")
    seq_batch("seq_batch_ragged_uniform", [
        seqex(feature_lists={"v": flist(i64([1, 2, 3, 4]), i64([5, 6]))}),
        seqex(feature_lists={"v": flist(i64([]))})], None,
        {"r": Ragged("int64", value_key="v", partitions=[URL(2)], row_splits_dtype="int64")},
        "UniformRowLength in feature_lists, batched")
    seq_batch("seq_batch_empty", [], {"c": Fixed([], "int64", 0), "cv": VarLen("float32")},
              {"fl": FixedSeq([2], "float32", True), "vl": VarLen("int64"), "rg": Ragged("string")}, "zero records")


def build_cases():
    fixed_len_cases()
    varlen_cases()
    sparse_cases()
    ragged_cases()
    fixed_len_sequence_in_example_cases()
    sequence_example_cases()
    for c in CASES:
        c.update(run_case(c))
    return CASES


def dump_json(p, obj):
    with open(p, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, indent=1, sort_keys=True)
        f.write("\n")


def main():
    tf.config.set_visible_devices([], "GPU")
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    cases = build_cases()
    dump_json(os.path.join(OUT, "cases.json"), cases)
    # Run again: the outputs must not change from one run to the next.
    again = [dict(c, **run_case(c)) for c in cases]
    assert json.dumps(again, sort_keys=True) == json.dumps(cases, sort_keys=True)
    with open(os.path.join(OUT, "cases.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    manifest = {
        "generator": "tests/data/make_golden_parse.py",
        "versions": {"tensorflow": tf.__version__, "numpy": np.__version__,
                     "protobuf": metadata.version("protobuf"), "python": sys.version.split()[0]},
        "files": {"cases.json": {"sha256": digest, "size": os.path.getsize(os.path.join(OUT, "cases.json")),
                                 "cases": len(cases)}},
    }
    dump_json(os.path.join(OUT, "manifest.json"), manifest)
    n_err = sum(1 for c in cases if "error" in c)
    print("wrote %d cases (%d errors) to %s" % (len(cases), n_err, OUT))


if __name__ == "__main__":
    main()
