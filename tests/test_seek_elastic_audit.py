"""Audit of random access into GZIP/ZLIB TFRecord files (seek points: format/seek.py, seek_inflate.py, the compiled
seek.c; RecordFile) and of elastic resumption (data/elastic.py, ElasticDistributedSampler).

What is checked here, over files the other seek tests do not write:
- differential: every record read by index (RecordFile.read, and read_many in random groups) equals the record read
  sequentially, with each inflater that restarts at a seek point (`seek_engine`), over random files: records of
  random sizes including 0 bytes and a multi-megabyte one; GZIP from TFRecordWriter and from Python's gzip module at
  levels 0, 1 and 9; several GZIP members concatenated (as `cat a.gz b.gz` makes), empty members among them, with
  headers carrying FEXTRA / FNAME / FCOMMENT / FHCRC fields; ZLIB at other levels;
- a GZIP member's trailer (CRC-32 / ISIZE) damaged after the index was built: the records the sequential read
  yields are read alike by index, whichever engine restarts, and the engines agree;
- a damaged sidecar (every byte flipped, every truncation of a small one; sampled in a larger one), the sidecar of
  another file and a truncated data file are refused with IndexMismatchError naming the data file and the sidecar;
- a damaged compressed stream gives the right record or a TFRecordError naming the file and an offset, never a
  wrong record nor another exception;
- memory: one record far into a big file costs one interval, and an index line that claims a huge record is
  refused before that many bytes are allocated;
- the pure-Python backend (TFR_TORCH_NATIVE=0, TFR_TORCH_INFLATE=zlib, in a subprocess) reads every record alike
  and writes the same index;
- elastic: a checkpoint of N ranks x W workers at random points, resumed by M ranks x V workers and then by one
  rank, gives every record of the epoch exactly once (exact multiset of ids), shuffled and not, over multi-member
  GZIP files read through seek points and over plain files; ElasticDistributedSampler over an
  IndexedTFRecordDataset of compressed files the same.

DataLoader workers are simulated in this process as tests/test_exactly_once_property.py does (a copy of the rank's
dataset per worker while get_worker_info answers).
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import os
import random
import struct
import subprocess
import sys
import tracemalloc
import warnings
import zlib
from collections import Counter
from contextlib import contextmanager
from unittest import mock

import pytest
import torch

import tfr_torch
import tfr_torch.data.dataset as dataset_module
import tfr_torch.data.resumable as resumable_module
from tfr_torch import IndexMismatchError, TFRecordDataset, TFRecordError
from tfr_torch.format.framing import masked_crc32c
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.seek import read_seek_points, seek_path_for

SPAN = 1 << 16
needs_core = pytest.mark.skipif(not tfr_torch._native.available(), reason="seek points are built by the compiled core")


# ----- writing files ---------------------------------------------------------------------------------------------


def _frame(records: list[bytes]) -> bytes:
    out = []
    for r in records:
        length = struct.pack("<Q", len(r))
        out.append(length + struct.pack("<I", masked_crc32c(length)) + r + struct.pack("<I", masked_crc32c(r)))
    return b"".join(out)


def _member(data: bytes, level: int, *, extra: bytes | None = None, name: bytes | None = None,
            comment: bytes | None = None, hcrc: bool = False, mtime: int = 0) -> bytes:
    """One GZIP member (RFC 1952) with the optional header fields given."""
    flags = (2 if hcrc else 0) | (4 if extra is not None else 0) | (8 if name is not None else 0) | (
        16 if comment is not None else 0)
    head = b"\x1f\x8b\x08" + bytes([flags]) + struct.pack("<I", mtime) + b"\x00\x03"
    if extra is not None:
        head += struct.pack("<H", len(extra)) + extra
    if name is not None:
        head += name + b"\x00"
    if comment is not None:
        head += comment + b"\x00"
    if hcrc:
        head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = deflate.compress(data) + deflate.flush()
    return head + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def _random_records(rng: random.Random, n: int, big: int = 0) -> list[bytes]:
    """Records of random sizes (some empty, some that compress, some that do not), `big` multi-megabyte ones."""
    out = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.12:
            out.append(b"")
            continue
        size = rng.randrange(1, 200) if kind < 0.5 else rng.randrange(200, 9000)
        half = rng.randrange(size + 1)
        out.append(b"%05d" % i + rng.randbytes(half) + bytes([i % 251]) * (size - half))
    for k in range(big):
        at = rng.randrange(len(out) + 1)
        size = rng.randrange(2 << 20, 3 << 20)
        out.insert(at, rng.randbytes(size // 3) + b"big%d" % k * (size // 8))
    return out


KINDS = ["writer-gzip", "writer-zlib", "gzip-level", "cat-members", "split-members", "zlib-level"]


def _write(path: str, kind: str, records: list[bytes], rng: random.Random) -> str:
    if kind.startswith("writer-"):
        with tfr_torch.TFRecordWriter(path, compression=kind[7:]) as w:
            for r in records:
                w.write(r)
        return path
    if kind == "gzip-level":  # Python's gzip module, stored blocks (level 0) to level 9
        with open(path, "wb") as f:
            f.write(gzip.compress(_frame(records), compresslevel=rng.choice([0, 1, 9])))
        return path
    if kind == "zlib-level":
        with open(path, "wb") as f:
            f.write(zlib.compress(_frame(records), rng.choice([0, 1, 9])))
        return path
    if kind == "split-members":  # members cut at random bytes, records straddling them (as pigz -i, bgzip make)
        data = _frame(records)
        cuts = [0, *sorted(rng.sample(range(1, len(data)), 40)), len(data)]
        with open(path, "wb") as f:
            f.write(b"".join(_member(data[a:b], rng.choice([0, 1, 6, 9]), hcrc=rng.random() < 0.5, mtime=a)
                             for a, b in zip(cuts, cuts[1:])))
        return path
    assert kind == "cat-members"  # `cat a.gz b.gz ...`: members of random sizes, empty ones, header fields
    parts, i = [gzip.compress(b"", mtime=1)], 0
    while i < len(records):
        n = rng.randrange(1, 40)
        fields = dict(extra=b"AB\x03\x00xyz" if rng.random() < 0.5 else None,
                      name=b"part%d.tfrecord" % i if rng.random() < 0.5 else None,
                      comment=b"made by cat" if rng.random() < 0.5 else None, hcrc=rng.random() < 0.5, mtime=i)
        parts.append(_member(_frame(records[i : i + n]), rng.choice([0, 1, 6, 9]), **fields))
        if rng.random() < 0.2:
            parts.append(gzip.compress(b"", mtime=2))
        i += n
    with open(path, "wb") as f:
        f.write(b"".join(parts))
    return path


def _build(path: str, **kwargs) -> str:
    """build_index with the compiled core (which builds seek points), whatever backend the test reads with."""
    previous = tfr_torch.set_backend("native")
    try:
        return tfr_torch.build_index(path, seek_span=SPAN, **kwargs)
    finally:
        tfr_torch.set_backend(previous)


@pytest.fixture(scope="module")
def random_files(tmp_path_factory):
    """One random file per kind: (path, records, index)."""
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    folder = tmp_path_factory.mktemp("seek-audit")
    files = {}
    for n, kind in enumerate(KINDS):
        rng = random.Random(100 + n)
        records = _random_records(rng, 160, big=1 if kind in ("cat-members", "split-members", "writer-gzip") else 0)
        path = _write(str(folder / f"data-{kind}.tfrecord"), kind, records, rng)
        index_path = _build(path, compression="zlib" if "zlib" in kind else "gzip")
        files[kind] = (path, records, tfr_torch.read_index(index_path, path))
    return files


def _compression(path: str) -> str:
    return "zlib" if "zlib" in os.path.basename(path) else "gzip"


# ----- differential: by index vs sequential ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_record_by_index_equals_the_sequential_read(random_files, kind, seek_engine):
    path, records, index = random_files[kind]
    compression = _compression(path)
    assert list(tfr_torch.read_records(path, compression=compression)) == records
    assert len(index) == len(records)
    rng = random.Random(kind)
    order = list(range(len(records)))
    rng.shuffle(order)
    with RecordFile(path, compression=compression) as f:
        assert f.compressed
        for i in order:
            assert f.read(*index[i]) == records[i], f"record {i} of {path} read by index differs"
        for _ in range(6):  # random groups, repeats and neighbours included
            group = [rng.choice(order) for _ in range(rng.randrange(1, 40))]
            group += [min(group[0] + 1, len(records) - 1)]
            got = f.read_many(index[group, 0], index[group, 1])
            assert got == [records[i] for i in group]
        assert f.read_many(index[:, 0], index[:, 1]) == records


# ----- a damaged member trailer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["crc", "isize"])
def test_a_damaged_member_trailer_gives_by_index_what_the_sequential_read_gives(tmp_path, seek_engine, field):
    """Members of 10 records, smaller than the seek span, so a restart inflates across members. Member 3's
    trailer is damaged after the index was built (bit rot): the sequential read yields records 0-39 (member 3's
    are whole and pass their CRCs) and then raises. By index, records 0-39 must be what the sequential read gave,
    whichever engine restarts; each later one the record or a TFRecordError naming the file; and every engine
    must give the same answer for every record."""
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    rng = random.Random(7)
    records = [b"%05d" % i + rng.randbytes(rng.randrange(0, 300)) + b"z" * rng.randrange(0, 300) for i in range(120)]
    members = [gzip.compress(_frame(records[i : i + 10]), mtime=i) for i in range(0, len(records), 10)]
    path = str(tmp_path / "members.tfrecord.gz")
    with open(path, "wb") as f:
        f.write(b"".join(members))
    index = tfr_torch.read_index(_build(path), path)
    end3 = sum(len(m) for m in members[:4])
    damaged = bytearray(b"".join(members))
    damaged[end3 - (6 if field == "crc" else 2)] ^= 0xFF
    with open(path, "wb") as f:
        f.write(damaged)

    sequential = []
    with pytest.raises(TFRecordError) as raised:
        for record in tfr_torch.read_records(path):
            sequential.append(record)
    assert path in str(raised.value)
    assert sequential == records[: len(sequential)] and len(sequential) == 40

    def by_index():
        answers = []
        with RecordFile(path) as f:
            for i in range(len(records)):
                try:
                    answers.append(f.read(*index[i]) == records[i] or "WRONG")
                except TFRecordError as err:
                    assert path in str(err)
                    answers.append("error")
        return answers

    mine = by_index()
    assert "WRONG" not in mine
    refused = [i for i in range(40) if mine[i] is not True]
    assert not refused, (f"engine {seek_engine}: records {refused} are refused by index but read sequentially "
                         "(they are whole and pass their CRCs)")
    from tfr_torch.format import seek as seek_module

    others = {}
    for engine in ("native", "zlib"):
        with mock.patch.object(seek_module, "restart_engine", lambda e=engine: e):
            previous = tfr_torch.set_backend("native")
            try:
                others[engine] = by_index()
            finally:
                tfr_torch.set_backend(previous)
    for engine, answers in others.items():
        differ = [i for i in range(len(records)) if answers[i] != mine[i]]
        assert not differ, f"engines {seek_engine} and {engine} disagree on records {differ}"


@pytest.mark.parametrize("damage", ["header-crc", "magic", "flags"])
def test_a_damaged_later_member_header_gives_the_same_answer_with_every_engine(tmp_path, seek_engine, damage):
    """Members with FHCRC/FNAME headers, smaller than the seek span; member 3's header is damaged after the index
    was built. Records before it read by index as written (as sequentially), and every engine (the Python ones
    parse the next member's header themselves, the compiled one through zlib) answers alike for every later one."""
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    rng = random.Random(11)
    records = [b"%05d" % i + rng.randbytes(rng.randrange(0, 300)) for i in range(80)]
    members = [_member(_frame(records[i : i + 10]), 6, name=b"m%d" % i, extra=b"AB\x01\x00z", hcrc=True, mtime=i)
               for i in range(0, len(records), 10)]
    path = str(tmp_path / "headers.tfrecord.gz")
    with open(path, "wb") as f:
        f.write(b"".join(members))
    index = tfr_torch.read_index(_build(path), path)
    start3 = sum(len(m) for m in members[:3])
    # the header: 10 fixed bytes, FEXTRA (2 + 5), FNAME (b"m30\0"), then the header CRC
    at = {"header-crc": start3 + 10 + 7 + 4, "magic": start3, "flags": start3 + 3}[damage]
    damaged = bytearray(b"".join(members))
    damaged[at] ^= 0x40 if damage == "flags" else 0x01
    with open(path, "wb") as f:
        f.write(damaged)
    sequential = []
    with pytest.raises(TFRecordError):
        for record in tfr_torch.read_records(path):
            sequential.append(record)
    assert sequential == records[:30]

    from tfr_torch.format import seek as seek_module

    def by_index():
        answers = []
        with RecordFile(path) as f:
            for i in range(len(records)):
                try:
                    answers.append(f.read(*index[i]) == records[i] or "WRONG")
                except TFRecordError as err:
                    assert path in str(err)
                    answers.append("error")
        return answers

    mine = by_index()
    assert "WRONG" not in mine
    for engine in ("native", "zlib"):
        with mock.patch.object(seek_module, "restart_engine", lambda e=engine: e):
            previous = tfr_torch.set_backend("native")
            try:
                answers = by_index()
            finally:
                tfr_torch.set_backend(previous)
        differ = [i for i in range(30, len(records)) if answers[i] != mine[i]]
        assert not differ, f"engines {seek_engine} and {engine} disagree on records {differ}"
    refused = [i for i in range(30) if mine[i] is not True]
    assert not refused, f"engine {seek_engine}: records {refused} before the damaged member are refused by index"


# ----- the sidecar: damaged, another file's, a truncated data file -----------------------------------------------


def _small_file(tmp_path, name: str, n: int, seed: int = 3) -> tuple[str, list[bytes]]:
    rng = random.Random(seed)
    records = [rng.randbytes(rng.randrange(0, 400)) + b"r" * rng.randrange(0, 4000) for _ in range(n)]
    path = str(tmp_path / name)
    with tfr_torch.TFRecordWriter(path, compression="gzip") as w:
        for r in records:
            w.write(r)
    _build(path)
    return path, records


def _refused(path: str, seek_path: str, blob: bytes, what: str) -> None:
    with open(seek_path, "wb") as f:
        f.write(blob)
    with pytest.raises(IndexMismatchError) as raised:
        RecordFile(path).close()
    text = str(raised.value)
    assert path in text and seek_path in text, f"{what}: the error does not name both files: {text}"


@needs_core
def test_every_damage_of_a_small_sidecar_is_refused_naming_both_files(tmp_path):
    path, records = _small_file(tmp_path, "one-point.tfrecord.gz", 5)
    seek_path = seek_path_for(path + ".idx")
    good = open(seek_path, "rb").read()
    assert len(good) < 200  # one point, no window: every byte and every cut is tried
    for at in range(len(good)):
        for mask in (0x01, 0x80, 0xFF):
            blob = bytearray(good)
            blob[at] ^= mask
            _refused(path, seek_path, bytes(blob), f"byte {at} ^ {mask:#x}")
    for cut in range(len(good)):
        _refused(path, seek_path, good[:cut], f"cut at {cut}")
    _refused(path, seek_path, good + b"\x00", "a byte appended")
    with open(seek_path, "wb") as f:
        f.write(good)
    index = tfr_torch.read_index(path + ".idx", path)
    with RecordFile(path) as f:
        assert [f.read(*row) for row in index] == records


@needs_core
def test_sampled_damage_of_a_larger_sidecar_is_refused_naming_both_files(tmp_path):
    path, _ = _small_file(tmp_path, "points.tfrecord.gz", 300)
    seek_path = seek_path_for(path + ".idx")
    good = open(seek_path, "rb").read()
    points = read_seek_points(seek_path, path, "gzip", os.path.getsize(path))
    assert len(points.table) >= 3
    table_end = 48 + 32 * len(points.table)
    rng = random.Random(5)
    spots = [*range(table_end), *rng.sample(range(table_end, len(good)), 150), *range(len(good) - 4, len(good))]
    for at in spots:
        blob = bytearray(good)
        blob[at] ^= 1 << rng.randrange(8)
        _refused(path, seek_path, bytes(blob), f"byte {at}")
    for cut in list(range(0, table_end + 8)) + rng.sample(range(table_end + 8, len(good)), 60):
        _refused(path, seek_path, good[:cut], f"cut at {cut}")


@needs_core
def test_seek_points_of_another_file_or_of_a_longer_file_are_refused(tmp_path):
    a, _ = _small_file(tmp_path, "a.tfrecord.gz", 300, seed=1)
    b, _ = _small_file(tmp_path, "b.tfrecord.gz", 200, seed=2)
    seek_b = seek_path_for(b + ".idx")
    _refused(b, seek_b, open(seek_path_for(a + ".idx"), "rb").read(), "another file's sidecar")
    # the data file cut (a copy interrupted, a disk full) under seek points made for the whole file
    whole = open(a, "rb").read()
    seek_a = seek_path_for(a + ".idx")
    sidecar = open(seek_a, "rb").read()
    for cut in (0, 1, 10, len(whole) // 3, len(whole) - 9, len(whole) - 1):
        with open(a, "wb") as f:
            f.write(whole[:cut])
        _refused(a, seek_a, sidecar, f"data file cut at {cut}")
    # and checking the index against the cut file refuses it too (its seek points say the file is longer)
    with open(a, "wb") as f:
        f.write(whole[: len(whole) // 2])
    with pytest.raises(TFRecordError) as raised:
        tfr_torch.read_index(a + ".idx", a)
    assert a in str(raised.value)


# ----- a damaged compressed stream -------------------------------------------------------------------------------


def test_a_damaged_stream_gives_the_record_or_an_error_naming_file_and_offset(random_files, seek_engine):
    path, records, index = random_files["cat-members"]
    whole = open(path, "rb").read()
    rng = random.Random(11)
    picks = sorted(rng.sample(range(len(records)), 12))
    try:
        for trial in range(10):
            damaged = bytearray(whole)
            for _ in range(rng.randrange(1, 3)):
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            with open(path, "wb") as f:
                f.write(damaged)
            with RecordFile(path) as f:
                for i in picks:
                    try:
                        got = f.read(*index[i])
                    except TFRecordError as err:
                        assert err.path == path and err.offset is not None, str(err)
                        assert path in str(err)
                        continue
                    assert got == records[i], f"trial {trial}: a wrong record {i} from a damaged stream"
                try:
                    got = f.read_many(index[picks, 0], index[picks, 1])
                except TFRecordError as err:
                    assert err.path == path and err.offset is not None, str(err)
                else:
                    assert got == [records[i] for i in picks]
    finally:
        with open(path, "wb") as f:
            f.write(whole)


# ----- memory ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    """About 32 MiB decompressed, 2000 records: (path, records, index)."""
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    rng = random.Random(4)
    records = [b"%07d" % i + rng.randbytes(64) + bytes([i % 251]) * 16000 for i in range(2000)]
    path = str(tmp_path_factory.mktemp("big") / "big.tfrecord.gz")
    with tfr_torch.TFRecordWriter(path, compression="gzip") as w:
        for r in records:
            w.write(r)
    previous = tfr_torch.set_backend("native")
    try:
        index = tfr_torch.read_index(tfr_torch.build_index(path), path)  # the default span, 1 MiB
    finally:
        tfr_torch.set_backend(previous)
    return path, records, index


@contextmanager
def _peak():
    tracemalloc.start()
    result = {}
    try:
        yield result
    finally:
        result["peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def test_one_record_far_into_a_big_file_costs_one_interval(big_file, seek_engine):
    path, records, index = big_file
    assert int(index[-1, 0]) > 30 << 20
    with RecordFile(path) as f:
        with _peak() as mem:
            assert f.read(*index[-1]) == records[-1]
            assert f.read_many(index[-3:, 0], index[-3:, 1]) == records[-3:]
    assert mem["peak"] < 6 << 20, f"{mem['peak']} bytes to read one record at decompressed offset {index[-1, 0]}"


def test_an_index_line_claiming_a_huge_record_is_refused_before_allocating_it(big_file, seek_engine, tmp_path):
    """An index whose second line spans the rest of the file (records merged: a stale or hand-made index). For a
    compressed file read_index checks only the first record and the end, so it is accepted; reading record 1 must
    then raise (its header says another size) without first inflating ~32 MiB into memory, as an uncompressed
    file's header is checked before its body is read."""
    path, _, index = big_file
    end = int(index[-1, 0] + index[-1, 1])
    bad_index = str(tmp_path / "merged.idx")
    with open(bad_index, "w") as f:
        f.write(f"0 {index[0, 1]}\n{index[1, 0]} {end - int(index[1, 0])}\n")
    rows = tfr_torch.read_index(bad_index, path)
    peaks = {}
    with RecordFile(path) as f:
        for how in ("read", "read_many"):
            with _peak() as mem:
                with pytest.raises(TFRecordError, match="the index says") as raised:
                    if how == "read":
                        f.read(*rows[1])
                    else:
                        f.read_many(rows[1:, 0], rows[1:, 1])
            assert raised.value.path == path
            peaks[how] = mem["peak"]
    assert max(peaks.values()) < 6 << 20, (f"bytes allocated (peak) for a record whose index line claims "
                                           f"{rows[1, 1]} bytes (its header says {index[1, 1]}): {peaks}")


# ----- the pure-Python backend --------------------------------------------------------------------------------------

_CHILD = r"""
import hashlib, sys
import tfr_torch
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.seek import restart_engine
path, index_copy = sys.argv[1], sys.argv[2]
assert tfr_torch._native.backend() == "python", tfr_torch._native.backend()
index = tfr_torch.read_index(path + ".idx", path)
digest = hashlib.sha256()
with RecordFile(path) as f:
    for row in index[::-1]:
        digest.update(f.read(*row))
    for record in f.read_many(index[:, 0], index[:, 1]):
        digest.update(record)
tfr_torch.build_index(path, index_copy, seek_span=None)
print(restart_engine(), digest.hexdigest())
"""


@needs_core
def test_the_python_backend_reads_every_record_alike_in_a_subprocess(random_files, tmp_path):
    path, records, index = random_files["cat-members"]
    digest = hashlib.sha256()
    for record in records[::-1] + records:
        digest.update(record)
    index_copy = str(tmp_path / "python.idx")
    env = dict(os.environ, TFR_TORCH_NATIVE="0", TFR_TORCH_INFLATE="zlib")
    done = subprocess.run([sys.executable, "-c", _CHILD, path, index_copy], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    engine, hexdigest = done.stdout.split()
    assert engine == "zlib"
    assert hexdigest == digest.hexdigest()
    assert open(index_copy, "rb").read() == open(path + ".idx", "rb").read()
    assert os.path.exists(seek_path_for(path + ".idx"))  # the sidecar beside the default index is left alone


# ----- elastic resumption ------------------------------------------------------------------------------------------

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
COUNTS = [13, 0, 21, 7, 19]  # 60 records: every world size of 1-6 reads the whole epoch


class _Info:
    """What torch's get_worker_info() gives in DataLoader worker `id` of `num_workers`."""

    def __init__(self, id, num_workers, base_seed):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, base_seed + id, None


@contextmanager
def _as_worker(worker, workers):
    info = None if workers == 0 else _Info(worker, workers, 1000)
    with mock.patch.object(dataset_module, "get_worker_info", lambda: info), \
            mock.patch.object(resumable_module, "get_worker_info", lambda: info), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def elastic_corpus(tmp_path_factory):
    """The same records as multi-member GZIP files with seek points (a small span: many points) and as plain
    indexed files; ids 500.."""
    if not tfr_torch._native.available():
        pytest.skip("seek points are built by the compiled core")
    folder = tmp_path_factory.mktemp("elastic-audit")
    rng = random.Random(9)
    paths = {"gz": [], "plain": []}
    ids, next_id = [], 500
    for f, n in enumerate(COUNTS):
        plain = str(folder / f"part-{f}.tfrecord")
        with tfr_torch.TFRecordWriter(plain) as w:
            for _ in range(n):
                w.write_example({"id": next_id, "blob": rng.randbytes(rng.randrange(0, 3000))})
                ids.append(next_id)
                next_id += 1
        rows = tfr_torch.read_index(tfr_torch.build_index(plain), plain)
        data = open(plain, "rb").read()
        framed = [data[o : o + s] for o, s in rows.tolist()]
        gz = str(folder / f"part-{f}.tfrecord.gz")
        with open(gz, "wb") as out:  # members of 3 records, as `cat` of small .gz files makes
            out.write(b"".join(_member(b"".join(framed[i : i + 3]), rng.choice([1, 9]), name=b"x", mtime=i)
                               for i in range(0, n, 3)) or gzip.compress(b""))
        _build(gz)
        paths["plain"].append(plain)
        paths["gz"].append(gz)
    return paths, ids


def _make(paths, rank, world, shuffle, batch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TFRecordDataset(paths, SPEC, index="auto", rank=rank, world_size=world, shuffle=shuffle, seed=3,
                               batch_size=batch, shuffle_buffer=5, interleave=2, shared_memory=False)


def _stage(paths, layout, shuffle, batch, rng, load=None, stop=True):
    """Every rank of (world, workers) reads, each reader stopping at a random point (`stop`) or at its end;
    returns (ids yielded, merged state)."""
    world, workers = layout
    ids, parts = [], []
    for rank in range(world):
        ds = _make(paths, rank, world, shuffle, batch)
        if load is not None:
            ds.load_state_dict(load)
        readers = [ds] if workers == 0 else [copy.copy(ds) for _ in range(workers)]
        for w, reader in enumerate(readers):
            with _as_worker(w, workers):
                iterator = iter(reader)
                take = rng.randrange(0, 12) if stop else None
                n = 0
                while take is None or n < take:
                    try:
                        item = next(iterator)
                    except StopIteration:
                        break
                    ids.extend(item["id"].reshape(-1).tolist())
                    n += 1
                parts.append(reader.state_dict())
                iterator.close()
    return ids, tfr_torch.elastic_state(parts)


@pytest.mark.parametrize("storage", ["gz", "plain"])
@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in-order"])
def test_resume_under_random_layouts_gives_every_record_exactly_once(elastic_corpus, storage, shuffle):
    paths, all_ids = elastic_corpus
    rng = random.Random(f"{storage}{shuffle}")
    for case in range(4):
        first = (rng.randint(1, 4), rng.randint(0, 3))
        second = (rng.randint(1, 4), rng.randint(0, 3))
        batch = rng.choice([None, 1, 3])
        before, state = _stage(paths[storage], first, shuffle, batch, rng)
        after, state2 = _stage(paths[storage], second, shuffle, batch, rng, load=state)
        rest, _ = _stage(paths[storage], (1, rng.randint(0, 2)), shuffle, batch, rng, load=state2, stop=False)
        seen = Counter(before + after + rest)
        twice = sorted(i for i, k in seen.items() if k > 1)
        assert not twice, f"case {case} {first} -> {second}: yielded twice: {twice}"
        assert sorted(seen) == all_ids, (f"case {case} {first} -> {second}: missing "
                                         f"{sorted(set(all_ids) - set(seen))}")


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in-order"])
def test_elastic_sampler_over_compressed_files_gives_every_record_exactly_once(elastic_corpus, shuffle):
    paths, all_ids = elastic_corpus
    dataset = tfr_torch.IndexedTFRecordDataset(paths["gz"], SPEC)
    assert len(dataset) == len(all_ids)
    rng = random.Random(f"sampler{shuffle}")
    for case in range(5):
        world = rng.choice([1, 2, 3, 4, 5, 6])  # divides 60: no padding in the first segment
        parts, before = [], []
        for rank in range(world):
            sampler = tfr_torch.ElasticDistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=shuffle,
                                                          seed=case)
            iterator = iter(sampler)
            for _ in range(rng.randrange(0, len(sampler) + 1)):
                before.append(int(dataset[next(iterator)]["id"]))
            parts.append(sampler.state_dict())
        merged = tfr_torch.elastic_state(parts)
        resumed = tfr_torch.ElasticDistributedSampler(dataset, num_replicas=1, rank=0, shuffle=shuffle, seed=case)
        resumed.load_state_dict(merged)
        after = [int(item["id"]) for item in (dataset[i] for i in resumed)]
        assert Counter(before + after) == Counter(all_ids), f"case {case}: world {world}"
