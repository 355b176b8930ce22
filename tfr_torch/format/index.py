"""Index files: one text line `"<offset> <size>\\n"` per record, the format DALI and the `tfrecord` package use.

`offset` is where the record's header starts and `size` its framed size (12 + length + 4). For GZIP/ZLIB files
the offsets are positions in the decompressed stream: a reader reaches them with one decompression pass
(`read_records(path, start=..., end=...)`), never one per record; `build_index` also writes their seek points
(`<index>.seek`, format/seek.py), through which RecordFile reads any record inflating at most one interval.
"""

from __future__ import annotations

import os
import re
from typing import cast

import numpy as np

from tfr_torch.errors import IndexMismatchError
from tfr_torch.format.compression import NONE
from tfr_torch.format.options import CompressionOrAuto, check_compression
from tfr_torch.format.framing import HEADER_SIZE, OVERHEAD, parse_header
from tfr_torch.format.paths import PathLike, as_path, atomic_output, exists, file_size, is_url, open_input
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.writer import naming_the_path
from tfr_torch.format.remote_options import RemoteOptions
from tfr_torch.format.seek import (
    DEFAULT_SPAN,
    build_seek_points,
    check_span,
    read_seek_points,
    remove_seek_points,
    seek_path_for,
)

_PROBE = RemoteOptions(block_size=1 << 16, readahead=0)  # checking a remote file's index: small requests only

__all__ = ["build_index", "read_index", "scan_index", "check_index", "index_path_for"]

_WELL_FORMED = re.compile(rb"(?:[ \t]*\d+[ \t]+\d+[ \t]*\r?\n)*(?:[ \t]*\d+[ \t]+\d+[ \t]*)?")


def index_path_for(path: PathLike) -> str:
    """The default index path of a TFRecord file: `<file>.idx` beside it."""
    return as_path(path) + ".idx"


def scan_index(path: PathLike, compression: CompressionOrAuto = "auto", verify: bool = False) -> np.ndarray:
    """Scan a TFRecord file and return its index as an int64 array of shape (n, 2): (offset, size) per record.

    With `verify=False` only the header CRCs are checked (data CRCs are checked when `verify=True`).
    """
    parts = []
    with RecordReader(path, check_compression(compression, auto=True), verify) as reader:
        for lengths, offset in reader.lengths():
            sizes = lengths + OVERHEAD
            starts = np.empty_like(sizes)
            starts[0] = offset
            np.cumsum(sizes[:-1], out=starts[1:])
            starts[1:] += offset
            parts.append(np.stack([starts, sizes], axis=1))
    return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)


def build_index(path: PathLike, index_path: PathLike | None = None, compression: CompressionOrAuto = "auto", *,
                seek_span: int | None = DEFAULT_SPAN) -> str:
    """Write the index of a TFRecord file (default `<file>.idx`) and return the index's path.

    The file is byte-identical to what DALI's `tfrecord2idx` and the `tfrecord` package write for uncompressed
    files; empty files give an empty index. Written atomically. For a GZIP/ZLIB file, its seek points are also
    written beside the index (`<index>.seek`, one every `seek_span` decompressed bytes; None: none) when the
    compiled core is available, for random access (RecordFile, IndexedTFRecordDataset, global shuffling). Where it
    writes none (an uncompressed file, `seek_span=None`), seek points an earlier run left there are removed.

    >>> build_index("train.tfrecord")  # doctest: +SKIP
    'train.tfrecord.idx'
    """
    compression = check_compression(compression, auto=True)
    if seek_span is not None:  # checked before the file is read
        check_span(seek_span)
    local = as_path(path)
    if not is_url(local) and os.path.exists(local) and not os.path.isdir(local) and not os.path.isfile(local):
        # a pipe, a FIFO, /dev/stdin: read once only, and an index is of a file read again by offset
        raise ValueError(f"{local} is not a regular file (a pipe or a device?): an index describes a file that is "
                         "read again by offset; write the records to a file first")
    with RecordReader(path, compression, verify=False) as probe:
        kind = probe.compression
    index = scan_index(path, cast(CompressionOrAuto, kind))
    target = index_path_for(path) if index_path is None else as_path(index_path)
    text = "".join(f"{offset} {size}\n" for offset, size in index.tolist())
    with naming_the_path(target, "an index"), atomic_output(target) as f:
        f.write(text.encode("ascii"))
    if kind != NONE and seek_span is not None:
        try:
            with naming_the_path(seek_path_for(target), "the seek points of an index"):
                build_seek_points(path, seek_path_for(target), kind, seek_span)
        except OSError:  # (a full disk): seek points of an earlier run must not stay beside the new index
            remove_seek_points(target)
            raise
    else:  # seek points an earlier run left beside this index describe the file as it was then: the datasets
        remove_seek_points(target)  # would refuse the file for them (or, were its size the same, seek wrong)
    return target


def read_index(path: PathLike, tfrecord_path: PathLike | None = None,
               compression: CompressionOrAuto = "auto") -> np.ndarray:
    """Read an index file into an int64 array of shape (n, 2): (offset, size) per record.

    The index must describe consecutive records from offset 0. When `tfrecord_path` is given the index is also
    checked against that file (see `check_index`). Problems raise IndexMismatchError naming both files.

    >>> read_index("train.tfrecord.idx", "train.tfrecord")  # doctest: +SKIP
    array([[  0, 120],
           [120, 118]])
    """
    check_compression(compression, auto=True)
    index_path = as_path(path)
    with open_input(index_path) as f:
        text = f.read()
    target = as_path(tfrecord_path) if tfrecord_path is not None else None
    lines = text.splitlines()
    values = None
    if _WELL_FORMED.fullmatch(text):
        try:
            values = np.array(text.split(), dtype=np.int64)
        except (ValueError, OverflowError):
            values = None
    if values is None:
        bad, why = next(((n, _line_problem(line)) for n, line in enumerate(lines, 1) if _line_problem(line)),
                        (len(lines), "expected '<offset> <size>'"))
        raise IndexMismatchError(f"line {bad} of the index is {lines[bad - 1][:80]!r}: {why}", target, None, index_path)
    index = values.reshape(-1, 2)
    _check_layout(index, target, index_path)
    if target is not None:
        check_index(index, target, index_path, compression)
    return index


def _line_problem(line: bytes) -> str | None:
    """What is wrong with one line of an index file, or None when it is two decimal numbers that fit in int64."""
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return "expected '<offset> <size>'"
    if any(int(p) > 2**63 - 1 for p in parts):
        return "a number larger than 2**63 - 1 (expected '<offset> <size>')"
    return None


def _check_layout(index: np.ndarray, path: str | None, index_path: str) -> None:
    if not len(index):
        return
    offsets, sizes = index[:, 0], index[:, 1]
    if offsets[0] != 0:
        raise IndexMismatchError(f"the index starts at offset {offsets[0]}, expected 0", path, None, index_path)
    small = np.flatnonzero(sizes < OVERHEAD)
    if small.size:
        i = int(small[0])
        raise IndexMismatchError(f"line {i + 1} of the index gives a record size of {sizes[i]}, expected at least "
                                 f"{OVERHEAD}", path, int(offsets[i]), index_path)
    with np.errstate(over="ignore"):
        ends = offsets + sizes  # both non-negative: a sum that wrapped is smaller than its offset
    wrapped = np.flatnonzero(ends < offsets)
    if wrapped.size:
        i = int(wrapped[0])
        raise IndexMismatchError(f"line {i + 1} of the index gives offset {offsets[i]} and size {sizes[i]}, which "
                                 "end beyond 2**63 - 1 bytes", path, None, index_path)
    gaps = np.flatnonzero(offsets[1:] != ends[:-1])
    if gaps.size:
        i = int(gaps[0])
        raise IndexMismatchError(
            f"line {i + 2} of the index says a record starts at {offsets[i + 1]}, but the record before it ends at "
            f"{offsets[i] + sizes[i]}", path, int(offsets[i + 1]), index_path)


def check_index(index: np.ndarray, path: PathLike, index_path: PathLike | None = None,
                compression: CompressionOrAuto = "auto") -> None:
    """Check that an index describes a TFRecord file, cheaply (a few small reads, never the whole file).

    Uncompressed files: the records must end exactly at the end of the file, and the headers of the first,
    middle and last records must be valid and agree with the sizes in the index. Compressed files: the first
    header is checked; offsets beyond it are checked as they are read. A stale index, a truncated one, or one
    made for another file raises IndexMismatchError naming both files.
    """
    check_compression(compression, auto=True)
    path = as_path(path)
    index_path = as_path(index_path) if index_path is not None else index_path_for(path)
    _check_layout(index, path, index_path)
    # a remote file is read with small requests and nothing ahead: a few headers, not blocks of megabytes
    with RecordReader(path, compression, verify=False, remote=_PROBE if is_url(path) else None) as reader:
        if reader.compression != NONE:
            first = next(reader, None) if len(index) else None
            if len(index) and (first is None or len(first) + OVERHEAD != index[0, 1]):
                found = "no record" if first is None else f"a record of {len(first) + OVERHEAD} bytes"
                raise IndexMismatchError(
                    f"line 1 of the index says a record of {index[0, 1]} bytes starts at offset 0, but the file has "
                    f"{found} there (stale index, or made for another file?)", path, 0, index_path)
            _check_decompressed_end(index, path, index_path, reader.compression)
            return
        raw = reader._raw  # not read from yet: its size, and the headers below, with no second open
        size = getattr(raw, "size", None)
        size = int(size) if isinstance(size, int) else file_size(path)
        end = int(index[-1, 0]) + int(index[-1, 1]) if len(index) else 0
        if end != size:
            raise IndexMismatchError(
                f"the index describes {len(index)} records ending at byte {end}, but the file has {size} bytes "
                "(stale index, or made for another file?)", path, None, index_path)
        rows = sorted({0, len(index) // 2, len(index) - 1}) if len(index) else []
        prefetch = getattr(raw, "prefetch", None)
        if prefetch is not None:  # a remote file: the headers' requests run together
            prefetch([(int(index[row, 0]), int(index[row, 0]) + HEADER_SIZE) for row in rows])
        for row in rows:
            raw.seek(int(index[row, 0]))
            _check_header(raw.read(HEADER_SIZE), index[row], row, path, index_path)


def _check_decompressed_end(index: np.ndarray, path: str, index_path: str, compression: str) -> None:
    """A compressed file with seek points beside its index (`<index>.seek`, which build_index writes): they record
    the file's decompressed size, which the index's records must end at exactly, as an uncompressed file's size:
    a truncated index, or one made for another file, would otherwise lose records silently. Seek points beside the
    index that describe another file are refused too (build_index writes the two together). Without any, offsets
    are checked as they are read."""
    size = file_size(path)
    points = None
    for seek_path in dict.fromkeys((seek_path_for(index_path), seek_path_for(path + ".idx"))):
        if exists(seek_path):  # beside the index (build_index writes them there), else the file's usual place
            points = read_seek_points(seek_path, path, compression, size)  # refuses another file's
            break
    if points is None:
        return
    end = int(index[-1, 0]) + int(index[-1, 1]) if len(index) else 0
    if end != points.total_out:
        raise IndexMismatchError(
            f"the index describes {len(index)} records ending at decompressed byte {end}, but the file decompresses "
            f"to {points.total_out} bytes (its seek points say so; stale index, or made for another file?)", path,
            None, index_path)


def _check_header(header: bytes, row: np.ndarray, line: int, path: str, index_path: str) -> None:
    offset, size = int(row[0]), int(row[1])
    if len(header) < HEADER_SIZE:
        raise IndexMismatchError(f"line {line + 1} of the index points at offset {offset}, past the end of the file",
                                 path, offset, index_path)
    length = parse_header(header)
    if length is None:  # a header whose CRC fails: the file damaged there, or an index of other bytes
        raise IndexMismatchError(
            f"line {line + 1} of the index says a record of {size} bytes starts at offset {offset}, but the header "
            "there fails its CRC (a corrupt record, or a stale index or one made for another file? `tfr-torch "
            "verify` reads the file alone)", path, offset, index_path)
    if length + OVERHEAD != size:
        raise IndexMismatchError(
            f"line {line + 1} of the index says a record of {size} bytes starts at offset {offset}, but the file has "
            f"a record of {length + OVERHEAD} bytes there (stale index, or made for another file?)", path, offset,
            index_path)
