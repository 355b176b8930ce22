"""The shard-set layout (tfr_torch.format.shardset): names, the sidecar as a Sidecar, stale shards."""

import json
import os

import pytest
import torch

import tfr_torch
from tfr_torch.decode.sidecar import sidecar_for, spec_from_json
from tfr_torch.format.shardset import SIDECAR_FORMAT, find_sidecar, shard_name, sidecar_path, stale_shards


def test_sidecar_of_a_written_set(tmp_path):
    spec = {"x": tfr_torch.FixedLenFeature([], torch.int64)}
    with tfr_torch.ShardedWriter(tmp_path, "ds", "train", records_per_shard=2, features=spec) as writer:
        for i in range(5):
            writer.write_example({"x": i})
    names = [shard_name("ds", "train", i, 3) for i in range(3)]
    assert [os.path.basename(p) for p in writer.paths] == names
    found = find_sidecar(writer.paths)
    assert found is not None and found.path == sidecar_path(str(tmp_path), "ds", "train")
    assert (found.name, found.split, found.image) == ("ds", "train", None)
    assert found.counts == dict(zip(names, [2, 2, 1]))
    assert spec_from_json(found.features) == spec
    assert found.data["format"] == SIDECAR_FORMAT and found.data["records"] == 5
    assert sidecar_for(writer.paths) == (found.data, found.counts)  # the older call gives the same pair
    assert find_sidecar(writer.paths[1:]).counts == dict(zip(names[1:], [2, 1]))


def test_stale_shards_are_those_of_another_count():
    names = ["ds-train.tfrecord-00000-of-00002", "ds-train.tfrecord-00000-of-00002.idx",
             "ds-train.tfrecord-00000-of-00001", "ds-test.tfrecord-00000-of-00002", "other.json"]
    assert sorted(stale_shards(names, "ds", "train", ["ds-train.tfrecord-00000-of-00001"])) == [
        "ds-train.tfrecord-00000-of-00002", "ds-train.tfrecord-00000-of-00002.idx"]


def test_sidecar_file_is_json_with_the_format_tag(tmp_path):
    with tfr_torch.ShardedWriter(tmp_path, "ds", "train") as writer:
        writer.write(b"r")
    data = json.loads((tmp_path / "ds-train.tfr_torch.json").read_text())
    assert data["format"] == SIDECAR_FORMAT and data["features"] is None and data["compression"] is None


def test_tfds_file_layout():
    from tfr_torch.format.shardset import (
        TFDS_TEMPLATE,
        fill_template,
        parse_shard_name,
        tfds_file_bytes,
        tfds_num_bytes,
        unknown_placeholders,
    )

    assert fill_template(TFDS_TEMPLATE, "mnist", "train", "tfrecord", 3, 12) == "mnist-train.tfrecord-00003-of-00012"
    assert fill_template("{SPLIT}/{DATASET}_{SHARD_INDEX}_{NUM_SHARDS}.{FILEFORMAT}", "m", "test", "tfrecord", 0, 2) \
        == "test/m_00000_00002.tfrecord"
    assert unknown_placeholders(TFDS_TEMPLATE) == [] and unknown_placeholders("{X}-{SPLIT}-{A}") == ["A", "X"]
    for i, n in [(0, 1), (3, 12), (5, 123456)]:  # the names fill_template and shard_name make parse back
        filled = fill_template(TFDS_TEMPLATE, "my-set", "val", "tfrecord", i, n)
        assert parse_shard_name(filled) == ("my-set", "val", i, n)
        assert parse_shard_name(shard_name("my-set", "val", i, n)) == ("my-set", "val", i, n)
    assert parse_shard_name("ds-train.tfrecords-00001-of-00002") == ("ds", "train", 1, 2)
    for other in ("train.tfrecord", "ds-train.tfrecord-00001", "ds-train.tfrecord-00001-of-00002.idx",
                  "ds.tfrecord-00000-of-00001"):
        assert parse_shard_name(other) is None, other
    shards = [(10, 10 * 16 + 500), (3, 3 * 16 + 90)]  # (records, file bytes): framing is 16 bytes per record
    assert tfds_num_bytes(shards) == 590
    assert tfds_file_bytes(590, 13) == sum(size for _, size in shards)


def test_written_tfds_metadata_uses_the_layout(tmp_path):
    from tfr_torch.format.shardset import tfds_num_bytes
    from tfr_torch.tfds.metadata import check_split_files, read_info

    spec = {"x": tfr_torch.FixedLenFeature([], torch.int64)}
    with tfr_torch.ShardedWriter(tmp_path, "ds", "train", records_per_shard=2, features=spec, tfds={}) as writer:
        for i in range(5):
            writer.write_example({"x": i})
    info = read_info(tmp_path)
    sizes = [os.path.getsize(p) for p in writer.paths]
    assert info.splits["train"].num_bytes == tfds_num_bytes(list(zip([2, 2, 1], sizes)))
    assert check_split_files(info, "train") == [f"{info.path}/{os.path.basename(p)}" for p in writer.paths]


def test_set_names_are_checked_before_anything_is_written(tmp_path):
    for name, split, message in [("a/b", "train", "name must be a non-empty string without '/', got 'a/b'"),
                                 ("ds", "", "split must be a non-empty string without '/', got ''"),
                                 (3, "train", "name must be a non-empty string without '/', got 3")]:
        with pytest.raises(ValueError) as info:
            tfr_torch.ShardedWriter(tmp_path / "out", name, split)
        assert str(info.value) == message
    assert list(tmp_path.iterdir()) == []
