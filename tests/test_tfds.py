"""Reading TensorFlow Datasets folders TF-free: every feature type decodes to what TFDS itself yields.

The golden dataset `tests/data/tfds/data/tfr_golden/` was prepared by real TFDS 4.9.10 (TensorFlow 2.21) with
`tests/data/tfds/make_tfds_golden.py`, which also recorded in `values.json` what
`tfds.as_numpy(builder.as_dataset(split))` yields for each example. These tests read them with no TensorFlow.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.tfds import TFDSDecoder, TFDSMetadataError, read_info

HERE = Path(__file__).parent / "data" / "tfds"
DATA_DIR = HERE / "data"
DATASET = DATA_DIR / "tfr_golden"
VERSION_DIR = DATASET / "1.0.0"
VALUES = json.loads((HERE / "values.json").read_text())
SUPERVISED = json.loads((HERE / "supervised.json").read_text())
# the JPEG images as TensorFlow decodes them with dct_method="INTEGER_ACCURATE" (see make_tfds_golden.py)
JPEG_ACCURATE = json.loads((HERE / "jpeg_accurate.json").read_text())
JPEG_TOLERANCE = 8  # most levels between libjpeg's IFAST inverse DCT (TFDS's default) and the accurate one
try:  # with simplejpeg (the tfds extra) JPEGs decode with TFDS's fast inverse DCT: TFDS's pixels exactly
    import simplejpeg  # noqa: F401

    FAST_DCT = True
except ImportError:
    FAST_DCT = False

IMAGES = {"image", "image_jpeg", "gray", "fixed_image", "mixed"}  # TFDS: [H, W, C]; tfr_torch: [C, H, W]


def expected(value):
    """A value of values.json as numpy arrays, bytes, dicts and nested lists."""
    if "dict" in value:
        return {k: expected(v) for k, v in value["dict"].items()}
    if "bytes" in value:
        return base64.b64decode(value["bytes"])
    if "ragged" in value:
        return value["ragged"]
    if "list" in value:
        return [expected(v) for v in value["list"]]
    dtype = np.dtype(value["dtype"]).newbyteorder("<")
    return np.frombuffer(base64.b64decode(value["b64"]), dtype=dtype).astype(value["dtype"]).reshape(value["shape"])


def to_tfds_layout(key: str, value):
    """tfr_torch's image layout turned into TFDS's: [C, H, W] -> [H, W, C]; video [T, C, H, W] -> [T, H, W, C]."""
    if key in IMAGES:
        return value.permute(1, 2, 0)
    if key == "frames":
        return value.permute(0, 2, 3, 1)
    return value


def assert_same(got, want, key: str) -> None:
    """`key`: "<where>/<feature key>"."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), key
        for k in want:
            assert_same(got[k], want[k], f"{key}/{k}")
    elif isinstance(want, bytes):
        assert got == want, key
    elif isinstance(want, list):  # a ragged (nested Sequence) value
        assert isinstance(got, tfr_torch.RaggedTensor), key
        assert got.to_list() == want, key
    else:
        assert isinstance(got, torch.Tensor), (key, type(got))
        got = to_tfds_layout(key.split("/")[1], got)
        assert got.dtype == torch.from_numpy(np.zeros(0, want.dtype)).dtype, (key, got.dtype, want.dtype)
        assert tuple(got.shape) == want.shape, (key, tuple(got.shape), want.shape)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=key)


# ----- values: every feature type, as TFDS decodes it -----------------------------------------------------------

@pytest.mark.parametrize("split", ["train", "test"])
def test_every_feature_equals_what_tfds_yields(split, backend):
    """Every value equals TFDS's, PNG images pixel for pixel. JPEG images equal TensorFlow's accurate inverse DCT
    pixel for pixel; TFDS decodes them with TensorFlow's default fast DCT, which differs by a few levels."""
    items = list(tfr_torch.TFRecordDataset(DATASET, split=split))
    want = VALUES[split]
    assert len(items) == len(want)
    jpegs = 0
    for i, (got, ex) in enumerate(zip(items, want)):
        want_i = expected(ex)
        for key, accurate in JPEG_ACCURATE[split][i].items():
            jpegs += 1
            fast = want_i.pop(key)
            assert_same(got.pop(key), fast if FAST_DCT else expected(accurate), f"{split}[{i}]/{key}")
            diff = np.abs(expected(accurate).astype(int) - fast.astype(int)).max()
            assert diff <= JPEG_TOLERANCE, (key, diff)
        assert_same(got, want_i, f"{split}[{i}]")
    assert jpegs >= len(items)  # every image_jpeg, plus the JPEG ones of "mixed"


def test_the_feature_types_covered():
    """The golden dataset holds each kind the issue names (a regression guard for make_tfds_golden.py)."""
    kinds = json.dumps(json.loads((VERSION_DIR / "features.json").read_text()))
    for kind in ("image_feature.Image", "class_label_feature.ClassLabel", "text_feature.Text", "tensor_feature.Tensor",
                 "bounding_boxes.BBoxFeature", "sequence_feature.Sequence", "features_dict.FeaturesDict",
                 "video_feature.Video", "audio_feature.Audio", '"encoding": "zlib"', '"encoding": "bytes"'):
        assert kind in kinds, kind


def test_decoded_types_and_layouts():
    item = next(iter(tfr_torch.TFRecordDataset(VERSION_DIR, split="train")))
    assert item["image"].dtype == torch.uint8 and item["image"].shape[0] == 3  # [C, H, W]
    assert item["gray"].shape[0] == 1
    assert item["mixed"].shape[0] == 3  # gray / RGBA / gray JPEG converted to the 3 channels TFDS declares
    assert item["flag"].dtype == torch.bool and item["i32"].dtype == torch.int32
    assert item["nested"]["b"]["c"].dtype == torch.uint16
    assert item["label"].dtype == torch.int64 and isinstance(item["text"], bytes)
    assert item["frames"].shape[1:] == (3, 3, 4)  # [T, C, H, W]
    assert isinstance(item["ragged"], tfr_torch.RaggedTensor)


def test_indexed_dataset_reads_the_same_values():
    ds = tfr_torch.IndexedTFRecordDataset(DATASET, split="test")
    assert len(ds) == 7
    for i, ex in enumerate(VALUES["test"]):
        got, want = ds[i], expected(ex)
        for key, accurate in JPEG_ACCURATE["test"][i].items():
            fast = want.pop(key)
            assert_same(got.pop(key), fast if FAST_DCT else expected(accurate), f"test[{i}]/{key}")
        assert_same(got, want, f"test[{i}]")
    assert torch.equal(ds[-1]["id"], ds[6]["id"])


def test_batches_collate_the_rows(backend):
    rows = list(tfr_torch.TFRecordDataset(DATASET, split="train"))
    batches = list(tfr_torch.TFRecordDataset(DATASET, split="train", batch_size=8))
    assert [len(b["id"]) for b in batches] == [8, 8, 7]
    batch, first = batches[0], rows[:8]
    assert torch.equal(batch["id"], torch.stack([r["id"] for r in first]))
    assert torch.equal(batch["mat"], torch.stack([r["mat"] for r in first]))
    assert torch.equal(batch["fixed_image"], torch.stack([r["fixed_image"] for r in first]))
    assert torch.equal(batch["nested"]["b"]["c"], torch.stack([r["nested"]["b"]["c"] for r in first]))
    assert batch["text"] == [r["text"] for r in first]
    # images of different sizes: a list, as TFDS cannot batch them either
    assert all(torch.equal(a, r["image"]) for a, r in zip(batch["image"], first))
    # variable-length Sequences: a nested (jagged) tensor
    assert batch["ints"].is_nested
    assert [t.tolist() for t in batch["ints"].unbind()] == [r["ints"].tolist() for r in first]
    assert [t.tolist() for t in batch["objects"]["area"].unbind()] == [r["objects"]["area"].tolist() for r in first]
    # nested Sequences: one RaggedTensor over the batch
    assert batch["ragged"].to_list() == [r["ragged"].to_list() for r in first]


def test_images_kept_encoded_on_request():
    decoder = TFDSDecoder(read_info(DATASET), decode_images=False)
    item = next(iter(tfr_torch.TFRecordDataset(DATASET, decoder, split="test")))
    assert item["image"][:8] == b"\x89PNG\r\n\x1a\n"
    assert item["image_jpeg"][:2] == b"\xff\xd8"
    assert isinstance(item["frames"], list) and all(f[:4] == b"\x89PNG" for f in item["frames"])
    assert torch.equal(tfr_torch.decode_image(item["image"]).permute(1, 2, 0),
                       torch.from_numpy(expected(VALUES["test"][0])["image"]))


def test_in_dataloader_workers():
    ds = tfr_torch.TFRecordDataset(DATASET, split="train", batch_size=4)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    ids = sorted(int(i) for b in loader for i in b["id"])
    assert ids == list(range(23))


# ----- supervised keys, class names, versions ---------------------------------------------------------------------

def test_as_supervised_gives_input_target_pairs():
    pairs = list(tfr_torch.TFRecordDataset(DATASET, split="test", as_supervised=True))
    want = SUPERVISED["test"]
    assert len(pairs) == len(want)
    for (image, label), w in zip(pairs, want):
        assert list(image.permute(1, 2, 0).shape) == w["image_shape"]
        assert int(label) == w["label"]
    (image, label) = tfr_torch.IndexedTFRecordDataset(DATASET, split="test", as_supervised=True)[1]
    assert list(image.shape) == [3, 5, 4] and int(label) == want[1]["label"]


def test_as_supervised_needs_supervised_keys():
    with pytest.raises(ValueError) as info:
        tfr_torch.TFRecordDataset(DATASET / "0.9.0", split="train", as_supervised=True)
    assert str(info.value) == (f"as_supervised=True but {DATASET}/0.9.0/dataset_info.json has no supervisedKeys")


def test_class_names_from_labels_files():
    info = read_info(DATASET)
    assert info.class_names == {"label": ["cat", "dog", "bird"], "objects-label": ["car", "person", "tree", "sign"]}
    decoder = TFDSDecoder(info)
    assert decoder.class_names() == {"label": ["cat", "dog", "bird"],
                                     "objects/label": ["car", "person", "tree", "sign"]}
    ds = tfr_torch.TFRecordDataset(DATASET, split="train")
    assert ds.tfds.classes == ["cat", "dog", "bird"]  # the supervised target's names


def test_versions_and_data_dir_with_name():
    assert read_info(DATASET).version == "1.0.0"  # the latest by default
    assert read_info(DATA_DIR, "tfr_golden").version == "1.0.0"
    old = read_info(DATA_DIR, "tfr_golden", "0.9.0")
    assert old.version == "0.9.0" and old.splits["train"].shard_lengths == (3,)
    ds = tfr_torch.TFRecordDataset(old, split="train")
    assert [int(x["id"]) for x in ds] == [0, 1, 2]
    assert read_info(f"file://{VERSION_DIR}").path.endswith("tfr_golden/1.0.0")
    with pytest.raises(FileNotFoundError) as err:
        read_info(DATA_DIR, "tfr_golden", "2.0.0")
    assert str(err.value) == (f"no version 2.0.0 of the TFDS dataset in {DATASET} (found: 0.9.0, 1.0.0)")
    with pytest.raises(FileNotFoundError) as err:
        read_info(DATA_DIR, "mnist")
    assert str(err.value) == f"no TFDS dataset at {DATA_DIR}/mnist: the folder does not exist"


def test_metadata_fields():
    info = read_info(VERSION_DIR)
    assert info.name == "tfr_golden" and info.file_format == "tfrecord"
    assert info.supervised_keys == ("image", "label")
    assert info.description == "tfr_torch golden dataset"
    assert {k: (s.num_examples, s.num_shards) for k, s in info.splits.items()} == {"train": (23, 3), "test": (7, 3)}
    assert info.shard_paths("test")[2] == f"{VERSION_DIR}/tfr_golden-test.tfrecord-00002-of-00003"


def test_len_and_ranks_from_shard_lengths():
    """len() and the split across ranks come from dataset_info.json: no counting pass, no warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = tfr_torch.TFRecordDataset(DATASET, split="train[:50%]+test", world_size=2, rank=0)
        assert len(ds) == 9  # (12 + 7) // 2
        seen = [int(x["id"]) for r in range(2)
                for x in tfr_torch.TFRecordDataset(DATASET, split="train[:50%]+test", world_size=2, rank=r)]
    want = [int(expected(ex)["id"]) for ex in VALUES["train"][:12] + VALUES["test"]]
    assert len(seen) == 18 and len(set(seen)) == 18 and set(seen) <= set(want)


def test_global_shuffle_with_indexes_is_a_permutation(tmp_path):
    import shutil

    copy = tmp_path / "tfr_golden" / "1.0.0"
    shutil.copytree(VERSION_DIR, copy)
    for shard in copy.glob("*.tfrecord-*"):
        tfr_torch.build_index(str(shard))
    ds = tfr_torch.TFRecordDataset(copy, split="train[5:-5]", index="auto", shuffle=True, seed=3)
    ids = [int(x["id"]) for x in ds]
    want = [int(expected(ex)["id"]) for ex in VALUES["train"][5:-5]]
    assert sorted(ids) == sorted(want) and ids != want
    assert [int(x["id"]) for x in tfr_torch.TFRecordDataset(copy, split="train[5:-5]", index="auto")] == want


# ----- split syntax: the same records as TFDS, in its order --------------------------------------------------------

SPLITS = json.loads((HERE / "splits.json").read_text())
GOOD = [s for s, v in SPLITS.items() if "ids" in v]
BAD = [s for s, v in SPLITS.items() if "error" in v]


@pytest.mark.parametrize("spec", GOOD)
def test_split_instructions_equal_tfds(spec):
    info = read_info(DATASET)
    reads = tfr_torch.tfds.resolve_split(spec, {n: s.shard_lengths for n, s in info.splits.items()})
    got = [[info.splits[r.split].filenames(info.name)[r.shard], r.skip, r.take] for r in reads]
    assert got == SPLITS[spec]["file_instructions"]


@pytest.mark.parametrize("spec", GOOD)
def test_split_records_equal_tfds(spec):
    ds = tfr_torch.IndexedTFRecordDataset(DATASET, split=spec, index=None)
    # only the ids are decoded: a spec with one key reads through the dataset's window on each shard
    ids = [int(ds[i]["id"]) for i in range(len(ds))]
    assert ids == SPLITS[spec]["ids"]
    streamed = [int(x["id"]) for x in tfr_torch.TFRecordDataset(
        DATASET, {"id": tfr_torch.FixedLenFeature([], torch.int64)}, split=spec)]
    assert streamed == SPLITS[spec]["ids"]


# tfr_torch's messages for the split strings TFDS refuses (TFDS's own message is in splits.json)
BAD_MESSAGES = {
    "test[3:1]": "split 'test[3:1]' selects no example",
    "train[50%:50%]": "split 'train[50%:50%]' selects no example",
    "train[:0]": "split 'train[:0]' selects no example",
    "train[4:4]": "split 'train[4:4]' selects no example",
    "test[:1_0]": "split 'test[:1_0]': the slice [:10] of 'test' does not fit its 7 examples",
    "validation": "split 'validation': unknown split 'validation'; this dataset has 'train', 'test'",
    "train[:24]": "split 'train[:24]': the slice [:24] of 'train' does not fit its 23 examples",
    "train[-24:]": "split 'train[-24:]': the slice [-24:23] of 'train' does not fit its 23 examples",
    "train[:101%]": "split 'train[:101%]': percent boundaries must lie in [-100, 100]",
    "all[:10%]": "split 'all[:10%]': 'all' cannot be sliced (as in TFDS); slice each split instead, e.g. "
                 "'train[:10%]+test[:10%]'",
    "train[1]": "split 'train[1]': [1] selects one shard only with the shard unit (e.g. [1shard]); for examples use "
                "a slice such as [1:]",
    "train[::2]": "split 'train[::2]': cannot read the slice [::2]: expected [from:to] with integers, percentages "
                  "(10%) or shards (2shard), or [N shard] for one shard (see https://www.tensorflow.org/datasets/splits)",
    "train[a:b]": "split 'train[a:b]': cannot read the slice [a:b]: expected [from:to] with integers, percentages "
                  "(10%) or shards (2shard), or [N shard] for one shard (see https://www.tensorflow.org/datasets/splits)",
    "": "split '': cannot read '': expected a split name, optionally followed by a slice such as [:10%], [100:200] "
        "or [1shard] (see https://www.tensorflow.org/datasets/splits)",
}


@pytest.mark.parametrize("spec", BAD)
def test_split_errors_where_tfds_refuses(spec):
    assert spec in BAD_MESSAGES, f"add tfr_torch's message for {spec!r} (TFDS: {SPLITS[spec]['error']})"
    with pytest.raises(ValueError) as info:
        tfr_torch.TFRecordDataset(DATASET, split=spec)
    assert str(info.value) == BAD_MESSAGES[spec]


def test_split_rounding_is_tfds_closest():
    """TFDS rounds percent boundaries to the closest example, halves to even (Python's round)."""
    from tfr_torch.tfds import resolve_split

    # 10 examples: 25% -> 2.5 -> 2, 35% -> 3.5 -> 4, 15% -> 1.5 -> 2
    assert [(r.skip, r.take) for r in resolve_split("a[25%:35%]", {"a": [10]})] == [(2, 2)]
    assert [(r.skip, r.take) for r in resolve_split("a[15%:]", {"a": [10]})] == [(2, 8)]
    assert resolve_split("a[-1shard]", {"a": [2, 0, 3]}) == [tfr_torch.tfds.ShardRead("a", 2, 0, 3)]
    assert resolve_split("a + a[:1]", {"a": [2]}) == [tfr_torch.tfds.ShardRead("a", 0, 0, 2),
                                                      tfr_torch.tfds.ShardRead("a", 0, 0, 1)]


def test_split_needed_and_typed():
    with pytest.raises(ValueError) as info:
        tfr_torch.TFRecordDataset(DATASET)
    assert str(info.value) == (f"{VERSION_DIR} is a TFDS dataset: pass split= (one of 'train', 'test', or TFDS's "
                               "slices such as 'train[:10%]' and sums such as 'train+test')")
    with pytest.raises(TypeError) as err:
        tfr_torch.TFRecordDataset(DATASET, split=["train"])
    assert str(err.value) == "split must be a string such as 'train' or 'train[:10%]', got list"
    with pytest.raises(ValueError) as info:
        tfr_torch.TFRecordDataset(DATASET, {"id": tfr_torch.FixedLenFeature([], torch.int64)}, split="train",
                                  as_supervised=True)
    assert str(info.value) == "as_supervised=True needs the dataset's own decoder (features=None), not a feature spec"


# ----- bad folders: clear errors naming the file, nothing read wrong -------------------------------------------------

@pytest.fixture
def copy(tmp_path):
    import shutil

    target = tmp_path / "tfr_golden" / "1.0.0"
    shutil.copytree(VERSION_DIR, target)
    return target


def _edit_info(folder: Path, change) -> None:
    path = folder / "dataset_info.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_missing_shard(copy):
    (copy / "tfr_golden-train.tfrecord-00001-of-00003").unlink()
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train[:2]")
    assert str(info.value) == (f"{copy}/tfr_golden-train.tfrecord-00001-of-00003: shard missing: "
                               f"{copy}/dataset_info.json lists 3 shard(s) for split 'train'")
    assert tfr_torch.TFRecordDataset(copy, split="test") is not None  # other splits still read


def test_shard_shorter_than_dataset_info_says(copy):
    shard = copy / "tfr_golden-train.tfrecord-00001-of-00003"
    records = list(tfr_torch.read_records(str(shard)))
    with tfr_torch.TFRecordWriter(str(shard)) as writer:
        for r in records[:-1]:
            writer.write(r)
    for make in (tfr_torch.TFRecordDataset, tfr_torch.IndexedTFRecordDataset):
        with pytest.raises(TFDSMetadataError) as info:
            make(copy, split="train")
        assert str(info.value) == (f"{shard}: shard holds 6 records but {copy}/dataset_info.json says 7 "
                                   "(shardLengths of split 'train')")


def test_shard_lengths_swapped_caught_by_the_index(copy):
    """Equal total size, different lengths per shard: an index (here written beside each shard) catches it."""
    _edit_info(copy, lambda d: d["splits"][0].update(shardLengths=["7", "8", "8"]))
    for shard in copy.glob("*train.tfrecord-*"):
        tfr_torch.build_index(str(shard))
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train", index="auto")
    assert str(info.value) == (f"{copy}/tfr_golden-train.tfrecord-00000-of-00003: shard holds 8 records but "
                               f"{copy}/dataset_info.json says 7 (shardLengths of its split)")


def test_malformed_features_json(copy):
    (copy / "features.json").write_text('{"pythonClassName": ')
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train")
    assert str(info.value).startswith(f"{copy}/features.json: not valid JSON: ")


def test_features_json_missing(copy):
    (copy / "features.json").unlink()
    with pytest.raises(TFDSMetadataError) as info:
        read_info(copy)
    assert str(info.value) == (f"{copy}/features.json: missing: a TFDS dataset folder holds dataset_info.json and "
                               "features.json")


def _set_feature(folder: Path, key: str, entry) -> None:
    path = folder / "features.json"
    data = json.loads(path.read_text())
    data["featuresDict"]["features"][key] = entry
    path.write_text(json.dumps(data))


def test_unsupported_feature_type_named(copy):
    _set_feature(copy, "thing",
                 {"pythonClassName": "tensorflow_datasets.core.features.lazy.LazyThing", "lazyThing": {}})
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train")
    assert str(info.value) == (f"{copy}/features.json: feature 'thing' is a LazyThing, which tfr_torch does not read "
                               "(supported: FeaturesDict, Tensor, Scalar, ClassLabel, Text, Image, Video, BBoxFeature, "
                               "Audio (not lazily decoded), Sequence, Dataset)")


def test_bad_feature_entries_named(copy):
    cases = [
        ({"tensor": {"shape": {}, "dtype": "int64"}},
         "feature 'bad': no \"pythonClassName\" (nor legacy \"type\"): not a TFDS feature"),
        ({"pythonClassName": "x.Tensor", "tensor": {"shape": {"dimensions": ["a"]}, "dtype": "int64"}},
         "feature 'bad': shape {'dimensions': ['a']} has a dimension that is not an integer"),
        ({"pythonClassName": "x.Tensor", "tensor": {"shape": {}, "dtype": "complex64"}},
         "feature 'bad': dtype 'complex64' is not supported (expected bool, an integer or float type, or string)"),
        ({"pythonClassName": "x.Tensor", "tensor": {"shape": {}, "dtype": "int64", "encoding": "gzip"}},
         "feature 'bad': unknown Tensor encoding 'gzip' (none, bytes or zlib)"),
        ({"pythonClassName": "x.Tensor", "tensor": {"shape": {"dimensions": ["-1", "-1"]}, "dtype": "int64"}},
         "feature 'bad': shape (None, None) has several unknown dimensions; TFDS stores such tensors only with "
         "encoding='bytes' or 'zlib'"),
        ("nope", "feature 'bad': expected a JSON object, got 'nope'"),
    ]
    for entry, message in cases:
        _set_feature(copy, "bad", entry)
        with pytest.raises(TFDSMetadataError) as info:
            tfr_torch.TFRecordDataset(copy, split="train")
        assert str(info.value) == f"{copy}/features.json: {message}"


def test_class_names_disagree_with_num_classes(copy):
    (copy / "label.labels.txt").write_text("cat\ndog\n")
    with pytest.raises(TFDSMetadataError) as info:
        read_info(copy) and TFDSDecoder(read_info(copy))
    assert str(info.value) == (f"{copy}/features.json: feature 'label': label.labels.txt holds 2 class names but "
                               "ClassLabel has 3 classes")


def test_array_record_datasets_refused(copy):
    _edit_info(copy, lambda d: d.update(fileFormat="array_record"))
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train")
    assert str(info.value) == (f"{copy}/dataset_info.json: the shards are in the 'array_record' format; tfr_torch "
                               "reads TFRecord datasets only (prepare the dataset with file_format='tfrecord')")


def test_malformed_dataset_info(copy):
    cases = [
        (lambda d: d.pop("splits"), "no \"splits\": the dataset was not prepared (or this is not a TFDS "
                                    "dataset_info.json)"),
        (lambda d: d["splits"][0].pop("shardLengths"),
         "split 'train' has no \"shardLengths\" (examples per shard): it was written by a TFDS too old for tfr_torch "
         "to read its shards safely (prepare it again with TFDS 4)"),
        (lambda d: d["splits"][0].update(shardLengths=["8", "x"]),
         "split 'train': shardLengths[1] must be an integer, got 'x'"),
        (lambda d: d["splits"][1].update(name="train"), "split 'train' is listed twice"),
        (lambda d: d["splits"][0].update(filepathTemplate="{DATASET}-{WHAT}"),
         "split 'train': unknown placeholder(s) ['WHAT'] in filepathTemplate '{DATASET}-{WHAT}'"),
    ]
    original = (copy / "dataset_info.json").read_text()
    for change, message in cases:
        (copy / "dataset_info.json").write_text(original)
        _edit_info(copy, change)
        with pytest.raises(TFDSMetadataError) as info:
            tfr_torch.TFRecordDataset(copy, split="test")
        assert str(info.value) == f"{copy}/dataset_info.json: {message}"
    (copy / "dataset_info.json").write_text("[1, 2]")
    with pytest.raises(TFDSMetadataError) as info:
        read_info(copy)
    assert str(info.value) == f"{copy}/dataset_info.json: expected a JSON object, got list"


def test_not_a_tfds_folder(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        tfr_torch.TFRecordDataset(tmp_path, split="train")
    assert str(info.value) == (f"{tmp_path} is not a TFDS dataset folder: it holds no dataset_info.json and no version "
                               "folder (such as 1.0.0/) that does")
    assert not tfr_torch.tfds.is_tfds_dir(tmp_path)
    assert tfr_torch.tfds.is_tfds_dir(DATASET) and tfr_torch.tfds.is_tfds_dir(VERSION_DIR)


def test_corrupt_tensor_payload_named(copy):
    """A zlib tensor that does not inflate: DecodeError with the record's file and offset and the key."""
    shard = copy / "tfr_golden-test.tfrecord-00000-of-00003"
    records = list(tfr_torch.read_records(str(shard)))
    ex = tfr_torch.decode_example(records[0])
    ex["zlib2d/value"] = [b"not zlib"]  # stored with its shape ("zlib2d/shape"): two unknown dimensions
    with tfr_torch.TFRecordWriter(str(shard)) as writer:
        writer.write_example(ex)
        writer.write(records[1])
    _edit_info(copy, lambda d: d["splits"][1].pop("numBytes"))
    with pytest.raises(tfr_torch.DecodeError) as info:
        list(tfr_torch.TFRecordDataset(copy, split="test"))
    assert str(info.value).startswith(f"{shard}:0: feature 'zlib2d': its zlib-encoded tensor does not inflate: ")


# ----- no TensorFlow --------------------------------------------------------------------------------------------------

def test_reading_never_imports_tensorflow(tmp_path):
    """Reading a TFDS folder never imports tensorflow or tensorflow_datasets: stand-ins for both, first on the path,
    record any attempt to import them (even one whose ImportError is caught), and sys.modules must lack them."""
    for name in ("tensorflow", "tensorflow_datasets"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"open({str(tmp_path / 'imported')!r}, 'a').write({name!r} + '\\n')\n"
            f"raise ImportError('tfr_torch must not import {name}')\n")
    code = f"""
import sys
import tfr_torch, tfr_torch.tfds
items = list(tfr_torch.TFRecordDataset({str(DATASET)!r}, split="test", batch_size=3))
pairs = list(tfr_torch.IndexedTFRecordDataset({str(DATASET)!r}, split="train", as_supervised=True))
assert len(pairs) == 23
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tensorflow_datasets")))
"""
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert not (tmp_path / "imported").exists(), (tmp_path / "imported").read_text()


def test_legacy_features_json_format(tmp_path):
    """features.json as TFDS before 4.6 wrote it ({"type": ..., "content": ...}) reads the same."""
    import shutil

    folder = tmp_path / "old" / "1.0.0"
    shutil.copytree(DATASET / "0.9.0", folder)
    (folder / "features.json").write_text(json.dumps({
        "type": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "content": {"id": {"type": "tensorflow_datasets.core.features.tensor_feature.Tensor",
                           "content": {"shape": [], "dtype": "int64"}}}}))
    _edit_info(folder, lambda d: d.update(name="tfr_golden"))
    assert [int(x["id"]) for x in tfr_torch.TFRecordDataset(folder, split="train")] == [0, 1, 2]


def _same_batch(a, b, key=""):
    if isinstance(b, dict):
        assert sorted(a) == sorted(b), key
        for k in b:
            _same_batch(a[k], b[k], f"{key}/{k}")
    elif isinstance(b, tfr_torch.RaggedTensor):
        assert a.to_list() == b.to_list(), key
    elif isinstance(b, torch.Tensor) and b.is_nested:
        assert a.is_nested and [x.tolist() for x in a.unbind()] == [x.tolist() for x in b.unbind()], key
    elif isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), key
    elif isinstance(b, bytes):
        assert a == b, key
    else:
        assert type(a) is type(b) and len(a) == len(b), key
        for x, y in zip(a, b):
            _same_batch(x, y, key)


@pytest.mark.parametrize("decode_images", [True, False])
def test_batch_decoding_equals_collated_rows(decode_images, backend):
    """Batches decode the static leaves column by column: the same values and types as collating the rows."""
    decoder = TFDSDecoder(read_info(DATASET), decode_images=decode_images)
    plan = decoder.plan()
    records = [r for p in read_info(DATASET).shard_paths("train") for r in tfr_torch.read_records(p)]
    for start in range(0, len(records), 8):
        chunk = records[start : start + 8]
        rows = list(plan.iter_rows(chunk))
        _same_batch(plan.parse(chunk), decoder.root.collate(rows), f"batch {start}")


@pytest.mark.parametrize("indexed", [False, True])
def test_slices_across_ranks_and_workers_exactly_once(indexed, tmp_path):
    """A split whose slices start and end inside shards, read by 2 ranks x 2 DataLoader workers: every rank yields
    the same number of records, no record twice, all from the split (the remainder of 25 over 2 ranks dropped)."""
    import shutil

    folder = tmp_path / "tfr_golden" / "1.0.0"
    shutil.copytree(VERSION_DIR, folder)
    if indexed:
        for shard in folder.glob("*.tfrecord-*"):
            tfr_torch.build_index(str(shard))
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    split = "train[3:-2]+test"
    want = [int(expected(ex)["id"]) for ex in VALUES["train"][3:-2] + VALUES["test"]]
    per_rank = []
    for rank in range(2):
        ds = tfr_torch.TFRecordDataset(folder, spec, split=split, rank=rank, world_size=2, batch_size=2,
                                       index="auto" if indexed else None)
        ids = [int(i) for b in DataLoader(ds, batch_size=None, num_workers=2) for i in b["id"]]
        assert len(ds) == 6 and len(ids) == 12
        per_rank.append(ids)
    seen = per_rank[0] + per_rank[1]
    assert len(set(seen)) == 24 and set(seen) <= set(want)
    assert [int(x["id"]) for x in tfr_torch.TFRecordDataset(folder, spec, split=split)] == want


def test_metadata_and_splits_never_import_torch():
    """read_info and resolve_split need neither torch nor TensorFlow (e.g. for a tool that plans reads)."""
    code = (f"import sys, tfr_torch.tfds as t\n"
            f"info = t.read_info({str(DATASET)!r})\n"
            f"t.resolve_split('train[:10%]+test', {{n: s.shard_lengths for n, s in info.splits.items()}})\n"
            f"print(sorted(m for m in ('torch', 'tensorflow', 'tensorflow_datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_buffered_shuffle_without_indexes_keeps_the_split():
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    want = [int(expected(ex)["id"]) for ex in VALUES["train"][5:-5]]
    ids = [int(x["id"]) for x in tfr_torch.TFRecordDataset(DATASET, spec, split="train[5:-5]", shuffle=True, seed=1,
                                                           shuffle_buffer=4)]
    assert sorted(ids) == sorted(want) and ids != want


def test_config_folders(tmp_path):
    """<data_dir>/<name>/<config>/<version>/: the config folder picks its latest version like a dataset folder."""
    import shutil

    shutil.copytree(VERSION_DIR, tmp_path / "tfr_golden" / "small" / "1.0.0")
    info = read_info(tmp_path, "tfr_golden/small")
    assert info.path == f"{tmp_path}/tfr_golden/small/1.0.0" and info.version == "1.0.0"
    assert len(tfr_torch.TFRecordDataset(tmp_path / "tfr_golden" / "small", split="test")) == 7


def test_without_simplejpeg_jpegs_take_decode_image(monkeypatch):
    """The fallback: decode_image's pixels, TensorFlow's accurate inverse DCT (a few levels from TFDS's)."""
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # `import simplejpeg` raises ImportError
    ds = tfr_torch.IndexedTFRecordDataset(DATASET, split="test")
    checked = 0
    for i in range(len(ds)):
        got = ds[i]
        for key, accurate in JPEG_ACCURATE["test"][i].items():
            assert_same(got[key], expected(accurate), f"test[{i}]/{key}")
            checked += 1
    assert checked >= len(ds)
