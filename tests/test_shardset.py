"""The shard-set layout (tfr_torch.format.shardset): names, the sidecar as a Sidecar, stale shards."""

import json
import os

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


def test_stale_shards_are_those_of_another_count(tmp_path):
    for name in ("ds-train.tfrecord-00000-of-00002", "ds-train.tfrecord-00000-of-00002.idx",
                 "ds-train.tfrecord-00000-of-00001", "ds-test.tfrecord-00000-of-00002", "other.json"):
        (tmp_path / name).write_bytes(b"")
    assert sorted(stale_shards(str(tmp_path), "ds", "train", ["ds-train.tfrecord-00000-of-00001"])) == [
        "ds-train.tfrecord-00000-of-00002", "ds-train.tfrecord-00000-of-00002.idx"]


def test_sidecar_file_is_json_with_the_format_tag(tmp_path):
    with tfr_torch.ShardedWriter(tmp_path, "ds", "train") as writer:
        writer.write(b"r")
    data = json.loads((tmp_path / "ds-train.tfr_torch.json").read_text())
    assert data["format"] == SIDECAR_FORMAT and data["features"] is None and data["compression"] is None
