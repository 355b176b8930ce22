"""Audit: metadata is checked against the files before it is trusted.

What was attacked, through every reader that uses each kind (TFRecordDataset with index="auto", its global shuffle,
several ranks, DataLoader workers, IndexedTFRecordDataset, len(), the TFDS readers):

- record indexes `<file>.idx` (tfr_torch's and the `tfrecord` package's text format): stale (appended), rows that
  lie in the middle (where the cheap check does not look), another file's index of the same size, duplicate rows,
  offsets out of order, huge and negative numbers, garbage bytes, an empty index, one line without a newline, CRLF;
- GZIP seek points `<file>.idx.seek`: another file's, forged (CRC recomputed) with a huge point count, a huge or
  smaller decompressed size, shifted points, truncated, garbage, and a data file rewritten after them;
- the shard-set sidecar `<name>-<split>.tfr_torch.json`: wrong JSON types for every field, negative / huge /
  larger / smaller counts, a shard listed twice, truncated JSON, non-UTF-8 bytes, a JSON list or null;
- TFDS folders: shardLengths that lie with and without numBytes, huge shardLengths, supervisedKeys of other types,
  a labels file that is not UTF-8, truncated or wrongly typed dataset_info.json / features.json;
- CachedDataset folders: a manifest or a part's check that is JSON of the wrong type, a damaged part;
- TFRecordDataset states (load_state_dict) and ShardedWriter(resume=True)'s progress file: wrong types, missing
  keys, counts that lie, another dataset's state, reordered entries.

Found and fixed here (tests marked "Fixed:"): the sidecar's content was trusted unchecked (bare KeyError /
TypeError / JSONDecodeError / AttributeError without the file's name, 4.5 records read as 4, a count of 2**62 in
124 bytes given by len()); a TFDS split without numBytes had its shardLengths trusted unchecked (len() lied and a
slice such as "train[3:7]" silently gave other records than TFDS's); supervisedKeys of another JSON type and a
non-UTF-8 labels file raised AttributeError / UnicodeDecodeError; a CachedDataset manifest or part check that is
valid JSON of another type raised AttributeError / TypeError instead of being treated as unreadable.

Fixed after the audit (tests below marked "Fixed:"): saved states with missing keys or wrong types raised bare
KeyError / TypeError, and an epoch of 1.5 was read as epoch 1 with the resume silently dropped (data/state_check.py
now checks every field a resume reads); ShardedWriter's progress file was trusted beyond its shards' byte sizes
(reordered entries duplicated records silently, a lying count went into the sidecar, malformed entries raised bare
TypeError / KeyError).

The rest was found correct and is pinned by the tests below.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import json
import os
import resource
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    CachedDataset,
    FixedLenFeature,
    IndexedTFRecordDataset,
    IndexMismatchError,
    ShardedWriter,
    TFRecordDataset,
    TFRecordError,
    TFRecordWriter,
    build_index,
)
from tfr_torch.format.seek import available as seek_available
from tfr_torch.tfds import TFDSMetadataError

SPEC = {"id": FixedLenFeature([], torch.int64)}


@contextlib.contextmanager
def capped(headroom: int = 256 << 20):
    """The block may not allocate what a lying number claims: the data segment is capped `headroom` bytes above
    its size now (an attempt raises MemoryError at once), and the traced Python peak must stay small."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    size = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                size = int(line.split()[1]) * 1024
    cap = soft if size is None else size + headroom
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    tracemalloc.start()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    assert peak < 64 << 20, f"allocated {peak} bytes for a lying number"


def ids(dataset) -> list[int]:
    out = []
    for item in dataset:
        out.append(int(item["id"]) if isinstance(item, dict) else int(tfr_torch.decode_example(item)["id"][0]))
    return sorted(out)


# ------------------------------------------------------------------------------------------------- the sidecar


def shard_set(folder, n: int = 10, per: int = 4, index: bool = False) -> tuple[list[str], str]:
    with ShardedWriter(str(folder), "ds", "train", records_per_shard=per, features=SPEC) as writer:
        for i in range(n):
            writer.write_example({"id": i})
    if not index:
        for path in glob.glob(f"{folder}/*.idx"):
            os.remove(path)
    paths = sorted(p for p in glob.glob(f"{folder}/ds-train.tfrecord-*") if not p.endswith((".idx", ".seek")))
    return paths, f"{folder}/ds-train.tfr_torch.json"


def edit_sidecar(path: str, change) -> None:
    with open(path) as f:
        data = json.load(f)
    change(data)
    with open(path, "w") as f:
        json.dump(data, f)


def _entry(key, value):
    return lambda data: data["shards"][0].__setitem__(key, value)


WRONG_SIDECARS = {
    "records a string": (_entry("records", "4"), "shard entry 0 (ds-train.tfrecord-00000-of-00003) has 'records' "
                                                 '"4", expected an int >= 0'),
    "records not a number": (_entry("records", "x"), "has 'records' \"x\", expected an int >= 0"),
    "records null": (_entry("records", None), "has 'records' null, expected an int >= 0"),
    "records negative": (_entry("records", -1), "has 'records' -1, expected an int >= 0"),
    "records a fraction": (_entry("records", 4.5), "has 'records' 4.5, expected an int >= 0"),
    "records a bool": (_entry("records", True), "has 'records' true, expected an int >= 0"),
    "records missing": (lambda data: data["shards"][0].pop("records"), "has no 'records'"),
    "file missing": (lambda data: data["shards"][0].pop("file"), "shard entry 0 has 'file' null, expected a file "
                                                                  "name"),
    "bytes a string": (_entry("bytes", "x"), "has 'bytes' \"x\", expected an int >= 0 (or null)"),
    "shards a dict": (lambda data: data.__setitem__("shards", {"a": 1}), "'shards' is {\"a\": 1}, expected a list"),
    "shards null": (lambda data: data.__setitem__("shards", None), "'shards' is null, expected a list"),
    "an entry a string": (lambda data: data.__setitem__("shards", ["x"]), "shard entry 0 is \"x\", expected"),
    "a shard listed twice": (lambda data: data["shards"].append(dict(data["shards"][0], records=7)),
                             "shard entry 3 lists ds-train.tfrecord-00000-of-00003 again"),
    "a count 2**62": (_entry("records", 2**62), "says 4611686018427387904 records in 124 bytes, but 124 bytes hold "
                                                "at most 7 records"),
    "split missing": (lambda data: data.pop("split"), "'split' is null, expected a string"),
}


@pytest.mark.parametrize("case", sorted(WRONG_SIDECARS))
def test_sidecar_of_wrong_content_is_refused_by_name(tmp_path, case):
    """Fixed: a sidecar whose shard list is not one (wrong JSON types, missing keys, a shard listed twice, a count
    its own byte size cannot hold) raised a bare KeyError / TypeError / ValueError without the file's name, read
    4.5 records as 4, or gave len() a count of 2**62; now a ValueError names the sidecar and the entry, for every
    reader, before any count is used."""
    change, message = WRONG_SIDECARS[case]
    paths, car = shard_set(tmp_path)
    edit_sidecar(car, change)
    for make in (lambda: TFRecordDataset(paths), lambda: TFRecordDataset(paths, rank=1, world_size=2),
                 lambda: TFRecordDataset(paths, shuffle=True), lambda: tfr_torch.decode.sidecar.sidecar_for(paths)):
        with capped(), pytest.raises(ValueError) as info:
            make()
        assert str(info.value).startswith(f"{car}: "), str(info.value)
        assert message in str(info.value)


@pytest.mark.parametrize("text", ['{"format": "tfr_torch.shards/1", "name": "ds", "spl', "[1, 2]", "null",
                                  "\x00\x01garbage"])
def test_sidecar_that_is_not_a_json_object_is_refused_by_name(tmp_path, text):
    """Fixed: a sidecar cut short, of garbage bytes, or a JSON list / null raised a bare JSONDecodeError,
    UnicodeDecodeError or AttributeError; now a ValueError naming the sidecar."""
    paths, car = shard_set(tmp_path)
    with open(car, "w") as f:
        f.write(text)
    with pytest.raises(ValueError, match=f"^{car} is not a tfr_torch shard sidecar"):
        TFRecordDataset(paths)


def test_indexed_dataset_refuses_a_wrong_sidecar_too(tmp_path):
    """Fixed: IndexedTFRecordDataset reads the same sidecar (its spec, its class names): a wrong one names it."""
    paths, car = shard_set(tmp_path, index=True)
    edit_sidecar(car, _entry("file", 3))
    with pytest.raises(ValueError, match="shard entry 0 has 'file' 3, expected a file name"):
        IndexedTFRecordDataset(paths)


@pytest.mark.parametrize("records", [3, 5])
def test_sidecar_count_that_lies_plausibly_raises_when_read(tmp_path, records):
    """A count that its bytes could hold but that is wrong (the file untouched) cannot be found without reading:
    every reader raises TFRecordError naming the shard and the sidecar's count, never yields a record twice or
    drops one silently (also through DataLoader workers and ranks)."""
    paths, car = shard_set(tmp_path)
    edit_sidecar(car, _entry("records", records))
    for dataset in (TFRecordDataset(paths), TFRecordDataset(paths, rank=0, world_size=2),
                    TFRecordDataset(paths, shuffle=True, seed=1)):
        with pytest.raises(TFRecordError, match="ds-train.tfrecord-00000-of-00003:.*the count in the sidecar"):
            ids(dataset)
    loader = torch.utils.data.DataLoader(TFRecordDataset(paths), batch_size=None, num_workers=2)
    with pytest.raises(TFRecordError, match="the count in the sidecar"):
        list(loader)


def test_sidecar_of_a_rewritten_shard_is_not_trusted(tmp_path):
    """A shard appended to after the sidecar was written: its count is not used (a warning names the sidecar and
    the shard) and the records are counted, every one read once."""
    paths, car = shard_set(tmp_path)
    with TFRecordWriter(str(tmp_path / "extra")) as writer:
        writer.write_example({"id": 10})
    with open(paths[2], "ab") as f, open(tmp_path / "extra", "rb") as g:
        f.write(g.read())
    with pytest.warns(UserWarning, match=f"the sidecar {car} does not match 1 of its 3 shards"):
        dataset = TFRecordDataset(paths)
    assert len(dataset) == 11
    assert ids(dataset) == list(range(11))
    edit_sidecar(car, _entry("bytes", None))  # no size to check a count against: counted too
    with pytest.warns(UserWarning, match="records no byte size to check its count of 4 against"):
        assert ids(TFRecordDataset(paths)) == list(range(11))


def test_sidecar_spec_of_wrong_types_is_refused_by_name(tmp_path):
    """features="auto": a spec of the wrong shape or types names the sidecar (a spec that is never used is not
    read)."""
    paths, car = shard_set(tmp_path)
    for change in (lambda d: d.__setitem__("features", [1]), lambda d: d["features"]["id"].__setitem__("dtype", 3),
                   lambda d: d["features"]["id"].__setitem__("shape", [2**62]),
                   lambda d: d["features"]["id"].__setitem__("shape", [-3])):
        shard_set(tmp_path)
        edit_sidecar(car, change)
        with capped(), pytest.raises(ValueError, match=f"{car}: the features spec it stores cannot be read"):
            TFRecordDataset(paths, features="auto")
        assert ids(TFRecordDataset(paths)) == list(range(10))


# ------------------------------------------------------------------------------------------------- indexes


def small_file(path, sizes) -> str:
    with TFRecordWriter(str(path)) as writer:
        for i, size in enumerate(sizes):
            writer.write(bytes([i]) * size)
    build_index(str(path))
    return str(path)


def readers(path):
    yield "sequential", lambda: [r[0] for r in TFRecordDataset(path, index="auto")]
    yield "len", lambda: len(TFRecordDataset(path, index="auto"))
    yield "shuffle", lambda: sorted(r[0] for r in TFRecordDataset(path, index="auto", shuffle=True, seed=1))
    yield "ranks", lambda: [[r[0] for r in TFRecordDataset(path, index="auto", rank=k, world_size=2)]
                            for k in range(2)]
    yield "indexed", lambda: [IndexedTFRecordDataset(path)[i][0] for i in range(len(IndexedTFRecordDataset(path)))]


BAD_INDEXES = {  # file: 7 records of 20 bytes; each index text, and what the error says
    "appended": ("0 20\n20 20\n40 20\n60 20\n80 20\n100 20\n",
                 "the index describes 6 records ending at byte 120, but the file has 140 bytes"),
    "duplicate row": ("0 20\n0 20\n20 20\n40 20\n60 20\n80 20\n100 20\n120 20\n",
                      "line 2 of the index says a record starts at 0, but the record before it ends at 20"),
    "out of order": ("0 20\n40 20\n20 20\n60 20\n80 20\n100 20\n120 20\n",
                     "line 2 of the index says a record starts at 40"),
    "off by one": ("1 20\n21 20\n41 20\n61 20\n81 20\n101 20\n121 19\n", "the index starts at offset 1, expected 0"),
    "huge size": (f"0 {2**62}\n", "the index describes 1 records ending at byte 4611686018427387904"),
    "beyond int64": (f"0 {2**64}\n", "a number larger than 2**63 - 1"),
    "negative": ("0 -20\n", "line 1 of the index is b'0 -20': expected '<offset> <size>'"),
    "garbage": ("\x00\xff garbage", "line 1 of the index is"),
    "empty": ("", "the index describes 0 records ending at byte 0, but the file has 140 bytes"),
    "another file's (same size)": ("0 20\n20 20\n40 24\n64 16\n80 20\n100 20\n120 20\n",
                                   "line 4 of the index says a record of 16 bytes starts at offset 64, but the header "
                                   "there fails its CRC"),
}


@pytest.mark.parametrize("case", sorted(BAD_INDEXES))
def test_index_that_does_not_describe_its_file_is_refused_by_every_reader(tmp_path, case):
    """Every reader refuses an index that is stale or not of its file with IndexMismatchError naming both files, at
    construction, and allocates nothing for a huge number."""
    text, message = BAD_INDEXES[case]
    path = small_file(tmp_path / "a.tfrecord", [4] * 7)
    with open(path + ".idx", "w") as f:
        f.write(text)
    for name, read in readers(path):
        with capped(), pytest.raises(IndexMismatchError) as info:
            read()
        assert message in str(info.value), (name, str(info.value))
        assert info.value.index_path == path + ".idx" and info.value.path == path, name


def test_index_rows_that_lie_where_the_cheap_check_does_not_look(tmp_path):
    """check_index reads only the first, middle and last headers: rows 2-3 that lie (their sizes swapped around
    the truth) pass it; the readers that use the sizes (IndexedTFRecordDataset, the global shuffle) then raise
    CorruptRecordError naming the file and offset, never a wrong record; the sequential readers read the file's own
    framing and give every record once."""
    path = small_file(tmp_path / "a.tfrecord", [4] * 7)
    with open(path + ".idx", "w") as f:
        f.write("0 20\n20 16\n36 24\n60 20\n80 20\n100 20\n120 20\n")
    assert [r[0] for r in TFRecordDataset(path, index="auto")] == list(range(7))
    with pytest.raises(tfr_torch.CorruptRecordError, match=f"{path}:20: the record here has 20 bytes but the index "
                                                           "says 16"):
        IndexedTFRecordDataset(path)[1]
    with pytest.raises(tfr_torch.CorruptRecordError, match="the index says 16"):
        list(TFRecordDataset(path, index="auto", shuffle=True, seed=1))


@pytest.mark.parametrize("text,records", [("0 20", 1), ("0 20\r\n20 20\r\n", 2)])
def test_index_text_of_other_tools_is_read(tmp_path, text, records):
    """The `tfrecord` package's one-line index without a newline, and CRLF lines, describe the file: read."""
    path = small_file(tmp_path / "a.tfrecord", [4] * records)
    with open(path + ".idx", "w") as f:
        f.write(text)
    assert sorted(r[0] for r in TFRecordDataset(path, index="auto", shuffle=True)) == list(range(records))
    assert [IndexedTFRecordDataset(path)[i][0] for i in range(records)] == list(range(records))
    assert len(TFRecordDataset(path, index="auto")) == records


# ------------------------------------------------------------------------------------------------- seek points


needs_seek = pytest.mark.skipif(not seek_available(), reason="seek points need the compiled core")


def gzip_pair(folder):
    """Two GZIP files of 120 incompressible records each, with indexes and seek points every 64 KiB."""
    out = []
    for name, seed in (("a", 1), ("b", 2)):
        rng = np.random.default_rng(seed)
        path = str(folder / f"{name}.tfrecord.gz")
        with TFRecordWriter(path, compression="gzip") as writer:
            for i in range(120):
                writer.write(bytes([i]) + rng.bytes(3000))
        build_index(path, seek_span=1 << 16)
        out.append(path)
    return out


def forged(blob: bytes, offset: int, value: int) -> bytes:
    """The seek file with the u64 at `offset` replaced and its trailing CRC recomputed (a forgery, not damage)."""
    body = bytearray(blob[:-4])
    struct.pack_into("<Q", body, offset, value)
    return bytes(body) + struct.pack("<I", zlib.crc32(bytes(body)))


@needs_seek
def test_seek_points_that_do_not_describe_their_file_are_refused(tmp_path):
    """Another file's seek points, forged ones (a point count of 2**62, a decompressed size of 2**62 or 100 bytes
    short), truncated or garbage ones: IndexMismatchError naming the .seek or .idx file, from the global shuffle,
    IndexedTFRecordDataset and the sequential reader with index="auto", with nothing huge allocated. Shifted
    points (CRC recomputed) are checked when used: the records come out right."""
    a, b = gzip_pair(tmp_path)
    seek = a + ".idx.seek"
    with open(seek, "rb") as f:
        good = f.read()
    with open(b + ".idx.seek", "rb") as f:
        other = f.read()
    total = struct.unpack_from("<Q", good, 32)[0]
    cases = {
        "another file's": (other, "the seek points were built for a file of"),
        "count 2**62": (forged(good, 40, 2**62), "the seek points say 4611686018427387904 points"),
        "size 2**62": (forged(good, 32, 2**62), "but the file decompresses to 4611686018427387904 bytes"),
        "size short": (forged(good, 32, total - 100), f"but the file decompresses to {total - 100} bytes"),
        "truncated": (good[:100], "the seek points do not match their CRC"),
        "garbage": (b"garbage" * 20, "the seek points are not a tfr_torch seek file"),
    }
    for name, (blob, message) in cases.items():
        with open(seek, "wb") as f:
            f.write(blob)
        for read in (lambda: list(TFRecordDataset(a, index="auto", shuffle=True, seed=1)),
                     lambda: IndexedTFRecordDataset(a)[5], lambda: list(TFRecordDataset(a, index="auto"))):
            with capped(), pytest.raises(IndexMismatchError, match=message):
                read()
    for offset in (48 + 32, 48 + 32 + 8):  # point 1's decompressed and file offsets, one byte on
        with open(seek, "wb") as f:
            f.write(forged(good, offset, struct.unpack_from("<Q", good, offset)[0] + 1))
        assert sorted(r[0] for r in TFRecordDataset(a, index="auto", shuffle=True, seed=1)) == list(range(120))
        assert [IndexedTFRecordDataset(a)[i][0] for i in (119, 5, 0)] == [119, 5, 0]


# ------------------------------------------------------------------------------------------------- TFDS folders


def tfds_folder(tmp_path) -> str:
    folder = str(tmp_path / "ds" / "1.0.0")
    with ShardedWriter(folder, "ds", "train", records_per_shard=4, features=SPEC, tfds={}) as writer:
        for i in range(10):
            writer.write_example({"id": i})
    return folder


def edit_info(folder: str, change) -> str:
    path = f"{folder}/dataset_info.json"
    edit_sidecar(path, change)
    return path


def _lengths(data):
    return data["splits"][0]["shardLengths"]


@pytest.mark.parametrize("told", ["3", "5", str(2**62)])
def test_tfds_shard_lengths_without_num_bytes_are_checked(tmp_path, told):
    """Fixed: a split whose dataset_info.json has no numBytes (protobuf's JSON leaves out a 0, a hand-made file may
    lack it) had its shardLengths trusted unchecked: len() gave the lie (11, or 2**62 + 6) and "train[3:7]" with a
    first shard said to hold 3 records silently gave records 4 to 7 instead of 3 to 6. Now the shards are counted
    and the first that differs is named with both numbers, for every reader and slice."""
    folder = tfds_folder(tmp_path)
    info = edit_info(folder, lambda d: (_lengths(d).__setitem__(0, told), d["splits"][0].pop("numBytes")))
    shard = f"{folder}/ds-train.tfrecord-00000-of-00003"
    message = f"{shard}: shard holds 4 records but {info} says {told} (shardLengths of split 'train')"
    for make in (lambda: TFRecordDataset(folder, split="train"), lambda: TFRecordDataset(folder, split="train[3:7]"),
                 lambda: TFRecordDataset(folder, split="train", rank=1, world_size=2),
                 lambda: IndexedTFRecordDataset(folder, split="train")):
        with capped(), pytest.raises(TFDSMetadataError) as err:
            make()
        assert str(err.value) == message


def test_tfds_shard_lengths_with_num_bytes_are_checked(tmp_path):
    """shardLengths that lie where numBytes is recorded: the sizes disagree, the shards are counted, the error names
    the shard and both numbers; the truth reads every record once through every reader."""
    folder = tfds_folder(tmp_path)
    assert ids(TFRecordDataset(folder, split="train")) == list(range(10))
    assert ids(TFRecordDataset(folder, split="train[3:7]")) == [3, 4, 5, 6]
    for told in ("3", "5", str(2**62)):
        folder = tfds_folder(tmp_path)
        edit_info(folder, lambda d, told=told: _lengths(d).__setitem__(0, told))
        with capped(), pytest.raises(TFDSMetadataError, match=f"shard holds 4 records but .* says {told}"):
            TFRecordDataset(folder, split="train[3:7]")


@pytest.mark.parametrize("keys", [[1, 2], "abc", {"tuple": []}, {"tuple": {"items": [1, 2]}},
                                  {"input": 1, "output": {}}])
def test_tfds_supervised_keys_of_other_types_are_refused_by_name(tmp_path, keys):
    """Fixed: supervisedKeys of another JSON type than TFDS writes raised a bare AttributeError; now
    TFDSMetadataError naming dataset_info.json and what it expected."""
    folder = tfds_folder(tmp_path)
    info = edit_info(folder, lambda d: d.__setitem__("supervisedKeys", keys))
    with pytest.raises(TFDSMetadataError, match="supervisedKeys: tfr_torch reads an \\(input, target\\) pair") as err:
        TFRecordDataset(folder, split="train")
    assert err.value.path == info


def test_tfds_labels_file_that_is_not_text_is_refused_by_name(tmp_path):
    """Fixed: a `<feature>.labels.txt` of bytes that are not UTF-8 raised a bare UnicodeDecodeError; now
    TFDSMetadataError naming the labels file."""
    folder = tfds_folder(tmp_path)
    with open(f"{folder}/id.labels.txt", "wb") as f:
        f.write(b"cat\n\xff\xfe\n")
    with pytest.raises(TFDSMetadataError, match="class names are not UTF-8 text") as err:
        TFRecordDataset(folder, split="train")
    assert err.value.path == f"{folder}/id.labels.txt"


@pytest.mark.parametrize("name,text,message", [
    ("dataset_info.json", '{"name": "ds", "spl', "not valid JSON"),
    ("dataset_info.json", "[1]", "expected a JSON object, got list"),
    ("features.json", "[1]", "expected a JSON object, got list"),
    ("features.json", "\xff", "not valid JSON"),
])
def test_tfds_json_that_is_not_metadata_is_refused_by_name(tmp_path, name, text, message):
    """Truncated or wrongly typed dataset_info.json / features.json: TFDSMetadataError naming the file."""
    folder = tfds_folder(tmp_path)
    with open(f"{folder}/{name}", "w") as f:
        f.write(text)
    with pytest.raises(TFDSMetadataError, match=message) as err:
        TFRecordDataset(folder, split="train")
    assert err.value.path == f"{folder}/{name}"


# ------------------------------------------------------------------------------------------------- CachedDataset


@pytest.mark.parametrize("which,text", [("manifest", "[1]"), ("manifest", '"a string"'),
                                        ("manifest", '{"format": "tfr_torch.cache/2", "source": {"settings": [1]}}'),
                                        ("check", "[1]"), ("check", '"a string"')])
def test_cache_folder_json_of_another_type_is_unreadable_not_a_crash(tmp_path, which, text):
    """Fixed: a CachedDataset folder whose manifest or part check is valid JSON of another type (a list, a string,
    settings that are a list) raised a bare AttributeError / TypeError; now it is read as unreadable, as a damaged
    file already was: a warning names the folder or part, the part is dropped and the source read again, every
    item once."""
    path = str(tmp_path / "a.tfrecord")
    with TFRecordWriter(path) as writer:
        for i in range(6):
            writer.write(bytes([i]))
    folder = str(tmp_path / "cache")
    assert sorted(r[0] for r in CachedDataset(TFRecordDataset(path), folder)) == list(range(6))
    target = f"{folder}/tfr_torch-cache.json" if which == "manifest" else glob.glob(f"{folder}/check-*.json")[0]
    with open(target, "w") as f:
        f.write(text)
    with pytest.warns(UserWarning, match="the cache in .* was made from another dataset|the cached part .* is damaged"):
        cached = CachedDataset(TFRecordDataset(path), folder)
        first = sorted(r[0] for r in cached)
    assert first == list(range(6))
    assert sorted(r[0] for r in cached) == list(range(6))


# ------------------------------------------------------------------------------------------------- saved states


@pytest.fixture
def saved(tmp_path):
    paths = [small_file(tmp_path / f"f{k}.tfrecord", [1] * 10) for k in range(2)]

    def make():
        return TFRecordDataset(paths, index="auto", shuffle=True, seed=3)

    dataset = make()
    it = iter(dataset)
    first = [next(it)[0] + 0 for _ in range(5)]
    return make, dataset.state_dict(), first


def resumed(make, state):
    dataset = make()
    dataset.load_state_dict(state)
    return [r[0] for r in dataset]


def test_state_resumes_exactly_and_refuses_another_dataset_or_lying_counts(saved, tmp_path):
    """The state resumes with every record once; another dataset's state, and yielded / consumed counts past the
    share or a world_size / version that lie, raise ValueError naming the key and both values."""
    make, state, first = saved
    assert len(first) == 5 and len(resumed(make, state)) == 15
    other = TFRecordDataset(small_file(tmp_path / "o.tfrecord", [1] * 10), index="auto", shuffle=True, seed=3)
    it = iter(other)
    next(it)
    for change, message in ((lambda s: (s.clear(), s.update(other.state_dict())), "files=1, this dataset has 2"),
                            (lambda s: s.__setitem__("yielded", 2**62), "having yielded 4611686018427387904"),
                            (lambda s: s.__setitem__("consumed", 2**62), "went 4611686018427387904 positions"),
                            (lambda s: s.__setitem__("consumed", -1), "consumed=-1, expected an int >= 0"),
                            (lambda s: s.__setitem__("seed", 4), "seed=4, this dataset has 3"),
                            (lambda s: s.__setitem__("version", 99), "has version 99, newer than"),
                            (lambda s: s.__setitem__("world_size", 2**62), "world_size=4611686018427387904")):
        bad = copy.deepcopy(state)
        change(bad)
        with capped(), pytest.raises(ValueError, match=message):
            resumed(make, bad)


STATE_TYPE_DEFECTS = {
    "yielded missing": lambda s: s.pop("yielded"),  # KeyError: 'yielded'
    "segments null": lambda s: s.__setitem__("segments", None),  # TypeError: Value after * must be an iterable
    "split null": lambda s: s.__setitem__("split", None),  # TypeError: '<=' not supported ...
    "world_size null": lambda s: s.__setitem__("world_size", None),  # TypeError: unsupported operand ...
    "rank a string": lambda s: s.__setitem__("rank", "x"),  # TypeError: '<=' not supported ...
    "epoch a list": lambda s: s.__setitem__("epoch", [1]),  # TypeError: int() argument must be ...
}


@pytest.mark.parametrize("case", sorted(STATE_TYPE_DEFECTS))
def test_state_of_wrong_types_is_refused_by_key(saved, case):
    """Fixed (data/state_check.py): load_state_dict did not check a saved state's keys and types: a missing
    'yielded' raised a bare KeyError, 'segments' / 'split' / 'world_size' null, 'rank' a string or 'epoch' a list
    a bare TypeError, none naming the key."""
    make, state, _ = saved
    bad = copy.deepcopy(state)
    STATE_TYPE_DEFECTS[case](bad)
    with pytest.raises(ValueError, match="cannot resume"):
        resumed(make, bad)


def test_state_with_a_fractional_epoch_is_refused(saved):
    """Fixed (data/state_check.py): load_state_dict set the epoch to int(1.5) = 1 but kept the resume for epoch
    1.5, which never comes: the resume was silently dropped and epoch 1 read from its start (the 5 records already
    yielded came again)."""
    make, state, _ = saved
    bad = dict(state, epoch=1.5)
    with pytest.raises(ValueError, match="epoch"):
        resumed(make, bad)


# ---------------------------------------------------------------------------------------- ShardedWriter(resume=True)


def interrupted_writer(folder) -> str:
    """A run that finished shards 0 and 1 (3 records each) and died inside shard 2; its progress file's path."""
    writer = ShardedWriter(str(folder), "ds", "train", records_per_shard=3, resume=True)
    for i in range(7):
        writer.write(bytes([i]), position=i)
    return glob.glob(f"{folder}/*.progress.json")[0]


def resume_and_read(folder) -> list[int]:
    writer = ShardedWriter(str(folder), "ds", "train", records_per_shard=3, resume=True)
    start = writer.resumed_position + 1 if writer.resumed_position is not None else 0
    for i in range(start, 10):
        writer.write(bytes([i]), position=i)
    writer.close()
    shards = sorted(p for p in glob.glob(f"{folder}/ds-train.tfrecord-*-of-*") if not p.endswith((".idx", ".seek")))
    return [r[0] for r in TFRecordDataset(shards)]


def test_progress_file_resumes_exactly(tmp_path):
    """The untouched progress file resumes after the last finished shard: every record once, in order."""
    interrupted_writer(tmp_path)
    assert resume_and_read(tmp_path) == list(range(10))


def test_progress_file_with_reordered_shards_is_refused(tmp_path):
    """Fixed: ShardedWriter._load_progress checked only each listed shard's byte size: entries reordered (shards of
    the same size) resumed after the wrong position, and records 3-5 were written twice, silently."""
    progress = interrupted_writer(tmp_path)
    edit_sidecar(progress, lambda d: d["shards"].reverse())
    try:
        records = resume_and_read(tmp_path)
    except ValueError as err:
        assert progress in str(err)
    else:
        assert records == list(range(10))


def test_progress_file_with_a_lying_count_is_refused(tmp_path):
    """Fixed: ShardedWriter._load_progress copied each entry's 'records' into the sidecar unchecked: a progress file
    saying 2 records of a 3-record shard gave a sidecar that every reader later refused, the progress file
    unnamed."""
    progress = interrupted_writer(tmp_path)
    edit_sidecar(progress, lambda d: d["shards"][0].__setitem__("records", 2))
    try:
        records = resume_and_read(tmp_path)
    except ValueError as err:
        assert progress in str(err)
    else:
        assert records == list(range(10))


@pytest.mark.parametrize("change", [lambda d: d.__setitem__("shards", ["x"]), lambda d: d["shards"][0].pop("partial")])
def test_progress_file_of_wrong_types_is_refused_by_name(tmp_path, change):
    """Fixed: ShardedWriter._load_progress read the entries of 'shards' unchecked: a string entry raised a bare
    TypeError, an entry without 'partial' a bare KeyError, neither naming the progress file."""
    progress = interrupted_writer(tmp_path)
    edit_sidecar(progress, change)
    with pytest.raises(ValueError, match="cannot resume from"):
        resume_and_read(tmp_path)
