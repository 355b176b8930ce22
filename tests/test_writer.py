"""TFRecordWriter: framing, atomic writes, options and errors."""

import os
import struct
import warnings

import pytest

import tfr_torch
from tfr_torch.format.crc import masked_crc32c

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core


def test_empty_record_is_the_reference_bytes(tmp_path):
    path = tmp_path / "e.tfrecord"
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(b"")
    assert path.read_bytes().hex() == "0000000000000000" + "29039807" + "d8ea82a2"


def test_framing_of_one_record(tmp_path):
    path = tmp_path / "one.tfrecord"
    with tfr_torch.TFRecordWriter(str(path)) as w:
        w.write(bytearray(b"hello"))
    data = path.read_bytes()
    length, hcrc = struct.unpack("<QI", data[:12])
    assert (length, hcrc) == (5, masked_crc32c(data[:8]))
    assert data[12:17] == b"hello"
    assert struct.unpack("<I", data[17:])[0] == masked_crc32c(b"hello")
    assert len(data) == 12 + 5 + 4


def test_memoryview_records_are_accepted(tmp_path):
    path = tmp_path / "mv.tfrecord"
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(memoryview(b"abcdef")[1:4])
    assert list(tfr_torch.read_records(path)) == [b"bcd"]


def test_file_appears_only_when_closed(tmp_path):
    path = tmp_path / "atomic.tfrecord"
    w = tfr_torch.TFRecordWriter(path)
    w.write(b"x")
    w.flush()
    assert not path.exists()
    w.close()
    assert path.exists()
    assert list(tfr_torch.read_records(path)) == [b"x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atomic.tfrecord"]


def test_exception_in_with_block_leaves_no_file(tmp_path):
    path = tmp_path / "failed.tfrecord"
    with pytest.raises(RuntimeError):
        with tfr_torch.TFRecordWriter(path, compression="gzip") as w:
            w.write(b"partial")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_existing_file_is_replaced_only_on_success(tmp_path):
    path = tmp_path / "data.tfrecord"
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(b"old")
    with pytest.raises(RuntimeError):
        with tfr_torch.TFRecordWriter(path) as w:
            w.write(b"new")
            raise RuntimeError("boom")
    assert list(tfr_torch.read_records(path)) == [b"old"]


def test_unclosed_writer_warns_and_discards(tmp_path):
    path = tmp_path / "leak.tfrecord"
    w = tfr_torch.TFRecordWriter(path)
    w.write(b"x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del w
    assert any("never closed" in str(c.message) for c in caught)
    assert list(tmp_path.iterdir()) == []


def test_permissions_follow_umask(tmp_path):
    path = tmp_path / "perm.tfrecord"
    with tfr_torch.TFRecordWriter(path):
        pass
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask


@pytest.mark.parametrize("name, expected", [(None, "none"), ("", "none"), ("GZIP", "gzip"), ("zlib", "zlib"),
                                            ("ZLIB", "zlib"), ("gzip", "gzip")])
def test_compression_names(tmp_path, name, expected):
    path = tmp_path / "c.tfrecord"
    with tfr_torch.TFRecordWriter(path, compression=name) as w:
        w.write(b"abc")
    reader = tfr_torch.read_records(path)
    assert list(reader) == [b"abc"]
    assert reader.compression == expected


def test_bad_options_name_the_value(tmp_path):
    with pytest.raises(ValueError, match="unknown compression 'bz2'"):
        tfr_torch.TFRecordWriter(tmp_path / "x", compression="bz2")
    with pytest.raises(ValueError, match="compression_level=5 needs compression"):
        tfr_torch.TFRecordWriter(tmp_path / "x", compression_level=5)
    with pytest.raises(ValueError, match="compression_level must be an int from 0 to 9.*got 12"):
        tfr_torch.TFRecordWriter(tmp_path / "x", compression="gzip", compression_level=12)
    assert list(tmp_path.iterdir()) == []


def test_write_rejects_non_bytes(tmp_path):
    with tfr_torch.TFRecordWriter(tmp_path / "x.tfrecord") as w:
        with pytest.raises(TypeError, match="bytes-like, got str"):
            w.write("text")
        with pytest.raises(TypeError, match="bytes-like, got int"):
            w.write(3)


def test_write_after_close_raises(tmp_path):
    w = tfr_torch.TFRecordWriter(tmp_path / "x.tfrecord")
    w.close()
    w.close()  # idempotent
    with pytest.raises(ValueError, match="closed TFRecordWriter"):
        w.write(b"x")


def test_write_example_round_trips(tmp_path):
    path = tmp_path / "ex.tfrecord"
    with tfr_torch.TFRecordWriter(path) as w:
        w.write_example({"label": 7, "name": "cat"})
    (record,) = list(tfr_torch.read_records(path))
    decoded = tfr_torch.decode_example(record)
    assert decoded["label"].tolist() == [7]
    assert decoded["name"] == [b"cat"]


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_flush_keeps_the_stream_readable(tmp_path, compression):
    path = tmp_path / "f.tfrecord"
    with tfr_torch.TFRecordWriter(path, compression=compression) as w:
        for i in range(3):
            w.write(bytes([i]) * 100)
            w.flush()
    assert list(tfr_torch.read_records(path)) == [bytes([i]) * 100 for i in range(3)]


def test_records_are_written_in_order_in_large_calls_and_flush_writes_what_is_pending(tmp_path):
    """Small records are framed together and written about a MiB at a time; large ones as they come, in order.
    flush() puts every pending record in the (temporary) file; a bytearray changed after write() was copied."""
    path = tmp_path / "w.tfrecord"
    w = tfr_torch.TFRecordWriter(path)
    temp = w._out.file.name
    mutable = bytearray(b"before")
    records = [bytes([i % 251]) * (i * 997 % 20000) for i in range(200)]
    records.insert(50, b"L" * 70000)  # framed and written on its own, after the pending ones
    for i, record in enumerate(records):
        w.write(record)
        if i == 3:
            w.write(mutable)
    mutable[:] = b"after!"
    w.flush()
    want = records[:4] + [b"before"] + records[4:]
    assert os.path.getsize(temp) == sum(len(r) + 16 for r in want)
    w.close()
    assert list(tfr_torch.read_records(path)) == want
    assert w.records == len(want)


def test_writing_over_a_folder_is_refused_at_open_naming_it(tmp_path):
    """The folder was found only at close(), by the rename, in an error naming the temporary file."""
    folder = tmp_path / "data.tfrecord"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match=f"cannot write '{folder}': it is a folder"):
        tfr_torch.TFRecordWriter(folder)
    assert sorted(os.listdir(tmp_path)) == ["data.tfrecord"]  # no temporary file left
