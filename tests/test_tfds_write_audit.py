"""Audit of writing TensorFlow Datasets folders TensorFlow-free: ShardedWriter(tfds=...), `tfr-torch reshard|convert
--tfds` and `tfr_torch.hf.write(..., tfds=True)`.

What it checks:
- every feature kind the writers accept (int64 / int32 / int8 / uint8 / bool / float16 / float32 / float64 tensors of
  fixed and unknown leading shape, Text with unicode, string tensors, VarLen strings, ClassLabel with unicode names,
  PNG RGB / gray and JPEG images from `datasets`) gets the features.json entry TFDS expects (golden trees) and reads
  back with tfr_torch value for value;
- dataset_info.json: split names (unicode, '-', capitals), shardLengths and numBytes consistent with the shard files
  (one record a shard, several splits), the version, supervised keys, class names;
- refusals with messages naming the key: empty splits, sparse / ragged specs, SequenceExamples, supervised keys
  that name no feature, class names the labels file cannot hold, compression;
- defects pinned (xfail) or fixed ("Fixed:" in the test's docstring);
- with TFR_TORCH_TF_PYTHON naming a Python with tensorflow and tensorflow-datasets: real TFDS
  (`builder_from_directory`, `tfds.load(name, data_dir=...)`, `as_supervised`) sees the same metadata and values.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import tfr_torch
from tfr_torch import FixedLenFeature, FixedLenSequenceFeature, ShardedWriter, TFRecordDataset, VarLenFeature, string
from tfr_torch.tfds import read_info

pytestmark = [pytest.mark.filterwarnings("ignore:.*have no index:UserWarning")]

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "")
needs_tf = pytest.mark.skipif(not TF_PYTHON or not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow for the reference checks")

_CLASS = "tensorflow_datasets.core.features."
SPEC = {
    "i64": FixedLenFeature([], torch.int64),
    "i32": FixedLenFeature([3], torch.int32),
    "i8": FixedLenFeature([2], torch.int8),
    "u8": FixedLenFeature([2, 2], torch.uint8),
    "flag": FixedLenFeature([2], torch.bool),
    "f16": FixedLenFeature([2], torch.float16),
    "f32": FixedLenFeature([2, 3], torch.float32),
    "f64": FixedLenFeature([], torch.float64),
    "text": FixedLenFeature([], string),
    "pair": FixedLenFeature([2], string),
    "words": VarLenFeature(string),
    "seq": FixedLenSequenceFeature([2], torch.float32, allow_missing=True),
}


def row(i: int) -> dict:
    """Record i of the table: every kind of SPEC, values exact in float16 / float32."""
    return {"i64": i * 1000003 - 5, "i32": np.array([i, -i, 2**31 - 1], np.int32), "i8": np.array([-128, i], np.int8),
            "u8": np.array([[255, i], [0, 7]], np.uint8), "flag": np.array([i % 2 == 0, True]),
            "f16": np.array([0.5 * i, -2.0], np.float16),
            "f32": np.arange(6, dtype=np.float32).reshape(2, 3) * i + 0.25,
            "f64": i / 4, "text": f"r\u00e9sum\u00e9 {i} \u2603", "pair": [b"\x00\xff%d" % i, b""],
            "words": np.array([f"w{j}".encode() for j in range(i % 3)], dtype=bytes),
            "seq": np.arange(2 * (i % 4), dtype=np.float32).reshape(-1, 2)}


def write_table(folder: Path, splits: dict, name: str = "table", **options) -> Path:
    for split, n in splits.items():
        with ShardedWriter(folder, name, split, records_per_shard=2, features=SPEC, tfds=options) as writer:
            for i in range(n):
                writer.write_example(row(i))
    return folder


def _tensor(shape: list, dtype: str) -> dict:
    return {"pythonClassName": _CLASS + "tensor_feature.Tensor",
            "tensor": {"shape": {"dimensions": [str(d) for d in shape]} if shape else {}, "dtype": dtype,
                       "encoding": "none"}}


GOLDEN_FEATURES = {
    "i64": _tensor([], "int64"), "i32": _tensor([3], "int32"), "i8": _tensor([2], "int8"),
    "u8": _tensor([2, 2], "uint8"), "flag": _tensor([2], "bool"), "f16": _tensor([2], "float16"),
    "f32": _tensor([2, 3], "float32"), "f64": _tensor([], "float64"),
    "text": {"pythonClassName": _CLASS + "text_feature.Text", "text": {}},
    "pair": _tensor([2], "string"), "words": _tensor([-1], "string"), "seq": _tensor([-1, 2], "float32"),
}


def _records_per_file(path: Path) -> int:
    """Records in an uncompressed TFRecord file, by walking its framing (length, crc, data, crc)."""
    data, pos, n = path.read_bytes(), 0, 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += 12 + length + 4
        n += 1
    assert pos == len(data)
    return n


def assert_row(got: dict, i: int) -> None:
    want = row(i)
    for key in ("i32", "i8", "u8", "flag", "f16", "f32", "seq"):
        assert torch.equal(got[key], torch.from_numpy(np.asarray(want[key]))), (key, i)
    assert int(got["i64"]) == want["i64"] and float(got["f64"]) == want["f64"]
    assert got["text"] == want["text"].encode() and got["pair"] == want["pair"]
    assert list(got["words"]) == list(want["words"])


# ----- every feature kind ---------------------------------------------------------------------------------------

def test_features_json_is_tfds_golden_and_values_read_back(tmp_path):
    """features.json for every spec kind equals the tree TFDS writes for the same features (dtype names, shapes as
    strings, -1 for unknown, Text for a scalar string), and tfr_torch reads every value back from every split."""
    folder = write_table(tmp_path / "table" / "1.0.0", {"train": 5, "test": 3})
    tree = json.loads((folder / "features.json").read_text())
    assert tree == {"pythonClassName": _CLASS + "features_dict.FeaturesDict",
                    "featuresDict": {"features": GOLDEN_FEATURES}}
    for split, n in (("train", 5), ("test", 3)):
        items = list(TFRecordDataset(folder, split=split))
        assert len(items) == n
        for i, got in enumerate(items):
            assert_row(got, i)


def test_shard_lengths_and_num_bytes_match_the_files(tmp_path):
    """One record a shard, three splits with unicode, '-' and capital names: dataset_info.json lists every shard's
    record count (counted in the file), numBytes is the files' bytes less 16 framing bytes a record (as TFDS's own
    writer records it), and the splits keep their order and names."""
    folder = tmp_path / "t" / "1.0.0"
    sizes = {"train": 12, "tr\u00e9s": 2, "val-1": 1, "Test": 3}
    for split, n in sizes.items():
        with ShardedWriter(folder, "t", split, records_per_shard=1, features=SPEC, tfds={}) as writer:
            for i in range(n):
                writer.write_example(row(i))
    data = json.loads((folder / "dataset_info.json").read_text())
    assert [s["name"] for s in data["splits"]] == list(sizes)
    assert (data["name"], data["version"], data["fileFormat"]) == ("t", "1.0.0", "tfrecord")
    for entry in data["splits"]:
        n = sizes[entry["name"]]
        files = [folder / f"t-{entry['name']}.tfrecord-{k:05d}-of-{n:05d}" for k in range(n)]
        assert entry["shardLengths"] == [str(_records_per_file(f)) for f in files] == ["1"] * n
        assert entry["filepathTemplate"] == "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
        assert int(entry["numBytes"]) == sum(f.stat().st_size for f in files) - 16 * n
    info = read_info(tmp_path / "t")
    assert {k: s.num_examples for k, s in info.splits.items()} == sizes
    assert len(TFRecordDataset(folder, split="train[2shard]+tr\u00e9s+val-1")) == 4


def test_refusals_name_the_key(tmp_path):
    """Sparse and ragged specs, SequenceExamples, compression and an empty split are refused with messages that
    say what (and which key) TFDS cannot hold; nothing is left describing a split."""
    cases = [
        ({"s": tfr_torch.SparseFeature(["i"], "v", torch.float32, [4])},
         "feature 's': a SparseFeature has no TensorFlow Datasets equivalent (TFDS metadata describes FixedLen, "
         "VarLen and FixedLenSequence features)"),
        ({"r": tfr_torch.RaggedFeature(torch.int64)},
         "feature 'r': a RaggedFeature has no TensorFlow Datasets equivalent (TFDS metadata describes FixedLen, "
         "VarLen and FixedLenSequence features)"),
        (tfr_torch.SequenceFeatures({}, {"s": VarLenFeature(torch.int64)}),
         "tfds=: TensorFlow Datasets folders hold tf.train.Example records (features.json has no SequenceExample "
         "form); write these SequenceExamples with the sidecar instead"),
    ]
    for features, message in cases:
        with pytest.raises(ValueError) as info:
            ShardedWriter(tmp_path / "x", "x", "train", features=features, tfds={})
        assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        ShardedWriter(tmp_path / "x", "x", "train", compression="zlib", features=SPEC, tfds={})
    assert str(info.value) == ("TensorFlow Datasets reads uncompressed shards only, got compression='zlib' with tfds "
                               "metadata")
    writer = ShardedWriter(tmp_path / "x", "x", "empty", features=SPEC, tfds={})
    with pytest.raises(ValueError) as info:
        writer.close()
    assert str(info.value) == ("split 'empty' of 'x' has no records: TensorFlow Datasets cannot read an empty split "
                               "(its own writer refuses one: 'No examples were yielded.')")
    assert not (tmp_path / "x" / "dataset_info.json").exists()


# ----- defects --------------------------------------------------------------------------------------------------

def test_supervised_keys_must_name_features(tmp_path):
    """Fixed: supervised_keys naming no feature were written, and TFDS's `as_supervised=True` then failed with a bare
    `KeyError: 'nope'`; now refused before anything is written, naming the key."""
    with pytest.raises(ValueError) as info:
        ShardedWriter(tmp_path / "s", "s", "train", features={"y": FixedLenFeature([], torch.int64)},
                      tfds={"supervised_keys": ("y", "nope")})
    assert str(info.value) == "tfds supervised_keys ('y', 'nope'): no feature 'nope' in the features ('y')"
    with pytest.raises(ValueError) as info:
        ShardedWriter(tmp_path / "s", "s", "train", features=SPEC, tfds={"supervised_keys": "i64"})
    assert str(info.value) == "tfds supervised_keys: expected a tuple of 2 or 3 feature keys, got 'i64'"
    assert not (tmp_path / "s").exists()


def test_a_split_added_later_keeps_the_supervised_keys(tmp_path):
    """Fixed: writing a second split without `supervised_keys` dropped the folder's supervisedKeys from
    dataset_info.json (TFDS's `as_supervised=True` then refused every split)."""
    folder = tmp_path / "k" / "1.0.0"
    write_table(folder, {"train": 2}, name="k", supervised_keys=("f32", "i64"), description="kept")
    write_table(folder, {"test": 1}, name="k")
    info = read_info(folder)
    assert info.supervised_keys == ("f32", "i64") and info.description == "kept"
    assert list(info.splits) == ["train", "test"]
    pairs = list(TFRecordDataset(folder, split="test", as_supervised=True))
    assert len(pairs) == 1 and int(pairs[0][1]) == row(0)["i64"]


def test_class_names_the_labels_file_cannot_hold_are_refused(tmp_path):
    """Fixed: class names with surrounding whitespace (or empty, or with a line break) were written to
    `<key>.labels.txt`, which TFDS (and tfr_torch) read back stripped or skipping lines: ' c' silently became 'c'.
    Now refused by `tfds_options`, before anything is written, naming the file and the name."""
    import datasets

    ds = datasets.Dataset.from_dict({"lab": [0, 1]}, features=datasets.Features(
        {"lab": datasets.ClassLabel(names=["a b", " c"])}))
    with pytest.raises(ValueError) as info:
        tfr_torch.hf.write(ds, str(tmp_path / "c" / "1.0.0"), "c", "train", tfds=True)
    assert str(info.value) == ("class name ' c' of lab.labels.txt: TensorFlow Datasets reads class names one a line, "
                               "stripped of surrounding whitespace and skipping empty lines; use a non-empty name "
                               "without line breaks or surrounding whitespace")
    assert not (tmp_path / "c" / "1.0.0" / "dataset_info.json").exists()
    for names in ([""], ["x\ny"]):
        with pytest.raises(ValueError, match="labels.txt: TensorFlow Datasets reads class names one a line"):
            ShardedWriter(tmp_path / "d", "d", "train", features=SPEC,
                          tfds={"class_names": {"lab": names}})


def test_rewriting_a_split_with_other_features_keeps_the_old_split(tmp_path):
    """Fixed: re-writing split 'train' with other features was refused only at close(), after the old shards had
    been replaced (the folder then listed shards that were gone). Now refused when the writer is made, and the
    folder still reads as before (its three train shards, its metadata)."""
    folder = tmp_path / "t" / "1.0.0"
    write_table(folder, {"train": 5}, name="t")
    with pytest.raises(ValueError, match="describes other features than split 'train' has"):
        with ShardedWriter(folder, "t", "train", features={"z": FixedLenFeature([], torch.float32)},
                           tfds={}) as writer:
            writer.write_example({"z": 1.0})
    items = list(TFRecordDataset(folder, split="train"))
    assert len(items) == 5
    assert_row(items[4], 4)


def test_split_names_tfds_cannot_read_are_refused(tmp_path):
    """Fixed: a split TFDS's split syntax cannot name ([\\w-]+, e.g. 'val.1') was written, and then neither TFDS
    ('Unrecognized split format') nor tfr_torch could read it. Refused up front with a ValueError naming it."""
    with pytest.raises(ValueError, match="val.1"):
        ShardedWriter(tmp_path / "v", "v", "val.1", features=SPEC, tfds={})


# ----- hf.write(tfds=True), reshard --tfds, convert --tfds ------------------------------------------------------

def _png(array: np.ndarray, mode: str, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, format=fmt, quality=95)
    return out.getvalue()


RGB = np.random.default_rng(3).integers(0, 256, (4, 5, 3), dtype=np.uint8)
GRAY = np.random.default_rng(4).integers(0, 256, (3, 2), dtype=np.uint8)
JPEG = _png(RGB, "RGB", "JPEG")
LABELS = ["k\u00e4tze", "\u72ac", "owl"]


def hf_dataset():
    import datasets

    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=LABELS),
                                  "caption": datasets.Value("string"), "score": datasets.Value("float64"),
                                  "box": datasets.List(datasets.Value("int32"), length=3),
                                  "tags": datasets.List(datasets.Value("int64"))})
    return datasets.Dataset.from_dict({
        "image": [{"bytes": _png(RGB, "RGB"), "path": None}, {"bytes": _png(GRAY, "L"), "path": None},
                  {"bytes": JPEG, "path": None}],
        "label": [2, 0, 1], "caption": ["\u00e9t\u00e9", "", "x"], "score": [0.25, -1.5, 3.0],
        "box": [[1, 2, 3], [4, 5, 6], [7, 8, 9]], "tags": [[], [5], [6, 7]]}, features=features)


def test_hf_write_tfds_features_and_values(tmp_path):
    """hf.write(DatasetDict, tfds=...) writes one folder of two splits: Image (decoded by content, channels as
    stored), ClassLabel with unicode names in label.labels.txt, Text, float64 / int32 Tensors, a VarLen list;
    tfr_torch reads the PNGs back pixel for pixel and the JPEG within 8 levels."""
    import datasets

    ds = hf_dataset()
    folder = tmp_path / "hfds" / "2.0.0"
    tfr_torch.hf.write(datasets.DatasetDict({"train": ds, "validation": ds.select([2, 0])}), str(folder), "hfds",
                       tfds={"version": "2.0.0", "supervised_keys": ("image", "label")})
    features = json.loads((folder / "features.json").read_text())["featuresDict"]["features"]
    assert features == {
        "image": {"pythonClassName": _CLASS + "image_feature.Image",
                  "image": {"shape": {"dimensions": ["-1", "-1", "-1"]}, "dtype": "uint8"}},
        "label": {"pythonClassName": _CLASS + "class_label_feature.ClassLabel", "classLabel": {"numClasses": "3"}},
        "caption": {"pythonClassName": _CLASS + "text_feature.Text", "text": {}},
        "score": _tensor([], "float64"), "box": _tensor([3], "int32"), "tags": _tensor([-1], "int64")}
    assert (folder / "label.labels.txt").read_text(encoding="utf-8") == "".join(f"{n}\n" for n in LABELS)
    info = read_info(tmp_path / "hfds")
    assert (info.version, info.supervised_keys) == ("2.0.0", ("image", "label"))
    assert {k: s.num_examples for k, s in info.splits.items()} == {"train": 3, "validation": 2}
    train = TFRecordDataset(folder, split="train")
    assert train.tfds.classes == LABELS
    items = list(train)
    assert torch.equal(items[0]["image"], torch.from_numpy(RGB).permute(2, 0, 1))
    assert torch.equal(items[1]["image"], torch.from_numpy(GRAY)[None])
    pil = torch.from_numpy(np.array(Image.open(io.BytesIO(JPEG)))).permute(2, 0, 1)
    assert items[2]["image"].shape == pil.shape
    assert (items[2]["image"].int() - pil.int()).abs().max() <= 8  # IDCT differences only
    assert [int(x["label"]) for x in items] == [2, 0, 1]
    assert [x["caption"] for x in items] == [b"\xc3\xa9t\xc3\xa9", b"", b"x"]
    assert [float(x["score"]) for x in items] == [0.25, -1.5, 3.0]
    assert [x["box"].tolist() for x in items] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [x["tags"].tolist() for x in items] == [[], [5], [6, 7]]
    assert [int(x["label"]) for x in TFRecordDataset(folder, split="validation")] == [1, 2]


def test_hf_write_with_empty_tfds_options_writes_tfds_metadata(tmp_path):
    """Fixed: hf.write(..., tfds={}) wrote the sidecar and no TFDS metadata (`if tfds:` took the empty options for
    no); it writes dataset_info.json and features.json, as ShardedWriter's tfds={} does."""
    folder = tmp_path / "e" / "1.0.0"
    tfr_torch.hf.write(hf_dataset(), str(folder), "e", "train", tfds={})
    assert (folder / "dataset_info.json").exists() and not (folder / "e-train.tfr_torch.json").exists()


def test_cli_reshard_and_convert_tfds(tmp_path):
    """`tfr-torch reshard --tfds` of plain shards with a sidecar writes OUT/NAME/VERSION with the spec's features
    and the same records; `tfr-torch convert --tfds` of an image folder writes the class names and supervised keys."""
    from tfr_torch.tools.cli import main

    with ShardedWriter(tmp_path / "plain", "table", "train", records_per_shard=2, features=SPEC) as writer:
        for i in range(5):
            writer.write_example(row(i))
    shards = sorted(str(p) for p in (tmp_path / "plain").glob("table-train.tfrecord-*[0-9]"))
    assert main(["reshard", *shards, "--out", str(tmp_path / "re"), "--tfds", "--tfds-version", "3.1.4",
                 "--shard-size", "600B", "-q"]) == 0
    folder = tmp_path / "re" / "table" / "3.1.4"
    assert json.loads((folder / "features.json").read_text())["featuresDict"]["features"] == GOLDEN_FEATURES
    items = list(TFRecordDataset(tmp_path / "re" / "table", split="train"))
    assert len(items) == 5 and read_info(folder).splits["train"].num_shards > 1
    for i, got in enumerate(items):
        assert_row(got, i)

    src = tmp_path / "imgs"
    for c, name in enumerate(["b\u00e4r", "cat"]):
        (src / name).mkdir(parents=True)
        Image.fromarray(np.full((3, 4, 3), 50 * c, np.uint8)).save(src / name / "0.png")
    assert main(["convert", str(src), str(tmp_path / "conv"), "--name", "pics", "--format", "png", "--tfds",
                 "-q"]) == 0
    info = read_info(tmp_path / "conv" / "pics")
    assert info.version == "1.0.0" and info.supervised_keys == ("image/encoded", "image/class/label")
    got = list(TFRecordDataset(info, split="train", as_supervised=True))
    assert [(x.shape, int(y)) for x, y in got] == [(torch.Size([3, 3, 4]), 0), (torch.Size([3, 3, 4]), 1)]
    assert TFRecordDataset(info, split="train").tfds.classes == ["b\u00e4r", "cat"]


# ----- real TFDS ------------------------------------------------------------------------------------------------

TF_SCRIPT = textwrap.dedent("""
    import base64, json, sys
    import numpy as np
    import tensorflow_datasets as tfds

    def enc(v):
        if isinstance(v, dict):
            return {k: enc(x) for k, x in v.items()}
        if isinstance(v, bytes):
            return {"b": base64.b64encode(v).decode()}
        v = np.asarray(v)
        if v.dtype == object:
            return {"list": [enc(x) for x in v.tolist()]}
        return {"dtype": str(v.dtype), "shape": list(v.shape), "v": v.astype(np.float64).tolist()}

    out = {}
    for folder in sys.argv[1:]:
        b = tfds.builder_from_directory(folder)
        names = {k: list(f.names) for k, f in b.info.features.items()
                 if isinstance(f, tfds.features.ClassLabel)}
        got = {"name": b.info.name, "version": str(b.info.version),
               "supervised": list(b.info.supervised_keys or []), "class_names": names,
               "splits": {k: [s.num_examples, list(s.shard_lengths), s.num_bytes]
                          for k, s in b.info.splits.items()}, "values": {}}
        rc = tfds.ReadConfig(interleave_cycle_length=1)
        for split in b.info.splits:
            ds = b.as_dataset(split=split, shuffle_files=False, read_config=rc)
            got["values"][split] = [enc(x) for x in tfds.as_numpy(ds)]
        if b.info.supervised_keys:
            ds = b.as_dataset(split=next(iter(b.info.splits)), shuffle_files=False, read_config=rc,
                              as_supervised=True)
            got["pairs"] = [[enc(x), enc(y)] for x, y in tfds.as_numpy(ds)]
        data_dir = folder.rsplit("/", 2)[0]
        loaded = tfds.load(b.info.name, data_dir=data_dir, split=next(iter(b.info.splits)), shuffle_files=False,
                           read_config=rc)
        got["loaded"] = len(list(tfds.as_numpy(loaded)))
        out[folder] = got
    json.dump(out, sys.stdout)
""")


def run_tfds(folders: list[Path]) -> dict:
    out = subprocess.run([TF_PYTHON, "-c", TF_SCRIPT, *map(str, folders)], capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _value(v):
    if "b" in v:
        import base64

        return base64.b64decode(v["b"])
    if "list" in v:
        return [_value(x) for x in v["list"]]
    return np.asarray(v["v"]).astype(v["dtype"]).reshape(v["shape"])


@needs_tf
def test_real_tfds_reads_every_kind(tmp_path):
    """Real TFDS loads the table (every spec kind, two splits, one of a unicode name, many shards), the
    hf.write folder (Image, ClassLabel with unicode names, supervised keys) and a reshard --tfds folder: the same
    metadata (num_examples, shard_lengths, num_bytes, version, class names) and the same values, also through
    `tfds.load(name, data_dir=...)` and `as_supervised`."""
    import datasets

    table = write_table(tmp_path / "table" / "1.0.0", {"train": 7, "t\u00e9st": 3}, supervised_keys=("f32", "i64"))
    hf = tmp_path / "hfds" / "1.0.0"
    tfr_torch.hf.write(datasets.DatasetDict({"train": hf_dataset()}), str(hf), "hfds", tfds=True)
    from tfr_torch.tools.reshard import reshard

    reshard(sorted(str(p) for p in table.glob("table-train.tfrecord-*[0-9]")), str(tmp_path / "re"),
            shard_size="700B", tfds=True, version="1.2.3")
    again = tmp_path / "re" / "table" / "1.2.3"
    seen = run_tfds([table, hf, again])

    got = seen[str(table)]
    written = read_info(table)
    assert got["splits"] == {k: [s.num_examples, list(s.shard_lengths), s.num_bytes]
                             for k, s in written.splits.items()}
    assert got["splits"]["train"][:2] == [7, [2, 2, 2, 1]] and got["supervised"] == ["f32", "i64"]
    assert got["loaded"] == 7
    for split, n in (("train", 7), ("t\u00e9st", 3)):
        values = got["values"][split]
        assert len(values) == n
        for i, value in enumerate(values):
            want, v = row(i), {k: _value(x) for k, x in value.items()}
            for key in ("i32", "i8", "u8", "flag", "f16", "f32", "seq"):
                np.testing.assert_array_equal(v[key], np.asarray(want[key]), err_msg=key)
                assert v[key].dtype == np.asarray(want[key]).dtype, key
            assert int(v["i64"]) == want["i64"] and float(v["f64"]) == want["f64"]
            assert v["text"] == want["text"].encode() and list(v["pair"]) == want["pair"]
            assert list(v["words"]) == list(want["words"])
    assert [int(_value(y)) for _, y in got["pairs"]] == [row(i)["i64"] for i in range(7)]

    got = seen[str(hf)]
    assert got["class_names"] == {"label": LABELS} and got["splits"]["train"][0] == 3
    ours = list(TFRecordDataset(hf, split="train"))
    for theirs, mine in zip(got["values"]["train"], ours):
        v = {k: _value(x) for k, x in theirs.items()}
        image = torch.from_numpy(v["image"]).permute(2, 0, 1)
        assert image.shape == mine["image"].shape
        assert (image.int() - mine["image"].int()).abs().max() <= 8
        assert int(v["label"]) == int(mine["label"]) and v["caption"] == mine["caption"]
        assert float(v["score"]) == float(mine["score"]) and v["box"].tolist() == mine["box"].tolist()
        assert v["tags"].tolist() == mine["tags"].tolist()
    assert torch.equal(torch.from_numpy(_value(got["values"]["train"][1]["image"])), torch.from_numpy(GRAY)[..., None])

    got = seen[str(again)]
    assert got["version"] == "1.2.3" and got["splits"]["train"][0] == 7 and len(got["splits"]["train"][1]) > 1
    assert got["supervised"] == ["f32", "i64"]
    assert got["values"]["train"] == seen[str(table)]["values"]["train"]
