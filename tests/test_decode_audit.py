"""Audit of Example decoding against TensorFlow 2.21's tf.io.parse_example / parse_single_example: FixedLenFeature,
VarLenFeature, SparseFeature, RaggedFeature (every partition) and FixedLenSequenceFeature(allow_missing=True), on
both backends.

- differential: random specs x random records (packed / unpacked lists, negative and 10-byte varints, NaN / inf /
  -0.0 floats, duplicate map keys, kind-less Features, wrong kinds and counts, missing keys, zero-size shapes),
  value by value, dtype and shape against TensorFlow in one subprocess per batch of cases (the Python that
  TFR_TORCH_TF_PYTHON names; skipped without it), batched and single;
- what TensorFlow gives for a table of hand-made records is pinned as plain expected values (PINNED), so CI checks
  them without TensorFlow, and a TF test checks the pins against TensorFlow itself;
- the order of value errors: each feature names the first example that breaks it (plan.py, "Error order"), as
  TensorFlow does, whatever the kind of problem (missing, count, index, partition, a value outside the dtype);
- both backends give the same results and the same errors on mutated records (byte flips, truncations).

Known differences from TensorFlow, kept on purpose and pinned here: a list with values after its packed run, or two
lists of one kind in a Feature, is refused (TensorFlow silently reads the first run or list only); ragged partitions
that do not fit their values are refused (TensorFlow, with validate=False, builds an inconsistent RaggedTensor); a
missing zero-size FixedLenFeature with a default gives the default (TensorFlow says it is required, as it reads an
empty default as "no default"); a kind mismatch anywhere in a batch is reported before any value problem.

Tests commented `# Fixed:` failed before the fix of a defect this audit found (the comment says what it was).
"""

from __future__ import annotations

import math
import os
import pickle
import random
import re
import struct
import subprocess
import tempfile
import textwrap
import warnings
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    VarLenFeature,
    parse_example,
    parse_single_example,
)
from tfr_torch.errors import DecodeError
from wirebytes import (
    I32,
    VARINT,
    bytes_feature,
    float_feature,
    int64_feature,
    ld,
    packed_floats,
    packed_ints,
    tag,
    unpacked_floats,
    unpacked_ints,
    varint,
)

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "")  # a Python with tensorflow (as tests/test_sequence_audit.py)
needs_tf = pytest.mark.skipif(not TF_PYTHON or not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow for the reference checks")
HYPO = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DTYPES = {"int64": torch.int64, "float32": torch.float32, "string": tfr_torch.string, "int32": torch.int32,
          "uint8": torch.uint8}


# ------------------------------------------------------------------------------------------------ wire and specs


def example(entries: list[tuple[str, bytes]]) -> bytes:
    """A tf.train.Example with these (key, raw Feature) map entries, in order (a key may repeat)."""
    return ld(1, b"".join(ld(1, ld(1, key.encode()) + ld(2, raw)) for key, raw in entries))


def fbits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def ints(values, how: str = "packed") -> bytes:
    if how == "unpacked":
        return int64_feature(unpacked_ints(values))
    return int64_feature(packed_ints(values))


def floats(values, how: str = "packed") -> bytes:
    bits = [fbits(v) for v in values]
    return float_feature(unpacked_floats(bits) if how == "unpacked" else packed_floats(bits))


def strings(values) -> bytes:
    return bytes_feature(b"".join(ld(1, v) for v in values))


def spec_of(entry: tuple) -> Any:
    """A spec from its plain form (the same tuple builds TensorFlow's spec in the subprocess)."""
    kind = entry[0]
    if kind == "FixedLen":
        return FixedLenFeature(entry[1], DTYPES[entry[2]], entry[3])
    if kind == "VarLen":
        return VarLenFeature(DTYPES[entry[1]])
    if kind == "Sparse":
        return SparseFeature(entry[1], entry[2], DTYPES[entry[3]], entry[4], entry[5])
    if kind == "Ragged":
        parts = [getattr(RaggedFeature, name)(arg) for name, arg in entry[3]]
        return RaggedFeature(DTYPES[entry[1]], entry[2], parts, DTYPES[entry[4]])
    return FixedLenSequenceFeature(entry[1], DTYPES[entry[2]], entry[3], entry[4])


# ------------------------------------------------------------------------------------------------ plain results


def _flat(x: Any) -> list[Any]:
    return [y for z in x for y in _flat(z)] if isinstance(x, list) else [x]


def _nest(flat: list[Any], shape: list[int]) -> Any:
    if not shape:
        return flat[0]
    step = math.prod(shape[1:])
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def plain(value: Any, entry: tuple, single: bool) -> tuple:
    """Our result in TensorFlow's plain form (see _TF_SCRIPT): dense (dtype, shape, flat values), sparse (dtype,
    indices, values, shape) or, for ragged, ("rlist", nested lists[, row splits dtype])."""
    if isinstance(value, tfr_torch.SparseBytes):
        return ("sparse", "string", value.indices.tolist(), list(value.values), list(value.dense_shape))
    if isinstance(value, torch.Tensor) and value.is_sparse:
        return ("sparse", str(value.dtype).removeprefix("torch."), value._indices().T.tolist(),
                value._values().tolist(), list(value.shape))
    if entry[0] == "VarLen":  # bytes: a list of bytes per example
        if single:
            return ("sparse", "string", [[j] for j in range(len(value))], list(value), [len(value)])
        return ("sparse", "string", [[i, j] for i, row in enumerate(value) for j in range(len(row))],
                [v for row in value for v in row], [len(value), max([len(row) for row in value] + [0])])
    if entry[0] == "Ragged":
        if isinstance(value, torch.Tensor) and value.is_nested:
            return ("rlist", [t.tolist() for t in value.unbind()])
        if isinstance(value, tfr_torch.RaggedTensor):
            return ("rlist", value.to_list(), str(value.nested_row_splits[0].dtype).removeprefix("torch."))
        return ("rlist", value.tolist() if isinstance(value, torch.Tensor) else value)
    if isinstance(value, torch.Tensor):
        return ("dense", str(value.dtype).removeprefix("torch."), list(value.shape), value.reshape(-1).tolist())
    return ("dense", "string", None, _flat(value) if isinstance(value, list) else [value])


def tf_rlist(value: tuple) -> tuple:
    """TensorFlow's ragged (or, for one example without partitions, dense) plain form as nested lists."""
    if value[0] == "dense":
        return ("rlist", _nest(value[3], value[2]) if value[2] else value[3][0])
    _, _, flat_values, inner, splits, splits_dtype = value
    flat_values = _flat(flat_values)
    rows: Any = flat_values
    if inner:
        width = math.prod(inner)
        rows = [_nest(flat_values[i * width:(i + 1) * width], inner) for i in range(len(flat_values) // width)]
    for s in reversed(splits):
        rows = [rows[s[i]:s[i + 1]] for i in range(len(s) - 1)]
    return ("rlist", rows, splits_dtype)


def same_values(a: Any, b: Any) -> bool:
    """Equal, floats by value and sign (NaN equal to NaN), ints and bytes exactly."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def same_result(ours: tuple, theirs: tuple, entry: tuple) -> bool:
    if entry[0] == "Ragged":
        ours = tf_rlist(ours) if ours[0] != "rlist" else ours
        expected = tf_rlist(theirs) if theirs[0] != "rlist" else theirs
        if len(ours) == 3 and len(expected) == 3 and ours[2] != expected[2]:
            return False
        return same_values(ours[1], expected[1])
    if ours[0] != theirs[0]:
        return False
    if ours[0] == "dense":
        if (ours[1] != "string" and ours[1] != theirs[1]) or (ours[2] is not None and ours[2] != theirs[2]):
            return False
        return same_values(ours[3], theirs[3])
    return same_values(list(ours[1:]), list(theirs[1:]))


def run_ours(records: list[bytes], spec: dict[str, tuple], single: bool, named: bool = False) -> tuple:
    """("ok", {key: plain}) or ("err", type name, message); `named`: the records are named r0, r1, ... (as
    run_tf names them)."""
    features = {key: spec_of(entry) for key, entry in spec.items()}
    names = [f"r{i}" for i in range(len(records))] if named and not single else None
    try:
        out = parse_single_example(records[0], features) if single else parse_example(records, features, names)
    except (DecodeError, ValueError, TypeError) as exc:
        return ("err", type(exc).__name__, str(exc))
    return ("ok", {key: plain(value, spec[key], single) for key, value in out.items()})


def same_outcome(ours: tuple, theirs: tuple, spec: dict[str, tuple]) -> bool:
    if ours[0] != theirs[0]:
        return False
    return ours[0] == "err" or all(same_result(ours[1][k], theirs[1][k], spec[k]) for k in spec)


def both_backends(records: list[bytes], spec: dict[str, tuple], single: bool, named: bool = False) -> tuple:
    """run_ours on the reference and on the compiled core (when built), which must agree to the message."""
    previous = tfr_torch.set_backend("python")
    try:
        reference = run_ours(records, spec, single, named)
        if tfr_torch._native.available():
            tfr_torch.set_backend("native")
            native = run_ours(records, spec, single, named)
            assert native[0] == reference[0], (spec, records, reference, native)
            if native[0] == "err":
                assert native == reference, (spec, records)
            else:
                assert same_outcome(native, reference, spec), (spec, records, reference, native)
    finally:
        tfr_torch.set_backend(previous)
    return reference


# ------------------------------------------------------------------------------------------------ TensorFlow


_TF_SCRIPT = """
    import pickle, sys
    import tensorflow as tf

    def spec_of(e):
        kind = e[0]
        if kind == "FixedLen":
            return tf.io.FixedLenFeature(e[1], getattr(tf, e[2]), default_value=e[3])
        if kind == "VarLen":
            return tf.io.VarLenFeature(getattr(tf, e[1]))
        if kind == "Sparse":
            return tf.io.SparseFeature(e[1], e[2], getattr(tf, e[3]), e[4], e[5])
        if kind == "Ragged":
            parts = [getattr(tf.io.RaggedFeature, name)(arg) for name, arg in e[3]]
            return tf.io.RaggedFeature(getattr(tf, e[1]), value_key=e[2], partitions=parts,
                                       row_splits_dtype=getattr(tf, e[4]))
        return tf.io.FixedLenSequenceFeature(e[1], getattr(tf, e[2]), allow_missing=e[3], default_value=e[4])

    def plain(v):
        if isinstance(v, tf.SparseTensor):
            return ("sparse", v.dtype.name, v.indices.numpy().tolist(), v.values.numpy().tolist(),
                    v.dense_shape.numpy().tolist())
        if isinstance(v, tf.RaggedTensor):
            return ("ragged", v.dtype.name, v.flat_values.numpy().tolist(), list(v.flat_values.shape[1:]),
                    [s.numpy().tolist() for s in v.nested_row_splits], v.row_splits.dtype.name)
        a = v.numpy()
        return ("dense", v.dtype.name, list(a.shape), a.reshape(-1).tolist())

    def run(records, spec, single):
        try:
            features = {k: spec_of(e) for k, e in spec.items()}
            if single:
                out = tf.io.parse_single_example(tf.constant(records[0]), features)
            else:
                names = [f"r{i}" for i in range(len(records))]
                out = tf.io.parse_example(tf.constant(records, dtype=tf.string), features, example_names=names)
            return ("ok", {k: plain(v) for k, v in out.items()})
        except Exception as exc:
            return ("err", type(exc).__name__, str(exc).split("\\n")[0][-400:])

    job = pickle.load(open(sys.argv[1], "rb"))
    pickle.dump([run(*case) for case in job], open(sys.argv[2], "wb"))
"""


def run_tf(cases: list[tuple[list[bytes], dict[str, tuple], bool]]) -> list[tuple]:
    """TensorFlow's outcome of each (records, spec, single), in one subprocess."""
    with tempfile.TemporaryDirectory() as folder:
        job, out = os.path.join(folder, "job.pkl"), os.path.join(folder, "out.pkl")
        with open(job, "wb") as f:
            pickle.dump(cases, f)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        done = subprocess.run([TF_PYTHON, "-c", textwrap.dedent(_TF_SCRIPT), job, out], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        with open(out, "rb") as f:
            return pickle.load(f)


# ------------------------------------------------------------------------------------------------ generators

_KINDS = {"int64": "int64", "float": "float32", "bytes": "string"}
_OTHER = {"int64": "float", "float": "bytes", "bytes": "int64"}
_SHAPES = [[], [1], [2], [2, 3], [1, 1, 2], [0], [0, 2]]
_PARTITIONS = ["RowLengths", "RowSplits", "RowStarts", "RowLimits", "ValueRowIds"]


def _values(rng: random.Random, kind: str, n: int) -> list[Any]:
    if kind == "int64":
        return [rng.choice([0, 1, 2, 3, -1, -5, 2**40, -(2**63), 2**63 - 1]) for _ in range(n)]
    if kind == "float":
        return [rng.choice([0.0, -0.0, 1.5, -2.25, math.nan, math.inf, -math.inf, 3e38, 1e-45]) for _ in range(n)]
    return [bytes(rng.randrange(256) for _ in range(rng.randint(0, 3))) for _ in range(n)]


def _feature(rng: random.Random, kind: str | None, values: list[Any]) -> bytes:
    """A Feature of `kind` (None: no kind set) holding `values`, numbers packed or unpacked."""
    if kind is None:
        return b""
    how = rng.choice(["packed", "packed", "unpacked"])
    if kind == "int64":
        return ints(values, how)
    if kind == "float":
        return floats(values, how)
    return strings(values)


def random_spec(rng: random.Random, features: int = 3) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """A spec of 1 to `features` features in plain form, and what a record holds for each (see random_record)."""
    spec: dict[str, tuple] = {}
    plan: dict[str, tuple] = {}
    for i in range(rng.randint(1, features)):
        key, kind = f"k{i}", rng.choice(list(_KINDS))
        dtype = _KINDS[kind]
        how = rng.choice(["fixed", "fixed", "varlen", "sparse", "ragged", "seq"])
        if how == "fixed":
            shape = rng.choice(_SHAPES)
            n = math.prod(shape)
            default = None
            if n and rng.random() < 0.5:  # (a zero-size default: see test_a_missing_zero_size_feature...)
                flat = [0.0 if isinstance(v, float) and v == 0 else v for v in _values(rng, kind, n)]
                default = _nest(flat, shape) if rng.random() < 0.5 else flat if shape else flat[0]
            spec[key], plan[key] = ("FixedLen", shape, dtype, default), ("fixed", kind, n)
        elif how == "varlen":
            spec[key], plan[key] = ("VarLen", dtype), ("var", kind)
        elif how == "sparse":
            sizes = [rng.choice([1, 3, 5]) for _ in range(rng.choice([1, 1, 2]))]
            index_keys = [f"{key}_i{j}" for j in range(len(sizes))]
            spec[key] = ("Sparse", index_keys if len(sizes) > 1 else index_keys[0], f"{key}_v", dtype,
                         sizes if len(sizes) > 1 else sizes[0], rng.random() < 0.3)
            plan[key] = ("sparse", kind, index_keys, sizes, f"{key}_v")
        elif how == "ragged":
            rows = [(rng.choice(_PARTITIONS), f"{key}_p{j}") for j in range(rng.choice([0, 0, 1, 2]))]
            uniform = [("UniformRowLength", rng.choice([1, 2])) for _ in range(rng.choice([0, 0, 1]))]
            value_key = rng.choice([None, f"{key}_vals"])
            spec[key] = ("Ragged", dtype, value_key, rows + uniform, rng.choice(["int32", "int64"]))
            plan[key] = ("ragged", kind, value_key or key, rows, math.prod(n for _, n in uniform))
        else:  # (TensorFlow dies of a division by zero on a zero-size FixedLenSequenceFeature)
            shape = rng.choice([[], [1], [2], [2, 2]])
            default = _values(rng, kind, 1)[0] if rng.random() < 0.4 else None
            default = 0.0 if isinstance(default, float) and default == 0 else default  # TF caches 0.0 as -0.0
            spec[key], plan[key] = ("FixedLenSeq", shape, dtype, True, default), ("seq", kind, math.prod(shape))
    return spec, plan


def _partition(rng: random.Random, name: str, nvals: int) -> tuple[list[int], int]:
    """A valid partition of `nvals` values into rows: its feature's values and the number of rows."""
    lengths: list[int] = []
    left = nvals
    while left > 0 or rng.random() < 0.3:
        length = rng.randint(0, left)
        lengths.append(length)
        left -= length
    splits = [0]
    for length in lengths:
        splits.append(splits[-1] + length)
    data = {"RowLengths": lengths, "RowSplits": splits, "RowStarts": splits[:-1], "RowLimits": splits[1:],
            "ValueRowIds": [row for row, length in enumerate(lengths) for _ in range(length)]}[name]
    if name == "ValueRowIds":  # row ids cannot say that rows after the last value's row exist
        return data, data[-1] + 1 if data else 0
    return data, len(lengths)


def random_record(rng: random.Random, plan: dict[str, tuple], bad: bool = False, kinds: bool = True) -> bytes:
    """An Example for the plan; `bad`: some Features with another count, and (`kinds`) of another kind or
    without a kind.
    Always what TensorFlow decides without crashing: ragged partitions and sparse indices fit (TensorFlow does not
    check them), no values for zero-size FixedLenFeatures."""
    def kind_of(kind: str) -> str | None:
        roll = rng.random()
        return _OTHER[kind] if bad and kinds and roll < 0.15 else None if bad and kinds and roll < 0.2 else kind

    entries: list[tuple[str, bytes]] = []
    for key, item in plan.items():
        how, kind = item[0], item[1]
        if rng.random() < (0.15 if how == "fixed" else 0.25):
            continue  # missing
        if how in ("fixed", "var", "seq"):
            count = item[2] if how == "fixed" else rng.randint(0, 4) if how == "var" else item[2] * rng.randint(0, 3)
            if bad and rng.random() < 0.2 and (how != "fixed" or item[2]):
                count = max(0, count + rng.choice([-1, 1]))
            k = kind_of(kind)
            entries.append((key, _feature(rng, k, _values(rng, k, count) if k else [])))
        elif how == "sparse":
            _, _, index_keys, sizes, value_key = item
            n = rng.randint(0, 4)
            k = kind_of(kind)
            entries.append((value_key, _feature(rng, k, _values(rng, k, n) if k else [])))
            for index_key, size in zip(index_keys, sizes):
                entries.append((index_key, ints([rng.randrange(size) for _ in range(n)], rng.choice(["packed",
                                                                                                      "unpacked"]))))
        else:
            _, _, value_key, rows, width = item
            k = kind_of(kind)
            nvals = rng.randint(0, 3) * width if k else 0
            entries.append((value_key, _feature(rng, k, _values(rng, k, nvals) if k else [])))
            n = nvals // width
            for name, partition_key in reversed(rows):
                data, n = _partition(rng, name, n)
                entries.append((partition_key, ints(data)))
    rng.shuffle(entries)
    if entries and rng.random() < 0.1:
        entries.append(rng.choice(entries))  # a key twice: the last one counts
    if rng.random() < 0.1:
        entries.append(("unread", floats([1.0])))
    return example(entries)


def random_cases(seed: int, n: int, bad: float, kinds: bool = True, features: int = 3,
                 ) -> list[tuple[list[bytes], dict[str, tuple], bool]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        spec, plan = random_spec(rng, features)
        records = [random_record(rng, plan, rng.random() < bad, kinds) for _ in range(rng.randint(0, 4))]
        single = bool(records) and rng.random() < 0.3
        cases.append((records[:1] if single else records, spec, single))
    return cases


# ------------------------------------------------------------------------------------------------ differential


def _tf_quirk(theirs: tuple) -> bool:
    """TensorFlow's own Python failing where its op would answer (parse_single_example with a bytes default
    raises AttributeError; an empty Example with two ragged partitions, ValueError "Dimension -1 must be >= 0")."""
    return theirs[0] == "err" and theirs[1] in ("AttributeError", "ValueError")


@needs_tf
def test_random_specs_and_records_equal_tensorflow():
    """440 random cases in one TensorFlow subprocess (its start takes most of the few seconds)."""
    cases = random_cases(seed=2, n=220, bad=0.0) + random_cases(seed=3, n=220, bad=0.6)
    theirs = run_tf(cases)
    checked = 0
    for (records, spec, single), expected in zip(cases, theirs):
        if _tf_quirk(expected):
            continue
        ours = both_backends(records, spec, single)
        assert same_outcome(ours, expected, spec), (spec, single, records, ours, expected)
        checked += 1
    assert checked > 400


@needs_tf
def test_the_first_example_that_breaks_a_feature_is_the_one_tensorflow_names():
    """One feature, Features of the right kind with wrong counts or missing: TensorFlow names the first record
    that breaks it ("Name: r<i>"), and so do we ("example <i> (r<i>)"). One TensorFlow subprocess: a few
    seconds."""
    # Fixed: a FixedLenFeature named its first missing example before an earlier one with a wrong value count
    cases = [case for case in random_cases(seed=5, n=600, bad=0.7, kinds=False, features=1)
             if not case[2] and len(case[0]) > 1]
    theirs = run_tf(cases)
    named = 0
    for (records, spec, _), expected in zip(cases, theirs):
        if _tf_quirk(expected):
            continue
        ours = both_backends(records, spec, False, named=True)
        assert same_outcome(ours, expected, spec), (spec, records, ours, expected)
        tf_name = re.search(r"Name: (r\d+)", expected[2]) if expected[0] == "err" else None
        if tf_name:
            assert f"({tf_name.group(1)})" in ours[2], (spec, records, ours[2], expected[2])
            named += 1
    assert named > 40


@settings(max_examples=60, **HYPO)
@given(st.randoms(use_true_random=False))
def test_backends_agree_on_mutated_records(rng):
    """Byte flips and truncations of valid and spoiled records: the same results, or the same error to the
    message, on both backends (both_backends asserts it)."""
    spec, plan = random_spec(rng)
    records = []
    for _ in range(rng.randint(1, 4)):
        data = bytearray(random_record(rng, plan, rng.random() < 0.3))
        roll = rng.random()
        if roll < 0.45 and data:
            for _ in range(rng.randint(1, 2)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif roll < 0.7 and data:
            data = data[: rng.randrange(len(data))]
        records.append(bytes(data))
    both_backends(records, spec, False)
    both_backends(records[:1], spec, True)


@pytest.mark.parametrize("seed", range(4))
def test_rows_of_random_batches_equal_single_parses(seed):
    """parse_single_example of each record equals that record's row of parse_example (or both fail)."""
    for records, spec, _ in random_cases(seed=100 + seed, n=40, bad=0.3):
        batch = both_backends(records, spec, False)
        for i, record in enumerate(records):
            one = both_backends([record], spec, True)
            if batch[0] == "ok":
                assert one[0] == "ok", (spec, record, one)
            elif one[0] == "err" and batch[0] == "err" and f"example {i} " in batch[2]:
                assert one[2] == batch[2].replace(f"example {i} ", "the example ").replace(
                    f"example {i}:", "the example:"), (spec, record)


# ------------------------------------------------------------------------------------------------ pinned


def _entry(key: str, raw: bytes) -> bytes:
    return ld(1, ld(1, key.encode()) + ld(2, raw))


_EMPTY = example([])
_NAN_BITS = [0x7FA00000, 0xFFC00001, 0x80000000, 0x7F800000, 0xFF800000, 1]  # signalling / negative NaN, -0.0, ...

# (name, records, spec, single, what TensorFlow 2.21 gives: its plain result, or ("err", our message) where it
# fails too). test_pins_hold_without_tensorflow checks ours against them, test_pins_are_what_tensorflow_gives the
# pins against TensorFlow.
PINNED: list[tuple[str, list[bytes], dict[str, tuple], bool, tuple]] = [
    ("a key twice in the map: the last one counts",
     [example([("a", ints([1])), ("b", ints([2])), ("a", ints([3, 4]))])],
     {"a": ("VarLen", "int64"), "b": ("FixedLen", [], "int64", None)}, False,
     ("ok", {"a": ("sparse", "int64", [[0, 0], [0, 1]], [3, 4], [1, 2]), "b": ("dense", "int64", [1], [2])})),
    ("two features fields merge, the later entry wins",
     [example([("a", ints([1]))]) + example([("a", floats([2.0]))])], {"a": ("VarLen", "float32")}, False,
     ("ok", {"a": ("sparse", "float32", [[0, 0]], [2.0], [1, 1])})),
    ("negative, 10-byte, overlong and 2**63 varints",
     [example([("a", int64_feature(ld(1, varint(-5) + b"\xff" * 9 + b"\x7f" + b"\xff" * 9 + b"\x01" + b"\x80\x00"
                                      + varint(2**63))))])], {"a": ("VarLen", "int64")}, False,
     ("ok", {"a": ("sparse", "int64", [[0, 0], [0, 1], [0, 2], [0, 3], [0, 4]],
                   [-5, -1, -1, 0, -(2**63)], [1, 5])})),
    ("unpacked int64 and float lists",
     [example([("a", ints([-1, 2**40], "unpacked")), ("f", floats([1.5, -0.0], "unpacked"))])],
     {"a": ("FixedLen", [2], "int64", None), "f": ("FixedLen", [2], "float32", None)}, True,
     ("ok", {"a": ("dense", "int64", [2], [-1, 2**40]), "f": ("dense", "float32", [2], [1.5, -0.0])})),
    ("NaN, inf, -0.0 and subnormal floats",
     [example([("a", float_feature(packed_floats(_NAN_BITS)))])], {"a": ("FixedLen", [6], "float32", None)}, False,
     ("ok", {"a": ("dense", "float32", [1, 6],
                   [math.nan, math.nan, -0.0, math.inf, -math.inf, 1.401298464324817e-45])})),
    ("a Feature with no kind is absent",
     [example([("a", b"")]), example([("a", floats([1.0, 2.0]))])], {"a": ("VarLen", "float32")}, False,
     ("ok", {"a": ("sparse", "float32", [[1, 0], [1, 1]], [1.0, 2.0], [2, 2])})),
    ("a Feature with no kind takes the default",
     [example([("a", b"")])], {"a": ("FixedLen", [2], "float32", [7.0, 8.0])}, False,
     ("ok", {"a": ("dense", "float32", [1, 2], [7.0, 8.0])})),
    ("a Feature with no kind and no default is missing",
     [example([("a", b"")])], {"a": ("FixedLen", [2], "float32", None)}, False,
     ("err", "feature 'a' in example 0 is required but missing (FixedLenFeature with shape [2], float, and no "
             "default_value)")),
    ("an empty list of another kind is a kind mismatch",
     [example([("a", floats([]))])], {"a": ("FixedLen", [1], "int64", [3])}, False,
     ("err", "feature 'a' in example 0 holds float values but int64 values were expected (data types don't "
             "match)")),
    ("an empty list is an error even with a default",  # Fixed: the missing example 2 was named, not example 0
     [example([("a", floats([]))]), example([("a", floats([1.5]))]), _EMPTY], {"a": ("FixedLen", [], "float32", None)},
     False, ("err", "feature 'a' in example 0 holds an empty list, expected 1 float values (shape []); an empty list "
                    "is an error even with a default_value, as in TensorFlow")),
    ("a wrong count before a missing feature",  # Fixed: the missing example 2 was named instead of example 1
     [example([("a", ints([1, 2]))]), example([("a", ints([5]))]), _EMPTY], {"a": ("FixedLen", [2], "int64", None)},
     False, ("err", "feature 'a' in example 1 holds 1 int64 values, expected 2 (shape [2])")),
    ("a missing feature before a wrong count",
     [_EMPTY, example([("a", ints([5]))])], {"a": ("FixedLen", [2], "int64", None)}, False,
     ("err", "feature 'a' in example 0 is required but missing (FixedLenFeature with shape [2], int64, and no "
             "default_value)")),
    ("SparseFeature keeps duplicate indices, sorted stably",
     [example([("i", ints([2, 0, 2])), ("v", ints([1, 2, 3]))]), example([("i", ints([1])), ("v", ints([9]))])],
     {"s": ("Sparse", "i", "v", "int64", 3, False)}, False,
     ("ok", {"s": ("sparse", "int64", [[0, 0], [0, 2], [0, 2], [1, 1]], [2, 1, 3, 9], [2, 3])})),
    ("SparseFeature already_sorted keeps the record's order",
     [example([("i", ints([2, 0, 2])), ("v", ints([1, 2, 3]))])], {"s": ("Sparse", "i", "v", "int64", 3, True)},
     False, ("ok", {"s": ("sparse", "int64", [[0, 2], [0, 0], [0, 2]], [1, 2, 3], [1, 3])})),
    ("SparseFeature of two index keys and bytes",
     [example([("i", ints([1, 0, 1])), ("j", ints([2, 1, 0])), ("v", strings([b"x", b"y", b"z"]))])],
     {"s": ("Sparse", ["i", "j"], "v", "string", [2, 3], False)}, False,
     ("ok", {"s": ("sparse", "string", [[0, 0, 1], [0, 1, 0], [0, 1, 2]], [b"y", b"z", b"x"], [1, 2, 3])})),
    ("bytes of a 3-D shape and its default",
     [example([("a", strings([b"a", b"b", b"c", b"d", b"e", b"f"]))]), _EMPTY],
     {"a": ("FixedLen", [2, 1, 3], "string", [b"1", b"2", b"3", b"4", b"5", b"6"])}, False,
     ("ok", {"a": ("dense", "string", [2, 2, 1, 3], [b"a", b"b", b"c", b"d", b"e", b"f",
                                                    b"1", b"2", b"3", b"4", b"5", b"6"])})),
    ("a scalar default of a one-element shape, a list default of a scalar",
     [_EMPTY], {"x": ("FixedLen", [1], "int64", 5), "y": ("FixedLen", [], "float32", [2.5])}, False,
     ("ok", {"x": ("dense", "int64", [1, 1], [5]), "y": ("dense", "float32", [1], [2.5])})),
    ("a float default beyond float32 is inf",
     [_EMPTY], {"f": ("FixedLen", [2], "float32", [1e39, 2])}, False,
     ("ok", {"f": ("dense", "float32", [1, 2], [math.inf, 2.0])})),
    ("FixedLenSequenceFeature pads with its default",
     [example([("q", ints([1, 2, 3, 4]))]), _EMPTY, example([("q", ints([5, 6]))])],
     {"q": ("FixedLenSeq", [2], "int64", True, -1)}, False,
     ("ok", {"q": ("dense", "int64", [3, 2, 2], [1, 2, 3, 4, -1, -1, -1, -1, 5, 6, -1, -1])})),
    ("FixedLenSequenceFeature, a one-element list default",
     [_EMPTY, example([("q", ints([3, 4]))])], {"q": ("FixedLenSeq", [2], "int64", True, [9])}, False,
     ("ok", {"q": ("dense", "int64", [2, 1, 2], [9, 9, 3, 4])})),
    ("FixedLenSequenceFeature, values not a multiple of the shape",
     [example([("q", ints([1, 2, 3]))])], {"q": ("FixedLenSeq", [2], "int64", True, None)}, False,
     ("err", "feature 'q' in example 0 holds 3 int64 values, not a multiple of 2 (FixedLenSequenceFeature shape "
             "[2])")),
    ("RaggedFeature, UniformRowLength that does not divide the values",
     [example([("v", ints([1, 2, 3]))])], {"r": ("Ragged", "int64", "v", [("UniformRowLength", 2)], "int64")},
     False, ("err", "feature 'r' in example 0 holds 3 values, not a multiple of the UniformRowLength 2")),
    ("RaggedFeature, RowSplits",
     [example([("v", ints([1, 2, 3])), ("p", ints([0, 1, 3]))]), example([("v", ints([])), ("p", ints([0]))])],
     {"r": ("Ragged", "int64", "v", [("RowSplits", "p")], "int64")}, False,
     ("ok", {"r": ("ragged", "int64", [1, 2, 3], [], [[0, 2, 2], [0, 1, 3]], "int64")})),
    ("RaggedFeature, ValueRowIds with an empty row",
     [example([("v", ints([1, 2, 3])), ("p", ints([0, 2, 2]))])],
     {"r": ("Ragged", "int64", "v", [("ValueRowIds", "p")], "int32")}, False,
     ("ok", {"r": ("ragged", "int64", [1, 2, 3], [], [[0, 3], [0, 1, 1, 3]], "int32")})),
    ("RaggedFeature, RowStarts of one empty row", [example([("p", ints([0]))])],
     {"r": ("Ragged", "float32", "v", [("RowStarts", "p")], "int64")}, True,
     ("ok", {"r": ("ragged", "float32", [], [], [[0, 0]], "int64")})),
    ("RaggedFeature, uniform rows of bytes",
     [example([("v", strings([b"a", b"b", b"c", b"d"]))]), _EMPTY],
     {"r": ("Ragged", "string", "v", [("UniformRowLength", 2)], "int32")}, False,
     ("ok", {"r": ("ragged", "string", [[b"a", b"b"], [b"c", b"d"]], [2], [[0, 2, 2]], "int32")})),
    ("unknown fields of the Example, a Feature and a list are skipped",
     [example([("a", ints([1]) + ld(4, b"")), ("b", int64_feature(packed_ints([2]) + tag(2, VARINT) + varint(3)))])
      + tag(2, VARINT) + varint(5) + ld(7, b"zz")],
     {"a": ("VarLen", "int64"), "b": ("FixedLen", [], "int64", None)}, False,
     ("ok", {"a": ("sparse", "int64", [[0, 0]], [1], [1, 1]), "b": ("dense", "int64", [1], [2])})),
    ("a map entry of value then key",
     [ld(1, ld(1, ld(2, ints([1])) + ld(1, b"a")))], {"a": ("VarLen", "int64")}, False,
     ("ok", {"a": ("sparse", "int64", [[0, 0]], [1], [1, 1])})),
    ("an unknown field among the map entries",
     [ld(1, _entry("a", ints([1])) + ld(2, b"q"))], {"a": ("VarLen", "int64")}, False,
     ("err", "example 0: cannot parse 17 bytes as a tf.train.Example: byte 14 has an unexpected field 2 "
             "(length-delimited) among its features (a Features message holds only map entries)")),
    ("unpacked values then a packed run",
     [example([("a", int64_feature(unpacked_ints([1, 2]) + packed_ints([3])))])], {"a": ("VarLen", "int64")},
     False, ("err", "feature 'a' in example 0 is malformed: its tf.train.Feature (9 bytes) has field 1 "
                    "(length-delimited) among its unpacked int64 values (at byte 6)")),
    ("a float list's I32 value in an int64 list",
     [example([("a", int64_feature(tag(1, I32) + bytes(4)))])], {"a": ("FixedLen", [1], "int64", [0])}, False,
     ("err", "feature 'a' in example 0 is malformed: its tf.train.Feature (7 bytes) has field 1 (fixed32) first "
             "in its int64 list (expected values) (at byte 2)")),
]

_REQUIRED = "feature 'x' in example 0 is required but missing (FixedLenFeature with shape {}, {}, and no default_value)"
# an empty batch, and two records without the key: every kind of spec (TensorFlow's shapes and row splits)
for _spec, _none, _two in [
    (("FixedLen", [2, 3], "int64", None), ("dense", "int64", [0, 2, 3], []), _REQUIRED.format("[2, 3]", "int64")),
    (("FixedLen", [2], "float32", [1.0, 2.0]), ("dense", "float32", [0, 2], []),
     ("dense", "float32", [2, 2], [1.0, 2.0, 1.0, 2.0])),
    (("FixedLen", [], "string", None), ("dense", "string", [0], []), _REQUIRED.format("[]", "bytes")),
    (("VarLen", "int64"), ("sparse", "int64", [], [], [0, 0]), ("sparse", "int64", [], [], [2, 0])),
    (("VarLen", "string"), ("sparse", "string", [], [], [0, 0]), ("sparse", "string", [], [], [2, 0])),
    (("Sparse", "i", "v", "float32", 4, False), ("sparse", "float32", [], [], [0, 4]),
     ("sparse", "float32", [], [], [2, 4])),
    (("Sparse", ["i", "j"], "v", "string", [4, 2], False), ("sparse", "string", [], [], [0, 4, 2]),
     ("sparse", "string", [], [], [2, 4, 2])),
    (("Ragged", "int64", None, [], "int64"), ("ragged", "int64", [], [], [[0]], "int64"),
     ("ragged", "int64", [], [], [[0, 0, 0]], "int64")),
    (("Ragged", "float32", "v", [("RowLengths", "i")], "int32"), ("ragged", "float32", [], [], [[0], [0]], "int32"),
     ("ragged", "float32", [], [], [[0, 0, 0], [0]], "int32")),
    (("Ragged", "int64", "v", [("RowSplits", "i"), ("UniformRowLength", 2)], "int64"),
     ("ragged", "int64", [], [2], [[0], [0]], "int64"), ("ragged", "int64", [], [2], [[0, 0, 0], [0]], "int64")),
    (("FixedLenSeq", [2], "int64", True, None), ("dense", "int64", [0, 0, 2], []), ("dense", "int64", [2, 0, 2], [])),
    (("FixedLenSeq", [1, 2], "float32", True, 7.0), ("dense", "float32", [0, 0, 1, 2], []),
     ("dense", "float32", [2, 0, 1, 2], [])),
]:
    PINNED.append((f"no records, {_spec}", [], {"x": _spec}, False, ("ok", {"x": _none})))
    PINNED.append((f"records without the key, {_spec}", [_EMPTY, _EMPTY], {"x": _spec}, False,
                   ("err", _two) if isinstance(_two, str) else ("ok", {"x": _two})))


@pytest.mark.parametrize("name, records, spec, single, expected", PINNED, ids=[p[0] for p in PINNED])
def test_pins_hold_without_tensorflow(name, records, spec, single, expected):
    ours = both_backends(records, spec, single)
    if expected[0] == "err":
        assert ours[0] == "err" and ours[2] == expected[1], ours
    else:
        assert same_outcome(ours, expected, spec), (ours, expected)


@needs_tf
def test_pins_are_what_tensorflow_gives():
    """Every pin of PINNED, from one TensorFlow subprocess; for an error, TensorFlow fails too."""
    theirs = run_tf([(records, spec, single) for _, records, spec, single, _ in PINNED])
    for (name, _, spec, _, expected), got in zip(PINNED, theirs):
        if expected[0] == "err":
            assert got[0] == "err", (name, got)
        else:
            assert same_outcome(got, expected, spec), (name, got, expected)


def test_float_bits_come_through_unchanged(backend):
    """NaN payloads (signalling, negative), -0.0 and subnormals keep their bits, batched and single."""
    from parse_util import float32_bits

    records = [example([("a", float_feature(packed_floats(_NAN_BITS)))]),
               example([("a", float_feature(unpacked_floats(_NAN_BITS)))])]
    spec = {"a": FixedLenFeature([6], torch.float32)}
    assert float32_bits(parse_example(records, spec)["a"]) == _NAN_BITS * 2
    assert float32_bits(parse_single_example(records[1], spec)["a"]) == _NAN_BITS
    assert float32_bits(parse_example(records, {"a": VarLenFeature(torch.float32)})["a"]._values()) == _NAN_BITS * 2


# ------------------------------------------------------------------------------------------------ error order


def _error(records: list[bytes], features: dict[str, Any]) -> str:
    with pytest.raises(DecodeError) as caught:
        parse_example(records, features)
    return str(caught.value)


def test_a_sparse_feature_names_its_first_bad_example_whichever_index_key(backend):
    # Fixed: the index keys were checked one after the other, so a count mismatch of the first key in example 1 was
    # named before one of the second key in example 0
    spec = {"s": SparseFeature(["i", "j"], "v", torch.int64, [3, 3])}
    records = [example([("i", ints([0])), ("j", ints([0, 1])), ("v", ints([5]))]),
               example([("i", ints([0, 1])), ("j", ints([0])), ("v", ints([5]))])]
    assert _error(records, spec) == "feature 's' in example 0 has 2 indices in 'j' but 1 values in 'v'"


def test_a_sparse_index_out_of_range_before_a_later_count_mismatch(backend):
    # Fixed: every example's counts were checked before any index, so example 1's count was named first
    spec = {"s": SparseFeature("i", "v", torch.int64, 3)}
    records = [example([("i", ints([7])), ("v", ints([5]))]), example([("i", ints([0, 1])), ("v", ints([5]))])]
    assert _error(records, spec) == "feature 's' in example 0 has index 7 in 'i', outside [0, 3)"
    records = [example([("i", ints([0, 1])), ("v", ints([5]))]), example([("i", ints([7])), ("v", ints([5]))])]
    assert _error(records, spec) == "feature 's' in example 0 has 2 indices in 'i' but 1 values in 'v'"


def test_a_ragged_partition_that_does_not_fit_before_a_later_uneven_example(backend):
    # Fixed: every example's values were checked against UniformRowLength before any partition, so example 1 was
    # named although example 0 comes first
    spec = {"r": RaggedFeature(torch.int64, "v", [RaggedFeature.RowLengths("l"), RaggedFeature.UniformRowLength(2)])}
    records = [example([("v", ints([1, 2])), ("l", ints([3]))]), example([("v", ints([1, 2, 3])), ("l", ints([1]))])]
    assert _error(records, spec) == ("feature 'r' in example 0 has an invalid partition RowLengths('l'): a row "
                                     "length 3 larger than the number of values (1)")


@pytest.mark.parametrize("spec, later", [
    (FixedLenFeature([2], torch.uint8), _EMPTY),  # missing
    (FixedLenFeature([2], torch.uint8), example([("x", ints([1, 2, 3]))])),  # another count
    (FixedLenSequenceFeature([1, 2], torch.uint8, allow_missing=True), example([("x", ints([1, 2, 3]))])),
    (RaggedFeature(torch.uint8, partitions=[RaggedFeature.UniformRowLength(2)]), example([("x", ints([1]))])),
    (RaggedFeature(torch.uint8, partitions=[RaggedFeature.RowSplits("p")]), example([("x", ints([1]))])),
], ids=["fixed missing", "fixed count", "sequence", "ragged uniform", "ragged splits"])
def test_a_value_outside_the_dtype_comes_before_a_later_examples_problem(backend, spec, later):
    # Fixed: a value that does not fit the dtype was only seen once every example's shape was checked, so a later
    # example's missing feature, count or partition was named instead of example 0
    first = example([("x", ints([300, 1])), ("p", ints([0, 2]))])
    spec = {"x": spec}
    assert _error([first, later], spec) == ("feature 'x' in example 0 cannot be converted: value 300 does not fit in "
                                            "torch.uint8 (range 0 to 255)")
    with pytest.raises(DecodeError, match="example 1 "):  # and once example 0 fits, example 1 is named
        parse_example([example([("x", ints([3, 1])), ("p", ints([0, 2]))]), later], spec)


def test_a_sparse_value_outside_the_dtype_comes_before_a_later_index_problem(backend):
    # Fixed: the values were converted only after every example's indices were checked, so example 1 was named
    spec = {"s": SparseFeature("i", "v", torch.int8, 3)}
    records = [example([("i", ints([0])), ("v", ints([-200]))]), example([("i", ints([9])), ("v", ints([5]))])]
    assert _error(records, spec) == ("feature 's' in example 0 cannot be converted: value -200 does not fit in "
                                     "torch.int8 (range -128 to 127)")


def test_a_float_default_beyond_float32_gives_no_numpy_warning():
    # Fixed: numpy's "overflow encountered in cast" RuntimeWarning escaped from the spec's default_value check
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = parse_example([_EMPTY], {"f": FixedLenFeature([2], torch.float32, default_value=[1e39, -1e39]),
                                       "q": FixedLenSequenceFeature([], torch.float16, True, default_value=1e39)})
    assert out["f"].tolist() == [[math.inf, -math.inf]]
    assert tuple(out["q"].shape) == (1, 0)


def test_a_later_kind_less_duplicate_hides_the_earlier_value(backend):
    """Protobuf's rule, last wins, and a Feature with no kind is absent: ours on every spec kind, batched and
    single. TensorFlow is not consistent here (recorded with 2.21): its dense features (FixedLenFeature,
    FixedLenSequenceFeature) skip the kind-less entry and keep the earlier value, its VarLenFeature and
    RaggedFeature do what we do in a batch but keep the earlier value in parse_single_example."""
    record = example([("a", ints([1, 2])), ("a", b"")])
    assert parse_example([record], {"a": FixedLenFeature([2], torch.int64, [7, 7])})["a"].tolist() == [[7, 7]]
    assert parse_example([record], {"a": VarLenFeature(torch.int64)})["a"]._nnz() == 0
    assert parse_single_example(record, {"a": RaggedFeature(torch.int64)})["a"].tolist() == []
    with pytest.raises(DecodeError, match="required but missing"):
        parse_single_example(record, {"a": FixedLenFeature([2], torch.int64)})


def test_the_nodes_example_decoder_gives_what_the_parse_functions_give(backend):
    from tfr_torch.nodes import ExampleDecoder

    def outcome(decode, data, spec, single):
        try:
            return ("ok", {k: plain(v, spec[k], single) for k, v in decode(data).items()})
        except DecodeError as exc:
            return ("err", "DecodeError", str(exc))

    for records, spec, _ in random_cases(seed=9, n=30, bad=0.2):
        if not records:
            continue
        decode = ExampleDecoder({key: spec_of(entry) for key, entry in spec.items()})
        for data, single in ((records, False), (records[0], True)):
            got = outcome(decode, data, spec, single)
            expected = run_ours(records[:1] if single else records, spec, single)
            assert got[0] == expected[0], (got, expected)
            assert got == expected if got[0] == "err" else same_outcome(got, expected, spec)
