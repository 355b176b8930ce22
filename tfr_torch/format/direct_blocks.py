"""`RecordReader.blocks(sizes)` with the framed sizes of the records from an index: records read by the compiled
core straight into their own bytes (one copy from the file instead of two), from a local uncompressed file or from
the cached blocks of a remote file, checked as usual; from the first record that is not read that way, the usual
record loop (format/record_loop.py) reads on and says what is wrong."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np

from tfr_torch import _native
from tfr_torch.format.compression import NONE
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.record_loop import _NO_END, _records

if TYPE_CHECKING:
    from tfr_torch.format.reader import RecordReader

_DIRECT_FROM = 4096  # mean framed record size from which blocks(sizes) reads records straight into their bytes


def _direct_ok(reader: RecordReader, sizes: np.ndarray) -> bool:
    if reader.compression != NONE or len(sizes) == 0 or _native.core is None:
        return False
    if not hasattr(_native.core, "read_framed") or float(np.mean(sizes)) < _DIRECT_FROM:
        return False
    if int(np.min(sizes)) < OVERHEAD:  # no record has that size: the usual loop reads what the file holds
        return False
    if getattr(reader._raw, "_cache", None) is not None and hasattr(reader._raw, "local_extent"):
        return True  # a remote file with a block cache: its blocks are local files (RemoteFile.local_extent)
    try:
        reader._raw.fileno()
    except (AttributeError, OSError, ValueError):  # not a local file (fsspec's, a pipe wrapper)
        return False
    return True


def _direct(reader: RecordReader, sizes: np.ndarray) -> Generator[Any, None, None]:
    """RecordReader.blocks(sizes): groups of about a buffer's worth of records read by the compiled core's preadv
    (from the file, or from the cached blocks of a remote file: a record across two blocks is read through the file
    and framed by the core); then the usual loop from the first record not read that way (to `end`)."""
    core = _native.core
    assert core is not None  # _direct_ok
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    extent = getattr(reader._raw, "local_extent", None)  # a remote file with a block cache
    fd = reader._raw.fileno() if extent is None else -1
    end = reader.end if reader.end is not None else _NO_END
    start = pos = reader.start
    if reader.end is not None:  # never read past `end`, whatever `sizes` says
        sizes = sizes[: int(np.searchsorted(ends, reader.end - start, side="right"))]
    i = 0
    try:
        while i < len(sizes) and pos < end:
            first = int(ends[i] - sizes[i])  # where record i starts, from `start`
            j = max(int(np.searchsorted(ends, first + reader._buffer_size, side="right")), i + 1)
            if extent is None:
                records, good = core.read_framed(fd, pos, sizes[i:j], reader.verify)
            else:
                records, good, j = _from_cached_block(reader, core, extent, pos, sizes, ends, first, i, j)
            if good:
                reader.offset = pos
                yield records, pos  # reader.offset is `pos` while the caller holds the block
                reader.records += good
                pos = start + int(ends[i + good - 1])
                reader.offset = pos
            if good < j - i:
                break
            i = j
    except BaseException:
        reader._close_input()
        raise
    reader.start = pos  # the usual loop takes over from here (to `end`)
    reader._raw.seek(pos)
    yield from _records(reader, blocks=True)


def _from_cached_block(reader: RecordReader, core: Any, extent: Any, pos: int, sizes: np.ndarray, ends: np.ndarray,
                       first: int, i: int, j: int) -> tuple[list[bytes], int, int]:
    """(_direct, a remote file with a block cache) Records i .. j-1 at most, from byte `pos`: those inside the
    block `pos` is in, read from its file in the cache; or record i alone when it runs into the next block(s),
    its pieces read from theirs and framed by the core. Returns (records, how many are good, the j taken);
    none good: the usual loop reads on from `pos` (and says what is wrong)."""
    got = extent(pos)
    if got is None:  # not cached (a full disk): the usual loop reads on
        return [], 0, j
    block_fd, at, available = got
    try:
        j = min(j, int(np.searchsorted(ends, first + available, side="right")))
        if j > i:
            records, good = core.read_framed(block_fd, at, sizes[i:j], reader.verify)
            return records, good, j
        size = int(sizes[i])
        pieces = [os.pread(block_fd, available, at)]
    finally:
        os.close(block_fd)
    got_bytes = len(pieces[0])
    while got_bytes < size:  # the rest of record i, from the next blocks' files
        more = extent(pos + got_bytes)
        if more is None:
            return [], 0, i + 1
        block_fd, at, available = more
        try:
            piece = os.pread(block_fd, min(available, size - got_bytes), at)
        finally:
            os.close(block_fd)
        if not piece:
            return [], 0, i + 1
        pieces.append(piece)
        got_bytes += len(piece)
    data = b"".join(pieces)
    found, stop, _ = core.scan_records(data, 0, len(data), len(data), reader.verify, 1)
    return (found, 1, i + 1) if len(found) == 1 and stop == size else ([], 0, i + 1)
