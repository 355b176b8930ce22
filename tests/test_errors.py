"""Errors a user understands: a file that is not a TFRecord file is named for what it looks like, globs skip the
files tfr_torch writes beside shards (and a list naming one is refused), and specs or calls written the way
another library spells them get a message saying what to write instead. The messages are asserted whole."""

from __future__ import annotations

import gzip
import io
import json
import os

import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import CorruptRecordError, IndexedTFRecordDataset, RecordReader, TFRecordDataset
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.sniff import describe, not_a_tfrecord

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}


@pytest.fixture
def write(write_records):
    """write(path, n=3): a file of n Examples {"id": i}; returns its path as a str."""
    return lambda path, n=3: str(write_records(str(path), [{"id": i} for i in range(n)]))


def jpeg_bytes():
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4)).save(out, format="JPEG")
    return out.getvalue()


def png_bytes():
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4)).save(out, format="PNG")
    return out.getvalue()


# ----- a file that is not a TFRecord file --------------------------------------------------------------------------

NOT_TFRECORD = [
    ("img.jpg", jpeg_bytes, "a JPEG image"),
    ("img.png", png_bytes, "a PNG image"),
    ("notes.txt", lambda: b"hello world\nsecond line\n", "text"),
    ("meta.json", lambda: json.dumps({"name": "ds", "records": 12}).encode(), "JSON text"),
    ("copy.idx", lambda: b"0 16\n16 17\n33 18\n", "a TFRecord index file (<offset> <size> lines)"),
    ("page.html", lambda: b"<!doctype html><html></html>\n", "XML or HTML text"),
    ("arr.npy", lambda: b"\x93NUMPY\x01\x00v\x00{'descr': '<f8'}", "a NumPy .npy array"),
]


@pytest.mark.parametrize("name, make, what", NOT_TFRECORD, ids=[n for n, _, _ in NOT_TFRECORD])
def test_not_a_tfrecord_file_says_what_it_looks_like(tmp_path, name, make, what, backend):
    path = tmp_path / name
    data = make()
    path.write_bytes(data)
    expected = (f"{path}:0: not a TFRecord file: it starts like {what} (its first bytes {data[:8].hex(' ')} are "
                "not a record header)")
    with pytest.raises(CorruptRecordError) as err:
        list(tfr_torch.read_records(str(path)))
    assert str(err.value) == expected
    assert err.value.offset == 0 and err.value.path == str(path)
    if name.endswith(".idx"):  # the datasets refuse a side file by its name, before reading it
        with pytest.raises(ValueError, match="is a TFRecord index"):
            TFRecordDataset(str(path), SPEC)
        return
    with pytest.raises(CorruptRecordError) as err:
        list(TFRecordDataset(str(path), SPEC))
    assert str(err.value) == expected


def test_gzip_file_read_uncompressed_says_which_compression(tmp_path):
    path = tmp_path / "data.tfrecord"
    with tfr_torch.TFRecordWriter(str(path), compression="gzip") as writer:
        writer.write(b"abc")
    with pytest.raises(CorruptRecordError) as err:
        list(tfr_torch.read_records(str(path), compression=None))
    head = path.read_bytes()[:8].hex(" ")
    assert str(err.value) == (f"{path}:0: not a TFRecord file as read (uncompressed): it starts like GZIP-compressed "
                              f"data; pass compression='gzip' (or 'auto') (its first bytes {head} are not a record "
                              "header)")
    assert list(tfr_torch.read_records(str(path))) == [b"abc"]  # "auto" reads it


def test_gzip_of_text_says_what_it_decompresses_to(tmp_path):
    path = tmp_path / "notes.txt.gz"
    path.write_bytes(gzip.compress(b"plain text in gzip\n"))
    with pytest.raises(CorruptRecordError) as err:
        list(tfr_torch.read_records(str(path)))
    assert str(err.value) == (f"{path}:0: not TFRecord data: the GZIP stream decompresses to what looks like text "
                              "(its first bytes 70 6c 61 69 6e 20 74 65 are not a record header)")


def test_random_access_to_a_non_tfrecord_file(tmp_path):
    path = tmp_path / "img.jpg"
    path.write_bytes(jpeg_bytes())
    with RecordFile(str(path)) as f, pytest.raises(CorruptRecordError) as err:
        f.read(0)
    assert str(err.value) == f"{path}:0: not a TFRecord file: it starts like a JPEG image"


def test_damaged_first_header_of_a_real_tfrecord_still_shows_the_crcs(tmp_path, write):
    path = write(tmp_path / "d.tfrecord")
    data = bytearray(open(path, "rb").read())
    data[9] ^= 0xFF  # the first header's length CRC
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptRecordError, match=r"d.tfrecord:0: corrupt record header: the CRC of its length field "
                                                  r"is 0x[0-9a-f]{8}, expected 0x[0-9a-f]{8} \(stored in the header\)"):
        list(tfr_torch.read_records(path))


def test_describe_recognises_common_formats():
    assert describe(b"GIF89a\x01\x00") == "a GIF image"
    assert describe(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "a WebP image"
    assert describe(b"PK\x03\x04\x14\x00") == "a ZIP archive (or a file stored in one, such as .npz or .docx)"
    assert describe(b"PAR1\x15\x04") == "a Parquet file"
    assert describe(b"\x1f\x8b\x08\x00") == "GZIP-compressed data"
    assert describe(b"\x78\x9c\x01\x02") == "ZLIB-compressed data"
    assert describe("héllo wörld".encode()) == "text"
    assert describe(b"\x00\x01\x02\x03\xfe\xfe") is None
    assert describe(b"") is None
    assert not_a_tfrecord(b"\x0b\x00\x00\x00\x00\x00\x00\x00") is None  # binary that could be a record header


# ----- side files in globs and lists ------------------------------------------------------------------------------

@pytest.fixture
def written_set(tmp_path):
    out = tmp_path / "out"
    with tfr_torch.ShardedWriter(str(out), "ds", "train", records_per_shard=4, features=SPEC) as writer:
        for i in range(10):
            writer.write(tfr_torch.encode_example({"id": i}))
    return out, writer.paths


def test_globs_skip_the_side_files(written_set):
    out, paths = written_set
    assert sorted(os.listdir(out)) == sorted([os.path.basename(p) for p in paths]
                                             + [os.path.basename(p) + ".idx" for p in paths]
                                             + ["ds-train.tfr_torch.json"])
    assert tfr_torch.expand_paths(f"{out}/*") == paths
    ds = TFRecordDataset(f"{out}/*", "auto")
    assert sorted(int(x["id"]) for x in ds) == list(range(10))
    assert len(IndexedTFRecordDataset(f"{out}/*", "auto")) == 10


def test_globs_skip_tfds_metadata(tmp_path, write):
    path = write(tmp_path / "mnist-train.tfrecord-00000-of-00001")
    for name in ("dataset_info.json", "features.json", "label.labels.txt"):
        (tmp_path / name).write_text("{}")
    assert tfr_torch.expand_paths(f"{tmp_path}/*") == [path]


@pytest.mark.parametrize("name, kind", [
    ("ds-train.tfrecord-00000-of-00003.idx", "a TFRecord index (.idx)"),
    ("ds-train.tfr_torch.json", "a tfr_torch sidecar (the shards' spec and record counts)"),
    ("dataset_info.json", "TFDS dataset metadata (dataset_info.json)"),
])
def test_a_side_file_named_explicitly_is_refused(written_set, name, kind):
    out, paths = written_set
    side = f"{out}/{name}"
    with pytest.raises(ValueError) as err:
        TFRecordDataset(paths + [side], SPEC)
    assert str(err.value) == (f"{side} is {kind}, not a TFRecord file: leave it out of the list of files (glob "
                              "patterns skip such files)")


def test_glob_matching_only_side_files(written_set):
    out, _ = written_set
    with pytest.raises(FileNotFoundError) as err:
        tfr_torch.expand_paths(f"{out}/*.json")
    assert str(err.value) == (f"no TFRecord files match '{out}/*.json': it matches only side files (1, such as "
                              f"{out}/ds-train.tfr_torch.json: a tfr_torch sidecar (the shards' spec and record "
                              "counts))")


# ----- specs and calls spelled the way another library spells them ---------------------------------------------

@pytest.mark.parametrize("features, message", [
    ("Auto", "features='Auto' (did you mean 'auto'?): expected None (each record's bytes), a dict of feature specs, "
             "or 'auto' (the spec in the sidecar ShardedWriter writes beside its shards)"),
    ("spec.json", "features='spec.json': expected None (each record's bytes), a dict of feature specs, or 'auto' "
                  "(the spec in the sidecar ShardedWriter writes beside its shards)"),
])
def test_features_string_typo(tmp_path, features, message, write):
    path = write(tmp_path / "d.tfrecord")
    for cls in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(ValueError) as err:
            cls(path, features)
        assert str(err.value) == message


@pytest.mark.parametrize("spec, message", [
    ({"label": "int"}, "feature 'label' is given as 'int' (the `tfrecord` package's description): write "
                       "tfr_torch.FixedLenFeature([], torch.int64) for one value per record, or "
                       "tfr_torch.VarLenFeature(torch.int64) for a variable number"),
    ({"image": "byte"}, "feature 'image' is given as 'byte' (the `tfrecord` package's description): write "
                        "tfr_torch.FixedLenFeature([], tfr_torch.string) for one value per record, or "
                        "tfr_torch.VarLenFeature(tfr_torch.string) for a variable number"),
    ({"x": torch.float32}, "feature 'x' is given as a bare dtype (torch.float32): write "
                           "tfr_torch.FixedLenFeature([], torch.float32) for one value per record, or "
                           "tfr_torch.VarLenFeature(torch.float32) for a variable number"),
    ({"x": tfr_torch.VarLenFeature}, "feature 'x' is the class VarLenFeature itself: call it, e.g. "
                                     "tfr_torch.VarLenFeature(...) with the shape and dtype"),
])
def test_foreign_spec_spellings(tmp_path, spec, message, write):
    path = write(tmp_path / "d.tfrecord")
    for cls in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(TypeError) as err:
            cls(path, spec)
        assert str(err.value) == message


def test_tensorflow_spec_objects_are_named(tmp_path, write):
    FixedLenFeature = type("FixedLenFeature", (), {"__module__": "tensorflow.python.ops.parsing_config"})
    path = write(tmp_path / "d.tfrecord")
    with pytest.raises(TypeError) as err:
        TFRecordDataset(path, {"label": FixedLenFeature()})
    assert str(err.value) == ("feature 'label' is tensorflow's FixedLenFeature: use tfr_torch.FixedLenFeature with "
                              "the same arguments (torch dtypes, or the names 'int64', 'float32', 'string')")


@pytest.mark.parametrize("workers", [0, 1])
def test_batched_dataset_in_a_batching_dataloader(tmp_path, workers, write, loader_error):
    path = write(tmp_path / "d.tfrecord", 10)
    ds = TFRecordDataset(path, SPEC, batch_size=4)
    error = loader_error(DataLoader(ds, num_workers=workers))
    assert isinstance(error, ValueError), repr(error)
    assert ("this TFRecordDataset yields whole batches (batch_size=4) but the DataLoader batches them again (its "
            "batch_size defaults to 1), adding a leading dimension: pass DataLoader(dataset, batch_size=None), or "
            "leave batch_size out of the dataset and let the DataLoader batch records") in str(error)
    assert [b["id"].tolist() for b in DataLoader(ds, batch_size=None, num_workers=workers)] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b["id"].tolist() for b in ds] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # iterated directly


def test_per_record_dataset_in_a_batching_dataloader_is_fine(tmp_path, write):
    path = write(tmp_path / "d.tfrecord", 10)
    batches = list(DataLoader(TFRecordDataset(path, SPEC), batch_size=4))
    assert [b["id"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_reader_still_reads_real_files(tmp_path, write):
    path = write(tmp_path / "d.tfrecord")
    with RecordReader(path) as reader:
        assert len(list(reader)) == 3


# ----- after a corruption inside a compressed stream, nothing later in that member is trusted -------------------

def _inflate_all(inflater):
    out, buf = bytearray(), bytearray(4096)
    while True:
        n = inflater.readinto(buf)
        if not n:
            return bytes(out)
        out += buf[:n]


def _members(*payloads):
    return [gzip.compress(p, mtime=0) for p in payloads]


PAYLOADS = [bytes([65 + i]) * 5000 + bytes(range(256)) * 20 for i in range(3)]


def test_zlib_error_in_a_gzip_member_resumes_at_the_next_member(inflate_thread):
    from tfr_torch.format.inflate import Inflater

    members = _members(*PAYLOADS)
    data = bytearray(b"".join(members))
    data[len(members[0]) + 40] ^= 0x55  # inside member 2's deflate data: zlib fails at its check value
    inflater = Inflater(io.BytesIO(bytes(data)), "gzip", "x.gz", chunk_size=4096)
    got = bytearray()
    buf = bytearray(4096)
    with pytest.raises(CorruptRecordError, match="cannot inflate the GZIP stream after"):
        while True:
            n = inflater.readinto(buf)
            assert n
            got += buf[:n]
    assert bytes(got[: len(PAYLOADS[0])]) == PAYLOADS[0]
    dropped = inflater.abandon_member()
    assert 0 < dropped <= len(members[1])
    assert _inflate_all(inflater) == PAYLOADS[2]  # member 3 whole, nothing of member 2 after the damage
    assert (inflater.dropped_members, inflater.dropped_bytes) == (1, dropped)


def test_abandon_after_a_crc_failure_skips_the_rest_of_the_member(inflate_thread):
    """A corruption the reader sees (a record CRC) rather than zlib: the rest of that member is dropped."""
    from tfr_torch.format.inflate import Inflater

    members = _members(*PAYLOADS)  # pieces of 100 bytes: the abandon comes in the middle of member 1
    inflater = Inflater(io.BytesIO(b"".join(members)), "gzip", "x.gz", chunk_size=1 << 20, piece_size=100)
    buf = bytearray(100)
    assert inflater.readinto(buf) == 100
    dropped = inflater.abandon_member()
    assert dropped < len(members[0])  # zlib had already used some of member 1's compressed bytes
    assert _inflate_all(inflater) == PAYLOADS[1] + PAYLOADS[2]


def test_abandon_skips_a_false_gzip_magic_inside_deflate_data(inflate_thread):
    from tfr_torch.format.inflate import Inflater

    fake = b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"\xff" * 100  # a gzip header, then an invalid deflate block
    first = zlib_stored(fake * 3)
    members = [first, gzip.compress(b"real", mtime=0)]
    inflater = Inflater(io.BytesIO(b"".join(members)), "gzip", "x.gz", chunk_size=1 << 20, piece_size=1)
    assert inflater.readinto(bytearray(1)) == 1
    assert fake in members[0]
    assert 0 < inflater.abandon_member() < len(members[0])
    assert _inflate_all(inflater) == b"real"  # the three false magics were probed and passed over


def zlib_stored(payload):
    """A gzip member whose deflate data stores `payload` as is (level 0), so its bytes appear in the file."""
    return gzip.compress(payload, compresslevel=0, mtime=0)


def test_abandon_in_a_zlib_stream_drops_the_rest_of_the_file(inflate_thread):
    import zlib

    from tfr_torch.format.inflate import Inflater

    payload = bytes(range(256)) * 400
    data = zlib.compress(payload)
    inflater = Inflater(io.BytesIO(data), "zlib", "x.zz", chunk_size=4096, piece_size=1000)
    assert inflater.readinto(bytearray(1000)) == 1000
    dropped = inflater.abandon_member()
    assert 0 < dropped < len(data)
    assert _inflate_all(inflater) == b""  # one stream: nothing after the corruption is read
    assert (inflater.dropped_members, inflater.dropped_bytes) == (1, dropped)


@pytest.mark.parametrize("content, looks", [(b'{"a": 1}', "JSON text"), (b"hello\n", "text")])
def test_a_file_shorter_than_a_header_is_named_for_what_it_looks_like(tmp_path, content, looks, backend):
    path = tmp_path / "tiny.tfrecord"
    path.write_bytes(content)
    with pytest.raises(tfr_torch.TruncatedRecordError) as caught:
        list(tfr_torch.read_records(str(path)))
    assert str(caught.value) == (f"{path}:0: not a TFRecord file: it starts like {looks} ({len(content)} bytes, "
                                 "shorter than a 12-byte record header)")
