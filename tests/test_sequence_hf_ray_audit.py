"""Audit of tf.train.SequenceExample records in Hugging Face `datasets` (`tfr_torch.hf.load` with a
`SequenceFeatures`) and Ray Data (`tfr_torch.ray.read_tfrecords` with a `SequenceFeatures`).

- differential: random SequenceExamples (every context kind: FixedLen scalars and shapes with defaults, VarLen,
  strings, context keys missing from some records or from all; every feature-list kind: FixedLenSequenceFeature of
  shapes [], [k], [a, b] of int64 / float32 / string, VarLenFeature and RaggedFeature of each dtype; zero-step
  sequences, empty steps, feature lists missing from some records; unicode text) against TensorFlow's own
  `tf.io.parse_single_sequence_example`, key by key (a subprocess in the Python that TFR_TORCH_TF_PYTHON names,
  skipped without it): HF streaming, not streaming and num_proc=2, Ray with small blocks and several read tasks,
  features="auto" from a ShardedWriter sidecar holding a SequenceFeatures;
- errors: non-UTF-8 bytes asked for as text, and records that are not SequenceExamples, name the file, the byte
  offset and the key.

Tests commented `# Fixed:` failed before the fix of a defect this audit found (the comment says what it was).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import tempfile
import textwrap

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SequenceFeatures,
    VarLenFeature,
    string,
)
from tfr_torch.errors import DecodeError
from tfr_torch.format._proto import example_pb2
from tfr_torch.format.index import scan_index

datasets = pytest.importorskip("datasets")
ray = pytest.importorskip("ray")
hf = pytest.importorskip("tfr_torch.hf")
tray = pytest.importorskip("tfr_torch.ray")

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "")  # a Python with tensorflow (as tests/test_sequence_audit.py)
needs_tf = pytest.mark.skipif(not TF_PYTHON or not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow for the reference checks")

# ------------------------------------------------------------------------------------------------ the spec

# (kind, shape, dtype, default) per key: the spec in a form both tfr_torch and the TensorFlow subprocess build from
CONTEXT = {
    "c_int": ("fixed", [], "int64", -3),
    "c_vec": ("fixed", [2], "float32", [0.5, -1.25]),
    "c_mat": ("fixed", [2, 3], "int64", [[1, 2, 3], [4, 5, 6]]),
    "c_str": ("fixed", [], "string", "none"),
    "c_strs": ("fixed", [2], "string", ["dé", "faut"]),
    "c_req": ("fixed", [], "float32", None),  # in every record
    "c_never": ("fixed", [], "int64", 11),  # in no record
    "c_vi": ("varlen", None, "int64", None),
    "c_vf": ("varlen", None, "float32", None),
    "c_vs": ("varlen", None, "string", None),
}
SEQUENCE = {
    "s_i": ("fixedseq", [], "int64", None),
    "s_f3": ("fixedseq", [3], "float32", None),
    "s_s22": ("fixedseq", [2, 2], "string", None),
    "s_i22": ("fixedseq", [2, 2], "int64", None),
    "s_s": ("fixedseq", [], "string", None),
    "s_f23": ("fixedseq", [2, 3], "float32", None),
    "s_i2": ("fixedseq", [2], "int64", None),
    "v_i": ("varlen", None, "int64", None),
    "v_f": ("varlen", None, "float32", None),
    "v_s": ("varlen", None, "string", None),
    "r_i": ("ragged", None, "int64", None),
    "r_f": ("ragged", None, "float32", None),
    "r_s": ("ragged", None, "string", None),
}
_TORCH = {"int64": torch.int64, "float32": torch.float32, "string": string}


def _default(dtype: str, default):
    if default is None or dtype != "string":
        return default
    return [d.encode() for d in default] if isinstance(default, list) else default.encode()


def _feature(entry):
    kind, shape, dtype, default = entry
    if kind == "fixed":
        return FixedLenFeature(shape, _TORCH[dtype], default_value=_default(dtype, default))
    if kind == "fixedseq":
        return FixedLenSequenceFeature(shape, _TORCH[dtype], allow_missing=True)
    if kind == "varlen":
        return VarLenFeature(_TORCH[dtype])
    return RaggedFeature(_TORCH[dtype])


SPEC = SequenceFeatures(context={k: _feature(e) for k, e in CONTEXT.items()},
                        sequence={k: _feature(e) for k, e in SEQUENCE.items()})
# the sidecar stores no RaggedFeature: the same lists as VarLenFeatures (the same values, step by step)
SIDECAR_SPEC = SequenceFeatures(context=SPEC.context, sequence={
    k: VarLenFeature(f.dtype) if isinstance(f, RaggedFeature) else f for k, f in SPEC.sequence.items()})
STRING_KEYS = sorted(k for k, e in {**CONTEXT, **SEQUENCE}.items() if e[2] == "string")

# ------------------------------------------------------------------------------------------------ random records

_WORDS = ["", "a", "déjà", "日本語", "emoji 🙂", "x" * 9, "Ωμέγα", "tab\tnew\nline", "nul\0byte"]


def _values(rng, dtype: str, n: int) -> list:
    if dtype == "int64":
        pool = [0, 1, -1, 2**63 - 1, -(2**63), 123456789012]
        return [int(pool[i]) if rng.random() < 0.3 else int(rng.integers(-1000, 1000)) for i in rng.integers(0, 6, n)]
    if dtype == "float32":
        pool = np.array([0.0, -0.0, 1.5, -2.25, 3.4028235e38, 1e-45], dtype=np.float32)
        out = np.where(rng.random(n) < 0.3, pool[rng.integers(0, 6, n)], rng.normal(size=n).astype(np.float32))
        return [float(v) for v in out.astype(np.float32)]
    return [_WORDS[i].encode() for i in rng.integers(0, len(_WORDS), n)]


def _set(feature, dtype: str, values: list) -> None:
    if dtype == "int64":
        feature.int64_list.value.extend(values)
    elif dtype == "float32":
        feature.float_list.value.extend(values)
    else:
        feature.bytes_list.value.extend(values)


def random_record(rng, bad_utf8_key: str | None = None) -> bytes:
    """A random SequenceExample of the spec: context keys missing at times (but c_req), feature lists missing at
    times, 0-4 steps, VarLen / Ragged steps of 0-3 values (empty steps included). `bad_utf8_key`: that key (a
    string context feature, or a string feature list) holds one value that is not UTF-8."""
    se = example_pb2.SequenceExample()
    for key, (kind, shape, dtype, default) in CONTEXT.items():
        if key == "c_never" or (key != "c_req" and rng.random() < 0.3):
            continue
        n = int(np.prod(shape)) if kind == "fixed" else int(rng.integers(0, 4))
        _set(se.context.feature[key], dtype, _values(rng, dtype, n))
    for key, (kind, shape, dtype, _) in SEQUENCE.items():
        if rng.random() < 0.2:
            continue
        feature_list = se.feature_lists.feature_list[key]
        for _ in range(int(rng.integers(0, 5))):
            n = int(np.prod(shape)) if kind == "fixedseq" else int(rng.integers(0, 4))
            _set(feature_list.feature.add(), dtype, _values(rng, dtype, n))
    if bad_utf8_key is not None:
        if bad_utf8_key in CONTEXT:
            feature = se.context.feature[bad_utf8_key]
            feature.ClearField("bytes_list")
            n = int(np.prod(CONTEXT[bad_utf8_key][1] or [1]))
            feature.bytes_list.value.extend([b"ok"] * (n - 1) + [b"bad \xff\xfe"])
        else:
            feature_list = se.feature_lists.feature_list[bad_utf8_key]
            del feature_list.feature[:]
            n = int(np.prod(SEQUENCE[bad_utf8_key][1] or [1]))
            feature_list.feature.add().bytes_list.value.extend([b"fine"] * n)
            feature_list.feature.add().bytes_list.value.extend([b"ok"] * (n - 1) + [b"bad \xc3\x28"])
    return se.SerializeToString()


def write(path: str, records: list[bytes], index: bool = True) -> str:
    with tfr_torch.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    if index:
        tfr_torch.build_index(path, path + ".idx")
    return path


# ------------------------------------------------------------------------------------------------ TensorFlow's answers

_TF_SCRIPT = """
    import json, sys
    import numpy as np
    import tensorflow as tf

    job = json.load(open(sys.argv[1]))
    def build(entry, context):
        kind, shape, dtype, default = entry
        dtype = getattr(tf, dtype)
        if kind == "fixed":
            if dtype == tf.string and default is not None:
                default = [d.encode() for d in default] if isinstance(default, list) else default.encode()
            return tf.io.FixedLenFeature(shape, dtype, default_value=default)
        if kind == "fixedseq":
            return tf.io.FixedLenSequenceFeature(shape, dtype, allow_missing=True)
        if kind == "varlen":
            return tf.io.VarLenFeature(dtype)
        return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
    context = {k: build(e, True) for k, e in job["context"].items()}
    sequence = {k: build(e, False) for k, e in job["sequence"].items()}

    def plain(v):
        if isinstance(v, bytes):
            return "hex:" + v.hex()
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, float):
            return ["f32", int(np.float32(v).view(np.uint32))]
        return v

    def value(t, steps):
        if isinstance(t, tf.SparseTensor):
            values, indices = t.values.numpy().tolist(), t.indices.numpy()
            if not steps:
                return plain(values)
            rows = [[] for _ in range(int(t.dense_shape[0]))]
            for (row, _), v in zip(indices.tolist(), values):
                rows[row].append(v)
            return plain(rows)
        if isinstance(t, tf.RaggedTensor):
            return plain(t.to_list())
        a = t.numpy()
        return plain(a.tolist() if hasattr(a, "tolist") else a)

    out = []
    for path in job["paths"]:
        rows = []
        for record in tf.data.TFRecordDataset(path):
            c, s = tf.io.parse_single_sequence_example(record, context, sequence)
            rows.append({"context": {k: value(v, False) for k, v in c.items()},
                         "feature_lists": {k: value(v, True) for k, v in s.items()}})
        out.append(rows)
    json.dump(out, open(sys.argv[2], "w"))
"""


def tf_rows(paths: list[str]) -> list[list[dict]]:
    """parse_single_sequence_example of each record of each of `paths`, in TensorFlow, as plain values (see
    `plain`)."""
    with tempfile.TemporaryDirectory() as folder:
        job_path, out_path = os.path.join(folder, "job.json"), os.path.join(folder, "out.json")
        with open(job_path, "w") as f:
            json.dump({"paths": paths, "context": CONTEXT, "sequence": SEQUENCE}, f)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        done = subprocess.run([TF_PYTHON, "-c", textwrap.dedent(_TF_SCRIPT), job_path, out_path], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
        with open(out_path) as f:
            return json.load(f)


def plain(value, text: bool = False):
    """A decoded value (numpy, lists, bytes, str) in tf_rows' form: floats as float32 bit patterns, bytes as hex
    (str values: their UTF-8 bytes, when `text`)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, (bytes, bytearray)):
        return "hex:" + bytes(value).hex()
    if isinstance(value, str):
        assert text, f"text value {value!r} where binary was expected"
        return "hex:" + value.encode("utf-8").hex()
    if isinstance(value, (list, tuple)):
        return [plain(v, text) for v in value]
    if isinstance(value, bool):
        raise AssertionError(f"bool {value!r} where a number was expected")
    if isinstance(value, float):
        return ["f32", struct.unpack("<I", struct.pack("<f", value))[0]]
    return value


def assert_same(got: dict, want: dict, row: int, text: bool) -> None:
    """One row, key by key, in each part."""
    for part in ("context", "feature_lists"):
        assert sorted(got[part]) == sorted(want[part]), (row, part)
        for key in want[part]:
            g = plain(got[part][key], text)
            assert g == want[part][key], f"row {row} {part}[{key!r}]: {g!r} != {want[part][key]!r}"


# ------------------------------------------------------------------------------------------------ the files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Three indexed files of random SequenceExamples (the second starts with a record of no lists and no
    context but c_req, and one of zero steps in every list; the third holds a tf.train.Example), and TensorFlow's
    rows of each (None without TF)."""
    folder = tmp_path_factory.mktemp("seq")
    rng = np.random.default_rng(20261126)
    paths = []
    for f in range(3):
        records = [random_record(rng) for _ in range(9 + 3 * f)]
        if f == 1:
            empty = example_pb2.SequenceExample()
            empty.context.feature["c_req"].float_list.value.append(2.5)
            zero = example_pb2.SequenceExample()
            zero.context.feature["c_req"].float_list.value.append(-2.5)
            for key in SEQUENCE:
                zero.feature_lists.feature_list[key].SetInParent()  # present, no steps
            records[:0] = [empty.SerializeToString(), zero.SerializeToString()]
        if f == 2:  # a tf.train.Example: TensorFlow reads its features as the context, and no feature lists
            records.insert(3, tfr_torch.encode_example({"c_int": np.array([9]), "c_req": np.array([1.5], np.float32),
                                                        "c_vs": np.array(["é".encode()], dtype=bytes)}))
        paths.append(write(str(folder / f"part-{f}.tfrecord"), records))
    want = tf_rows(paths) if TF_PYTHON and os.path.exists(TF_PYTHON) else None
    return paths, want


@needs_tf
def test_the_random_files_hold_every_case(files):
    """The differential tests below see, for every feature list, records with no steps and with several, and
    for every VarLen / Ragged list empty and non-empty steps; for every optional context key, records without it."""
    _, want = files
    rows = [r for rows_of_file in want for r in rows_of_file]
    for key, (kind, _, _, _) in SEQUENCE.items():
        steps = [len(r["feature_lists"][key]) for r in rows]
        assert min(steps) == 0 and max(steps) >= 3, key
        if kind != "fixedseq":
            sizes = {len(step) for r in rows for step in r["feature_lists"][key]}
            assert 0 in sizes and max(sizes) >= 2, key
    for key, (kind, _, dtype, default) in CONTEXT.items():
        if kind == "fixed" and default is not None:
            assert plain(_default(dtype, default)) in [r["context"][key] for r in rows], key


def _cache(tmp_path) -> str:
    return str(tmp_path / "hf_cache")


# ------------------------------------------------------------------------------------------------ Hugging Face


@needs_tf
@pytest.mark.parametrize("mode", ["arrow", "streaming", "num_proc"])
def test_hf_rows_equal_tensorflow_key_by_key(files, tmp_path, mode):
    """Every record of three files, as `datasets` rows (Arrow, streaming, two processes), against TensorFlow;
    strings as text (utf8=True: the random words are UTF-8)."""
    paths, want = files
    kwargs = {"streaming": True} if mode == "streaming" else {"num_proc": 2} if mode == "num_proc" else {}
    ds = hf.load(paths, SPEC, utf8=True, cache_dir=_cache(tmp_path), **kwargs)
    rows = list(ds)
    expected = [r for rows_of_file in want for r in rows_of_file]
    assert len(rows) == len(expected)
    for i, (got, row) in enumerate(zip(rows, expected)):
        assert_same(got, row, i, text=True)


@needs_tf
def test_hf_binary_strings_equal_tensorflow(files, tmp_path):
    """utf8=False: every string key as bytes; with a torch format the numbers come back as tensors too."""
    paths, want = files
    ds = hf.load(paths[1], SPEC, cache_dir=_cache(tmp_path))
    assert ds.features["feature_lists"]["s_s22"] == datasets.List(
        datasets.List(datasets.List(datasets.Value("binary"), length=2), length=2))
    for i, (got, row) in enumerate(zip(ds, want[1])):
        assert_same(got, row, i, text=False)


def test_hf_features_of_every_kind():
    features = hf.features_from_spec(SPEC, utf8=["c_str", "v_s"])
    context, steps = features["context"], features["feature_lists"]
    assert context["c_mat"] == datasets.Array2D(shape=(2, 3), dtype="int64")
    assert context["c_str"] == datasets.Value("string") and context["c_vs"] == datasets.List(datasets.Value("binary"))
    assert steps["s_i"] == datasets.List(datasets.Value("int64"))
    assert steps["s_f23"] == datasets.Array3D(shape=(None, 2, 3), dtype="float32")
    assert steps["v_s"] == datasets.List(datasets.List(datasets.Value("string")))
    assert steps["r_s"] == datasets.List(datasets.List(datasets.Value("binary")))


@needs_tf
def test_hf_features_auto_from_a_sharded_writer_sidecar(files, tmp_path):
    """A ShardedWriter folder whose sidecar holds the SequenceFeatures: load(folder) needs no spec."""
    paths, want = files
    with tfr_torch.ShardedWriter(str(tmp_path / "out"), "clips", records_per_shard=5,
                                features=SIDECAR_SPEC) as writer:
        for path in paths:
            for record in tfr_torch.read_records(path):
                writer.write(record)
    ds = hf.load(str(tmp_path / "out"), split="train", utf8=True, cache_dir=_cache(tmp_path))
    expected = [r for rows_of_file in want for r in rows_of_file]
    rows = list(ds)
    assert len(rows) == len(expected)
    for i, (got, row) in enumerate(zip(rows, expected)):
        assert_same(got, row, i, text=True)


def _bad_file(tmp_path, key: str, at: int = 2) -> tuple[str, int]:
    rng = np.random.default_rng(7)
    records = [random_record(rng) for _ in range(4)]
    records[at] = random_record(rng, bad_utf8_key=key)
    path = write(str(tmp_path / f"bad-{key}.tfrecord"), records, index=False)
    return path, int(scan_index(path)[at, 0])


def _raised(raised: BaseException) -> BaseException:
    """The DecodeError under what `datasets` (or Ray) wrapped it in."""
    err: BaseException | None = raised
    while err is not None and not isinstance(err, DecodeError):
        err = err.__cause__ or err.__context__
    assert err is not None, repr(raised)
    return err


@pytest.mark.parametrize("key", ["c_strs", "s_s22", "v_s", "r_s"])
@pytest.mark.parametrize("streaming", [False, True])
def test_hf_non_utf8_text_names_file_offset_and_key(tmp_path, key, streaming):
    # Fixed: the error named the part ('feature_lists' / 'context'), not the feature that held the bad bytes
    path, offset = _bad_file(tmp_path, key)
    with pytest.raises(Exception) as info:  # a Dataset is converted by load, an IterableDataset as it is read
        list(hf.load(path, SPEC, utf8=True, streaming=streaming, cache_dir=_cache(tmp_path)))
    err = _raised(info.value)
    assert (err.path, err.offset, err.key) == (path, offset, key)
    assert f"feature {key!r} of record 2 is not UTF-8 text" in str(err)
    assert f"{path}:{offset}" in str(err)


def test_hf_utf8_of_a_key_that_is_a_context_string_and_a_numeric_feature_list(tmp_path):
    # Fixed: utf8 looked at the feature list's spec only (the two parts merged, the lists winning), so utf8=True left
    # the context string binary and utf8=["x"] raised "not string features of the spec: ['x']"
    se = example_pb2.SequenceExample()
    se.context.feature["x"].bytes_list.value.append("grüß".encode())
    for n in (2, 0):
        se.feature_lists.feature_list["x"].feature.add().int64_list.value.extend(range(n))
    path = write(str(tmp_path / "both.tfrecord"), [se.SerializeToString()], index=False)
    spec = SequenceFeatures(context={"x": FixedLenFeature([], string)}, sequence={"x": VarLenFeature(torch.int64)})
    for utf8 in (True, ["x"]):
        features = hf.features_from_spec(spec, utf8)
        assert features["context"]["x"] == datasets.Value("string")
        assert features["feature_lists"]["x"] == datasets.List(datasets.List(datasets.Value("int64")))
        rows = list(hf.load(path, spec, utf8=utf8, streaming=True))
        assert len(rows) == 1 and rows[0]["context"] == {"x": "grüß"}
        assert [list(step) for step in rows[0]["feature_lists"]["x"]] == [[0, 1], []]
    with pytest.raises(ValueError, match=r"utf8 names features that are not string features of the spec: \['y'\]"):
        hf.features_from_spec(spec, ["y"])


@pytest.mark.parametrize("streaming", [False, True])
def test_hf_records_that_are_not_sequence_examples_name_file_and_offset(tmp_path, streaming):
    rng = np.random.default_rng(8)
    records = [random_record(rng), random_record(rng), b"\x0a\x05not a", random_record(rng)]
    path = write(str(tmp_path / "junk.tfrecord"), records, index=False)
    offset = int(scan_index(path)[2, 0])
    with pytest.raises(Exception) as info:
        list(hf.load(path, SPEC, streaming=streaming, cache_dir=_cache(tmp_path)))
    err = _raised(info.value)
    assert (err.path, err.offset) == (path, offset), str(err)
    assert f"{path}:{offset}" in str(err)


# ------------------------------------------------------------------------------------------------ Ray Data


def _ray_rows(ds, spec: SequenceFeatures) -> list[dict]:
    """A Ray dataset's rows, in order, in the `{"context", "feature_lists"}` form of the HF rows."""
    return [{"context": {k: row[k] for k in spec.context}, "feature_lists": {k: row[k] for k in spec.sequence}}
            for row in ds.take_all()]


def _ray_read(read, spec: SequenceFeatures) -> list[dict] | str:
    """_ray_rows of `read()`, or what went wrong (so one failing read fails its own test only)."""
    try:
        return _ray_rows(read(), spec)
    except Exception as err:  # Ray wraps the task's error
        return f"{type(err).__name__}: {str(err)[-3000:]}"


def _ray_error(read) -> BaseException | str:
    try:
        read().materialize()
    except Exception as err:  # Ray wraps the task's error
        try:
            return _raised(err)
        except AssertionError:
            return f"{type(err).__name__}: {err}"
    return "no error"


@pytest.fixture(scope="module")
def ray_results(files, tmp_path_factory):
    """Every Ray read of this module, on one local Ray (2 CPUs, no dashboard, rows in the files' order)."""
    paths, _ = files
    folder = tmp_path_factory.mktemp("ray")
    with tfr_torch.ShardedWriter(str(folder / "out"), "clips", records_per_shard=5,
                                 features=SIDECAR_SPEC) as writer:
        for path in paths:
            for record in tfr_torch.read_records(path):
                writer.write(record)
    bad = {}
    for key in ("c_strs", "s_s22", "v_s", "r_s"):
        rng = np.random.default_rng(7)
        records = [random_record(rng) for _ in range(4)]
        records[2] = random_record(rng, bad_utf8_key=key)
        bad[key] = write(str(folder / f"bad-{key}.tfrecord"), records, index=False)
    rng = np.random.default_rng(8)
    junk = write(str(folder / "junk.tfrecord"), [random_record(rng), random_record(rng), b"\x0a\x05not a"],
                 index=False)
    # a valid context, then feature_lists (field 2) whose bytes end inside a varint
    broken = example_pb2.SequenceExample()
    broken.context.feature["c_req"].float_list.value.append(1.0)
    broken_lists = write(str(folder / "broken-lists.tfrecord"),
                         [random_record(rng), broken.SerializeToString() + b"\x12\x03\xff\xff\xff"], index=False)
    sequence_only = SequenceFeatures(sequence=SPEC.sequence)
    context_only = SequenceFeatures(context=SPEC.context)

    if ray.is_initialized():
        ray.shutdown()
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init sets its own, which ray.shutdown leaves (see ray/convert.py)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    context = ray.data.DataContext.get_current()
    before = context.enable_progress_bars, context.execution_options.preserve_order
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    try:
        out = {}
        out["text"] = _ray_read(lambda: tray.read_tfrecords(paths, SPEC, utf8=True, batch_rows=4,
                                                            override_num_blocks=3), SPEC)
        out["binary"] = _ray_read(lambda: tray.read_tfrecords(paths[1], SPEC, batch_rows=5), SPEC)
        out["sequence_only"] = _ray_read(lambda: tray.read_tfrecords(paths, sequence_only, utf8=True, batch_rows=3),
                                         sequence_only)
        out["auto"] = _ray_read(lambda: tray.read_tfrecords(str(folder / "out"), "auto", split="train", utf8=True,
                                                            batch_rows=4, override_num_blocks=2), SIDECAR_SPEC)
        out["bad"] = {key: (path, int(scan_index(path)[2, 0]),
                            _ray_error(lambda path=path: tray.read_tfrecords(path, SPEC, utf8=True)))
                      for key, path in bad.items()}
        out["junk"] = (junk, int(scan_index(junk)[2, 0]),
                       [_ray_error(lambda spec=spec: tray.read_tfrecords(junk, spec))
                        for spec in (SPEC, sequence_only, context_only)])
        out["broken_lists"] = (broken_lists, int(scan_index(broken_lists)[1, 0]),
                               _ray_error(lambda: tray.read_tfrecords(broken_lists, context_only)))
        return out
    finally:
        context.enable_progress_bars, context.execution_options.preserve_order = before
        ray.shutdown()
        signal.signal(signal.SIGTERM, sigterm)


@needs_tf
def test_ray_rows_equal_tensorflow_key_by_key(files, ray_results):
    """Three files in blocks of 4 records over 3 read tasks, strings as text, against TensorFlow."""
    _, want = files
    expected = [r for rows_of_file in want for r in rows_of_file]
    assert isinstance(ray_results["text"], list), ray_results["text"]
    assert len(ray_results["text"]) == len(expected)
    for i, (got, row) in enumerate(zip(ray_results["text"], expected)):
        assert_same(got, row, i, text=True)


@needs_tf
def test_ray_binary_strings_equal_tensorflow(files, ray_results):
    _, want = files
    assert isinstance(ray_results["binary"], list), ray_results["binary"]
    assert len(ray_results["binary"]) == len(want[1])
    for i, (got, row) in enumerate(zip(ray_results["binary"], want[1])):
        assert_same(got, row, i, text=False)


@needs_tf
def test_ray_a_spec_of_feature_lists_only(files, ray_results):
    # Fixed: with no context features every block failed (ArrowInvalid: "Added column's length must match table's
    # length. Expected length 0"): the feature-list columns were appended to a table of no columns and no rows
    _, want = files
    expected = [{"context": {}, "feature_lists": r["feature_lists"]} for rows_of_file in want for r in rows_of_file]
    assert isinstance(ray_results["sequence_only"], list), ray_results["sequence_only"]
    assert len(ray_results["sequence_only"]) == len(expected)
    for i, (got, row) in enumerate(zip(ray_results["sequence_only"], expected)):
        assert_same(got, row, i, text=True)


@needs_tf
def test_ray_features_auto_from_a_sharded_writer_sidecar(files, ray_results):
    _, want = files
    expected = [r for rows_of_file in want for r in rows_of_file]
    assert isinstance(ray_results["auto"], list), ray_results["auto"]
    assert len(ray_results["auto"]) == len(expected)
    for i, (got, row) in enumerate(zip(ray_results["auto"], expected)):
        assert_same(got, row, i, text=True)


@pytest.mark.parametrize("key", ["c_strs", "s_s22", "v_s", "r_s"])
def test_ray_non_utf8_text_names_file_offset_and_key(ray_results, key):
    # Fixed: for list and fixed-size-list string columns the error named example 0 and the block's first offset
    # (the bad row was looked for by casting one-row slices, and a slice of a list array casts all its values)
    path, offset, err = ray_results["bad"][key]
    assert isinstance(err, DecodeError), err
    assert f"{path}:{offset}: feature {key!r} in example 2 is not valid UTF-8 text" in str(err)
    assert getattr(err, "cause", err).key == key  # Ray's wrapper keeps the task's error as `cause`


def test_ray_records_that_are_not_sequence_examples_name_file_and_offset(ray_results):
    # Fixed: with context features the error said "cannot parse 7 bytes as a tf.train.Example" (the context was
    # read with the Example parser)
    path, offset, errors = ray_results["junk"]
    for err in errors:  # spec with context and lists, lists only, context only
        assert isinstance(err, DecodeError), err
        assert f"{path}:{offset}" in str(err)
        assert "cannot parse 7 bytes as a tf.train.SequenceExample" in str(err), str(err)


def test_ray_a_context_only_spec_still_reads_the_records_as_sequence_examples(ray_results):
    # Fixed: a context-only SequenceFeatures read the records with the Example parser, which skips field 2 (the
    # feature lists) unread: a record whose feature lists are not protobuf gave a row, where TensorFlow's
    # parse_single_sequence_example (and tfr_torch's) refuse it
    path, offset, err = ray_results["broken_lists"]
    assert isinstance(err, DecodeError), err
    assert f"{path}:{offset}" in str(err)
    assert "tf.train.SequenceExample" in str(err) and "ends inside a varint" in str(err), str(err)


def test_ray_non_utf8_in_an_example_list_of_strings_names_its_row():
    # Fixed: the same search for the bad row, in an Example's VarLen and FixedLen([k]) string columns
    from tfr_torch.format.location import RecordLocation
    from tfr_torch.ray.arrow import block_maker

    rows = [([b"a", b"b"], [b"x", b"y"]), ([b"c"], [b"x", b"y"]), ([b"\xff"], [b"z", b"\xfe"])]
    records = [tfr_torch.encode_example({"v": np.array(v, dtype=bytes), "f": np.array(f, dtype=bytes)})
               for v, f in rows]
    names = [RecordLocation("d.tfrecord", offset) for offset in (0, 40, 80)]
    for key, spec in (("v", VarLenFeature(string)), ("f", FixedLenFeature([2], string))):
        with pytest.raises(DecodeError) as info:
            block_maker({key: spec}, utf8=True).make(records, names)
        assert str(info.value).startswith(f"d.tfrecord:80: feature {key!r} in example 2 is not valid UTF-8 text"), \
            str(info.value)
