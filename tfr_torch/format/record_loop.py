"""The sequential record loop of `RecordReader`: records framed and checked from the reader's buffer window, a bad
record, corrupt header or cut file handed to the reader's bad-record policy, and a large record of a local
uncompressed file read straight into its own bytes. The reader (format/reader.py) opens the stream and owns the
state the loop updates (`offset`, `records`, `skipped`)."""

from __future__ import annotations

import io
import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tfr_torch import _native
from tfr_torch.errors import CorruptRecordError, DecodeError, TFRecordError
from tfr_torch.format import limits
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
from tfr_torch.format.read_errors import _data_crc_error, _tail_error, _truncated
from tfr_torch.format.sniff import header_message
from tfr_torch.format.window import _Window

if TYPE_CHECKING:
    from tfr_torch.format.reader import RecordReader

_SCAN_BATCH = 4096  # records the compiled kernel frames per call
_NO_END = float("inf")
# a record of a local uncompressed file this large (and larger than the buffer) is read into its own bytes (one copy
# in memory, not the buffer grown to hold it plus a copy out); smaller ones grow the buffer, whose read-ahead the next
# records use (a direct read leaves the window empty: read-ahead after it is thrown away when the next is large too)
_DIRECT_BYTES = 8 << 20


def _over_limit(reader: RecordReader, length: int, off: int) -> DecodeError:
    """The error for a header, read from a stream that nothing else bounds, that declares more than the limit."""
    try:
        limits.check_record_length(length, reader.path, off, reader.compression)
    except DecodeError as err:
        return err
    raise AssertionError(f"{length} is within limits.MAX_RECORD_BYTES")  # the caller checked it is not


def _read_whole(reader: RecordReader, off: int, length: int, skip_data: bool) -> tuple[bytes, int] | None:
    """(the data, its stored CRC) of the record whose header (checked, and within the file's size) is at `off`,
    read from the file into one bytes object of its size (FileIO.read allocates exactly that); with `skip_data`
    (lengths without verify) the data is not read, b"" stands for it. None when the file ends first (the error
    is reported: the file shrank since it was opened)."""
    raw = cast(io.FileIO, reader._raw)
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
        reader._fail(_truncated(length, f"the file ends after {got}", reader.path, off), (off, off + got))
        return None
    return data, unpack_crc(footer, 0)[0]


def _lying_length(reader: RecordReader, w: _Window, core: Any, length: int, off: int) -> bool:
    """A header at `off` (the window's `lo`) passed its CRC but says more bytes than the uncompressed stream has
    left: a cut file, or a length that lies. Under a policy, look for a good record after it (as after a corrupt
    header); where there is one, report the header as corrupt, skipped up to it, and say True (the window is
    there). Else False: the window is left at the end, the caller reports a cut file."""
    if reader._policy is None or w.compressed:
        return False
    w.resync(core)
    at = w.base + w.lo
    if w.hi - w.lo < HEADER_SIZE:  # nothing good after it: a cut file
        return False
    err = CorruptRecordError(f"corrupt record header: it passes its CRC but says {length} bytes of data, more than "
                             f"the rest of the stream, and a good record starts at offset {at}: skipped to it",
                             reader.path, off)
    reader._fail(err, (off, at), estimated=True)
    return True


def _records(reader: RecordReader, blocks: bool = False, lengths: bool = False) -> Generator[Any, None, None]:
    """The hot loop: records one by one, or with `blocks` as `RecordReader.blocks()` describes (with `lengths`, as
    `RecordReader.lengths()` does). It keeps the window's `buf`, `view`, `lo`, `hi` and `base` in locals (see
    `_Window`) and hands `lo` to the window, and takes the five back, around each call that reads or moves data."""
    total = reader._total
    end = reader.end if reader.end is not None else _NO_END
    verify = reader.verify
    path = reader.path
    w = _Window(reader, reader._buffer_size)
    buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
    core = _native.core  # the compiled framing kernel, or None: the loop below is then the whole reader
    # a local uncompressed file of known size: a record bigger than the buffer is read straight into its own
    # bytes (one copy of it in memory, not the buffer grown to hold it and then a copy out of the buffer)
    direct = total is not None and isinstance(reader._stream, io.FileIO)  # (not wrapped: _Prefixed, Inflater)
    try:
        while True:
            off = base + lo
            reader.offset = off
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
                        reader.records += len(sizes)
                        reader.offset = base + lo
                        continue
                    if blocks:
                        yield found, off  # reader.offset is `off` while the caller holds the block
                        reader.records += len(found)
                        reader.offset = base + lo
                        continue
                    for data in found:
                        off += len(data) + OVERHEAD
                        reader.records += 1
                        reader.offset = off
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
                        reader._fail(_tail_error(bytes(view[lo:hi]), path, off, reader.compression), (off, base + hi))
                    return
            length = parse_header(buf, lo)
            if length is None:
                err: TFRecordError = CorruptRecordError(header_message(
                    view[lo : min(hi, lo + 512)], off, header_crc(buf, lo), unpack_header(buf, lo)[1],
                    reader.compression), path, off)
                w.lo = lo
                if w.compressed:  # where the next record starts is unknown: give the rest of the member up
                    w.give_up_member(err)
                else:
                    if reader._policy is None:
                        raise err
                    w.resync(core)
                    reader._fail(err, (off, w.base + w.lo), estimated=True)
                buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                continue
            need = length + OVERHEAD
            if hi - lo < need:
                if total is None and length > limits.MAX_RECORD_BYTES:  # nothing bounds it but the limit
                    err = _over_limit(reader, length, off)
                    if not w.compressed:  # a plain stream of unknown size: nothing after it can be framed
                        reader._fail(err)
                        return
                    w.lo = lo
                    w.give_up_member(err)
                    buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                    continue
                if total is not None and off + need > total:
                    w.lo = lo
                    if _lying_length(reader, w, core, length, off):  # a good record follows: skipped to it
                        buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                        continue
                    reader._fail(_truncated(length, f"the file has only {total - off}", path, off), (off, total))
                    return
                w.lo = lo
                if direct and need > max(len(buf), _DIRECT_BYTES):  # a large record: into its own bytes
                    got = _read_whole(reader, off, length, lengths and not verify)
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
                        stop = base + hi
                        if _lying_length(reader, w, core, length, off):
                            buf, view, lo, hi, base = w.buf, w.view, w.lo, w.hi, w.base
                            continue
                        reader._fail(_truncated(length, f"the stream ends after {stop - off}", path, off),
                                     (off, stop))
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
                reader._fail(_data_crc_error(data, stored, path, off), (off, base + lo))
                if w.compressed and w.suspect is None:
                    w.suspect = (off, reader.records)
                continue
            if blocks:
                yield (np.array([length], dtype=np.int64) if lengths else [data]), off
                reader.records += 1
                reader.offset = base + lo
                continue
            reader.records += 1
            reader.offset = base + lo
            yield data
    finally:
        w.view.release()
        reader._close_input()
