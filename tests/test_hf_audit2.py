"""Second audit of the Hugging Face `datasets` integration (tfr_torch.hf), beyond tests/test_hf_nodes_audit.py.

Round trips TFRecord -> datasets -> TFRecord byte for byte with extreme values (int64 bounds, float32 NaN / inf /
-0.0 / subnormals, bytes with NUL and non-UTF-8, empty lists) for Examples and SequenceExamples; datasets ->
TFRecord -> datasets keeping float specials bit for bit, string ArrayNDs, Images given by path, a shuffled and
selected dataset's row order, an empty dataset, and a dataset whose split is a slice ("train[:50%]", as
`load_dataset` names it); files of no records; a FixedLenFeature of shape [0]; a TFDS slice given as the split of
plain TFRecord files; streaming and map-style datasets giving the same rows; `utf8=` on
shards `write` made (Image and ClassLabel kept); `features=None` on a TFDS folder; the cache key covering a TFDS
shard rewritten in place, a remote file rewritten with the same size and another spec on the same files; a record
that is not an Example and a value of the wrong type named by file and offset (also with num_proc=2).
"""

import math
import os
import shutil
import struct

import numpy as np
import pytest
import torch

import tfr_torch

datasets = pytest.importorskip("datasets")
import tfr_torch.hf as hf  # noqa: E402
from tfr_torch.format.example import ByteStrings, encode_sequence_example  # noqa: E402
from chain_util import chain as _chain  # noqa: E402

S = tfr_torch.string
F = tfr_torch.FixedLenFeature


@pytest.fixture(autouse=True)
def _hf_cache(tmp_path, monkeypatch):
    """Nothing `datasets` caches leaks out of the test's folder."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-home"))


def _cache(tmp_path, name="hf-cache"):
    return str(tmp_path / name)


def _bits(value):
    """A value with every float as its bit pattern (NaN == NaN, -0.0 != 0.0) and numpy values as Python ones."""
    if isinstance(value, dict):
        return {k: _bits(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        return [_bits(v) for v in value]
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    return value


def _shards(folder):
    return sorted(p for p in os.listdir(folder) if ".tfrecord-" in p and not p.endswith(".idx"))


# ----- round trips --------------------------------------------------------------------------------------------------

EXTREMES = {"i": F([2], torch.int64), "f": F([5], torch.float32), "b": F([], S), "v": tfr_torch.VarLenFeature(S),
            "vi": tfr_torch.VarLenFeature(torch.int64), "vf": tfr_torch.VarLenFeature(torch.float32)}


def _extreme_example(i):
    return {"i": np.array([-2**63, 2**63 - 1]), "f": np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], np.float32),
            "b": b"\x00\xff\xfe" * i, "v": ByteStrings([b"", b"\x00", b"\xff"][:i]), "vi": np.arange(i) - 2**62,
            "vf": np.array([-0.0, np.nan][:i % 3], np.float32)}


def test_extreme_values_round_trip_tfrecord_datasets_tfrecord_byte_for_byte(tmp_path):
    """int64 bounds, float32 NaN / inf / -0.0 / subnormal, bytes with NUL and non-UTF-8 bytes, empty lists: the
    shards `write` makes of the loaded Dataset are the source shards byte for byte, and a stream gives the rows the
    Dataset holds, float bits included."""
    src = tmp_path / "src"
    with tfr_torch.ShardedWriter(src, "x", "train", records_per_shard=2, features=EXTREMES) as writer:
        for i in range(5):
            writer.write_example(_extreme_example(i))
    ds = hf.load(src, split="train", cache_dir=_cache(tmp_path))
    assert ds[0]["i"] == [-2**63, 2**63 - 1] and ds[0]["v"] == [] and ds[2]["b"] == b"\x00\xff\xfe" * 2
    assert _bits(ds[0]["f"]) == _bits([math.nan, math.inf, -math.inf, -0.0, float(np.float32(1e-45))])
    stream = list(hf.load(src, split="train", streaming=True))
    assert _bits(stream) == _bits(list(ds))
    written = hf.write(ds, str(tmp_path / "out"), "x", records_per_shard=2)
    assert [os.path.basename(p) for p in written["train"]] == _shards(src)
    for path in written["train"]:
        with open(path, "rb") as a, open(src / os.path.basename(path), "rb") as b:
            assert a.read() == b.read(), path


def test_float_specials_round_trip_datasets_tfrecord_datasets_bit_for_bit(tmp_path):
    """float32 and float64 columns (scalars, lists, Array2D) keep NaN, inf and -0.0 through write and load."""
    V = datasets.Value
    features = datasets.Features({"f32": V("float32"), "f64": V("float64"), "lst": datasets.List(V("float32")),
                                  "arr": datasets.Array2D((1, 2), "float32")})
    rows = {"f32": [math.nan, -0.0, math.inf], "f64": [-math.inf, math.nan, -0.0],
            "lst": [[-0.0, math.nan], [], [math.inf]], "arr": [[[math.nan, -0.0]], [[1.0, -math.inf]], [[0.0, 2.0]]]}
    ds = datasets.Dataset.from_dict(rows, features=features)
    hf.write(ds, str(tmp_path / "out"), "fl")
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert back.features == features
    assert _bits(back[:]) == _bits(ds[:])
    assert _bits(list(hf.load(tmp_path / "out", split="train", streaming=True))) == _bits(list(ds))


def test_sequence_examples_round_trip_byte_for_byte(tmp_path):
    """SequenceExamples with int64 bounds, NaN / -0.0, non-UTF-8 bytes, steps of no values and records of no steps:
    load -> write gives the same records; the stream's rows are the Dataset's."""
    FS = tfr_torch.FixedLenSequenceFeature
    spec = tfr_torch.SequenceFeatures(
        {"id": F([], torch.int64), "name": F([], S), "f": F([2], torch.float32)},
        {"tok": FS([], torch.int64, allow_missing=True), "w": tfr_torch.VarLenFeature(S),
         "xy": FS([2], torch.float32, allow_missing=True), "s": FS([], S, allow_missing=True)})
    path = str(tmp_path / "seq.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(4):
            writer.write(encode_sequence_example(
                {"id": -2**63 + i, "name": ByteStrings([b"\x00n\xff" * i]), "f": np.array([np.nan, -0.0], np.float32)},
                {"tok": [np.array([2**63 - 1 - t]) for t in range(i)],
                 "w": [ByteStrings([b"a\x00"] * t) for t in range(i)],
                 "xy": [np.array([t, -0.0], np.float32) for t in range(i)],
                 "s": [ByteStrings([b"\xff%d" % t]) for t in range(i)]}))
    ds = hf.load(path, spec, cache_dir=_cache(tmp_path))
    assert ds[2]["feature_lists"]["w"] == [[], [b"a\x00"]] and ds[0]["feature_lists"]["tok"] == []
    assert _bits(list(hf.load(path, spec, streaming=True))) == _bits(list(ds))
    written = hf.write(ds, str(tmp_path / "out"), "seq")
    with open(written["train"][0], "rb") as a, open(path, "rb") as b:
        assert a.read() == b.read()
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path, "c2"))
    assert back.features == ds.features and _bits(back[:]) == _bits(ds[:])


def test_a_shuffled_and_selected_dataset_is_written_in_its_row_order(tmp_path):
    """A Dataset with an indices mapping (shuffle, select) is written in the order it iterates, across shards; the
    map-style and streaming loads and TFRecordDataset give that order."""
    base = datasets.Dataset.from_dict({"id": list(range(20)), "t": [f"r{i}" for i in range(20)]})
    ds = base.shuffle(seed=7).select(range(3, 14))
    hf.write(ds, str(tmp_path / "out"), "sh", records_per_shard=3, batch_size=4)
    assert len(_shards(tmp_path / "out")) == 4
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert back["id"] == ds["id"] and back["t"] == ds["t"]
    assert [row["id"] for row in hf.load(tmp_path / "out", split="train", streaming=True)] == ds["id"]
    records = tfr_torch.TFRecordDataset(_shard_paths(tmp_path / "out"), {"id": F([], torch.int64)})
    assert [int(r["id"]) for r in records] == ds["id"]


def test_an_image_given_by_path_is_written_as_its_file(tmp_path):
    """An `Image` column holding paths (no bytes) is written as the files' bytes and loads back as `Image()`."""
    from PIL import Image

    files = []
    for i in range(2):
        files.append(str(tmp_path / f"im{i}.png"))
        Image.fromarray(np.full((2, 3, 3), 40 * i, np.uint8)).save(files[-1])
    ds = datasets.Dataset.from_dict({"img": files}).cast_column("img", datasets.Image())
    hf.write(ds, str(tmp_path / "out"), "im")
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert back.features["img"] == datasets.Image()
    raw = back.cast_column("img", datasets.Image(decode=False))
    for row, path in zip(raw, files):
        with open(path, "rb") as f:
            assert row["img"]["bytes"] == f.read()


def test_a_string_array_streams_as_text_like_the_dataset(tmp_path):
    """Fixed: an `Array2D(dtype="string")` column written and loaded back gave str in the Dataset (Arrow casts) but
    bytes in the stream (to_row left the decoded bytes as they were)."""
    features = datasets.Features({"a": datasets.Array2D((1, 2), "string")})
    ds = datasets.Dataset.from_dict({"a": [[["a", "b"]], [["", "é\x00"]]]}, features=features)
    hf.write(ds, str(tmp_path / "out"), "a2s")
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert back.features == features and back["a"][:] == ds["a"][:]
    assert [row["a"] for row in hf.load(tmp_path / "out", split="train", streaming=True)] == ds["a"][:]


# ----- empty data ---------------------------------------------------------------------------------------------------

def test_files_of_no_records_load_as_an_empty_dataset(tmp_path):
    """Fixed: TFRecord files of no records gave `ValueError: Instruction "train" corresponds to no data!` from
    `datasets` when loaded map-style, while the stream of the same files is empty: now a Dataset of no rows with
    the spec's features."""
    paths = []
    for name in ("a", "b"):
        paths.append(str(tmp_path / f"{name}.tfrecord"))
        with tfr_torch.TFRecordWriter(paths[-1]):
            pass
    spec = {"id": F([], torch.int64), "t": tfr_torch.VarLenFeature(S)}
    ds = hf.load(paths, spec, cache_dir=_cache(tmp_path))
    assert len(ds) == 0 and ds.features == hf.features_from_spec(spec) and str(ds.split) == "train"
    assert list(hf.load(paths, spec, streaming=True)) == []


def test_an_empty_dataset_round_trips(tmp_path):
    """Fixed: `write` of a Dataset of no rows leaves a sidecar of no shards, which `load` of the folder refused
    ("features='auto' needs the sidecar ... and none describes these files"): now a Dataset of no rows with the
    written features, map-style and streaming."""
    features = datasets.Features({"x": datasets.Value("int64"), "t": datasets.Value("string")})
    empty = datasets.Dataset.from_dict({"x": [], "t": []}, features=features)
    assert hf.write(empty, str(tmp_path / "out"), "e") == {"train": []}
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert len(back) == 0 and back.features == features
    assert list(hf.load(tmp_path / "out", split="train", streaming=True)) == []
    assert len(hf.load(tmp_path / "out", cache_dir=_cache(tmp_path))["train"]) == 0


# ----- split names, utf8, features=None -----------------------------------------------------------------------------

@pytest.mark.parametrize("tfds", [False, True])
def test_a_dataset_of_a_sliced_split_is_written_under_the_split_name(tmp_path, tfds):
    """Fixed: `load_dataset(..., split="train[:50%]")` gives a Dataset whose split is "train[:50%]"; `write` used it
    as the split name, making files named "x-train[:50%].tfrecord-..." and, with tfds=True, a TFDS split that
    neither TFDS, TFRecordDataset nor `load` can read ("cannot read 'train[:50%][0shard]'"): now "train"."""
    import json

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"a": i}) + "\n" for i in range(10)))
    ds = datasets.load_dataset("json", data_files=str(data), split="train[:50%]", cache_dir=_cache(tmp_path, "j"))
    assert str(ds.split) == "train[:50%]"
    folder = tmp_path / "data" / "x" / "1.0.0"
    written = hf.write(ds, str(folder), "x", tfds=tfds)
    assert list(written) == ["train"] and all("[" not in os.path.basename(p) for p in written["train"])
    back = hf.load(folder, split="train", cache_dir=_cache(tmp_path))
    assert back["a"] == [0, 1, 2, 3, 4]
    if tfds:
        assert [int(r["a"]) for r in tfr_torch.TFRecordDataset(str(folder), split="train")] == [0, 1, 2, 3, 4]


def test_utf8_keeps_the_image_and_class_label_write_recorded(tmp_path):
    """Fixed: `utf8=` on shards `write` made dropped the recorded `datasets` features (Image -> binary, ClassLabel
    -> int64), and utf8=True decoded the PNG bytes as text ("feature 'img' of record 0 is not UTF-8"): now only the
    binary columns utf8 names become text; naming an Image column is a ValueError."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((2, 2, 3), 5, np.uint8)).save(buffer, format="PNG")
    V = datasets.Value
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"]),
                                  "bin": V("binary"), "bins": datasets.List(V("binary")), "keep": V("binary")})
    ds = datasets.Dataset.from_dict({"img": [{"bytes": buffer.getvalue(), "path": None}], "label": [1],
                                     "bin": [b"hi"], "bins": [[b"x", b""]], "keep": [b"\xff"]}, features=features)
    hf.write(ds, str(tmp_path / "out"), "u")
    some = hf.load(tmp_path / "out", split="train", utf8=["bin", "bins"], cache_dir=_cache(tmp_path))
    assert some.features == datasets.Features({**features, "bin": V("string"), "bins": datasets.List(V("string"))})
    assert (some[0]["bin"], some[0]["bins"], some[0]["keep"], some[0]["label"]) == ("hi", ["x", ""], b"\xff", 1)
    with pytest.raises(Exception) as err:  # utf8=True: every binary column as text, "keep" is not UTF-8
        hf.load(tmp_path / "out", split="train", utf8=True, cache_dir=_cache(tmp_path))
    assert "feature 'keep' of record 0 is not UTF-8" in _chain(err.value)
    every = hf.load(tmp_path / "out", split="train", utf8=["bin", "bins"], streaming=True)
    assert every.features == some.features
    with pytest.raises(ValueError) as err:
        hf.load(tmp_path / "out", split="train", utf8=["img"], cache_dir=_cache(tmp_path))
    assert str(err.value) == "utf8 names 'img', which the sidecar records as Image(mode=None, decode=True), not a " \
                             "binary column"


def _tfds_folder(folder, values):
    ds = datasets.Dataset.from_dict({"x": values}, features=datasets.Features({"x": datasets.Value("int64")}))
    hf.write(ds, str(folder), "t", tfds=True)
    return folder


def test_features_none_on_a_tfds_folder_is_refused(tmp_path):
    """Fixed: `features=None` means "a bytes column of raw records", yet on a TFDS folder it was taken as "auto" and
    gave decoded columns: now a ValueError that says how to get the raw records."""
    folder = _tfds_folder(tmp_path / "data" / "t" / "1.0.0", [1, 2, 3])
    with pytest.raises(ValueError) as err:
        hf.load(folder, None, split="train", cache_dir=_cache(tmp_path))
    assert str(err.value) == ("a TFDS folder's features come from its features.json: leave features='auto' and "
                              "utf8=False (Text features are strings, string Tensors binary); for its raw records, "
                              "pass its shard files with features=None")
    raw = hf.load(tfr_torch.tfds.read_info(folder).shard_paths("train"), None, cache_dir=_cache(tmp_path))
    assert raw["bytes"] == list(tfr_torch.read_records(next(iter(_shard_paths(folder)))))


def _shard_paths(folder):
    return [os.path.join(folder, p) for p in _shards(folder)]


# ----- the cache key ------------------------------------------------------------------------------------------------

def test_a_tfds_shard_rewritten_in_place_is_converted_again(tmp_path):
    """Fixed: the cache key of a TFDS folder held the folder and the shard lengths but not the shard files, so a
    shard rewritten in place (same counts, the folder's time unchanged) gave the stale cached rows."""
    folder = _tfds_folder(tmp_path / "data" / "t" / "1.0.0", [1, 2, 3])
    other = _tfds_folder(tmp_path / "other" / "t" / "1.0.0", [7, 8, 9])
    assert hf.load(folder, split="train", cache_dir=_cache(tmp_path))["x"] == [1, 2, 3]
    for name in _shards(other):
        shutil.copyfile(other / name, folder / name)  # in place: the folder's entries do not change
    assert hf.load(folder, split="train", cache_dir=_cache(tmp_path))["x"] == [7, 8, 9]


def test_a_remote_file_rewritten_with_the_same_size_is_converted_again(tmp_path):
    """Fixed: a URL's cache key held its name and size only: a remote file rewritten with other records of the same
    size gave the stale cached rows (local files have their modification time in the key)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    url = f"memory://hf-audit2/{tmp_path.name}/x.tfrecord"

    def put(values):
        local = str(tmp_path / "x.tfrecord")
        with tfr_torch.TFRecordWriter(local) as writer:
            for v in values:
                writer.write_example({"a": v})
        with open(local, "rb") as src, fs.open(url[len("memory://"):], "wb") as dst:
            dst.write(src.read())

    spec = {"a": F([], torch.int64)}
    put([1, 2])
    assert hf.load(url, spec, cache_dir=_cache(tmp_path))["a"] == [1, 2]
    put([3, 4])  # the same size
    try:
        assert hf.load(url, spec, cache_dir=_cache(tmp_path))["a"] == [3, 4]
    finally:
        fs.rm(f"/hf-audit2/{tmp_path.name}", recursive=True)


def test_another_spec_or_option_on_the_same_files_is_converted_again(tmp_path):
    """The cache key covers the spec (a default value differing only), utf8 and a file rewritten locally."""
    path = str(tmp_path / "d.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write_example({"a": 1, "t": b"x"})
        writer.write_example({"t": b"y"})
    cache = _cache(tmp_path)
    seven = {"a": F([], torch.int64, default_value=7), "t": F([], S)}
    assert hf.load(path, seven, cache_dir=cache)["a"] == [1, 7]
    assert hf.load(path, {**seven, "a": F([], torch.int64, default_value=8)}, cache_dir=cache)["a"] == [1, 8]
    assert hf.load(path, seven, cache_dir=cache)["t"] == [b"x", b"y"]
    assert hf.load(path, seven, utf8=True, cache_dir=cache)["t"] == ["x", "y"]
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write_example({"a": 5, "t": b"z"})
    assert hf.load(path, seven, cache_dir=cache)["a"] == [5]


# ----- errors -------------------------------------------------------------------------------------------------------

def _offsets(path):
    offsets, at = [], 0
    for record in tfr_torch.read_records(path):
        offsets.append(at)
        at += 16 + len(record)
    return offsets


@pytest.mark.parametrize("how", ["map", "stream", "num_proc"])
def test_a_record_that_is_no_example_and_a_value_of_another_type_name_file_and_offset(tmp_path, how):
    """A record with a valid frame but bytes that are no tf.train.Example, and a float_list where the spec wants
    int64: the error names the file, the record's offset and (for the value) the key; never a dropped row."""
    good = str(tmp_path / "good.tfrecord")
    with tfr_torch.TFRecordWriter(good) as writer:
        writer.write_example({"a": 1})
    proto = str(tmp_path / "proto.tfrecord")
    with tfr_torch.TFRecordWriter(proto) as writer:
        writer.write_example({"a": 1})
        writer.write(b"\x0a\xff\xff\xff")
    typed = str(tmp_path / "type.tfrecord")
    with tfr_torch.TFRecordWriter(typed) as writer:
        writer.write_example({"a": 1})
        writer.write_example({"a": 2})
        writer.write_example({"a": np.array([1.5], np.float32)})
    spec = {"a": F([], torch.int64)}
    for i, (bad, expected) in enumerate([(proto, "cannot parse 4 bytes as a tf.train.Example"),
                                         (typed, "feature 'a' in the example holds float values but int64 values "
                                                 "were expected")]):
        with pytest.raises(Exception) as err:
            if how == "stream":
                list(hf.load([good, bad], spec, streaming=True))
            else:
                hf.load([good, bad], spec, cache_dir=_cache(tmp_path, f"c{i}"),
                        num_proc=2 if how == "num_proc" else None)
        text = _chain(err.value)
        assert f"{bad}:{_offsets(bad)[-1]}:" in text and expected in text, text


def test_a_sliced_split_of_tfrecord_files_is_refused(tmp_path):
    """Fixed: split="train[:2]" (TFDS's slice syntax) on TFRecord files was silently read whole and named "train":
    every record came back. Now a ValueError; a plain name such as "validation" still names the split."""
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(6):
            writer.write_example({"a": i})
    spec = {"a": F([], torch.int64)}
    for split in ("train[:2]", "train+test", "train[50%:]"):
        with pytest.raises(ValueError) as err:
            hf.load(path, spec, split=split, cache_dir=_cache(tmp_path))
        assert str(err.value) == (f"split={split!r}: slices and sums of splits select the records of TFDS folders; "
                                  "for TFRecord files split= only names the split (such as 'train'): slice the "
                                  "Dataset instead (ds.select(range(...)))")
    assert hf.load(path, spec, split="validation", cache_dir=_cache(tmp_path))["a"] == list(range(6))


def test_a_fixed_len_feature_of_no_values_loads(tmp_path):
    """Fixed: FixedLenFeature([0]) (zero values, valid in TensorFlow) mapped to datasets.List(length=0), an Arrow
    fixed_size_list of size 0, which pyarrow refuses ('list_size needs to be a strict positive integer'): a 0
    dimension is now a List of any length, and the rows hold empty lists, as a stream gives them."""
    path = str(tmp_path / "z.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write_example({"id": 1, "z": np.array([], np.int64)})
    spec = {"id": F([], torch.int64), "z": F([0], torch.int64)}
    ds = hf.load(path, spec, cache_dir=_cache(tmp_path))
    assert ds[0] == {"id": 1, "z": []}
    assert list(hf.load(path, spec, streaming=True)) == [{"id": 1, "z": []}]
    two = {"id": F([], torch.int64), "z": F([2, 0], torch.int64)}
    assert hf.load(path, two, cache_dir=_cache(tmp_path))[0] == {"id": 1, "z": [[], []]}
