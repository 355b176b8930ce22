"""`tfr-torch inspect DIR` on TensorFlow Datasets folders, and `tfr-torch convert|reshard --tfds`."""

from __future__ import annotations

from pathlib import Path


import tfr_torch
from tfr_torch import TFRecordDataset
from tfr_torch.tfds import read_info
from tfr_torch.tools.cli import main as cli_main

from test_tfds_write import images, make_images  # noqa: F401  (the image folder fixture)

GOLDEN = Path(__file__).parent / "data" / "tfds" / "data" / "tfr_golden"


def test_cli_convert_and_reshard_tfds(images, tmp_path, capsys):
    src, _ = images
    assert cli_main(["convert", str(src), str(tmp_path / "out"), "--name", "pets", "--format", "png", "--tfds",
                     "--tfds-version", "1.2.3", "-q"]) == 0
    folder = tmp_path / "out" / "pets" / "1.2.3"
    assert read_info(folder).splits["train"].num_examples == 10
    shards = sorted(str(p) for p in folder.glob("pets-train.tfrecord-*[0-9]"))
    assert cli_main(["reshard", *shards, "--out", str(tmp_path / "re"), "--tfds", "--shard-size", "1KB",
                     "-q"]) == 0
    info = read_info(tmp_path / "re" / "pets")
    assert info.splits["train"].num_examples == 10 and info.splits["train"].num_shards > 1
    assert info.features == read_info(folder).features and info.class_names == read_info(folder).class_names
    assert info.supervised_keys == ("image/encoded", "image/class/label")
    a = [int(x["image/class/label"]) for x in TFRecordDataset(folder, split="train")]
    b = [int(x["image/class/label"]) for x in TFRecordDataset(tmp_path / "re" / "pets", split="train")]
    assert a == b


def test_cli_reshard_tfds_needs_examples(tmp_path, capsys):
    path = tmp_path / "plain.tfrecord"
    with tfr_torch.TFRecordWriter(str(path)) as writer:
        writer.write(b"not an example")
    assert cli_main(["reshard", str(path), "--out", str(tmp_path / "re"), "--tfds", "-q"]) == 1
    assert capsys.readouterr().err == ("tfr-torch reshard: a TFDS dataset needs the records' features: the input has "
                                       "no sidecar and its records are not tf.train.Examples tfr_torch can "
                                       "describe\n")
    assert not (tmp_path / "re").exists()


def test_inspect_a_tfds_folder(capsys):
    assert cli_main(["inspect", str(GOLDEN)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"tfr_golden 1.0.0  ({GOLDEN}/1.0.0)"
    assert lines[1] == "tfr_torch golden dataset"
    assert lines[3:7] == ["split  shards  records   bytes",
                          "train       3       23  54,706",
                          "test        3        7  16,586",
                          "2 split(s), 30 records; shards named tfr_golden-train.tfrecord-00000-of-00003 ..."]
    assert "supervised keys (as_supervised=True): image -> label" in lines
    for line in ["  label: ClassLabel  int64  ()  3 classes: cat, dog, bird",
                 "  image_jpeg: Image  uint8  (None, None, 3)  jpeg",
                 "  zlib2d: Tensor  float16  (None, None)  encoding=zlib",
                 "  objects: Sequence (variable length) of",
                 "    -: FeaturesDict",
                 "      label: ClassLabel  int64  ()  4 classes: car, person, tree, sign",
                 "  nested: FeaturesDict",
                 "      c: Tensor  uint16  (2,)",
                 "  frames: Video (variable length) of",
                 "    -: Image  uint8  (3, 4, 3)  png"]:
        assert line in lines, line
    assert "problem" not in out


def test_inspect_reports_a_missing_shard(tmp_path, capsys):
    import shutil

    folder = tmp_path / "tfr_golden" / "1.0.0"
    shutil.copytree(GOLDEN / "1.0.0", folder)
    (folder / "tfr_golden-test.tfrecord-00002-of-00003").unlink()
    assert cli_main(["inspect", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "test   3 (2 present)        7  16,586" in out
    assert out.splitlines()[-1] == (f"problem: {folder}/tfr_golden-test.tfrecord-00002-of-00003: shard missing: "
                                    f"{folder}/dataset_info.json lists 3 shard(s) for split 'test'")


def test_inspect_bad_metadata_exit_1(tmp_path, capsys):
    import shutil

    folder = tmp_path / "tfr_golden" / "1.0.0"
    shutil.copytree(GOLDEN / "1.0.0", folder)
    (folder / "features.json").write_text("{")
    assert cli_main(["inspect", str(folder)]) == 1
    assert capsys.readouterr().err.startswith(f"tfr-torch inspect: {folder}/features.json: not valid JSON: ")


def test_reshard_tfds_keeps_a_tfds_folder_metadata(tmp_path):
    shards = sorted(str(p) for p in (GOLDEN / "1.0.0").glob("tfr_golden-test.tfrecord-*"))
    assert cli_main(["reshard", *shards, "--out", str(tmp_path), "--tfds", "--tfds-version", "1.0.1",
                     "--shard-size", "8KB", "-q"]) == 0
    info = read_info(tmp_path / "tfr_golden")
    assert info.version == "1.0.1" and info.splits["test"].num_examples == 7 and info.splits["test"].num_shards > 1
    assert info.supervised_keys == ("image", "label") and info.class_names == read_info(GOLDEN).class_names
    a = [(int(x["id"]), x["image"].shape) for x in TFRecordDataset(GOLDEN, split="test")]
    b = [(int(x["id"]), x["image"].shape) for x in TFRecordDataset(tmp_path / "tfr_golden", split="test")]
    assert a == b


def test_inspect_an_rlds_folder(capsys):
    """The steps of an RLDS episode show as the Dataset feature they are."""
    folder = Path(__file__).parent / "data" / "tfds" / "rlds" / "rlds_legacy" / "1.0.0"
    assert cli_main(["inspect", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for line in ["  steps: Dataset (variable length) of", "    -: FeaturesDict",
                 "        image: Image  uint8  (8, 10, 3)  jpeg", "      language_instruction: Text  string  ()",
                 "    episode_id: Tensor  int64  ()"]:
        assert line in lines, line
