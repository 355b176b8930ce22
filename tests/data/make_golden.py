"""Generate the TensorFlow golden files under tests/data/golden/.

Run by hand, from the repository root, with a Python that has real TensorFlow
(tensorflow-cpu 2.21 was used), numpy and the `tfrecord` PyPI package:

    /work/tfenv/bin/python tests/data/make_golden.py

The script is deterministic (fixed contents, protobuf maps serialized with
``deterministic=True``, TF's gzip header has mtime 0) and deletes and rewrites the
files directly in ``tests/data/golden/`` (not ``golden/parse/``, see make_golden_parse.py). It never imports
tfr_torch: everything in the golden files is what TensorFlow itself writes and decodes.

Files written (all under tests/data/golden/):

* ``examples.tfrecord``: tf.train.Example records (TFRecordWriter, no
  compression); the same records in ``examples-gzip.tfrecord``,
  ``examples-zlib.tfrecord`` (default level), ``examples-{gzip,zlib}-{1,9}.tfrecord``.
  ``examples.json``: one entry per record,
  ``{"features": {key: {"kind": "int64"|"float"|"bytes", "values": [...]}},
  "kindless": [keys whose Feature has no kind set, sorted]}``, values as decoded
  by TF's C++ parser (tf.io.parse_single_example with VarLenFeature).
* ``sequence_examples.tfrecord`` + ``sequence_examples.json``: per record
  ``{"context": {key: {"kind", "values"}}, "feature_lists": {key: [{"kind", "values"}, ...per step]}}``.
* ``tensors.tfrecord`` + ``tensors.json``: one tf.io.serialize_tensor record per
  entry ``{"dtype": tf dtype name, "shape": [...], "values": [flat row-major]}``
  as tf.io.parse_tensor returns it.
* ``tensor_protos.tfrecord`` + ``tensor_protos.json``: TensorProto records in
  the ``*_val`` forms; entries as in tensors.json plus ``"proto_hex"``,
  ``"case"`` and ``"made_with"``.
* ``empty.tfrecord`` (0 records, 0 bytes), ``empty-record.tfrecord`` (one
  zero-length record), ``one-record.tfrecord`` (one Example).
* ``large-gzip.tfrecord``: one 17_000_000-byte record, GZIP-compressed.
* ``*.tfrecord.idx``: index files made by ``tfrecord.tools.tfrecord2idx.create_index``.
* ``manifest.json``: versions, every file's size/sha256/record count and
  compression type/level.

Value encodings in all JSON files:
  int64/int*/uint*  -> JSON integers
  float32           -> IEEE bit pattern as unsigned int (np.float32(x).view(np.uint32))
  float16, bfloat16 -> uint16 bit pattern; float64 -> uint64 bit pattern
  complex64/128     -> [real_bits, imag_bits] pairs (uint32 / uint64 bits)
  bool              -> true/false
  bytes / string    -> lowercase hex strings
"""

import hashlib
import json
import os
import sys
from importlib import metadata

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2


def _load_create_index():
    """tfrecord.tools.tfrecord2idx.create_index, loaded without importing the
    `tfrecord` package: its __init__ registers its own copy of example.proto,
    which clashes with TensorFlow's ("duplicate symbol 'tensorflow.BytesList'").
    The tfrecord2idx module itself only uses the standard library."""
    import importlib.util

    dist = metadata.distribution("tfrecord")
    src = dist.locate_file("tfrecord/tools/tfrecord2idx.py")
    spec = importlib.util.spec_from_file_location("_tfrecord2idx", str(src))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.create_index


create_index = _load_create_index()

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "golden")

F32 = np.float32
BF16 = tf.bfloat16.as_numpy_dtype


def path(name):
    return os.path.join(OUT, name)


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------

def f32_from_bits(bits):
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def i64(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def flt(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def byt(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def example(features):
    return tf.train.Example(features=tf.train.Features(feature=features))


def ser(msg):
    # Map fields would otherwise be written in (possibly run-dependent) hash order.
    return msg.SerializeToString(deterministic=True)


# Minimal protobuf encoder for the hand-made records (unpacked lists, duplicate keys).
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


KIND_NAMES = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes"}
KIND_DTYPES = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string}


def enc_values(kind, values):
    if kind == "int64":
        return [int(v) for v in np.asarray(values, dtype=np.int64)]
    if kind == "float":
        return [int(v) for v in np.asarray(values, dtype=np.float32).view(np.uint32)]
    if kind == "bytes":
        return [bytes(v).hex() for v in values]
    raise ValueError(kind)


def feature_to_json(feature):
    kind = feature.WhichOneof("kind")
    if kind is None:
        return None
    return {"kind": KIND_NAMES[kind], "values": enc_values(KIND_NAMES[kind], getattr(feature, kind).value)}


def write_records(name, records, compression_type=None, compression_level=None):
    if compression_type is None:
        options = None
    else:
        options = tf.io.TFRecordOptions(compression_type=compression_type, compression_level=compression_level)
    with tf.io.TFRecordWriter(path(name), options=options) as w:
        for r in records:
            w.write(r)


def dump_json(name, obj):
    with open(path(name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------
# 1. tf.train.Example
# --------------------------------------------------------------------------

SUBNORMAL_F32 = f32_from_bits(1)  # 1.4e-45
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)  # smallest normal
LONG_BYTES = bytes((i * 7 + 3) % 256 for i in range(1000))


def make_examples():
    """Returns (serialized records, descriptions)."""
    recs = []

    def add(desc, rec):
        recs.append((desc, rec if isinstance(rec, bytes) else ser(rec)))

    add("single values of each kind", example({
        "i": i64([42]), "f": flt([1.5]), "b": byt([b"hello"])}))
    add("lists of each kind, up to 50 values", example({
        "ints": i64([i * 1000003 - 25000000 for i in range(50)]),
        "floats": flt([i * 0.25 - 6.0 for i in range(50)]),
        "strs": byt([("s%d" % i).encode() for i in range(10)])}))
    add("empty lists of each kind", example({
        "e_int": tf.train.Feature(int64_list=tf.train.Int64List()),
        "e_float": tf.train.Feature(float_list=tf.train.FloatList()),
        "e_bytes": tf.train.Feature(bytes_list=tf.train.BytesList())}))
    add("Feature with no kind set", example({
        "none": tf.train.Feature(), "present": i64([1])}))
    add("unicode keys", example({
        "größe": flt([1.85]), "日本語": byt(["こんにちは".encode()]), "emoji😀": i64([7])}))
    add("int64 extremes", example({
        "extremes": i64([-2**63, 2**63 - 1, 0, -1, 1]),
        "min": i64([-2**63]), "max": i64([2**63 - 1])}))
    add("special floats", example({
        "special": flt([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, SUBNORMAL_F32,
                        F32_MAX, -F32_MAX, F32_TINY, 0.1, 3.14159265358979]),
        "nan": flt([float("nan")]), "neg_zero": flt([-0.0])}))
    add("special bytes", example({
        "special": byt([b"", b"\xff\x00\xfe", LONG_BYTES]),
        "empty_value": byt([b""]), "non_utf8": byt([b"\xff\x00\xfe"]), "long": byt([LONG_BYTES]),
        "utf8": byt(["héllo wörld".encode()])}))
    add("Example() with no features field (serializes to b'')", tf.train.Example())
    add("Example with an empty features map (serializes to b'\\x0a\\x00')",
        tf.train.Example(features=tf.train.Features()))
    many = {}
    for k in range(30):
        key = "feat_%02d" % k
        if k % 3 == 0:
            many[key] = i64(range(k % 5))
        elif k % 3 == 1:
            many[key] = flt([k / 8.0] * (k % 4 + 1))
        else:
            many[key] = byt([key.encode()] * (k % 3))
    add("30 features", example(many))
    add("mixed: every kind, empty, kindless, empty-string key", example({
        "": i64([3]), "a": i64([-5, 5]), "b": flt([]), "c": byt([b"x", b""]),
        "d": tf.train.Feature(), "e": tf.train.Feature()}))
    # Hand-encoded: numeric lists written unpacked (one tag per value); TF writes packed.
    unpacked_int = ld(3, b"".join(varint(1 << 3) + varint(v) for v in (1, -2, 2**63 - 1, -2**63)))
    unpacked_flt = ld(2, b"".join(bytes([(1 << 3) | 5]) + np.float32(v).tobytes() for v in (1.5, -3.0, float("inf"))))
    add("hand-encoded: unpacked int64 and float lists",
        ld(1, map_entry("unpacked_int", unpacked_int) + map_entry("unpacked_float", unpacked_flt)))
    # Hand-encoded: the same map key twice; the last entry wins (even with a different kind).
    add("hand-encoded: duplicate map keys, last wins",
        ld(1, map_entry("dup", ld(3, ld(1, varint(5))))
           + map_entry("other", ld(1, ld(1, b"keep")))
           + map_entry("dup", ld(2, ld(1, np.float32(2.5).tobytes())))
           + map_entry("dup2", ld(3, ld(1, varint(1))))
           + map_entry("dup2", ld(3, ld(1, varint(6) + varint(7))))))
    return recs


def decode_example_with_tf(rec):
    ex = tf.train.Example.FromString(rec)
    spec, kindless, py_values = {}, [], {}
    for key, feat in ex.features.feature.items():
        j = feature_to_json(feat)
        if j is None:
            kindless.append(key)
        else:
            spec[key] = tf.io.VarLenFeature(KIND_DTYPES[j["kind"]])
            py_values[key] = j
    parsed = tf.io.parse_single_example(rec, spec) if spec else {}
    features = {}
    for key, sp in parsed.items():
        kind = py_values[key]["kind"]
        values = enc_values(kind, sp.values.numpy())
        # TF's C++ parser and the Python protobuf decode must agree.
        assert values == py_values[key]["values"], (key, values, py_values[key])
        features[key] = {"kind": kind, "values": values}
    # A kindless feature reads as missing (no values) in TF.
    for key in kindless:
        sp = tf.io.parse_single_example(rec, {key: tf.io.VarLenFeature(tf.int64)})[key]
        assert sp.values.shape[0] == 0
    return {"features": features, "kindless": sorted(kindless)}


# --------------------------------------------------------------------------
# 2. tf.train.SequenceExample
# --------------------------------------------------------------------------

def flist(features):
    return tf.train.FeatureList(feature=list(features))


def seq_example(context=None, feature_lists=None):
    kw = {}
    if context is not None:
        kw["context"] = tf.train.Features(feature=context)
    if feature_lists is not None:
        kw["feature_lists"] = tf.train.FeatureLists(feature_list=feature_lists)
    return tf.train.SequenceExample(**kw)


def make_sequence_examples():
    recs = []
    recs.append(("context of each kind, lists of each kind with ragged steps, empty feature list",
                 seq_example(
                     context={"length": i64([4]), "weight": flt([0.5, -1.25]), "id": byt([b"seq-0"])},
                     feature_lists={
                         "tokens": flist([i64([1, 2, 3]), i64([4]), i64([]), i64([5, 6, 7, 8, 9])]),
                         "scores": flist([flt([0.5, 1.5]), flt([2.5, 3.5]), flt([-0.0, float("inf")])]),
                         "words": flist([byt([b"a", b"bc"]), byt([b""]), byt([b"\xff\x00\xfe", b"d", b"ef"])]),
                         "empty_list": flist([]),
                     })))
    recs.append(("no context, unicode keys",
                 seq_example(feature_lists={
                     "größe": flist([flt([1.0]), flt([2.0, 3.0])]),
                     "日本語": flist([byt(["語".encode()]), byt([])]),
                     "emoji😀": flist([i64([-2**63, 2**63 - 1])]),
                 })))
    recs.append(("no feature_lists, unicode context keys",
                 seq_example(context={
                     "größe": flt([float("nan"), SUBNORMAL_F32, F32_MAX]),
                     "日本語": byt([LONG_BYTES[:100]]),
                     "emoji😀": i64([0, -1]),
                 })))
    recs.append(("empty lists in context and steps, single-step lists",
                 seq_example(
                     context={"e_int": i64([]), "e_float": flt([]), "e_bytes": byt([])},
                     feature_lists={
                         "one_step": flist([i64([10])]),
                         "empty_steps": flist([flt([]), flt([]), flt([])]),
                         "mixed_lengths": flist([byt([]), byt([b"x"]), byt([b"y", b"z"]), byt([])]),
                         "also_empty": flist([]),
                     })))
    recs.append(("SequenceExample() with neither context nor feature_lists", tf.train.SequenceExample()))
    return [(d, ser(m)) for d, m in recs]


def decode_sequence_example(rec):
    se = tf.train.SequenceExample.FromString(rec)
    context = {}
    for key, feat in se.context.feature.items():
        j = feature_to_json(feat)
        assert j is not None
        context[key] = j
    feature_lists = {}
    for key, fl in se.feature_lists.feature_list.items():
        steps = [feature_to_json(f) for f in fl.feature]
        assert all(s is not None for s in steps)
        feature_lists[key] = steps

    # Cross-check with TF's C++ sequence parser.
    ctx_spec = {k: tf.io.VarLenFeature(KIND_DTYPES[v["kind"]]) for k, v in context.items()}
    seq_spec = {k: tf.io.VarLenFeature(KIND_DTYPES[v[0]["kind"]]) for k, v in feature_lists.items() if v}
    if not ctx_spec and not seq_spec:  # TF refuses two empty specs
        return {"context": context, "feature_lists": feature_lists}
    ctx, seq = tf.io.parse_single_sequence_example(rec, ctx_spec, seq_spec)
    for k, v in context.items():
        assert enc_values(v["kind"], ctx[k].values.numpy()) == v["values"], k
    for k, steps in feature_lists.items():
        if not steps:
            continue
        sp = seq[k]
        assert int(sp.dense_shape[0]) == len(steps), k
        flat = [x for s in steps for x in s["values"]]
        assert enc_values(steps[0]["kind"], sp.values.numpy()) == flat, k
    return {"context": context, "feature_lists": feature_lists}


# --------------------------------------------------------------------------
# 3. serialize_tensor / parse_tensor
# --------------------------------------------------------------------------

BITS_VIEW = {
    "float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64,
    "complex64": np.uint32, "complex128": np.uint64,
}


def encode_tensor_values(dtype_name, arr):
    flat = np.asarray(arr).reshape(-1)
    if dtype_name in ("float16", "bfloat16", "float32", "float64"):
        return [int(v) for v in flat.view(BITS_VIEW[dtype_name])]
    if dtype_name in ("complex64", "complex128"):
        bits = flat.view(BITS_VIEW[dtype_name]).reshape(-1, 2)
        return [[int(r), int(i)] for r, i in bits]
    if dtype_name == "bool":
        return [bool(v) for v in flat]
    if dtype_name == "string":
        return [bytes(v).hex() for v in flat]
    return [int(v) for v in flat]


def float_from_bits(np_dtype, bits_dtype, bits, shape):
    return np.array(bits, dtype=bits_dtype).view(np_dtype).reshape(shape)


def make_tensor_cases():
    """Returns a list of (description, tf.Tensor)."""
    cases = []

    def add(desc, t):
        cases.append((desc, t))

    # float16: bits: max 0x7bff, min 0xfbff, nan 0x7e00, inf 0x7c00, -inf 0xfc00, -0 0x8000,
    # smallest subnormal 0x0001, smallest normal 0x0400, 1.0 0x3c00
    f16 = lambda bits, shape: tf.constant(float_from_bits(np.float16, np.uint16, bits, shape))
    add("float16 scalar", f16([0x3E00], []))
    add("float16 2x3 extremes", f16([0xFBFF, 0x7BFF, 0x7E00, 0x7C00, 0xFC00, 0x8000], [2, 3]))
    add("float16 subnormal/normal", f16([0x0001, 0x0400, 0x3C00, 0xBC00], [4]))
    add("float16 zero-size", f16([], [0, 3]))
    # bfloat16: max 0x7f7f, min 0xff7f, nan 0x7fc0, inf 0x7f80, -inf 0xff80, -0 0x8000, subnormal 0x0001
    b16 = lambda bits, shape: tf.constant(float_from_bits(BF16, np.uint16, bits, shape), dtype=tf.bfloat16)
    add("bfloat16 scalar", b16([0x3FC0], []))
    add("bfloat16 2x3 extremes", b16([0xFF7F, 0x7F7F, 0x7FC0, 0x7F80, 0xFF80, 0x8000], [2, 3]))
    add("bfloat16 subnormal/normal", b16([0x0001, 0x0080, 0x3F80, 0xBF80], [4]))
    add("bfloat16 zero-size", b16([], [0, 3]))
    f32 = lambda bits, shape: tf.constant(float_from_bits(np.float32, np.uint32, bits, shape))
    add("float32 scalar", tf.constant(np.float32(1.5)))
    add("float32 2x3 extremes", f32([0xFF7FFFFF, 0x7F7FFFFF, 0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000], [2, 3]))
    add("float32 subnormal/normal", f32([0x00000001, 0x00800000, 0x3F800000, 0x3DCCCCCD], [4]))
    add("float32 zero-size", f32([], [0, 3]))
    add("float32 zero-size rank 1", f32([], [0]))
    add("float32 rank 4", f32([0x40000000], [1, 1, 1, 1]))
    f64 = lambda bits, shape: tf.constant(float_from_bits(np.float64, np.uint64, bits, shape))
    add("float64 scalar", tf.constant(np.float64(-2.75)))
    add("float64 2x3 extremes", f64([0xFFEFFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x7FF8000000000000,
                                     0x7FF0000000000000, 0xFFF0000000000000, 0x8000000000000000], [2, 3]))
    add("float64 subnormal/normal", f64([0x0000000000000001, 0x0010000000000000, 0x3FF0000000000000,
                                         0x3FB999999999999A], [4]))
    add("float64 zero-size", f64([], [0, 3]))
    for name, npdt in [("int8", np.int8), ("int16", np.int16), ("int32", np.int32), ("int64", np.int64)]:
        info = np.iinfo(npdt)
        add(name + " scalar", tf.constant(npdt(-7)))
        add(name + " 2x3 extremes", tf.constant(np.array([info.min, info.max, 0, -1, 1, 42], dtype=npdt).reshape(2, 3)))
        add(name + " zero-size", tf.constant(np.zeros([0, 3], dtype=npdt)))
    add("int32 zero-size rank 3", tf.constant(np.zeros([2, 0, 4], dtype=np.int32)))
    for name, npdt in [("uint8", np.uint8), ("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)]:
        info = np.iinfo(npdt)
        add(name + " scalar", tf.constant(npdt(200)))
        add(name + " 2x3 extremes",
            tf.constant(np.array([0, info.max, 1, info.max - 1, 2, 127], dtype=npdt).reshape(2, 3)))
        add(name + " zero-size", tf.constant(np.zeros([0, 3], dtype=npdt)))
    add("bool scalar", tf.constant(True))
    add("bool 2x3", tf.constant(np.array([[True, False, True], [False, False, True]])))
    add("bool zero-size", tf.constant(np.zeros([0, 3], dtype=bool)))
    c64 = lambda bits, shape: tf.constant(float_from_bits(np.complex64, np.uint32, bits, shape))
    add("complex64 scalar", tf.constant(np.complex64(1.5 - 2j)))
    add("complex64 2x3 extremes", c64([0x7FC00000, 0x7F800000, 0x80000000, 0x3F800000, 0x7F7FFFFF, 0xFF7FFFFF,
                                       0xFF800000, 0x00000001, 0x00000000, 0x80000000, 0x40000000, 0xC0000000], [2, 3]))
    add("complex64 zero-size", tf.constant(np.zeros([0, 3], dtype=np.complex64)))
    c128 = lambda bits, shape: tf.constant(float_from_bits(np.complex128, np.uint64, bits, shape))
    add("complex128 scalar", tf.constant(np.complex128(-0.5 + 4j)))
    add("complex128 2x3 extremes", c128([
        0x7FF8000000000000, 0x7FF0000000000000, 0x8000000000000000, 0x3FF0000000000000,
        0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0xFFF0000000000000, 0x0000000000000001,
        0x0000000000000000, 0x8000000000000000, 0x4000000000000000, 0xC000000000000000], [2, 3]))
    add("complex128 zero-size", tf.constant(np.zeros([0, 3], dtype=np.complex128)))
    add("string scalar", tf.constant(b"hello"))
    add("string 2x3 (empty, non-UTF-8, UTF-8, long)", tf.constant(np.array(
        [[b"", b"\xff\x00\xfe", "größe".encode()], [b"a", LONG_BYTES[:300], b"\x00"]], dtype=object)))
    add("string scalar empty", tf.constant(b""))
    add("string scalar non-UTF-8", tf.constant(b"\xff\x00\xfe"))
    add("string zero-size", tf.constant(np.zeros([0, 3], dtype=object).astype(bytes), dtype=tf.string))
    add("string zero-size rank 1", tf.constant([], dtype=tf.string))
    return cases


def tensor_entry(record, dtype):
    t = tf.io.parse_tensor(record, out_type=dtype)
    arr = t.numpy()
    return {
        "dtype": dtype.name,
        "shape": [int(d) for d in t.shape],
        "values": encode_tensor_values(dtype.name, arr),
    }


# --------------------------------------------------------------------------
# 4. TensorProto *_val forms
# --------------------------------------------------------------------------

def shape_proto(dims):
    return tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])


def hand_proto(dtype_enum, dims, **vals):
    p = tensor_pb2.TensorProto(dtype=dtype_enum, tensor_shape=shape_proto(dims))
    for field, v in vals.items():
        getattr(p, field).extend(v)
    return p


def make_tensor_proto_cases():
    """Returns a list of (case, made_with, tf dtype, TensorProto)."""
    cases = []
    mtp = tf.make_tensor_proto

    def add(case, made_with, dtype, proto):
        # Make sure no case silently fell back to tensor_content.
        assert not proto.tensor_content, (case, proto)
        cases.append((case, made_with, dtype, proto))

    DT = types_pb2
    # float_val
    add("float_val scalar", "make_tensor_proto", tf.float32, mtp(np.float32(2.5)))
    add("float_val broadcast (1 value, shape [2,3])", "make_tensor_proto", tf.float32, mtp(1.0, shape=[2, 3]))
    add("float_val fill with last (2 values, shape [5])", "make_tensor_proto", tf.float32,
        mtp([1.0, 2.0], shape=[5], dtype=tf.float32))
    add("float_val exact (6 values, shape [2,3]; nan, inf, -0.0, subnormal)", "hand", tf.float32,
        hand_proto(DT.DT_FLOAT, [2, 3], float_val=[float("nan"), float("inf"), float("-inf"), -0.0,
                                                    SUBNORMAL_F32, F32_MAX]))
    add("float_val no values (shape [2] -> zeros)", "hand", tf.float32, hand_proto(DT.DT_FLOAT, [2]))
    add("float_val no values scalar", "hand", tf.float32, hand_proto(DT.DT_FLOAT, []))
    add("float_val too many values (4 values, shape [2] -> first 2)", "hand", tf.float32,
        hand_proto(DT.DT_FLOAT, [2], float_val=[1.0, 2.0, 3.0, 4.0]))
    add("float_val zero-size shape [0,3] with no values", "hand", tf.float32, hand_proto(DT.DT_FLOAT, [0, 3]))
    # double_val
    add("double_val scalar", "make_tensor_proto", tf.float64, mtp(np.float64(0.1)))
    add("double_val broadcast", "make_tensor_proto", tf.float64, mtp(-1.5, shape=[2, 3], dtype=tf.float64))
    add("double_val fill with last", "hand", tf.float64, hand_proto(DT.DT_DOUBLE, [5], double_val=[1.0, float("nan")]))
    add("double_val no values", "hand", tf.float64, hand_proto(DT.DT_DOUBLE, [2]))
    # int_val for int32 / int16 / int8 / uint8 / uint16
    add("int_val int32 scalar", "make_tensor_proto", tf.int32, mtp(np.int32(-2**31)))
    add("int_val int32 broadcast", "make_tensor_proto", tf.int32, mtp(7, shape=[2, 3], dtype=tf.int32))
    add("int_val int32 fill with last", "hand", tf.int32, hand_proto(DT.DT_INT32, [5], int_val=[2**31 - 1, -1]))
    add("int_val int32 no values", "hand", tf.int32, hand_proto(DT.DT_INT32, [2]))
    add("int_val int16 exact extremes", "hand", tf.int16, hand_proto(DT.DT_INT16, [3], int_val=[-32768, 32767, -1]))
    add("int_val int16 broadcast", "make_tensor_proto", tf.int16, mtp(7, shape=[2, 3], dtype=tf.int16))
    add("int_val int8 exact extremes", "hand", tf.int8, hand_proto(DT.DT_INT8, [3], int_val=[-128, 127, -1]))
    add("int_val int8 fill with last", "hand", tf.int8, hand_proto(DT.DT_INT8, [5], int_val=[1, -2]))
    add("int_val uint8 exact extremes", "hand", tf.uint8, hand_proto(DT.DT_UINT8, [3], int_val=[0, 255, 128]))
    add("int_val uint8 broadcast", "make_tensor_proto", tf.uint8, mtp(np.uint8(200), shape=[2, 3]))
    add("int_val uint16 exact extremes", "hand", tf.uint16, hand_proto(DT.DT_UINT16, [3], int_val=[0, 65535, 32768]))
    add("int_val uint16 no values", "hand", tf.uint16, hand_proto(DT.DT_UINT16, [2]))
    # int64_val
    add("int64_val scalar", "make_tensor_proto", tf.int64, mtp(np.int64(-2**63)))
    add("int64_val broadcast", "make_tensor_proto", tf.int64, mtp(2**63 - 1, shape=[2, 3], dtype=tf.int64))
    add("int64_val fill with last", "hand", tf.int64, hand_proto(DT.DT_INT64, [5], int64_val=[-2**63, 2**63 - 1]))
    add("int64_val no values", "hand", tf.int64, hand_proto(DT.DT_INT64, [2]))
    # bool_val
    add("bool_val scalar", "make_tensor_proto", tf.bool, mtp(True))
    add("bool_val broadcast", "make_tensor_proto", tf.bool, mtp(True, shape=[2, 3]))
    add("bool_val fill with last", "hand", tf.bool, hand_proto(DT.DT_BOOL, [5], bool_val=[False, True]))
    add("bool_val no values", "hand", tf.bool, hand_proto(DT.DT_BOOL, [2]))
    # half_val (float16 and bfloat16)
    add("half_val float16 scalar", "make_tensor_proto", tf.float16, mtp(np.float16(1.5)))
    add("half_val float16 broadcast", "make_tensor_proto", tf.float16, mtp(np.float16(-2.0), shape=[2, 3]))
    add("half_val float16 exact extremes (bits)", "hand", tf.float16,
        hand_proto(DT.DT_HALF, [2, 3], half_val=[0xFBFF, 0x7BFF, 0x7E00, 0x7C00, 0x8000, 0x0001]))
    add("half_val float16 fill with last", "hand", tf.float16, hand_proto(DT.DT_HALF, [5], half_val=[0x3C00, 0x4000]))
    add("half_val float16 no values", "hand", tf.float16, hand_proto(DT.DT_HALF, [2]))
    add("half_val bfloat16 scalar", "make_tensor_proto", tf.bfloat16, mtp(1.0, dtype=tf.bfloat16))
    add("half_val bfloat16 broadcast", "make_tensor_proto", tf.bfloat16, mtp(-0.5, shape=[2, 3], dtype=tf.bfloat16))
    add("half_val bfloat16 exact extremes (bits)", "hand", tf.bfloat16,
        hand_proto(DT.DT_BFLOAT16, [2, 3], half_val=[0xFF7F, 0x7F7F, 0x7FC0, 0x7F80, 0x8000, 0x0001]))
    add("half_val bfloat16 fill with last", "hand", tf.bfloat16,
        hand_proto(DT.DT_BFLOAT16, [5], half_val=[0x3F80, 0x4000]))
    add("half_val bfloat16 no values", "hand", tf.bfloat16, hand_proto(DT.DT_BFLOAT16, [2]))
    # scomplex_val / dcomplex_val (interleaved real, imag)
    add("scomplex_val scalar", "make_tensor_proto", tf.complex64, mtp(1 + 2j, dtype=tf.complex64))
    add("scomplex_val broadcast", "make_tensor_proto", tf.complex64, mtp(3 - 4j, shape=[2, 3], dtype=tf.complex64))
    add("scomplex_val fill with last", "hand", tf.complex64,
        hand_proto(DT.DT_COMPLEX64, [5], scomplex_val=[1.0, 2.0, float("nan"), -0.0]))
    add("scomplex_val no values", "hand", tf.complex64, hand_proto(DT.DT_COMPLEX64, [2]))
    add("dcomplex_val scalar", "make_tensor_proto", tf.complex128, mtp(-1.5 + 0.25j, dtype=tf.complex128))
    add("dcomplex_val broadcast", "make_tensor_proto", tf.complex128, mtp(1j, shape=[2, 3], dtype=tf.complex128))
    add("dcomplex_val fill with last", "hand", tf.complex128,
        hand_proto(DT.DT_COMPLEX128, [5], dcomplex_val=[1.0, 2.0, float("inf"), -1.0]))
    add("dcomplex_val no values", "hand", tf.complex128, hand_proto(DT.DT_COMPLEX128, [2]))
    # uint32_val / uint64_val
    add("uint32_val scalar", "make_tensor_proto", tf.uint32, mtp(np.uint32(2**32 - 1)))
    add("uint32_val broadcast", "make_tensor_proto", tf.uint32, mtp(np.uint32(5), shape=[2, 3]))
    add("uint32_val fill with last", "hand", tf.uint32, hand_proto(DT.DT_UINT32, [5], uint32_val=[0, 2**32 - 1]))
    add("uint32_val no values", "hand", tf.uint32, hand_proto(DT.DT_UINT32, [2]))
    add("uint64_val scalar", "make_tensor_proto", tf.uint64, mtp(np.uint64(2**64 - 1)))
    add("uint64_val broadcast", "make_tensor_proto", tf.uint64, mtp(np.uint64(2**63), shape=[2, 3]))
    add("uint64_val fill with last", "hand", tf.uint64, hand_proto(DT.DT_UINT64, [5], uint64_val=[1, 2**64 - 1]))
    add("uint64_val no values", "hand", tf.uint64, hand_proto(DT.DT_UINT64, [2]))
    # string_val
    add("string_val scalar", "make_tensor_proto", tf.string, mtp(b"\xff\x00\xfe"))
    add("string_val broadcast", "make_tensor_proto", tf.string, mtp(b"ab", shape=[2, 3]))
    add("string_val exact (empty, non-UTF-8, UTF-8)", "make_tensor_proto", tf.string,
        mtp(np.array([b"", b"\xff\x00\xfe", "größe".encode()], dtype=object)))
    add("string_val fill with last", "hand", tf.string, hand_proto(DT.DT_STRING, [5], string_val=[b"x", b"last"]))
    add("string_val no values", "hand", tf.string, hand_proto(DT.DT_STRING, [2]))
    return cases


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------

COMPRESSED_VARIANTS = [
    ("examples-gzip.tfrecord", "GZIP", None),
    ("examples-zlib.tfrecord", "ZLIB", None),
    ("examples-gzip-1.tfrecord", "GZIP", 1),
    ("examples-gzip-9.tfrecord", "GZIP", 9),
    ("examples-zlib-1.tfrecord", "ZLIB", 1),
    ("examples-zlib-9.tfrecord", "ZLIB", 9),
]

LARGE_LEN = 17_000_000


def large_payload():
    return (bytes(range(256)) * (LARGE_LEN // 256 + 1))[:LARGE_LEN]


def read_all(name, compression_type=""):
    ds = tf.data.TFRecordDataset(path(name), compression_type=compression_type)
    return [r.numpy() for r in ds]


def main():
    # Remove only this script's own files: golden/parse/ belongs to make_golden_parse.py.
    if os.path.isdir(OUT):
        for name in os.listdir(OUT):
            if os.path.isfile(os.path.join(OUT, name)):
                os.remove(os.path.join(OUT, name))
    os.makedirs(OUT, exist_ok=True)

    compression = {}  # file name -> (type, level)
    notes = {}

    # 1. Examples
    ex_cases = make_examples()
    ex_records = [r for _, r in ex_cases]
    write_records("examples.tfrecord", ex_records)
    compression["examples.tfrecord"] = ("", None)
    for name, ctype, level in COMPRESSED_VARIANTS:
        write_records(name, ex_records, ctype, level)
        compression[name] = (ctype, level)
    ex_json = []
    for desc, rec in ex_cases:
        entry = decode_example_with_tf(rec)
        entry["description"] = desc
        ex_json.append(entry)
    dump_json("examples.json", ex_json)

    # 2. SequenceExamples
    seq_cases = make_sequence_examples()
    write_records("sequence_examples.tfrecord", [r for _, r in seq_cases])
    compression["sequence_examples.tfrecord"] = ("", None)
    seq_json = []
    for desc, rec in seq_cases:
        entry = decode_sequence_example(rec)
        entry["description"] = desc
        seq_json.append(entry)
    dump_json("sequence_examples.json", seq_json)

    # 3. serialize_tensor
    t_cases = make_tensor_cases()
    t_records = [tf.io.serialize_tensor(t).numpy() for _, t in t_cases]
    write_records("tensors.tfrecord", t_records)
    compression["tensors.tfrecord"] = ("", None)
    t_json = []
    for (desc, t), rec in zip(t_cases, t_records):
        entry = tensor_entry(rec, t.dtype)
        # parse_tensor must give back the original tensor (bit-exact).
        assert entry["shape"] == list(t.shape), desc
        assert entry["values"] == encode_tensor_values(t.dtype.name, t.numpy()), desc
        entry["description"] = desc
        t_json.append(entry)
    dump_json("tensors.json", t_json)

    # 4. TensorProto *_val forms
    p_cases = make_tensor_proto_cases()
    p_records = [p.SerializeToString(deterministic=True) for _, _, _, p in p_cases]
    write_records("tensor_protos.tfrecord", p_records)
    compression["tensor_protos.tfrecord"] = ("", None)
    p_json = []
    for (case, made_with, dtype, _), rec in zip(p_cases, p_records):
        entry = tensor_entry(rec, dtype)
        entry.update({"case": case, "made_with": made_with, "proto_hex": rec.hex()})
        p_json.append(entry)
    dump_json("tensor_protos.json", p_json)

    # 5. empty / trivial files
    write_records("empty.tfrecord", [])
    write_records("empty-record.tfrecord", [b""])
    write_records("one-record.tfrecord", [ex_records[0]])
    for n in ("empty.tfrecord", "empty-record.tfrecord", "one-record.tfrecord"):
        compression[n] = ("", None)

    # 6. large record, gzip
    payload = large_payload()
    write_records("large-gzip.tfrecord", [payload], "GZIP", None)
    compression["large-gzip.tfrecord"] = ("GZIP", None)

    # 7. index files (tfrecord package)
    for n in ("examples.tfrecord", "one-record.tfrecord", "empty.tfrecord", "empty-record.tfrecord"):
        try:
            create_index(path(n), path(n + ".idx"))
        except Exception as e:  # pragma: no cover - recorded in the manifest instead
            notes[n + ".idx"] = "tfrecord.create_index failed: %r" % (e,)
            if os.path.exists(path(n + ".idx")):
                os.remove(path(n + ".idx"))

    # ---------------------------------------------------------------- checks
    counts = {}
    for n, (ctype, _) in compression.items():
        counts[n] = len(read_all(n, ctype))
    assert read_all("examples.tfrecord") == ex_records
    for name, ctype, _ in COMPRESSED_VARIANTS:
        assert read_all(name, ctype) == ex_records, name
    assert read_all("sequence_examples.tfrecord") == [r for _, r in seq_cases]
    assert read_all("tensors.tfrecord") == t_records
    assert read_all("tensor_protos.tfrecord") == p_records
    assert counts["empty.tfrecord"] == 0 and os.path.getsize(path("empty.tfrecord")) == 0
    assert read_all("empty-record.tfrecord") == [b""]
    assert read_all("one-record.tfrecord") == [ex_records[0]]
    large_back = read_all("large-gzip.tfrecord", "GZIP")
    assert len(large_back) == 1 and large_back[0] == payload
    del large_back
    # index files: "<offset> <framed size>\n" per record
    for n in ("examples.tfrecord", "one-record.tfrecord", "empty.tfrecord", "empty-record.tfrecord"):
        if n + ".idx" in notes:
            continue
        with open(path(n + ".idx")) as f:
            lines = [tuple(map(int, ln.split())) for ln in f.read().splitlines()]
        recs = read_all(n)
        offset, expected = 0, []
        for r in recs:
            expected.append((offset, 16 + len(r)))
            offset += 16 + len(r)
        assert lines == expected, (n, lines, expected)

    # -------------------------------------------------------------- manifest
    files = {}
    for n in sorted(os.listdir(OUT)):
        if n == "manifest.json":
            continue
        p = path(n)
        info = {"size": os.path.getsize(p), "sha256": sha256_file(p)}
        if n in compression:
            ctype, level = compression[n]
            info["compression_type"] = ctype
            info["compression_level"] = level
            info["records"] = counts[n]
        files[n] = info
    manifest = {
        "generator": "tests/data/make_golden.py",
        "versions": {
            "tensorflow": tf.__version__,
            "numpy": np.__version__,
            "protobuf": metadata.version("protobuf"),
            "tfrecord": metadata.version("tfrecord"),
            "python": sys.version.split()[0],
        },
        "compression_level_note": "null = TFRecordOptions default (Z_DEFAULT_COMPRESSION, i.e. zlib level 6)",
        "files": files,
        "large_record": {
            "file": "large-gzip.tfrecord",
            "length": LARGE_LEN,
            "sha256": hashlib.sha256(payload).hexdigest(),
            "content": "(bytes(range(256)) * (17_000_000 // 256 + 1))[:17_000_000]",
        },
        "examples_payload_sha256": [hashlib.sha256(r).hexdigest() for r in ex_records],
        "notes": notes,
    }
    dump_json("manifest.json", manifest)
    total = sum(v["size"] for v in files.values())
    print("wrote %d files, %d bytes, to %s" % (len(files) + 1, total, OUT))


if __name__ == "__main__":
    main()
