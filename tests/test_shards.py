"""ShardedWriter: rollover by size or record count, TFDS shard names, indexes, the sidecar, compression,
crash safety and resumption; parse_size and shard_name."""

from __future__ import annotations

import json
import os
import re
import warnings

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import FixedLenFeature, ShardedWriter, TFRecordDataset, VarLenFeature, string
from tfr_torch.decode.sidecar import spec_from_json, spec_to_json
from tfr_torch.tools.shards import parse_size, shard_name

SHARD_RE = re.compile(r"^(?P<name>.+)-(?P<split>[^-]+)\.tfrecord-(?P<i>\d+)-of-(?P<n>\d+)$")
SPEC = {"id": FixedLenFeature([], torch.int64), "payload": FixedLenFeature([], string),
        "tags": VarLenFeature(torch.int64)}


def records(n, seed=0, low=20, high=400):
    """n Examples of varied sizes."""
    rng = np.random.default_rng(seed)
    return [tfr_torch.encode_example({"id": i, "payload": bytes(rng.integers(0, 256, int(rng.integers(low, high)),
                                                                             dtype=np.uint8)),
                                      "tags": np.arange(i % 4, dtype=np.int64)}) for i in range(n)]


def read_all(paths):
    out = []
    for path in paths:
        with tfr_torch.read_records(path) as reader:
            out.extend(reader)
    return out


def per_shard(paths):
    return [read_all([p]) for p in paths]


def sidecar(out_dir, name="ds", split="train"):
    with open(os.path.join(out_dir, f"{name}-{split}.tfr_torch.json")) as f:
        return json.load(f)


def write(out_dir, data, **kwargs):
    kwargs.setdefault("shard_size", "1KB")
    with ShardedWriter(str(out_dir), "ds", "train", **kwargs) as writer:
        for record in data:
            writer.write(record)
    return writer.paths


def check_set(out_dir, paths, data, compression=None):
    """Names, order, indexes identical to build_index's, sidecar counts."""
    n = len(paths)
    assert paths == [os.path.join(str(out_dir), f"ds-train.tfrecord-{i:05d}-of-{n:05d}") for i in range(n)]
    assert read_all(paths) == data
    meta = sidecar(out_dir)
    assert meta["records"] == len(data)
    assert meta["compression"] == compression
    assert [s["file"] for s in meta["shards"]] == [os.path.basename(p) for p in paths]
    assert [s["records"] for s in meta["shards"]] == [len(r) for r in per_shard(paths)]
    assert [s["bytes"] for s in meta["shards"]] == [os.path.getsize(p) for p in paths]
    for path in paths:
        rebuilt = tfr_torch.build_index(path, path + ".rebuilt")
        assert open(path + ".idx", "rb").read() == open(rebuilt, "rb").read()
        os.remove(rebuilt)
        if os.path.exists(rebuilt + ".seek"):  # a compressed shard's seek points: the writer's are the same
            assert open(path + ".idx.seek", "rb").read() == open(rebuilt + ".seek", "rb").read()
            os.remove(rebuilt + ".seek")
    # nothing else is left: no partial shards, no progress file, no temporary files
    expected = {os.path.basename(p) for p in paths} | {os.path.basename(p) + ".idx" for p in paths}
    if compression is not None and tfr_torch._native.available():  # seek points, built by the compiled core
        expected |= {os.path.basename(p) + ".idx.seek" for p in paths}
    assert set(os.listdir(out_dir)) == expected | {"ds-train.tfr_torch.json"}
    return meta


# ------------------------------------------------------------------------------------------ parse_size


@pytest.mark.parametrize("text, value", [
    (1, 1), (4096, 4096), ("1KB", 1000), ("1kb", 1000), ("2KiB", 2048), ("2 KiB", 2048), ("1.5MB", 1_500_000),
    ("64MiB", 64 << 20), ("1GB", 10**9), ("1GiB", 1 << 30), ("128", 128), ("10B", 10), (" 3 mb ", 3_000_000),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["", "KB", "1XB", "-1KB", "0", 0, -5, "1 2KB", "0.0001KB", True])
def test_parse_size_refuses(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


# ------------------------------------------------------------------------------------------ shard names


def test_shard_name():
    assert shard_name("cifar10", "train", 0, 1) == "cifar10-train.tfrecord-00000-of-00001"
    assert shard_name("imagenet", "validation", 12, 64) == "imagenet-validation.tfrecord-00012-of-00064"
    assert shard_name("x", "train", 99998, 99999) == "x-train.tfrecord-99998-of-99999"
    assert shard_name("x", "train", 5, 100000) == "x-train.tfrecord-000005-of-100000"
    assert shard_name("x", "train", 123456, 1234567) == "x-train.tfrecord-0123456-of-1234567"
    names = [shard_name("x", "train", i, 100001) for i in (0, 9, 10, 99999, 100000)]
    assert names == sorted(names)  # equal widths: lexical order is shard order


@pytest.mark.parametrize("name, split", [("", "train"), ("a/b", "train"), ("ds", ""), ("ds", "tr/ain"), (None, "x")])
def test_bad_name_or_split(tmp_path, name, split):
    with pytest.raises(ValueError):
        ShardedWriter(str(tmp_path), name, split)


def test_file_url_is_a_local_folder(tmp_path):
    data = records(3)
    paths = write(f"file://{tmp_path}/out", data)
    assert read_all(paths) == data and all(os.path.exists(p) for p in paths)


# ------------------------------------------------------------------------------------------------ rollover


@pytest.mark.parametrize("size, limit", [("1KB", 1000), ("2KiB", 2048), (700, 700)])
def test_rollover_by_shard_size(tmp_path, size, limit):
    data = records(40)
    paths = write(tmp_path, data, shard_size=size)
    assert len(paths) > 2
    meta = check_set(tmp_path, paths, data)
    shards = per_shard(paths)
    framed = [[len(r) + 16 for r in shard] for shard in shards]
    for i, sizes in enumerate(framed):
        assert sum(sizes) == os.path.getsize(paths[i])
        assert sum(sizes) <= limit or len(sizes) == 1  # a shard overflows only with a single, larger record
        if i + 1 < len(framed):
            assert sum(sizes) + framed[i + 1][0] > limit  # shards are filled: the next record did not fit
    assert sum(s["records"] for s in meta["shards"]) == 40


def test_a_record_larger_than_the_shard_size_gets_its_own_shard(tmp_path):
    data = [b"a" * 10, b"b" * 5000, b"c" * 10, b"d" * 10]
    paths = write(tmp_path, data, shard_size=100)
    assert per_shard(paths) == [[data[0]], [data[1]], [data[2], data[3]]]


@pytest.mark.parametrize("n, per, counts", [(10, 3, [3, 3, 3, 1]), (9, 3, [3, 3, 3]), (2, 5, [2]), (1, 1, [1])])
def test_rollover_by_records_per_shard(tmp_path, n, per, counts):
    data = records(n)
    paths = write(tmp_path, data, records_per_shard=per, shard_size="1GB")
    assert [len(s) for s in per_shard(paths)] == counts
    meta = check_set(tmp_path, paths, data)
    assert [s["records"] for s in meta["shards"]] == counts


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3"])
def test_records_per_shard_must_be_a_positive_int(tmp_path, bad):
    with pytest.raises(ValueError):
        ShardedWriter(str(tmp_path), "ds", records_per_shard=bad)


def test_many_shards_are_named_in_order(tmp_path):
    data = [bytes([i % 256]) * 3 for i in range(120)]
    paths = write(tmp_path, data, records_per_shard=1)
    assert len(paths) == 120
    assert os.path.basename(paths[-1]) == "ds-train.tfrecord-00119-of-00120"
    assert read_all(paths) == data


# ------------------------------------------------------------------------------------------ compression


def test_gzip_shards_and_their_indexes(tmp_path):
    data = records(30)
    paths = write(tmp_path, data, shard_size="2KB", compression="gzip")
    assert len(paths) > 1
    check_set(tmp_path, paths, data, compression="gzip")
    for path, shard in zip(paths, per_shard(paths)):
        with open(path, "rb") as f:
            assert f.read(2) == b"\x1f\x8b"
        index = tfr_torch.read_index(path + ".idx", path)
        # offsets are positions in the decompressed stream
        assert index[:, 1].tolist() == [len(r) + 16 for r in shard]
        assert index[:, 0].tolist() == np.concatenate([[0], np.cumsum(index[:-1, 1])]).tolist()
        for (offset, size), record in zip(index.tolist(), shard):
            with tfr_torch.read_records(path, start=offset, end=offset + size) as reader:
                assert list(reader) == [record]
        middle = len(shard) // 2
        with tfr_torch.read_records(path, start=int(index[middle, 0])) as reader:
            assert list(reader) == shard[middle:]
    # datasets read them, with and without the indexes, and take the counts from the sidecar
    assert list(TFRecordDataset(paths, index="auto")) == data
    assert list(TFRecordDataset(paths)) == data
    assert len(TFRecordDataset(paths)) == len(data)


def test_zlib_shards(tmp_path):
    data = records(12)
    paths = write(tmp_path, data, shard_size="1KB", compression="ZLIB")
    check_set(tmp_path, paths, data, compression="zlib")


def test_shard_size_counts_bytes_before_compression(tmp_path):
    data = [b"\x00" * 300 for _ in range(10)]  # compresses to almost nothing
    paths = write(tmp_path, data, shard_size=1000, compression="gzip")
    assert [len(s) for s in per_shard(paths)] == [3, 3, 3, 1]


# ------------------------------------------------------------------------------------------------ sidecar


def test_sidecar_keeps_features_and_image(tmp_path):
    data = records(5)
    image = {"encoding": "png", "classes": ["a", "b"]}
    with ShardedWriter(str(tmp_path), "ds", "train", features=SPEC, image=image) as writer:
        for record in data:
            writer.write(record)
    meta = sidecar(tmp_path)
    assert meta["format"] == "tfr_torch.shards/1"
    assert (meta["name"], meta["split"]) == ("ds", "train")
    assert meta["tfr_torch_version"] == tfr_torch.__version__
    assert meta["image"] == image
    assert meta["features"] == spec_to_json(SPEC)
    assert spec_from_json(meta["features"]) == SPEC
    decoded = list(TFRecordDataset(writer.paths, features="auto"))
    assert [int(d["id"]) for d in decoded] == list(range(5))


def test_sidecar_without_features(tmp_path):
    paths = write(tmp_path, records(3))
    assert sidecar(tmp_path)["features"] is None
    with pytest.raises(ValueError, match="sidecar"):
        TFRecordDataset(paths, features="auto")
    assert len(TFRecordDataset(paths)) == 3


def test_len_reads_counts_from_the_sidecar_without_scanning(tmp_path, monkeypatch):
    data = records(25)
    paths = write(tmp_path, data, records_per_shard=4)

    def no_scan(*args, **kwargs):
        raise AssertionError("scanned a file: the sidecar's counts were not used")

    monkeypatch.setattr("tfr_torch.data.epoch_records.EpochRecords._count_file", no_scan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(TFRecordDataset(paths)) == 25
        assert len(TFRecordDataset(os.path.join(str(tmp_path), "ds-train.tfrecord-*"))) == 25
        assert len(TFRecordDataset(paths[2:4])) == 8
        assert len(TFRecordDataset(paths, batch_size=10)) == 3
        assert len(TFRecordDataset(paths, batch_size=10, drop_last=True)) == 2


# --------------------------------------------------------------------------------- closing and crashing


def test_close_twice_and_write_after_close(tmp_path):
    writer = ShardedWriter(str(tmp_path), "ds", "train", shard_size=500)
    data = records(8)
    for record in data:
        writer.write(record)
    first = writer.close()
    assert writer.close() == first == writer.paths
    assert read_all(first) == data
    with pytest.raises(ValueError):
        writer.write(b"late")
    check_set(tmp_path, first, data)


def test_exception_inside_with_leaves_no_final_shards(tmp_path):
    data = records(30)
    with pytest.raises(RuntimeError, match="boom"):
        with ShardedWriter(str(tmp_path), "ds", "train", shard_size="1KB", features=SPEC) as writer:
            for i, record in enumerate(data):
                if i == 20:
                    raise RuntimeError("boom")
                writer.write(record)
    names = os.listdir(tmp_path)
    assert not [n for n in names if SHARD_RE.match(n)]
    assert "ds-train.tfr_torch.json" not in names
    assert not [n for n in names if n.endswith(".tmp")]  # the open shard is discarded
    assert writer.closed


def test_records_counts_finished_and_open_shards(tmp_path):
    with ShardedWriter(str(tmp_path), "ds", records_per_shard=3) as writer:
        for i, record in enumerate(records(7)):
            writer.write(record)
            assert writer.records == i + 1


def test_write_example(tmp_path):
    with ShardedWriter(str(tmp_path), "ds", features=SPEC) as writer:
        writer.write_example({"id": 1, "payload": b"x", "tags": [1, 2]})
    (record,) = TFRecordDataset(writer.paths, features="auto")
    assert int(record["id"]) == 1 and record["payload"] == b"x"


def test_resume_after_a_crash(tmp_path):
    data = records(20)
    ref = tmp_path / "ref"
    write(ref, data, records_per_shard=3)
    out = tmp_path / "out"
    writer = ShardedWriter(str(out), "ds", "train", shard_size="1KB", records_per_shard=3)
    for i, record in enumerate(data[:11]):
        writer.write(record, position=i, state={"note": f"after {i}"})
    writer.abort()  # a crash: shards 0-2 (items 0-8) were finished, items 9-10 were in the open shard
    resumed = ShardedWriter(str(out), "ds", "train", shard_size="1KB", records_per_shard=3, resume=True)
    assert resumed.resumed_position == 8
    assert resumed.resumed_state == {"note": "after 8"}
    assert resumed.records == 9
    for record in data[9:]:
        resumed.write(record)
    paths = resumed.close()
    check_set(out, paths, data)
    for name in os.listdir(ref):
        assert open(os.path.join(ref, name), "rb").read() == open(os.path.join(out, name), "rb").read(), name


def test_resume_without_progress_and_restart(tmp_path):
    data = records(10)
    writer = ShardedWriter(str(tmp_path), "ds", records_per_shard=2)
    for i, record in enumerate(data[:5]):
        writer.write(record, position=i)
    writer.abort()
    fresh = ShardedWriter(str(tmp_path), "ds", records_per_shard=2, resume=False)  # starts over
    assert fresh.resumed_position is None and fresh.records == 0
    for record in data:
        fresh.write(record)
    check_set(tmp_path, fresh.close(), data)
    again = ShardedWriter(str(tmp_path), "ds", records_per_shard=2, resume=True)  # nothing to resume
    assert again.resumed_position is None and again.records == 0
    again.abort()


def test_resume_with_other_settings_is_refused(tmp_path):
    writer = ShardedWriter(str(tmp_path), "ds", records_per_shard=2)
    for i, record in enumerate(records(5)):
        writer.write(record, position=i)
    writer.abort()
    with pytest.raises(ValueError, match="cannot resume"):
        ShardedWriter(str(tmp_path), "ds", records_per_shard=3, resume=True)


def test_resume_drops_a_damaged_partial_shard(tmp_path):
    data = records(12)
    writer = ShardedWriter(str(tmp_path), "ds", records_per_shard=2)
    for i, record in enumerate(data[:9]):
        writer.write(record, position=i)
    writer.abort()  # shards 0-3 finished
    partial = os.path.join(str(tmp_path), "ds-train.tfrecord-00002.partial")
    with open(partial, "ab") as f:
        f.write(b"junk")  # a different size: shard 2 and those after it are not trusted
    resumed = ShardedWriter(str(tmp_path), "ds", records_per_shard=2, resume=True)
    assert resumed.resumed_position == 3 and resumed.records == 4
    for record in data[4:]:
        resumed.write(record)
    check_set(tmp_path, resumed.close(), data)


def test_resumed_state_is_the_state_passed_with_the_last_kept_record(tmp_path):
    """The state saved with a finished shard is the one given with its last record, even when the caller keeps
    changing the object it passed (convert_dataset passes its growing list of skipped items)."""
    seen = []
    writer = ShardedWriter(str(tmp_path), "ds", records_per_shard=2)
    for i, record in enumerate(records(5)):
        seen.append(i)
        writer.write(record, position=i, state={"seen": seen})
    seen.append("after")
    writer.abort()  # shards 0 (items 0, 1) and 1 (items 2, 3) finished; item 4's shard discarded
    resumed = ShardedWriter(str(tmp_path), "ds", records_per_shard=2, resume=True)
    assert resumed.resumed_position == 3
    assert resumed.resumed_state == {"seen": [0, 1, 2, 3]}
    resumed.abort()


# ------------------------------------------------------------------------------------ the sidecar's spec


def test_spec_json_round_trip():
    from tfr_torch import FixedLenSequenceFeature, SparseFeature

    spec = {
        "a": FixedLenFeature([], torch.int64, default_value=-1),
        "b": FixedLenFeature([2, 3], torch.float32),
        "c": FixedLenFeature([], string, default_value="none"),
        "d": VarLenFeature(string),
        "e": VarLenFeature(torch.float32),
        "f": FixedLenSequenceFeature([2], torch.int64, allow_missing=True),
        "g": FixedLenFeature([2], torch.uint8, default_value=[1, 2]),
        "h": FixedLenFeature([], torch.bool),
    }
    encoded = json.loads(json.dumps(spec_to_json(spec)))  # JSON all the way
    assert spec_from_json(encoded) == spec
    with pytest.raises(TypeError, match="x"):
        spec_to_json({"x": SparseFeature("i", "v", torch.float32, 10)})
    with pytest.raises(ValueError, match="kind"):
        spec_from_json({"x": {"kind": "Sparse", "dtype": "float32"}})
    with pytest.raises(ValueError, match="sidecar feature 'x': unknown dtype 'nope'"):  # not an AttributeError
        spec_from_json({"x": {"kind": "VarLen", "dtype": "nope"}})
    with pytest.raises(ValueError, match="sidecar feature 'y': unknown dtype 'complex64'"):
        spec_from_json({"y": {"kind": "VarLen", "dtype": "complex64"}})
    every = {f"k{i}": VarLenFeature(dtype) for i, dtype in enumerate(
        [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.int8, torch.uint8,
         torch.int16, torch.int32, torch.int64, string])}
    assert spec_from_json(json.loads(json.dumps(spec_to_json(every)))) == every


def test_sidecar_is_used_only_for_the_files_it_describes(tmp_path, monkeypatch):
    from tfr_torch.decode.sidecar import read_sidecar, sidecar_for

    data = records(6)
    paths = write(tmp_path, data, records_per_shard=2)
    found = sidecar_for(paths)
    assert found is not None and found[1] == {os.path.basename(p): 2 for p in paths}
    assert sidecar_for(paths[1:2])[1] == {os.path.basename(paths[1]): 2}
    other = tmp_path / "other"
    other_paths = write(other, data, records_per_shard=3)
    assert sidecar_for([paths[0], other_paths[0]]) is None  # two sets
    renamed = str(tmp_path / "loose.tfrecord")
    os.link(paths[0], renamed)
    assert sidecar_for([renamed]) is None  # not a TFDS name
    stale = str(tmp_path / "ds-train.tfrecord-00000-of-00007")
    os.link(paths[0], stale)
    assert sidecar_for([stale]) is None  # a shard the sidecar does not list
    with pytest.raises(TypeError, match="unknown"):
        len(TFRecordDataset(stale))  # no counts for it: its length is unknown
    assert list(TFRecordDataset(stale)) == data[:2]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x-train.tfr_torch.json").write_text(json.dumps({"format": "something/9"}))
    with pytest.raises(ValueError, match="not a tfr_torch shard sidecar"):
        read_sidecar(str(bad / "x-train.tfr_torch.json"))


def test_features_with_a_bytes_default_value(tmp_path):
    spec = {"id": FixedLenFeature([], torch.int64), "c": FixedLenFeature([], string, default_value=b"none")}
    with ShardedWriter(str(tmp_path), "ds", features=spec) as writer:
        writer.write_example({"id": 1})
        writer.write_example({"id": 2, "c": b"x"})
    assert spec_from_json(sidecar(tmp_path)["features"]) == spec
    assert [r["c"] for r in TFRecordDataset(writer.paths, features="auto")] == [b"none", b"x"]
