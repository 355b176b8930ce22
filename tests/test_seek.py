"""Seek points in GZIP / ZLIB files (format/seek.py, the compiled seek.c): random access to every record, the
sidecar checked before it is trusted, and the datasets that read compressed files by offset through them.

Tests that take `backend` run on both backends, those that take `seek_engine` with each inflater that restarts at
a point (the compiled core's zlib, zlib-ng's and Python's zlib APIs; tests/conftest.py); they and the tests named
`native` also run under the sanitizer build (`make test-sanitizers`)."""

from __future__ import annotations

import gzip
import os
import random
import struct
import zlib
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import CorruptRecordError, IndexMismatchError, TFRecordError
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.seek import read_seek_points, seek_path_for
from tfr_torch.format.seek_inflate import restart_prefix

SPAN = 1 << 16
_POINT0 = 48  # the sidecar's header size: point k's row is at 48 + 32 k
needs_core = pytest.mark.skipif(not tfr_torch._native.available(), reason="the compiled core is not built")


def _records(n: int, seed: int = 0) -> list[bytes]:
    """Records that compress (repeats) and do not (random bytes), of varied sizes: blocks end at any bit."""
    rng = random.Random(seed)
    return [b"%06d" % i + rng.randbytes(rng.randrange(0, 800)) + bytes([i % 251]) * rng.randrange(0, 600)
            for i in range(n)]


def _frame_all(records: list[bytes]) -> bytes:
    from tfr_torch.format.framing import masked_crc32c

    out = []
    for r in records:
        length = struct.pack("<Q", len(r))
        out.append(length + struct.pack("<I", masked_crc32c(length)) + r + struct.pack("<I", masked_crc32c(r)))
    return b"".join(out)


def _build(path: str, **kwargs) -> str:
    """build_index with the compiled core (which builds seek points), whatever backend the test reads with."""
    previous = tfr_torch.set_backend("native")
    try:
        return tfr_torch.build_index(path, seek_span=SPAN, **kwargs)
    finally:
        tfr_torch.set_backend(previous)


def _usable(path: str) -> list[int]:
    """The points after the first with a window of 200+ bytes (every engine restarts at any point)."""
    blob = open(path + ".idx.seek", "rb").read()
    rows = [struct.unpack_from("<QQB3xI", blob, _POINT0 + 32 * k) for k in range(_point_count(path))]
    return [k for k, (_, _, bits, n) in enumerate(rows) if k and n >= 200]


def _write(tmp_path, kind: str, records: list[bytes]) -> str:
    """A GZIP or ZLIB file as TFRecordWriter writes it; "multi": GZIP members of a few records each (Python's gzip
    module, with names and mtimes in the headers), as concatenated .gz files are."""
    path = str(tmp_path / f"data.{kind}")
    if kind == "multi":
        with open(path, "wb") as f:
            for i in range(0, len(records), 37):
                f.write(gzip.compress(_frame_all(records[i : i + 37]), mtime=i))
        return path
    with tfr_torch.TFRecordWriter(path, compression=kind) as w:
        for r in records:
            w.write(r)
    return path


@pytest.fixture(params=["gzip", "multi", "zlib"])
def indexed_file(request, tmp_path):
    records = _records(1200)
    path = _write(tmp_path, request.param, records)
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    index_path = _build(path)
    return path, records, tfr_torch.read_index(index_path, path)


def test_every_record_by_index(indexed_file, seek_engine):
    path, records, index = indexed_file
    assert os.path.exists(path + ".idx.seek")
    assert list(tfr_torch.read_records(path)) == records  # the sequential read, for the differential
    order = list(range(len(records)))
    random.Random(1).shuffle(order)
    with RecordFile(path) as f:
        got = {i: f.read(*index[i]) for i in order}
        assert [got[i] for i in range(len(records))] == records
        assert f.read_many(index[order[:50], 0], index[order[:50], 1]) == [records[i] for i in order[:50]]


@needs_core
def test_points_start_inside_bytes_and_members_native(tmp_path):
    """The files above give points at every bit position and, in multi-member GZIP, reads that cross members."""
    records = _records(3000)
    for kind in ("gzip", "multi"):
        path = _write(tmp_path, kind, records)
        _build(path)
        points = read_seek_points(path + ".idx.seek", path, "gzip", os.path.getsize(path))
        assert len(points.table) > 15
        if kind == "gzip":  # blocks end at every bit position; in "multi", most points are members' starts
            assert len(set(points.table[:, 2].tolist())) >= 5
        assert points.total_out == len(_frame_all(records))


def _zlib_modules() -> list:
    """Python's zlib, and zlib-ng's zlib API when installed."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return [zlib]
    return [zlib, zlib_ng]


@pytest.mark.parametrize("module", _zlib_modules(), ids=lambda m: m.__name__)
def test_restart_prefix_reaches_a_block_at_every_bit(module):
    """A block that begins at bit 8 - b of a byte (its first b bits the byte's high bits), after bits of
    something else: the prefix replaces that byte, and raw inflation with a window gives the block's output."""
    window = b"0123456789" * 10
    # a final fixed-Huffman block (BFINAL 1, BTYPE 01): literal "A" (8-bit code 0x30 + 0x41, written from its high
    # bit), then a match of length 3 at distance 100 (code 257: 7 bits 0000001; distance code 13, 5 bits, with
    # 6 extra bits 3) that copies "012" from the window, then end-of-block (seven 0 bits)
    fields = [(1, 1), (1, 2), (int(f"{0x30 + 0x41:08b}"[::-1], 2), 8), (int("0000001"[::-1], 2), 7),
              (int("01101"[::-1], 2), 5), (4, 6), (0, 7)]
    value = length = 0
    for v, n in fields:
        value, length = value | v << length, length + n
    for bits in range(1, 8):
        shifted = (value << (8 - bits)) | 0b1010101 & ((1 << (8 - bits)) - 1)  # junk below the block's first bit
        raw = shifted.to_bytes((length + 8 - bits + 7) // 8, "little")
        stream = restart_prefix(bits, raw[0]) + raw[1:]
        inflater = module.decompressobj(-15, zdict=window)
        assert inflater.decompress(stream) == b"A012" and inflater.eof, bits
    assert restart_prefix(0, 0xFF) == b""
    with pytest.raises(ValueError, match="restart_prefix: bits must be 0..7, got 8"):
        restart_prefix(8, 0)


@needs_core
@pytest.mark.parametrize("kind", ["gzip", "multi", "zlib"])
def test_every_point_restarts_alike_on_every_engine_native(tmp_path, kind, seek_engine):
    """Differential: from every point (blocks beginning at every bit; member starts in "multi"), the interval to
    the next point and 3000 bytes past it (across members) are the sequential stream's bytes, whichever
    inflater restarts."""
    records = _records(3000)
    path = _write(tmp_path, kind, records)
    _build(path)
    points = read_seek_points(path + ".idx.seek", path, "zlib" if kind == "zlib" else "gzip", os.path.getsize(path))
    if kind == "gzip":
        assert set(points.table[:, 2].tolist()) == set(range(8))
    whole = _frame_all(records)
    data = open(path, "rb").read()

    def read_file_at(offset: int, size: int) -> bytes:
        return data[offset : offset + size]

    outs = points.table[:, 0].tolist() + [len(whole)]
    for k in range(len(points.table)):
        n = outs[k + 1] - outs[k] + 3000
        assert points.read(read_file_at, outs[k], n) == whole[outs[k] : outs[k] + n], k


def _rewrite_seek(path: str, edit) -> None:
    """Apply `edit(bytearray)` to a sidecar and (like a forger would) recompute its trailing CRC."""
    seek = path + ".idx.seek"
    blob = bytearray(open(seek, "rb").read()[:-4])
    edit(blob)
    open(seek, "wb").write(bytes(blob) + struct.pack("<I", zlib.crc32(bytes(blob))))


def _read_all_or_raise(path: str, records: list[bytes], index: np.ndarray) -> int:
    """Read every record through the seek points: each is the true record or raises TFRecordError naming the
    file. Returns how many raised."""
    errors = 0
    with RecordFile(path) as f:
        for i, (offset, size) in enumerate(index.tolist()):
            try:
                data = f.read(offset, size)
            except TFRecordError as err:
                assert err.path == path and path in str(err)
                errors += 1
            else:
                assert data == records[i], f"record {i} came back wrong"
    return errors




def test_input_that_ends_early_names_the_point(indexed_file, seek_engine):
    """The file's bytes ending 100 bytes after point 1 (as if cut while read): an error naming the point, the
    sidecar and the file, from every inflater."""
    path, records, index = indexed_file
    data = open(path, "rb").read()
    points = read_seek_points(path + ".idx.seek", path, "zlib" if path.endswith("zlib") else "gzip", len(data))
    out, start, bits = (int(v) for v in points.table[1])
    cut = start + 100

    def read_file_at(offset: int, size: int) -> bytes:
        return data[offset : min(offset + size, cut)]

    with pytest.raises(CorruptRecordError, match=(
            rf"cannot read 100000 decompressed bytes from seek point 1 \(compressed byte {start}, bit {bits}, "
            rf"decompressed offset {out}\) of .*\.idx\.seek: the compressed data ends too early; the file or its seek "
            r"points changed since they were built\?")) as info:
        points.read(read_file_at, out, 100000)
    assert info.value.path == path and info.value.offset == out


def _point_count(path: str) -> int:
    return struct.unpack_from("<Q", open(path + ".idx.seek", "rb").read(), 40)[0]


def _window_start(path: str, k: int) -> int:
    blob = open(path + ".idx.seek", "rb").read()
    n = _point_count(path)
    lengths = [struct.unpack_from("<I", blob, _POINT0 + 32 * j + 20)[0] for j in range(n)]
    return _POINT0 + 32 * n + sum(lengths[:k])


def test_forged_window(indexed_file, seek_engine):
    path, records, index = indexed_file
    usable = _usable(path)
    if not usable:
        pytest.skip("no point after the first with a window")
    k = usable[len(usable) // 2]
    at = _window_start(path, k) + 100

    def flip(blob):
        blob[at] ^= 0x40

    _rewrite_seek(path, flip)
    with pytest.raises(IndexMismatchError, match=f"the window of seek point {k} does not match its CRC") as info:
        with RecordFile(path) as f:
            for offset, size in index.tolist():
                f.read(offset, size)
    assert info.value.path == path and info.value.index_path == path + ".idx.seek"


def test_forged_window_and_its_crc_gives_errors_never_wrong_records(indexed_file, seek_engine):
    path, records, index = indexed_file
    n = _point_count(path)

    def forge(blob):
        for k in range(1, n):  # every window's bytes changed, and its CRC made to match
            start = _window_start(path, k)
            length = struct.unpack_from("<I", blob, _POINT0 + 32 * k + 20)[0]
            for j in range(start, start + length, 97):
                blob[j] ^= 0x5A
            struct.pack_into("<I", blob, _POINT0 + 32 * k + 24, zlib.crc32(bytes(blob[start : start + length])))

    _rewrite_seek(path, forge)
    errors = _read_all_or_raise(path, records, index)
    assert errors > 0 or not _usable(path)


@pytest.mark.parametrize("shift", [1, -1, 7])
def test_moved_offsets_give_errors_never_wrong_records(indexed_file, seek_engine, shift):
    path, records, index = indexed_file
    n = _point_count(path)
    data = open(path, "rb").read()

    def move(blob):
        for k in range(1, n):  # each point's compressed offset moved, its anchor CRC made to match the new place
            row = _POINT0 + 32 * k
            start = struct.unpack_from("<Q", blob, row + 8)[0] + shift
            struct.pack_into("<Q", blob, row + 8, start)
            bits = blob[row + 16]
            first = start - (1 if bits else 0)
            struct.pack_into("<I", blob, row + 28, zlib.crc32(data[first : first + (1 if bits else 0) + 32]))

    _rewrite_seek(path, move)
    errors = _read_all_or_raise(path, records, index)
    assert errors > 0 or not _usable(path)


def test_moved_decompressed_offsets_give_errors_never_wrong_records(indexed_file, seek_engine):
    path, records, index = indexed_file
    n = _point_count(path)

    def move(blob):
        for k in range(1, n):
            row = _POINT0 + 32 * k
            struct.pack_into("<Q", blob, row, struct.unpack_from("<Q", blob, row)[0] + 16)

    _rewrite_seek(path, move)
    errors = _read_all_or_raise(path, records, index)
    assert errors > 0 or not _usable(path)


def test_stale_seek_points_of_a_rewritten_file(tmp_path, backend):
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    records = _records(600)
    path = _write(tmp_path, "gzip", records)
    _build(path)
    other = _records(600, seed=5)
    _write(tmp_path, "gzip", other)  # rewritten: another size
    with pytest.raises(IndexMismatchError, match=r"the seek points were built for a file of \d+ bytes, but the file "
                                                 r"has \d+ \(stale seek points") as info:
        RecordFile(path)
    assert info.value.path == path and path + ".idx.seek" in str(info.value)


def test_stale_seek_points_same_size(tmp_path, seek_engine):
    """The file rewritten with records of the same sizes (so the same index, often the same file size): never a
    record of the old file, never a wrong one."""
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    records = _records(600)
    path = _write(tmp_path, "zlib", records)
    _build(path, compression="zlib")
    index = tfr_torch.read_index(path + ".idx", path)
    seek = open(path + ".idx.seek", "rb").read()
    new = [bytes(b ^ 1 for b in r) for r in records]
    _write(tmp_path, "zlib", new)
    with open(path, "r+b") as f:  # same size as before, whatever the new bytes compress to
        f.truncate(struct.unpack_from("<Q", seek, 24)[0])
    errors = 0
    try:
        f = RecordFile(path)
    except TFRecordError:
        return
    with f:
        for i, (offset, size) in enumerate(index.tolist()):
            try:
                assert f.read(offset, size) == new[i]
            except TFRecordError as err:
                assert path in str(err)
                errors += 1
    assert errors > 0


def test_damaged_sidecar(indexed_file):
    path, records, index = indexed_file
    seek = path + ".idx.seek"
    blob = bytearray(open(seek, "rb").read())
    blob[60] ^= 1
    open(seek, "wb").write(bytes(blob))
    with pytest.raises(IndexMismatchError, match="the seek points do not match their CRC"):
        RecordFile(path)
    open(seek, "wb").write(b"not a seek file")
    with pytest.raises(IndexMismatchError, match="are not a tfr_torch seek file"):
        RecordFile(path)


def test_without_seek_points_reads_as_today(tmp_path):
    records = _records(300)
    path = _write(tmp_path, "gzip", records)
    tfr_torch.build_index(path, seek_span=None)
    assert not os.path.exists(path + ".idx.seek")
    with pytest.raises(ValueError, match=r"is GZIP-compressed and has no seek points \(.*data\.gzip\.idx\.seek\)"):
        RecordFile(path)
    ds = tfr_torch.TFRecordDataset(path, index="auto", shuffle=True)
    assert not ds._global_shuffle
    assert sorted(ds) == sorted(records)


def test_build_index_options(tmp_path):
    path = _write(tmp_path, "gzip", _records(50))
    with pytest.raises(ValueError, match="seek_span must be an int of at least 65536 decompressed bytes"):
        tfr_torch.build_index(path, seek_span=100)
    uncompressed = str(tmp_path / "plain.tfrecord")
    with tfr_torch.TFRecordWriter(uncompressed) as w:
        w.write(b"x")
    tfr_torch.build_index(uncompressed)
    assert not os.path.exists(uncompressed + ".idx.seek")
    assert seek_path_for("a/b.idx") == "a/b.idx.seek"


@needs_core
def test_cli_index_writes_seek_points_native(tmp_path):
    from tfr_torch.tools.cli import main

    path = _write(tmp_path, "gzip", _records(100))
    main(["index", path])
    assert os.path.exists(path + ".idx") and os.path.exists(path + ".idx.seek")


def _id(record: bytes) -> int:
    return int(record[:6])


@needs_core
@pytest.mark.parametrize("num_workers", [0, 2])
def test_indexed_dataset_over_compressed_files_native(tmp_path, num_workers):
    files = []
    for j, kind in enumerate(["gzip", "multi", "zlib"]):
        folder = tmp_path / str(j)
        folder.mkdir()
        recs = [b"%06d" % (j * 1000 + i) + r[6:] for i, r in enumerate(_records(400, seed=j))]
        files.append(_write(folder, kind, recs))
        _build(files[-1])
    ds = tfr_torch.IndexedTFRecordDataset(files)
    assert len(ds) == 1200
    loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=num_workers, collate_fn=list,
                        generator=torch.Generator().manual_seed(0))
    ids = Counter(_id(r) for batch in loader for r in batch)
    assert ids == Counter(j * 1000 + i for j in range(3) for i in range(400))


@needs_core
@pytest.mark.parametrize("num_workers,world_size", [(0, 1), (2, 1), (2, 2)])
def test_global_shuffle_over_compressed_files_native(tmp_path, num_workers, world_size):
    files = []
    for j, kind in enumerate(["gzip", "multi", "zlib"]):
        folder = tmp_path / str(j)
        folder.mkdir()
        recs = [b"%06d" % (j * 1000 + i) + r[6:] for i, r in enumerate(_records(300, seed=j))]
        files.append(_write(folder, kind, recs))
        _build(files[-1])
    seen: Counter[int] = Counter()
    orders = []
    for rank in range(world_size):
        ds = tfr_torch.TFRecordDataset(files, index="auto", shuffle=True, seed=3, rank=rank, world_size=world_size)
        assert ds._global_shuffle
        got = [_id(r) for r in DataLoader(ds, batch_size=None, num_workers=num_workers)]
        orders.append(got)
        seen.update(got)
    expected = 900 // world_size * world_size
    assert sum(seen.values()) == expected and max(seen.values()) == 1
    assert orders[0] != sorted(orders[0])  # records from all files, mixed
    if world_size == 1:
        assert set(seen) == {j * 1000 + i for j in range(3) for i in range(300)}


@needs_core
def test_sharded_writer_and_reshard_write_seek_points_native(tmp_path):
    """Compressed shards get their seek points as build_index writes them (so a global shuffle reads them by
    offset); seek_span=None writes none and removes an earlier set's, which would be stale beside the new shard."""
    from tfr_torch.tools.reshard import reshard

    records = _records(900)
    out = tmp_path / "out"
    with tfr_torch.ShardedWriter(out, "ds", "train", shard_size="200KB", compression="gzip",
                                 seek_span=SPAN) as writer:
        for r in records:
            writer.write(r)
    paths = writer.paths
    assert len(paths) > 1
    for path in paths:
        written = open(path + ".idx.seek", "rb").read()
        _build(path)
        assert open(path + ".idx.seek", "rb").read() == written
    ds = tfr_torch.TFRecordDataset(paths, index="auto", shuffle=True, seed=1)
    assert ds._global_shuffle
    got = list(ds)
    assert sorted(got) == sorted(records) and got != records
    again = tfr_torch.ShardedWriter(out, "ds", "train", shard_size="200KB", compression="gzip", seek_span=None)
    with again:
        for r in records:
            again.write(r)
    assert again.paths == paths and not any(os.path.exists(p + ".idx.seek") for p in paths)
    with pytest.raises(ValueError, match="seek_span must be an int of at least 65536 decompressed bytes"):
        tfr_torch.ShardedWriter(out, "ds", "train", compression="gzip", seek_span=1000)
    new = reshard(paths, str(tmp_path / "zlib"), shard_size="300KB", compression="zlib")
    assert all(os.path.exists(p + ".idx.seek") for p in new)
    with RecordFile(new[-1]) as f:
        index = tfr_torch.read_index(new[-1] + ".idx", new[-1])
        assert f.read_many(index[::-1, 0], index[::-1, 1]) == list(tfr_torch.read_records(new[-1]))[::-1]


@needs_core
def test_a_record_up_to_two_mib_is_inflated_in_one_pass(tmp_path, seek_engine, monkeypatch):
    """Read by offset, a compressed record is one restart from the seek point before it, up to 2 MiB framed: its
    header is checked against the index after that pass. Only a larger one reads its first 2 MiB, then the rest
    once the header agrees (a second restart, which inflates again from the point before the rest: done for every
    record, as it was for those over 64 KiB, it made a random-order epoch of 512 KiB records take 1.6x as long)."""
    from tfr_torch.format.seek import SeekPoints

    rng = random.Random(3)
    records = [rng.randbytes(size) for size in (600 << 10, (2 << 20) - 16, (2 << 20) - 15, 3 << 20, 100)]
    path = str(tmp_path / "big.tfrecord.gz")
    with tfr_torch.TFRecordWriter(path, compression="gzip") as writer:
        for record in records:
            writer.write(record)
    _build(path)
    index = tfr_torch.read_index(path + ".idx", path)
    assert index[:, 1].tolist() == [len(r) + 16 for r in records]
    restarts = []
    original = SeekPoints.read

    def counted(self, read_file_at, offset, size):
        restarts.append(size)
        return original(self, read_file_at, offset, size)

    monkeypatch.setattr(SeekPoints, "read", counted)
    with RecordFile(path) as f:
        for (offset, size), record in zip(index.tolist(), records):
            restarts.clear()
            assert f.read(offset, size) == record
            assert restarts == ([size] if size <= 2 << 20 else [2 << 20, size - (2 << 20)]), (size, restarts)
