"""Reading TFRecord files: framing, CRC checks, compression, byte ranges and the bad-record policy.

The reader fills one reusable buffer with large reads and copies each record out into its own `bytes`, so a
record handed to the caller never changes afterwards. The length CRC of every header is always checked (it
guards every allocation); the data CRC is checked when `verify=True`. Random access by offset is
format/record_file.py (`RecordFile`).
"""

from __future__ import annotations

import io
import operator
import os
import warnings
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol, cast

import numpy as np

from tfr_torch import _native
from tfr_torch.errors import CorruptRecordError, DecodeError, SkippedRecordWarning, TFRecordError, TruncatedRecordError
from tfr_torch.format import limits
from tfr_torch.format.compression import NONE, compression_from_name, detect_compression, normalize_compression
from tfr_torch.format.inflate import Inflater, read_past
from tfr_torch.format.framing import (
    FOOTER_SIZE,
    HEADER_SIZE,
    OVERHEAD,
    header_crc,
    masked_crc32c,
    parse_header,
    unpack_crc,
    unpack_header,
)
from tfr_torch.format.options import CompressionOrAuto, OnError, check_compression
from tfr_torch.format.read_errors import _data_crc_error, _mark_skipped, _tail_error, _truncated
from tfr_torch.format.remote import RemoteOptions
from tfr_torch.format.remote_open import open_remote
from tfr_torch.format.paths import PathLike, as_path, is_url, open_input
from tfr_torch.format.sniff import header_message
from tfr_torch.format.streams import _BUFFER, _Prefixed, _seekable, _size_of
from tfr_torch.format.window import _Window

__all__ = ["HEADER_SIZE", "FOOTER_SIZE", "RecordReader", "read_records", "OnError"]

_SCAN_BATCH = 4096  # records the compiled kernel frames per call
_NO_END = float("inf")
_DIRECT_FROM = 4096  # mean framed record size from which blocks(sizes) reads records straight into their bytes
# a record of a local uncompressed file this large (and larger than the buffer) is read into its own bytes (one copy
# in memory, not the buffer grown to hold it plus a copy out); smaller ones grow the buffer, whose read-ahead the next
# records use (a direct read leaves the window empty: read-ahead after it is thrown away when the next is large too)
_DIRECT_BYTES = 8 << 20

class _Stream(Protocol):
    """What the record loop reads from: a file opened by open_input, `_Prefixed` or an `Inflater`."""

    def readinto(self, view: memoryview, /) -> int: ...



def _resolve_policy(on_error: OnError) -> Callable[[TFRecordError], None] | None:
    if on_error == "raise":
        return None
    if on_error == "skip":
        return _warn
    if callable(on_error):
        return on_error
    raise ValueError(f'on_error must be "raise", "skip" or a callable taking the error, got {on_error!r}')


def _warn(err: TFRecordError) -> None:
    warnings.warn(f"skipping bad data: {err}", SkippedRecordWarning, stacklevel=5)  # the user's line: under
    #                              _report, under _fail or _Window.give_up_member, under the record loop


class RecordReader:
    """An iterator over the records of one TFRecord file, as `bytes`.

    Use `read_records()` to make one. Attributes: `path`; `compression` ("none", "gzip" or "zlib", detected
    when "auto"); `offset`, the byte offset of the next record (in the decompressed stream for compressed
    files); `records`, how many were yielded; `skipped`, how many records were skipped under `on_error="skip"`
    (or with their errors handed to an `on_error` callable): each error's `skipped_records`, that is 1 for a bad
    record or a corrupt region of an uncompressed file, and for a GZIP member (ZLIB stream) given up an estimate
    of the records it still held (see `read_records`).
    """

    def __init__(
        self,
        path: PathLike,
        compression: str | None = "auto",
        verify: bool = True,
        *,
        start: int = 0,
        end: int | None = None,
        on_error: OnError = "raise",
        buffer_size: int = _BUFFER,
        remote: RemoteOptions | None = None,
    ) -> None:
        self.path = as_path(path)
        self.verify = bool(verify)
        start = _offset(start, "start")
        end = None if end is None else _offset(end, "end")
        if start < 0:
            raise ValueError(f"start must be a non-negative byte offset, got {start!r}")
        if end is not None and end < start:
            raise ValueError(f"end must be None or a byte offset >= start ({start}), got {end!r}")
        self._policy = _resolve_policy(on_error)
        self._buffer_size = max(int(buffer_size), 64)
        self.start, self.end = start, end
        self.offset = start
        self.records = 0
        self.skipped = 0
        self._raw = open_remote(self.path, remote) if is_url(self.path) else open_input(self.path)
        try:
            self.compression, self._stream, self._total = self._open(
                normalize_compression(compression, allow_auto=True))
        except BaseException:
            self._raw.close()
            raise
        self._gen: Generator[Any, None, None] | None = None
        self._mode = "records"

    def _open(self, compression: str) -> tuple[str, _Stream, int | None]:
        raw = self._raw
        head = b""
        if compression == "auto":
            compression = compression_from_name(self.path) or ""
            if not compression:
                head = raw.read(HEADER_SIZE)
                compression = detect_compression(head)
        if compression == NONE:
            total = _size_of(raw)
            stream: _Stream = cast(_Stream, raw)  # open_input's files (FileIO, fsspec's) all have readinto
            if head or self.start:
                if _seekable(raw):
                    raw.seek(self.start)
                else:  # a pipe-like stream: give back the sniffed bytes, then skip to `start`
                    stream = _Prefixed(head, raw)
                    if self.start and read_past(stream, self.start) < self.start:
                        raise TruncatedRecordError(f"cannot start reading at offset {self.start}: the file is shorter",
                                                   self.path, self.start)
            return NONE, stream, total
        inflater = Inflater(raw, compression, self.path, head=head)
        if self.start:
            skipped = inflater.skip(self.start)
            if skipped < self.start:
                raise TruncatedRecordError(
                    f"cannot start reading at offset {self.start}: the decompressed stream has only {skipped} bytes",
                    self.path, self.start)
        return compression, inflater, None

    def __iter__(self) -> Iterator[bytes]:
        return self._generator("records")  # iterating the generator itself saves a Python call per record

    def __next__(self) -> bytes:
        return cast(bytes, next(self._generator("records")))

    def blocks(self, sizes: np.ndarray | None = None) -> Iterator[tuple[list[bytes], int]]:
        """The records in blocks, as the reader frames them: `(records, offset)`, a non-empty list of consecutive
        records (each a fresh `bytes`) and the byte offset of the first; each next record starts its framing
        (OVERHEAD, 16 bytes) after the one before ends. One Python step per block instead of per record, for callers
        that batch. A reader is iterated one way only: record by record, in blocks, or in lengths.

        `sizes`: the framed sizes of the records from `start` on, from an index checked against the file. Where
        they pay (an uncompressed local file, records of a few KB or more, the compiled core), records are then read
        straight into their own bytes (one copy from the file instead of two) and checked as usual: from the
        first one that does not match its size or fails a check, reading goes on as without `sizes`, which
        reports what is wrong in the same words."""
        if sizes is not None and self._gen is None and self._direct_ok(sizes):
            self._gen = self._direct(sizes)
            self._mode = "blocks"
        return self._generator("blocks")

    def _direct_ok(self, sizes: np.ndarray) -> bool:
        if self.compression != NONE or len(sizes) == 0 or _native.core is None:
            return False
        if not hasattr(_native.core, "read_framed") or float(np.mean(sizes)) < _DIRECT_FROM:
            return False
        if int(np.min(sizes)) < OVERHEAD:  # no record has that size: the usual loop reads what the file holds
            return False
        if getattr(self._raw, "_cache", None) is not None and hasattr(self._raw, "local_extent"):
            return True  # a remote file with a block cache: its blocks are local files (RemoteFile.local_extent)
        try:
            self._raw.fileno()
        except (AttributeError, OSError, ValueError):  # not a local file (fsspec's, a pipe wrapper)
            return False
        return True

    def _direct(self, sizes: np.ndarray) -> Generator[Any, None, None]:
        """blocks(sizes): groups of about a buffer's worth of records read by the compiled core's preadv (from the
        file, or from the cached blocks of a remote file: a record across two blocks is read through the file and
        framed by the core); then the usual loop from the first record not read that way (to `end`)."""
        core = _native.core
        assert core is not None  # _direct_ok
        sizes = np.ascontiguousarray(sizes, dtype=np.int64)
        ends = np.cumsum(sizes)
        extent = getattr(self._raw, "local_extent", None)  # a remote file with a block cache
        fd = self._raw.fileno() if extent is None else -1
        end = self.end if self.end is not None else _NO_END
        start = pos = self.start
        if self.end is not None:  # never read past `end`, whatever `sizes` says
            sizes = sizes[: int(np.searchsorted(ends, self.end - start, side="right"))]
        i = 0
        try:
            while i < len(sizes) and pos < end:
                first = int(ends[i] - sizes[i])  # where record i starts, from `start`
                j = max(int(np.searchsorted(ends, first + self._buffer_size, side="right")), i + 1)
                if extent is None:
                    records, good = core.read_framed(fd, pos, sizes[i:j], self.verify)
                else:
                    records, good, j = self._from_cached_block(core, extent, pos, sizes, ends, first, i, j)
                if good:
                    self.offset = pos
                    yield records, pos  # self.offset is `pos` while the caller holds the block
                    self.records += good
                    pos = start + int(ends[i + good - 1])
                    self.offset = pos
                if good < j - i:
                    break
                i = j
        except BaseException:
            self._close_input()
            raise
        self.start = pos  # the usual loop takes over from here (to `end`)
        self._raw.seek(pos)
        yield from self._records(blocks=True)

    def _from_cached_block(self, core: Any, extent: Any, pos: int, sizes: np.ndarray, ends: np.ndarray, first: int,
                           i: int, j: int) -> tuple[list[bytes], int, int]:
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
                records, good = core.read_framed(block_fd, at, sizes[i:j], self.verify)
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
        found, stop, _ = core.scan_records(data, 0, len(data), len(data), self.verify, 1)
        return (found, 1, i + 1) if len(found) == 1 and stop == size else ([], 0, i + 1)

    def lengths(self) -> Iterator[tuple[np.ndarray, int]]:
        """As `blocks()`, but the lengths of the records (an int64 array) instead of the records: the compiled core
        then frames and checks them without copying any data out (for counting, indexing, verifying)."""
        return self._generator("lengths")

    def _generator(self, mode: str) -> Generator[Any, None, None]:
        if self._gen is None:
            self._gen = self._records(mode != "records", mode == "lengths")
            self._mode = mode
        elif self._mode != mode:
            raise ValueError(f"this reader of {self.path} is already iterated ({self._mode}); iterate it one way")
        return self._gen

    def close(self) -> None:
        """Close the file. Safe to call more than once."""
        if self._gen is not None:
            self._gen.close()
        self._close_input()

    def _close_input(self) -> None:
        if isinstance(self._stream, Inflater):  # stops its inflate thread first
            self._stream.close()
        self._raw.close()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fail(self, err: TFRecordError, span: tuple[int, int] | None = None, estimated: bool = False) -> None:
        """Raise `err`, or (under a policy) count one skipped record and hand `err` over. `span`: the offsets of
        the bytes skipped; `estimated`: the bytes held an unknown number of records (a corrupt region)."""
        if self._policy is None:
            raise err
        _mark_skipped(err, 1, estimated, span, span if self.compression == NONE else None)
        self._report(err)

    def _report(self, err: TFRecordError) -> None:
        self.skipped += err.skipped_records or 1
        assert self._policy is not None  # callers raise first without one
        self._policy(err)

    def _over_limit(self, length: int, off: int) -> DecodeError:
        """The error for a header, read from a stream that nothing else bounds, that declares more than the limit."""
        try:
            limits.check_record_length(length, self.path, off, self.compression)
        except DecodeError as err:
            return err
        raise AssertionError(f"{length} is within limits.MAX_RECORD_BYTES")  # the caller checked it is not

    def _read_whole(self, off: int, length: int, skip_data: bool) -> tuple[bytes, int] | None:
        """(the data, its stored CRC) of the record whose header (checked, and within the file's size) is at `off`,
        read from the file into one bytes object of its size (FileIO.read allocates exactly that); with `skip_data`
        (lengths without verify) the data is not read, b"" stands for it. None when the file ends first (the error
        is reported: the file shrank since it was opened)."""
        raw = cast(io.FileIO, self._raw)
        raw.seek(off + HEADER_SIZE + (length if skip_data else 0))
        data = b""
        if not skip_data:
            data = raw.read(length) or b""
            while len(data) < length:  # a short read (rare for a local file): the rest, joined
                more = raw.read(length - len(data))
                if not more:
                    break
                data += more
        whole = skip_data or len(data) == length
        footer = (raw.read(FOOTER_SIZE) or b"") if whole else b""
        if len(footer) < FOOTER_SIZE:
            got = HEADER_SIZE + (length if skip_data else len(data)) + len(footer)
            if skip_data:  # the data was not read: where the file ends now says how much of it is there
                got = min(got, max(os.fstat(raw.fileno()).st_size - off, 0))
            self._fail(_truncated(length, f"the file ends after {got}", self.path, off), (off, off + got))
            return None
        return data, unpack_crc(footer, 0)[0]

    def _records(self, blocks: bool = False, lengths: bool = False) -> Generator[Any, None, None]:
        """The hot loop: records one by one, or with `blocks` as `blocks()` describes (with `lengths`, as
        `lengths()` does). It keeps the window's `buf`, `view`, `lo`, `hi` and `base` in locals (see `_Window`) and
        hands `lo` to the window, and takes the five back, around each call that reads or moves data."""
        total = self._total
        end = self.end if self.end is not None else _NO_END
        verify = self.verify
        path = self.path
        w = _Window(self, self._buffer_size)
        buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
        core = _native.core  # the compiled framing kernel, or None: the loop below is then the whole reader
        # a local uncompressed file of known size: a record bigger than the buffer is read straight into its own
        # bytes (one copy of it in memory, not the buffer grown to hold it and then a copy out of the buffer)
        direct = total is not None and isinstance(self._stream, io.FileIO)  # (not wrapped: _Prefixed, Inflater)
        try:
            while True:
                off = base + lo
                self.offset = off
                if off >= end:
                    return
                if core is not None and hi - lo >= HEADER_SIZE:  # every whole, good record in the buffer at once
                    limit = hi if end == _NO_END else min(hi, end - base)
                    found, stop, _ = core.scan_records(buf, lo, hi, limit, verify, _SCAN_BATCH, lengths)
                    if found:
                        lo = stop
                        if lengths:
                            sizes = np.frombuffer(found, dtype=np.int64)
                            yield sizes, off
                            self.records += len(sizes)
                            self.offset = base + lo
                            continue
                        if blocks:
                            yield found, off  # self.offset is `off` while the caller holds the block
                            self.records += len(found)
                            self.offset = base + lo
                            continue
                        for data in found:
                            off += len(data) + OVERHEAD
                            self.records += 1
                            self.offset = off
                            yield data
                        continue
                    # nothing whole and good at `lo`: the step below reads more, or reports what is wrong
                if hi - lo < HEADER_SIZE:
                    w.lo = lo
                    w.fill(HEADER_SIZE)
                    buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                    if hi - lo < HEADER_SIZE:
                        if w.broken:  # the stream failed (inside this member): give the rest of it up
                            w.give_up_member(None)
                            buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                            continue
                        if hi > lo:
                            self._fail(_tail_error(bytes(view[lo:hi]), path, off, self.compression), (off, base + hi))
                        return
                length = parse_header(buf, lo)
                if length is None:
                    err: TFRecordError = CorruptRecordError(header_message(
                        view[lo : min(hi, lo + 512)], off, header_crc(buf, lo), unpack_header(buf, lo)[1],
                        self.compression), path, off)
                    w.lo = lo
                    if w.compressed:  # where the next record starts is unknown: give the rest of the member up
                        w.give_up_member(err)
                    else:
                        if self._policy is None:
                            raise err
                        w.resync(core)
                        self._fail(err, (off, w.base + w.lo), estimated=True)
                    buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                    continue
                need = length + OVERHEAD
                if hi - lo < need:
                    if total is None and length > limits.MAX_RECORD_BYTES:  # nothing bounds it but the limit
                        err = self._over_limit(length, off)
                        if not w.compressed:  # a plain stream of unknown size: nothing after it can be framed
                            self._fail(err)
                            return
                        w.lo = lo
                        w.give_up_member(err)
                        buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                        continue
                    if total is not None and off + need > total:
                        self._fail(_truncated(length, f"the file has only {total - off}", path, off), (off, total))
                        return
                    w.lo = lo
                    if direct and need > max(len(buf), _DIRECT_BYTES):  # a large record: into its own bytes
                        got = self._read_whole(off, length, lengths and not verify)
                        w.lo = w.hi = 0
                        w.base, w.eof = off + need, False  # the file is there now: the window reads on from it
                        buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                        if got is None:
                            return
                        data, stored = got
                    else:
                        w.fill(need)
                        buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                        if hi - lo < need:
                            if w.broken:  # the stream failed inside this record: give the rest of the member up
                                w.give_up_member(None)
                                buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                                continue
                            self._fail(_truncated(length, f"the stream ends after {hi - lo}", path, off),
                                       (off, base + hi))
                            return
                        data_end = lo + HEADER_SIZE + length
                        data = bytes(view[lo + HEADER_SIZE : data_end])
                        stored = unpack_crc(buf, data_end)[0] if verify else 0
                        lo += need
                else:
                    data_end = lo + HEADER_SIZE + length
                    data = bytes(view[lo + HEADER_SIZE : data_end])
                    stored = unpack_crc(buf, data_end)[0] if verify else 0  # (read only to check)
                    lo += need
                if verify and masked_crc32c(data) != stored:
                    # this record alone: its header passed its CRC, so the next record starts where it says, and
                    # the stream has not failed (see _Window.give_up_member for a member that fails later)
                    self._fail(_data_crc_error(data, stored, path, off), (off, base + lo))
                    if w.compressed and w.suspect is None:
                        w.suspect = (off, self.records)
                    continue
                if blocks:
                    yield (np.array([length], dtype=np.int64) if lengths else [data]), off
                    self.records += 1
                    self.offset = base + lo
                    continue
                self.records += 1
                self.offset = base + lo
                yield data
        finally:
            w.view.release()
            self._close_input()


def _offset(value: object, name: str) -> int:
    """An int from an int-like offset (numpy integers from an index array included)."""
    try:
        return operator.index(value)  # type: ignore[arg-type]  # anything without __index__: TypeError, below
    except TypeError:
        raise ValueError(f"{name} must be a byte offset (an int), got {value!r}") from None



def read_records(
    path: PathLike,
    compression: CompressionOrAuto = "auto",
    verify: bool = True,
    *,
    start: int = 0,
    end: int | None = None,
    on_error: OnError = "raise",
    remote: RemoteOptions | None = None,
) -> RecordReader:
    """Iterate over the records of a TFRecord file as `bytes` (each a fresh object the caller owns).

    - `compression`: "auto" (from the name, else from the first bytes), None/"" (none), "gzip"/"GZIP",
      "zlib"/"ZLIB".
    - `verify`: check each record's data CRC (the header CRC is always checked).
    - `start`, `end`: read only the records whose header begins in `[start, end)`; `start` must be a record
      boundary (an offset from an index). In a compressed file these are offsets in the decompressed stream,
      reached with one decompression pass.
    - `on_error`: "raise" (default) raises CorruptRecordError / TruncatedRecordError; "skip" warns
      (SkippedRecordWarning), skips and counts the records skipped in `.skipped`; a callable is called with each
      error instead of warning (raise from it to stop). What is skipped: a record whose data CRC fails, alone
      (its header passed, so the next record starts where it says; in a GZIP/ZLIB file too, while the stream has
      not failed); after a corrupt header in an uncompressed file, the bytes up to the next place where a header
      and its data pass their CRCs (counted as one); in a GZIP/ZLIB file whose stream fails (a zlib error, a
      check value that does not match, a cut file) or holds a corrupt header, the rest of that gzip member (of a
      ZLIB file, the rest of the file), then reading goes on at the next member. How many records that lost is
      unknown: the error's message and its `skipped_*` attributes give an estimate and the bytes lost, and
      `.skipped` counts the estimate. Records read after a skipped bad record are yielded as they come (each
      passed its CRCs); if their member fails later, the error names them (the member's check comes at its end).

    - `remote`: how a URL (s3://, gs://, ...) is read: block size, read-ahead, requests in flight, a local block
      cache (`RemoteOptions`; None: its defaults).

    >>> with read_records("data.tfrecord") as records:  # doctest: +SKIP
    ...     for record in records:
    ...         ...
    """
    return RecordReader(path, check_compression(compression, auto=True), verify, start=start, end=end,
                        on_error=on_error, remote=remote)
