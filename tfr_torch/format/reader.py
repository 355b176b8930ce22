"""Reading TFRecord files: framing, CRC checks, compression, byte ranges and the bad-record policy.

The reader fills one reusable buffer with large reads and copies each record out into its own `bytes`, so a
record handed to the caller never changes afterwards. The length CRC of every header is always checked (it
guards every allocation); the data CRC is checked when `verify=True`. Random access by offset is
format/record_file.py (`RecordFile`). Here: opening the stream, the ways to iterate it and the bad-record policy;
the record loop itself is format/record_loop.py, `blocks(sizes)`'s direct reads format/direct_blocks.py.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol, cast

import numpy as np

from tfr_torch.errors import SkippedRecordWarning, TFRecordError, TruncatedRecordError
from tfr_torch.format.compression import NONE, compression_from_name, detect_compression, normalize_compression
from tfr_torch.format.direct_blocks import _direct, _direct_ok
from tfr_torch.format.framing import FOOTER_SIZE, HEADER_SIZE
from tfr_torch.format.inflate import Inflater, read_past
from tfr_torch.format.options import CompressionOrAuto, OnError, check_compression
from tfr_torch.format.paths import PathLike, as_path, is_url, open_input
from tfr_torch.format.read_errors import _mark_skipped
from tfr_torch.format.record_loop import _records
from tfr_torch.format.remote_open import open_remote
from tfr_torch.format.remote_options import RemoteOptions
from tfr_torch.format.streams import _BUFFER, _Prefixed, _seekable, _size_of

__all__ = ["HEADER_SIZE", "FOOTER_SIZE", "RecordReader", "read_records", "OnError"]


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
        if sizes is not None and self._gen is None and _direct_ok(self, sizes):
            self._gen = _direct(self, sizes)
            self._mode = "blocks"
        return self._generator("blocks")

    def lengths(self) -> Iterator[tuple[np.ndarray, int]]:
        """As `blocks()`, but the lengths of the records (an int64 array) instead of the records: the compiled core
        then frames and checks them without copying any data out (for counting, indexing, verifying)."""
        return self._generator("lengths")

    def _generator(self, mode: str) -> Generator[Any, None, None]:
        if self._gen is None:
            self._gen = _records(self, mode != "records", mode == "lengths")
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
