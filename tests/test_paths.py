"""Paths: str, pathlib.Path, globs and fsspec URLs (memory:// here; S3 against a loopback server comes with the
dataset issue)."""

import uuid

import pytest

import tfr_torch

fsspec = pytest.importorskip("fsspec")


def test_glob_patterns_expand_sorted(tmp_path):
    for name in ["b.tfrecord", "a.tfrecord", "c.txt"]:
        (tmp_path / name).write_bytes(b"")
    assert tfr_torch.expand_paths(str(tmp_path / "*.tfrecord")) == [str(tmp_path / "a.tfrecord"),
                                                                    str(tmp_path / "b.tfrecord")]
    assert tfr_torch.expand_paths([tmp_path / "c.txt", str(tmp_path / "[ab].tfrecord")]) == [
        str(tmp_path / "c.txt"), str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]


def test_glob_leaves_out_seek_points_and_files_being_written(tmp_path):
    """A glob over a compressed set that ShardedWriter wrote (it writes seek points beside each shard) gives the
    shards only; `.idx.seek` files were taken for TFRecord files and failed the read with a CRC error."""
    with tfr_torch.ShardedWriter(tmp_path, "ds", "train", records_per_shard=4, compression="gzip") as writer:
        for i in range(10):
            writer.write(b"r%d" % i)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".seek")) == [
        f"ds-train.tfrecord-0000{i}-of-00003.idx.seek" for i in range(3)]
    (tmp_path / f"ds-train.tfrecord-00009-of-00010.tmp-{uuid.uuid4().hex}").write_bytes(b"half")  # a URL write's
    paths = tfr_torch.expand_paths(str(tmp_path / "ds-train.tfrecord-*"))
    assert paths == writer.paths
    assert [r for p in paths for r in tfr_torch.read_records(p)] == [b"r%d" % i for i in range(10)]
    with pytest.raises(ValueError, match=r"is the seek points of a compressed TFRecord file \(\.idx\.seek\), not a "
                                         "TFRecord file"):
        tfr_torch.expand_paths([writer.paths[0] + ".idx.seek"])


def test_glob_without_match_names_the_pattern(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no files match .*nothing-\*"):
        tfr_torch.expand_paths(str(tmp_path / "nothing-*"))


def test_expand_paths_rejects_non_paths():
    with pytest.raises(TypeError, match="got int"):
        tfr_torch.expand_paths(3)


def test_missing_local_file():
    with pytest.raises(FileNotFoundError):
        tfr_torch.read_records("/nonexistent/file.tfrecord")


def test_file_url_is_a_local_path(tmp_path, write_records):
    path = tmp_path / "f.tfrecord"
    write_records(path, [b"a"])
    assert list(tfr_torch.read_records(f"file://{path}")) == [b"a"]


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_memory_filesystem_write_read_index(compression, write_records):
    root = f"memory://tfr-{uuid.uuid4().hex}"
    url = f"{root}/data.tfrecord"
    records = [bytes([i]) * (i * 1000) for i in range(20)]
    write_records(url, records, compression)
    fs = fsspec.filesystem("memory")
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)] == ["data.tfrecord"]  # no temp file left
    reader = tfr_torch.read_records(url)
    assert list(reader) == records
    assert reader.compression == (compression or "none")
    index_path = tfr_torch.build_index(url)
    assert index_path == url + ".idx"
    index = tfr_torch.read_index(index_path, url)
    assert index.shape == (20, 2)
    offset, size = index[7].tolist()
    assert list(tfr_torch.read_records(url, start=offset, end=offset + size)) == [records[7]]
    (matched,) = tfr_torch.expand_paths(f"{root}/*.tfrecord")  # memory:// spells it memory:///tfr-...
    assert fsspec.core.url_to_fs(matched)[1] == fsspec.core.url_to_fs(url)[1]
    assert list(tfr_torch.read_records(matched)) == records


def test_memory_filesystem_failed_write_leaves_nothing():
    root = f"memory://tfr-{uuid.uuid4().hex}"
    with pytest.raises(RuntimeError):
        with tfr_torch.TFRecordWriter(f"{root}/x.tfrecord") as w:
            w.write(b"x")
            raise RuntimeError("boom")
    fs = fsspec.filesystem("memory")
    assert not fs.exists(f"{root}/x.tfrecord")
    assert fs.glob(f"{root}/*") == []


def test_unknown_protocol_is_a_clear_error():
    with pytest.raises((ValueError, ImportError), match="nosuchproto"):
        tfr_torch.read_records("nosuchproto://bucket/key.tfrecord")


def test_missing_memory_url():
    with pytest.raises(FileNotFoundError, match="memory://"):
        tfr_torch.read_records(f"memory://tfr-{uuid.uuid4().hex}/missing.tfrecord")
