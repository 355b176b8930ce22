"""Grouped reads of GZIP / ZLIB files through their seek points (SeekPoints.read_many, RecordFile.read_many, the
global shuffle's groups of `max_group_bytes`, IndexedTFRecordDataset's batches): exactly the records asked for,
in the order asked, on both backends; each stretch of the stream inflated once; errors naming the file from stale
or forged seek points; memory bounded by the group.

Tests that take `backend` run on both backends, those that take `seek_engine` with each inflater that restarts at
a point (tests/conftest.py)."""

from __future__ import annotations

import gzip
import random
import struct
import tracemalloc
import zlib
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import TFRecordError
from tfr_torch.data.reading import group_bounds
from tfr_torch.format.framing import masked_crc32c
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.seek import read_seek_points

SPAN = 1 << 16
needs_core = pytest.mark.skipif(not tfr_torch._native.available(), reason="the compiled core is not built")


def _records(n: int, seed: int = 0, base: int = 0) -> list[bytes]:
    """Records of varied sizes that compress (repeats) and do not (random bytes), each starting with its id."""
    rng = random.Random(seed)
    return [b"%06d" % (base + i) + rng.randbytes(rng.randrange(0, 800)) + bytes([i % 251]) * rng.randrange(0, 600)
            for i in range(n)]


def _framed(records: list[bytes]) -> bytes:
    out = []
    for r in records:
        length = struct.pack("<Q", len(r))
        out.append(length + struct.pack("<I", masked_crc32c(length)) + r + struct.pack("<I", masked_crc32c(r)))
    return b"".join(out)


def _write(folder, kind: str, records: list[bytes]) -> str:
    """A GZIP or ZLIB file as TFRecordWriter writes it; "multi": GZIP members of 37 records each."""
    path = str(folder / f"data.{kind}")
    if kind == "multi":
        with open(path, "wb") as f:
            for i in range(0, len(records), 37):
                f.write(gzip.compress(_framed(records[i : i + 37]), mtime=i))
        return path
    with tfr_torch.TFRecordWriter(path, compression=kind) as w:
        for r in records:
            w.write(r)
    return path


def _build(path: str, span: int = SPAN) -> np.ndarray:
    """build_index with the compiled core (which builds seek points); the index."""
    previous = tfr_torch.set_backend("native")
    try:
        return tfr_torch.read_index(tfr_torch.build_index(path, seek_span=span), path)
    finally:
        tfr_torch.set_backend(previous)


@pytest.fixture(params=["gzip", "multi", "zlib"])
def indexed_file(request, tmp_path):
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    records = _records(1500)
    path = _write(tmp_path, request.param, records)
    return path, _build(path)


@pytest.mark.parametrize("group", [1, 7, 100, None])
def test_groups_give_the_permutations_records_in_order(indexed_file, seek_engine, group):
    """Differential: a sequential read, permuted, against read_many over the permutation in groups (None: one
    group of every record)."""
    path, index = indexed_file
    records = list(tfr_torch.read_records(path))
    order = np.random.default_rng(1).permutation(len(records))
    group = group or len(order)
    got = []
    with RecordFile(path) as f:
        for start in range(0, len(order), group):
            at = order[start : start + group]
            got.extend(f.read_many(index[at, 0], index[at, 1]))
    assert got == [records[i] for i in order]


def test_repeated_and_sorted_records_in_a_group(indexed_file, seek_engine):
    path, index = indexed_file
    records = list(tfr_torch.read_records(path))
    at = np.array([5, 900, 5, 6, 7, 1499, 0, 900, 3, 1499])
    with RecordFile(path) as f:
        assert f.read_many(index[at, 0], index[at, 1]) == [records[i] for i in at]
        everything = np.arange(len(records))
        assert f.read_many(index[everything, 0], index[everything, 1]) == records


@needs_core
def test_a_group_inflates_each_stretch_once_native(tmp_path, seek_engine):
    """Every record of the file in random order: one run from the first point (the records are back to back, so
    inflation goes on across every point); records far apart: one restart per point they are nearest after."""
    path = _write(tmp_path, "gzip", _records(3000))
    index = _build(path)
    points = read_seek_points(path + ".idx.seek", path, "gzip", len(open(path, "rb").read()))
    assert len(points.table) > 10
    reads: list[tuple[int, int]] = []

    def read_file_at(offset: int, size: int) -> bytes:
        reads.append((offset, size))
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    def restarts() -> list[int]:
        """Where each run of back-to-back reads began (a restart; the zlib APIs read a run a chunk at a time)."""
        return [o for j, (o, n) in enumerate(reads) if not j or sum(reads[j - 1]) != o]

    order = np.random.default_rng(2).permutation(len(index))
    framed = points.read_many(read_file_at, index[order, 0], index[order, 1])
    assert len(restarts()) == 1 and reads[0][0] <= int(points.table[0, 1])
    whole = _framed(list(tfr_torch.read_records(path)))
    assert framed == [whole[o : o + n] for o, n in index[order].tolist()]
    reads.clear()
    one_per_point = [int(np.searchsorted(index[:, 0], out + 1000)) for out in points.table[1:, 0].tolist()]
    at = np.array(one_per_point[::-1])
    points.read_many(read_file_at, index[at, 0], index[at, 1])
    assert len(restarts()) == len(at)


def test_group_bounds():
    assert group_bounds(np.array([4, 4, 4, 9, 1]), 8) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert group_bounds(np.array([1] * 5), 1 << 30) == [(0, 5)]
    assert group_bounds(np.zeros(0, dtype=np.int64), 8) == []


def _forge_windows(path: str) -> None:
    """Every window after the first changed, and its CRC (and the sidecar's) made to match, as a forger would."""
    seek = path + ".idx.seek"
    blob = bytearray(open(seek, "rb").read()[:-4])
    n = struct.unpack_from("<Q", blob, 40)[0]
    lengths = [struct.unpack_from("<I", blob, 48 + 32 * k + 20)[0] for k in range(n)]
    start = 48 + 32 * n
    for k in range(n):
        if k:
            for j in range(start, start + lengths[k], 97):
                blob[j] ^= 0x5A
            struct.pack_into("<I", blob, 48 + 32 * k + 24, zlib.crc32(bytes(blob[start : start + lengths[k]])))
        start += lengths[k]
    open(seek, "wb").write(bytes(blob) + struct.pack("<I", zlib.crc32(bytes(blob))))


@pytest.mark.parametrize("group", [3, 50])
def test_forged_windows_give_errors_naming_the_file_never_wrong_records(indexed_file, seek_engine, group):
    path, index = indexed_file
    records = list(tfr_torch.read_records(path))
    _forge_windows(path)
    order = np.random.default_rng(3).permutation(len(index))
    errors = 0
    with RecordFile(path) as f:
        for start in range(0, len(order), group):
            at = order[start : start + group]
            try:
                got = f.read_many(index[at, 0], index[at, 1])
            except TFRecordError as err:
                assert err.path == path and path in str(err)
                errors += 1
            else:
                assert got == [records[i] for i in at]
    # in "multi", most points start a member (no window)
    assert errors > 0 or path.endswith("multi")


def test_stale_seek_points_same_size_in_groups(tmp_path, seek_engine):
    """The file rewritten with other records of the same sizes, cut to its old size: every group raises naming
    the file or gives the new file's records, never the old ones."""
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    old = _records(800)
    path = _write(tmp_path, "gzip", old)
    index = _build(path)
    size = len(open(path, "rb").read())
    new = [bytes(b ^ 1 for b in r) for r in old]
    _write(tmp_path, "gzip", new)
    with open(path, "r+b") as f:  # the old size, whatever the new bytes compress to
        f.truncate(size)
    order = np.random.default_rng(4).permutation(len(index))
    errors = 0
    with RecordFile(path) as f:
        for start in range(0, len(order), 40):
            at = order[start : start + 40]
            try:
                assert f.read_many(index[at, 0], index[at, 1]) == [new[i] for i in at]
            except TFRecordError as err:
                assert err.path == path and path in str(err)
                errors += 1
    assert errors > 0


def _files(tmp_path, n: int = 300) -> list[str]:
    files = []
    for j, kind in enumerate(["gzip", "multi", "zlib"]):
        folder = tmp_path / str(j)
        folder.mkdir()
        files.append(_write(folder, kind, _records(n, seed=j, base=j * 1000)))
        _build(files[-1])
    return files


@needs_core
@pytest.mark.parametrize("num_workers,world_size", [(0, 1), (2, 2)])
def test_global_shuffle_in_groups_native(tmp_path, num_workers, world_size):
    """Each rank's order is the same whatever the group size (one record: as read one by one; one group for all),
    and every record id comes once over the ranks."""
    files = _files(tmp_path)
    seen: Counter[int] = Counter()
    for rank in range(world_size):
        orders = []
        for group in (1, 5000, 1 << 40):
            ds = tfr_torch.TFRecordDataset(files, index="auto", shuffle=True, seed=3, rank=rank,
                                           world_size=world_size, max_group_bytes=group)
            orders.append([int(r[:6]) for r in DataLoader(ds, batch_size=None, num_workers=num_workers)])
        assert orders[0] == orders[1] == orders[2]
        seen.update(orders[0])
    assert sum(seen.values()) == 900 // world_size * world_size and max(seen.values()) == 1
    if world_size == 1:
        assert set(seen) == {j * 1000 + i for j in range(3) for i in range(300)}


def test_max_group_bytes_checked(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(b"x")
    for bad in (0, -1, 1.5, True, "64MB"):
        with pytest.raises(ValueError, match=f"max_group_bytes must be a positive int \\(bytes\\), got {bad!r}"):
            tfr_torch.TFRecordDataset(path, max_group_bytes=bad)  # type: ignore[arg-type]


@needs_core
@pytest.mark.parametrize("num_workers", [0, 2])
def test_indexed_dataset_batches_are_groups_native(tmp_path, num_workers):
    files = _files(tmp_path, 400)
    ds = tfr_torch.IndexedTFRecordDataset(files)
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=num_workers, collate_fn=list,
                        generator=torch.Generator().manual_seed(0))
    ids = Counter(int(r[:6]) for batch in loader for r in batch)
    assert ids == Counter(j * 1000 + i for j in range(3) for i in range(400))
    order = [5, 1000, 3, 1199, 5]
    assert ds.__getitems__(order) == [ds[i] for i in order]


@needs_core
def test_memory_of_a_grouped_epoch_is_bounded_by_the_group_native(tmp_path):
    """Incompressible records, 8 MiB in all: an epoch in groups of 512 KiB holds about a group (plus one run's
    compressed bytes), far from the file's size."""
    rng = np.random.default_rng(0)
    path = str(tmp_path / "big.tfrecord.gz")
    with tfr_torch.TFRecordWriter(path, compression="gzip") as w:
        for i in range(512):
            w.write(b"%06d" % i + rng.integers(0, 256, 16384 - 6, dtype=np.uint8).tobytes())
    _build(path)
    budget = 512 << 10
    ds = tfr_torch.TFRecordDataset(path, index="auto", shuffle=True, seed=1, max_group_bytes=budget)
    tracemalloc.start()
    try:
        records = iter(ds)
        ids = [int(next(records)[:6])]  # the file opened: its seek points (their windows) loaded
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        ids.extend(int(r[:6]) for r in records)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sorted(ids) == list(range(512)) and ids != sorted(ids)
    # the group, the 64 records of the block being handed out (as for any file), one run's compressed bytes
    assert peak - before < budget + 64 * 16400 + 4 * SPAN, (peak, before)
