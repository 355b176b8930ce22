"""Follow-ups of the command-line audit: defects it found below the CLI (paths, infer_features, the reader, the
index, error messages). Each test failed before its fix."""

from __future__ import annotations

import contextlib
import io
import os
import struct
import threading
import tracemalloc

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch.format.framing import header_bytes
from tfr_torch.tools.cli import main
from tfr_torch.tools.reshard import reshard


def run(*args):
    """(exit status, stdout, stderr) of `tfr-torch ARGS` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def write(path, examples, compression=None):
    with tfr_torch.TFRecordWriter(str(path), compression=compression) as w:
        for features in examples:
            w.write(tfr_torch.encode_example(features))
    return str(path)


def ids_of(path):
    return [tfr_torch.decode_example(r)["id"][0] for r in tfr_torch.read_records(path)]


# ------------------------------------------------------------------ 1: file names with glob characters


def test_existing_file_named_like_a_pattern_is_that_file(tmp_path):
    # Fixed: expand_paths read the name of an existing file holding [ ] * ? as a glob pattern: "data[1].tfrecord"
    # matched data1.tfrecord (or nothing: "no files match"), in TFRecordDataset, infer_features and reshard.
    literal = write(tmp_path / "data[1].tfrecord", [{"id": i} for i in range(3)])
    neighbour = write(tmp_path / "data1.tfrecord", [{"id": 100 + i} for i in range(2)])
    assert tfr_torch.expand_paths(literal) == [literal]
    assert tfr_torch.expand_paths([literal, neighbour]) == [literal, neighbour]
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    assert [int(x["id"]) for x in tfr_torch.TFRecordDataset(literal, features=spec)] == [0, 1, 2]
    assert tfr_torch.infer_features([literal]).records_read == 3
    # a real pattern still matches by pattern (not the file whose name holds the brackets)
    assert tfr_torch.expand_paths(str(tmp_path / "data[0-9].tfrecord")) == [neighbour]
    assert tfr_torch.expand_paths(str(tmp_path / "data[1].tfrecor[d]")) == [neighbour]
    assert tfr_torch.expand_paths(str(tmp_path / "data*.tfrecord")) == [neighbour, literal]  # (sorted)
    # a side file named with glob characters is still refused as one
    open(literal + ".idx", "w").close()
    with pytest.raises(ValueError, match=r"is a TFRecord index \(\.idx\), not a TFRecord file"):
        tfr_torch.expand_paths(literal + ".idx")


def test_reshard_of_a_file_named_like_a_pattern(tmp_path):
    # Fixed: `tfr-torch reshard 'data[1].tfrecord' --out o` failed with "no files match": reshard's infer_features
    # expanded the (already expanded) name again as a pattern.
    literal = write(tmp_path / "data[1].tfrecord", [{"id": i} for i in range(4)])
    out = tmp_path / "o"
    rc, stdout, stderr = run("reshard", literal, "--out", out, "-q")
    assert (rc, stderr) == (0, "")
    shards = sorted(p for p in os.listdir(out) if p.endswith("-of-00001"))
    assert len(shards) == 1 and ids_of(str(out / shards[0])) == [0, 1, 2, 3]
    written = reshard([literal], str(tmp_path / "o2"))
    assert [ids_of(p) for p in written] == [[0, 1, 2, 3]]


# ------------------------------------------------------------------ 2: infer_features' memory


def test_infer_features_memory_does_not_grow_with_the_records_read(tmp_path):
    # Fixed: infer_features kept every record read (their raw Features) until it proposed: ~265 MB for 1000
    # records of 100 KB. It now summarizes them chunk by chunk (kinds, counts, keys carried).
    n, size = 300, 100_000
    rows = ({"id": i, "blob": bytes([i % 256]) * size, "v": np.full(i % 3, 0.5, np.float32)} for i in range(n))
    path = write(tmp_path / "big.tfrecord", rows)
    tfr_torch.infer_features([path], max_records=2)  # (imports and caches first: not what is measured)
    tracemalloc.start()
    try:
        spec = tfr_torch.infer_features([path], max_records=1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * size / 2, f"peak {peak:,} bytes for {n * size:,} bytes of records"
    assert spec.records_read == n
    assert spec["blob"] == tfr_torch.FixedLenFeature([], tfr_torch.string)
    assert spec["id"].shape == () and isinstance(spec["v"], tfr_torch.VarLenFeature)
    assert spec.present == {"blob": n, "id": n, "v": n}  # a Feature with no values still carries a kind


def test_infer_features_same_proposal_across_chunks(tmp_path, monkeypatch):
    # Fixed (with the above): the summary must give what reading every record at once gave, including a kind that
    # differs between chunks, keys that only later records carry, and feature lists.
    from tfr_torch.decode import infer

    monkeypatch.setattr(infer, "_CHUNK_RECORDS", 2)
    records = [tfr_torch.encode_example({"a": [1, 2], **({"late": 1.5} if i >= 3 else {})}) for i in range(5)]
    spec = tfr_torch.infer_features(records)
    assert spec["a"] == tfr_torch.FixedLenFeature([2], torch.int64)
    assert isinstance(spec["late"], tfr_torch.VarLenFeature) and spec.present["late"] == 2
    mixed = records[:3] + [tfr_torch.encode_example({"a": [1.0, 2.0]})]
    with pytest.raises(tfr_torch.DecodeError, match=r"feature 'a' holds float and int64 values in different records"):
        tfr_torch.infer_features(mixed)
    sequences = [tfr_torch.encode_sequence_example({"id": i}, {"f": [[0.5, 1.5]] * (i + 1)} if i != 2 else {})
                 for i in range(5)]
    seq = tfr_torch.infer_features(sequences)
    assert seq.sequence["f"].shape == (2,) and seq.sequence["f"].allow_missing
    assert seq.list_present == {"f": 4}


# ------------------------------------------------------------------ 3: reading from a pipe


def _fifo_with(tmp_path, data, name="pipe"):
    fifo = str(tmp_path / name)
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as f:
            f.write(data)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return fifo, thread


def test_records_from_a_fifo(tmp_path):
    # Fixed: a FIFO (or /dev/stdin fed by a pipe) has st_size 0, taken as the file's size: "truncated record ...
    # the file has only 0". A file that is not a regular file is now read as a stream, to its end.
    path = write(tmp_path / "ok.tfrecord", [{"id": i} for i in range(5)])
    data = open(path, "rb").read()
    fifo, thread = _fifo_with(tmp_path, data)
    assert ids_of(fifo) == [0, 1, 2, 3, 4]
    thread.join()
    fifo2, thread = _fifo_with(tmp_path, data, "pipe2")
    assert run("count", fifo2) == (0, f"5\t{fifo2}\n", "")
    thread.join()


def test_fifo_with_a_lying_length_allocates_as_data_arrives(tmp_path):
    # Fixed (with the above): a stream has no size bounding a header's length; the reader grows its buffer only
    # as data arrives, and says where the stream ended.
    claimed = 900 << 20  # under limits.MAX_RECORD_BYTES, far over what arrives
    data = header_bytes(claimed) + b"x" * 1000
    fifo, thread = _fifo_with(tmp_path, data)
    tracemalloc.start()
    try:
        with pytest.raises(tfr_torch.TruncatedRecordError) as info:
            list(tfr_torch.read_records(fifo, compression=None))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    thread.join()
    assert peak < 16 << 20
    assert str(info.value) == (f"{fifo}:0: truncated record: its header says {claimed} bytes of data, so "
                               f"{claimed + 16} bytes from this offset, but the stream ends after 1012")


# ------------------------------------------------------------------ 4: one copy of a large record


@pytest.fixture(scope="module")
def one_big_record(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("big") / "one.tfrecord")
    size = 30 << 20
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(bytes(range(256)) * (size // 256))
        w.write(b"after")
    return path, size


@pytest.mark.parametrize("verify", [False, True])
def test_large_record_is_held_once(one_big_record, verify):
    # Fixed: a record bigger than the buffer grew the buffer to its size and was then copied out into its bytes:
    # about twice the record in memory. It is now read from the file straight into its own bytes.
    path, size = one_big_record
    tracemalloc.start()
    try:
        with tfr_torch.read_records(path, verify=verify) as reader:
            lengths = [len(record) for record in reader]
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        with tfr_torch.read_records(path, verify=verify) as reader:
            counted = sum(len(sizes) for sizes, _ in reader.lengths())
        counting_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lengths == [size, 5] and counted == 2
    assert peak < 1.3 * size, f"peak {peak:,} bytes for a record of {size:,}"
    assert counting_peak < (1.3 * size if verify else 0.2 * size)  # without verify the data is not read at all


def test_large_record_errors_unchanged(tmp_path):
    # Guards the fix above (passed before it too): the direct read checks the data CRC and the file's end as the
    # buffered one did.
    path = str(tmp_path / "bad.tfrecord")
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(b"a" * (3 << 20))
        w.write(b"next")
    data = bytearray(open(path, "rb").read())
    data[100] ^= 1
    open(path, "wb").write(data)
    with pytest.raises(tfr_torch.CorruptRecordError, match=r"bad.tfrecord:0: corrupt record data: the CRC of its "
                                                           r"3145728 data bytes \(at offset 12\)"):
        list(tfr_torch.read_records(path))
    with pytest.warns(tfr_torch.SkippedRecordWarning):
        assert list(tfr_torch.read_records(path, on_error="skip")) == [b"next"]
    assert len(list(tfr_torch.read_records(path, verify=False))[0]) == 3 << 20
    open(path, "wb").write(data[: (3 << 20) + 10])
    with pytest.raises(tfr_torch.TruncatedRecordError, match="the file has only 3145738"):
        list(tfr_torch.read_records(path, verify=False))


# ------------------------------------------------------------------ 5: stale seek points


def test_build_index_without_seek_points_removes_stale_ones(tmp_path):
    # Fixed: build_index(path, seek_span=None) left <index>.seek from an earlier run; IndexedTFRecordDataset then
    # refused the file for it ("the seek points were built for a file of N bytes").
    path = write(tmp_path / "a.tfrecord.gz", [{"id": i} for i in range(3)], "gzip")
    tfr_torch.build_index(path)
    seek = path + ".idx.seek"
    if not os.path.exists(seek):  # the pure-Python backend builds none: an earlier run's
        open(seek, "wb").write(b"stale")
    write(path, [{"id": i} for i in range(500)], "gzip")
    assert tfr_torch.build_index(path, seek_span=None) == path + ".idx"
    assert not os.path.exists(seek)
    with pytest.raises(ValueError, match="has no seek points"):
        tfr_torch.IndexedTFRecordDataset(path)
    plain = write(tmp_path / "b.tfrecord", [{"id": 1}])  # an uncompressed file never has seek points
    open(plain + ".idx.seek", "wb").write(b"stale")
    tfr_torch.build_index(plain)
    assert not os.path.exists(plain + ".idx.seek")


# ------------------------------------------------------------------ 6: errors in the user's terms


def _bad_key_example() -> bytes:
    feature = b"\x1a\x03\x0a\x01\x07"  # Feature{int64_list{value: [7]}}
    entry = b"\x0a\x01\xff" + b"\x12" + bytes([len(feature)]) + feature  # key b"\xff": not UTF-8
    features = b"\x0a" + bytes([len(entry)]) + entry
    return b"\x0a" + bytes([len(features)]) + features


def test_schema_names_a_feature_key_that_is_not_utf8(tmp_path):
    # Fixed: "Error parsing message with type 'tfr_torch_raw.RawExample'" (an internal type name): the error now
    # says what is wrong, where.
    path = str(tmp_path / "k.tfrecord")
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(tfr_torch.encode_example({"a": 1}))
        w.write(_bad_key_example())
    expected = (f"{path}:30: record 1 is not a tf.train.Example: byte 6 has a feature key that is not valid UTF-8: "
                "b'\\xff'")
    with pytest.raises(tfr_torch.DecodeError) as info:
        tfr_torch.infer_features([path])
    assert str(info.value) == expected
    rc, out, err = run("schema", path)
    assert rc == 1 and "RawExample" not in err and expected in err
    cut = struct.pack("<B", 0x0A) + b"\x05\x0a\x03\x0a\x01"  # a features message longer than the record
    with pytest.raises(tfr_torch.DecodeError, match=r"^record 0 is not a tf.train.Example: byte 1 has a features "
                                                    r"message of 5 bytes but only 4 bytes remain"):
        tfr_torch.infer_features([cut])


def test_build_index_refuses_a_pipe_by_name(tmp_path):
    """Fixed: `tfr-torch index <(cat f)` said "corrupt record header" of a good file (build_index opens its input
    twice: the first open's sniff ate the pipe's first bytes). A pipe has nothing to index: refused by name."""
    import threading

    from tfr_torch.format.framing import frame_record
    from tfr_torch.tools.cli import main

    fifo = tmp_path / "records.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"records\.fifo is not a regular file \(a pipe or a device\?\)"):
        tfr_torch.build_index(str(fifo), str(tmp_path / "x.idx"))
    writer = threading.Thread(target=lambda: fifo.write_bytes(frame_record(b"one")), daemon=True)
    writer.start()  # (the CLI refuses before opening it: the writer is unblocked by the read below)
    assert main(["index", str(fifo), "--out-dir", str(tmp_path)]) != 0
    assert list(tfr_torch.read_records(str(fifo))) == [b"one"]
    writer.join(5)
    assert not (tmp_path / "records.fifo.idx").exists()
