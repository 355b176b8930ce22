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
