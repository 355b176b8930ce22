"""Writing TFDS folders: ShardedWriter(tfds=...), convert_image_folder / convert_dataset(tfds=True) and
`tfr-torch convert|reshard --tfds` write dataset_info.json, features.json and the labels files, in TFDS's
<data_dir>/<name>/<version>/ layout with TFDS's shard names. tfr_torch reads them back as a TFDS folder, and
(TensorFlow-marked tests) `tfds.builder_from_directory` loads them and yields the same values.

The TensorFlow tests run TFDS in this process when it imports, else in the Python named by the environment variable
TFR_TORCH_TF_PYTHON (a virtualenv with tensorflow and tensorflow-datasets, which need not have torch), else skip.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import tfr_torch
from tfr_torch import FixedLenFeature, ShardedWriter, TFRecordDataset, VarLenFeature, string
from tfr_torch.tfds import read_info

HERE = Path(__file__).parent / "data" / "tfds"
CLASSES = ["cat", "dog", "owl"]
SPEC = {
    "x": FixedLenFeature([2, 3], torch.float32),
    "y": FixedLenFeature([], torch.int64),
    "name": FixedLenFeature([], string),
    "tokens": VarLenFeature(torch.int64),
    "pair": FixedLenFeature([2], string),
}


def row(i: int) -> dict:
    return {"x": np.arange(6, dtype=np.float32).reshape(2, 3) * i - 0.5, "y": i * 7, "name": f"row {i}",
            "tokens": np.arange(i % 4, dtype=np.int64), "pair": [b"a%d" % i, b""]}


def write_table(out: Path, splits=(("train", 7), ("test", 3)), **options) -> Path:
    folder = out / "table" / "1.0.0"
    for split, n in splits:
        with ShardedWriter(folder, "table", split, records_per_shard=3, features=SPEC, tfds=options) as writer:
            for i in range(n):
                writer.write_example(row(i))
    return folder


def make_images(root: Path) -> dict:
    """An ImageFolder of PNGs (RGB, gray, RGBA) and JPEGs; returns {relative path: [C, H, W] pixels of PNGs}."""
    rng = np.random.default_rng(5)
    pixels = {}
    for c, cls in enumerate(CLASSES):
        (root / cls).mkdir(parents=True)
        for i, mode in enumerate(["RGB", "L", "RGBA"][: 2 + c % 2]):
            shape = (5 + i, 6 + c) + (() if mode == "L" else (len(mode),))
            array = rng.integers(0, 256, shape, dtype=np.uint8)
            Image.fromarray(array, mode).save(root / cls / f"{i}.png")
            pixels[f"{cls}/{i}.png"] = torch.from_numpy(array.reshape(shape[:2] + (-1,))).permute(2, 0, 1)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / cls / "z.jpg", quality=90)
    return pixels


# ----- ShardedWriter(tfds=...) ---------------------------------------------------------------------------------------

def test_sharded_writer_writes_tfds_metadata(tmp_path):
    folder = write_table(tmp_path, description="a table", supervised_keys=("x", "y"))
    names = sorted(p.name for p in folder.iterdir())
    assert names[:2] == ["dataset_info.json", "features.json"]
    assert "table-train.tfrecord-00002-of-00003" in names and "table-test.tfrecord-00000-of-00001" in names
    assert not any(n.endswith(".tfr_torch.json") for n in names)  # TFDS's metadata is the one source of truth
    info = read_info(tmp_path / "table")
    assert (info.name, info.version, info.description) == ("table", "1.0.0", "a table")
    assert {k: s.shard_lengths for k, s in info.splits.items()} == {"train": (3, 3, 1), "test": (3,)}
    assert info.supervised_keys == ("x", "y")
    data = json.loads((folder / "dataset_info.json").read_text())
    shards = sorted(folder.glob("table-train.tfrecord-*[0-9]"))
    assert int(data["splits"][0]["numBytes"]) == sum(p.stat().st_size for p in shards) - 16 * 7


def test_written_folder_reads_back_as_a_tfds_dataset(tmp_path):
    write_table(tmp_path)
    items = list(TFRecordDataset(tmp_path / "table", split="train+test[:1]"))
    assert len(items) == 8
    for got, i in zip(items, [0, 1, 2, 3, 4, 5, 6, 0]):
        want = row(i)
        assert torch.equal(got["x"], torch.from_numpy(want["x"]))
        assert int(got["y"]) == want["y"] and got["name"] == want["name"].encode()
        assert got["tokens"].tolist() == want["tokens"].tolist()
        assert got["pair"] == want["pair"]
    assert len(TFRecordDataset(tmp_path / "table", split="train[:50%]")) == 4  # round(3.5) = 4, as TFDS


def test_features_json_for_specs():
    tree = tfr_torch.tfds.features_from_spec(SPEC)
    features = tree["featuresDict"]["features"]
    assert features["name"] == {"pythonClassName": "tensorflow_datasets.core.features.text_feature.Text", "text": {}}
    assert features["x"]["tensor"] == {"shape": {"dimensions": ["2", "3"]}, "dtype": "float32", "encoding": "none"}
    assert features["tokens"]["tensor"]["shape"] == {"dimensions": ["-1"]}
    assert features["pair"]["tensor"] == {"shape": {"dimensions": ["2"]}, "dtype": "string", "encoding": "none"}
    seq = tfr_torch.tfds.features_from_spec({"s": tfr_torch.FixedLenSequenceFeature([3], torch.int64,
                                                                                       allow_missing=True)})
    assert seq["featuresDict"]["features"]["s"]["tensor"]["shape"] == {"dimensions": ["-1", "3"]}


def test_tfds_option_errors(tmp_path):
    cases = [
        (dict(tfds={"colour": 1}), ValueError,
         "tfds options: unknown key(s) ['colour'] (version, features, supervised_keys, class_names, description)"),
        (dict(tfds={}, compression="gzip"), ValueError,
         "TensorFlow Datasets reads uncompressed shards only, got compression='gzip' with tfds metadata"),
        (dict(tfds={"version": "1.0"}), ValueError, "a TFDS version is MAJOR.MINOR.PATCH, got '1.0'"),
        (dict(tfds={}, features=None), ValueError,
         "TFDS metadata needs the features: pass features= (a spec) or tfds={'features': ...}"),
        (dict(tfds={}, features={"r": tfr_torch.RaggedFeature(torch.int64)}), ValueError,
         "feature 'r': a RaggedFeature has no TensorFlow Datasets equivalent (TFDS metadata describes FixedLen, "
         "VarLen and FixedLenSequence features)"),
    ]
    for kwargs, error, message in cases:
        kwargs.setdefault("features", SPEC)
        with pytest.raises(error) as info:
            ShardedWriter(tmp_path / "t", "t", "train", **kwargs)
        assert str(info.value) == message
    assert not (tmp_path / "t" / "dataset_info.json").exists()


def test_splits_with_other_features_refused(tmp_path):
    folder = write_table(tmp_path, splits=(("train", 2),))
    other = {"y": FixedLenFeature([], torch.int64)}
    with pytest.raises(ValueError) as info:  # when the writer is made: nothing of the folder replaced yet
        ShardedWriter(folder, "table", "test", features=other, tfds={})
    assert str(info.value) == (f"{folder}/features.json describes other features than split 'test' has: write "
                               "splits of different features into different datasets")
    assert list(read_info(folder).splits) == ["train"]


def test_other_dataset_in_the_folder_refused(tmp_path):
    folder = write_table(tmp_path, splits=(("train", 2),))
    with pytest.raises(ValueError) as info:  # when the writer is made: the folder's train split left as it was
        ShardedWriter(folder, "other", "train", features=SPEC, tfds={})
    assert str(info.value) == (f"{folder}/dataset_info.json describes dataset 'table' version '1.0.0', not 'other' "
                               "'1.0.0': write each dataset version into its own folder")
    assert read_info(folder).splits["train"].num_examples == 2


def test_rewriting_a_split_replaces_its_entry(tmp_path):
    write_table(tmp_path, splits=(("train", 7), ("test", 3)))
    write_table(tmp_path, splits=(("train", 2),))
    info = read_info(tmp_path / "table")
    assert {k: s.shard_lengths for k, s in info.splits.items()} == {"test": (3,), "train": (2,)}


# ----- image converters --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfds_images") / "src"
    return root, make_images(root)


def test_convert_image_folder_tfds_layout(images, tmp_path):
    src, pixels = images
    result = tfr_torch.convert_image_folder(str(src), str(tmp_path / "out"), "pets", "train", format="keep",
                                            tfds=True, version="2.1.0", records_per_shard=4)
    folder = tmp_path / "out" / "pets" / "2.1.0"
    assert result.paths == [str(folder / f"pets-train.tfrecord-0000{i}-of-00003") for i in range(3)]
    assert (folder / "image.class.label.labels.txt").read_text() == "cat\ndog\nowl\n"
    info = read_info(tmp_path / "out", "pets")
    assert info.supervised_keys == ("image/encoded", "image/class/label")
    ds = TFRecordDataset(tmp_path / "out" / "pets", split="train")
    assert ds.tfds.classes == CLASSES
    items = list(ds)
    assert len(items) == 10
    for item in items:
        rel = item["image/filename"].decode()
        if rel in pixels:
            assert torch.equal(item["image/encoded"], pixels[rel]), rel  # channels as stored
        assert CLASSES[int(item["image/class/label"])] == rel.split("/")[0]
    pairs = list(TFRecordDataset(folder, split="train[:3]", as_supervised=True))
    assert [int(y) for _, y in pairs] == [0, 0, 0] and torch.equal(pairs[0][0], pixels["cat/0.png"])


def test_convert_dataset_tfds(tmp_path):
    class Tiny:
        classes = ["zero", "one"]

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.full((1, 3, 2), i * 10, dtype=torch.uint8), i % 2

    tfr_torch.convert_dataset(Tiny(), str(tmp_path), "tiny", "test", image_format="png", tfds=True)
    got = list(TFRecordDataset(tmp_path / "tiny", split="test", as_supervised=True))
    assert [(x.tolist(), int(y)) for x, y in got] == [(torch.full((1, 3, 2), i * 10).tolist(), i % 2)
                                                      for i in range(4)]
    assert read_info(tmp_path / "tiny").class_names == {"image.class.label": ["zero", "one"]}


def test_raw_images_cannot_be_a_tfds_dataset(images, tmp_path):
    src, _ = images
    with pytest.raises(ValueError) as info:
        tfr_torch.convert_image_folder(str(src), str(tmp_path), "pets", format="raw", tfds=True)
    assert str(info.value) == ("TensorFlow Datasets cannot decode 'raw' (serialize_tensor) images: convert with format "
                               "'jpeg', 'png' or 'keep' for a TFDS dataset")


# ----- TensorFlow Datasets loads what tfr_torch wrote -----------------------------------------------------------------

def _tfds_load(folders: list[Path]) -> dict:
    """What TFDS sees in each folder (tests/data/tfds/load_with_tfds.py), in this process or TFR_TORCH_TF_PYTHON."""
    if importlib.util.find_spec("tensorflow_datasets") is not None:
        sys.path.insert(0, str(HERE))
        try:
            import load_with_tfds

            return {str(f): load_with_tfds.load(str(f)) for f in folders}
        finally:
            sys.path.remove(str(HERE))
    python = os.environ.get("TFR_TORCH_TF_PYTHON")
    if not python:
        pytest.skip("needs tensorflow-datasets here, or TFR_TORCH_TF_PYTHON naming a Python that has it")
    out = subprocess.run([python, str(HERE / "load_with_tfds.py"), *map(str, folders)], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _decode(value):
    if "dict" in value:
        return {k: _decode(v) for k, v in value["dict"].items()}
    if "bytes" in value:
        return base64.b64decode(value["bytes"])
    if "list" in value:
        return [_decode(v) for v in value["list"]]
    return np.frombuffer(base64.b64decode(value["b64"]), np.dtype(value["dtype"]).newbyteorder("<")).astype(
        value["dtype"]).reshape(value["shape"])


@pytest.mark.tensorflow
def test_tfds_builder_from_directory_loads_what_tfr_torch_wrote(images, tmp_path):
    src, pixels = images
    write_table(tmp_path, supervised_keys=("x", "y"), description="a table")
    tfr_torch.convert_image_folder(str(src), str(tmp_path), "pets", format="keep", tfds=True, records_per_shard=4)
    tfr_torch.convert_image_folder(str(src), str(tmp_path), "pets", "test", format="jpeg", tfds=True)
    table, pets = tmp_path / "table" / "1.0.0", tmp_path / "pets" / "1.0.0"
    from tfr_torch.tools.reshard import reshard

    reshard(sorted(str(p) for p in pets.glob("pets-train.tfrecord-*[0-9]")), str(tmp_path / "re"), shard_size="1KB",
            tfds=True, version="1.0.1")
    again = tmp_path / "re" / "pets" / "1.0.1"
    seen = _tfds_load([table, pets, again])

    got = seen[str(table)]
    assert (got["name"], got["version"], got["supervised_keys"]) == ("table", "1.0.0", ["x", "y"])
    assert got["splits"] == {"train": {"num_examples": 7, "num_shards": 3, "shard_lengths": [3, 3, 1]},
                             "test": {"num_examples": 3, "num_shards": 1, "shard_lengths": [3]}}
    for split, n in (("train", 7), ("test", 3)):
        values = [_decode(v) for v in got["values"][split]]
        assert len(values) == n
        for i, value in enumerate(values):
            want = row(i)
            np.testing.assert_array_equal(value["x"], want["x"])
            assert value["x"].dtype == np.float32 and int(value["y"]) == want["y"]
            assert value["name"] == want["name"].encode()
            np.testing.assert_array_equal(value["tokens"], want["tokens"])
            assert list(value["pair"]) == want["pair"]
    assert len(got["supervised"]) == 7

    got = seen[str(pets)]
    assert got["supervised_keys"] == ["image/encoded", "image/class/label"]
    assert got["class_names"] == {"image/class/label": CLASSES}
    assert got["splits"]["train"]["shard_lengths"] == [4, 4, 2] and got["splits"]["test"]["num_examples"] == 10
    ours = {split: list(TFRecordDataset(pets, split=split)) for split in ("train", "test")}
    for split in ("train", "test"):
        values = [_decode(v) for v in got["values"][split]]
        assert len(values) == len(ours[split]) == 10
        for theirs, mine in zip(values, ours[split]):
            rel = theirs["image/filename"].decode()
            assert mine["image/filename"].decode() == rel
            assert int(theirs["image/class/label"]) == int(mine["image/class/label"])
            image = torch.from_numpy(theirs["image/encoded"]).permute(2, 0, 1)
            if split == "train" and rel in pixels:  # PNGs kept as they are: TFDS's pixels are the file's
                assert torch.equal(image, pixels[rel]), rel
            if split == "train" and rel.endswith(".png"):
                assert torch.equal(image, mine["image/encoded"]), rel
            else:  # JPEG: TFDS decodes with TensorFlow's fast DCT, tfr_torch with the accurate one
                assert image.shape == mine["image/encoded"].shape, rel
                assert (image.int() - mine["image/encoded"].int()).abs().max() <= 8, rel
    labels = [int(_decode(y)) for _, y in got["supervised"]]
    assert labels == [int(x["image/class/label"]) for x in ours["train"]]

    resharded = seen[str(again)]  # reshard --tfds of a TFDS folder's shards keeps its metadata
    assert resharded["version"] == "1.0.1" and resharded["class_names"] == got["class_names"]
    assert resharded["supervised_keys"] == got["supervised_keys"] and resharded["splits"]["train"]["num_shards"] > 1
    assert resharded["features"] == got["features"]
    assert [v["dict"]["image/filename"] for v in resharded["values"]["train"]] == \
        [v["dict"]["image/filename"] for v in got["values"]["train"]]
