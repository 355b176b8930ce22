"""Random access to the records of a TFRecord file by byte offset (from an index): `RecordFile`.

Each read checks the record's header (against the framed size from the index, when given) and its data CRC; a
GZIP or ZLIB file is read through its seek points (format/seek.py). Sequential reading is format/reader.py.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from tfr_torch import _native
from tfr_torch.errors import CorruptRecordError, TruncatedRecordError
from tfr_torch.format.compression import NONE, compression_from_name, detect_compression, normalize_compression
from tfr_torch.format.framing import FOOTER_SIZE, HEADER_SIZE, OVERHEAD, masked_crc32c, parse_header, unpack_crc
from tfr_torch.format.remote_options import RemoteOptions
from tfr_torch.format.remote_open import open_remote
from tfr_torch.format.paths import PathLike, as_path, exists, is_url, open_input
from tfr_torch.format.seek import SeekPoints, read_seek_points, seek_path_for
from tfr_torch.format.sniff import not_a_tfrecord
from tfr_torch.format.streams import _BUFFER, _size_of

__all__ = ["RecordFile"]

# The most framed bytes of a compressed record read before its header is checked against the index's size: a stale
# or forged index line claiming a huge record is refused after at most this many bytes inflated. A larger record
# reads the rest once the header agrees, one more restart (from the seek point before the rest: at most one span
# inflated again, which is why this is not smaller: at 64 KiB, records of 512 KiB read one by one took 1.6x as long).
_BEFORE_HEADER = 2 << 20


class RecordFile:
    """Random access to the records of a TFRecord file by byte offset (from an index).

    Keeps one open handle; `read(offset, size)` reads exactly that record and checks its header and data CRCs.
    A GZIP or ZLIB file is read through its seek points (`seek`, default `<file>.idx.seek`, which `build_index`
    writes; offsets are then in the decompressed stream): each read inflates at most one interval between points.
    Without seek points a compressed file raises ValueError (each access would inflate from the start).
    `read` and `read_many` may be called from several threads at once (a local file is read with pread; a remote
    file's seek and read are taken under a lock). `close` while other threads read: each read either completes or
    raises ValueError (the file is closed); the handle is closed once the last read under way is done, so a read
    never goes to another file opened meanwhile under the same descriptor number.
    """

    def __init__(self, path: PathLike, compression: str | None = "auto", verify: bool = True, *,
                 seek: PathLike | None = None, remote: RemoteOptions | None = None) -> None:
        self.path = as_path(path)
        self.verify = verify
        self._raw = (open_remote(self.path, remote, readahead=False) if is_url(self.path)  # no read-ahead
                     else open_input(self.path, block_size=1 << 16))
        self._remote = hasattr(self._raw, "prefetch")  # a RemoteFile (a size-less stream is read as a file)
        try:
            self._fd = self._raw.fileno() if hasattr(os, "pread") and not is_url(self.path) else None
        except (AttributeError, OSError, ValueError):
            self._fd = None
        self._seek: SeekPoints | None = None
        # reads under way (one item each) and whether close was asked: list appends, pops and attribute stores are
        # atomic, so no lock per read (and none a fork could copy held); see `_enter` and `close`
        self._reading: list[None] = []
        self._closing = False
        self._close_once = [None]  # popped by whoever closes the handle, so it is closed exactly once
        _OPEN.add(self)  # a forked child forgets the reads its parent's threads had under way (_after_fork_in_child)
        self._position = threading.Lock()  # a handle without pread: its seek and read, one thread at a time
        self._pid = os.getpid()  # a forked child makes its own lock (another thread may hold this one at fork)
        try:
            kind = normalize_compression(compression, allow_auto=True)
            if kind == "auto":
                kind = compression_from_name(self.path) or detect_compression(self._raw.read(HEADER_SIZE))
            if kind != NONE:
                self._seek = _seek_points(self.path, kind, seek, _size_of(self._raw))
        except BaseException:
            self._raw.close()
            raise
        # refreshed when a record seems to reach past it; the decompressed size for a compressed file
        self._size = _size_of(self._raw) if self._seek is None else self._seek.total_out

    @property
    def compressed(self) -> bool:
        """Whether the file is GZIP/ZLIB (read through its seek points; `read_many` then reads groups faster than
        `read` one by one)."""
        return self._seek is not None

    @property
    def seek_span(self) -> int:
        """The decompressed bytes between seek points of a compressed file (0 for an uncompressed one)."""
        return int(self._seek.span) if self._seek is not None else 0

    def seek_points_match(self) -> bool:
        """Whether every seek point matches the file (SeekPoints.match_file: one small read per point); True for an
        uncompressed file. For a reader that goes through the file front to back and must agree with one that
        restarts at the points."""
        return self._seek is None or self._seek.match_file(self._read_file_at)

    def read(self, offset: int, size: int | None = None) -> bytes:
        """The data of the record whose header starts at `offset` (`size`, the framed size from the index, is
        checked against the header when given)."""
        reading = self._reading
        reading.append(None)  # `_enter` and `_leave`, inline (a call per record costs as much as they do)
        try:
            if self._closing:
                raise ValueError(f"cannot read {self.path}: the RecordFile is closed")
            # one inflation for a compressed record; one read (not header, then body) from a remote file's blocks
            whole_at_once = (self._seek is not None or self._remote) and size is not None and size >= OVERHEAD
            if not whole_at_once:
                return self._record(offset, size, None)
            size = cast(int, size)
            # a remote file: at most one block before the header agrees (a larger record costs one more request)
            limit = _BEFORE_HEADER if self._seek is not None else getattr(getattr(self._raw, "options", None),
                                                                           "block_size", size)
            first = min(size, limit)
            whole = self._read_at(offset, first)
            if first < size and len(whole) == first and parse_header(whole[:HEADER_SIZE]) == size - OVERHEAD:
                whole = b"".join([whole, self._read_at(offset + first, size - first)])  # the header agrees: the rest
            return self._record(offset, size, whole)
        finally:
            reading.pop()
            if self._closing and not reading:
                self._close_now()

    def _enter(self) -> None:
        """Count a read under way, or raise ValueError when the file is closed (or closing). The count goes up
        before `_closing` is looked at, and `close` sets `_closing` before it looks at the count: one of the two
        sees the other, so the handle is never closed under a read."""
        self._reading.append(None)
        if self._closing:
            self._leave()
            raise ValueError(f"cannot read {self.path}: the RecordFile is closed")

    def _leave(self) -> None:
        self._reading.pop()
        if self._closing and not self._reading:
            self._close_now()

    def _close_now(self) -> None:
        try:
            self._close_once.pop()
        except IndexError:  # closed already (by `close`, or by the last read that was under way)
            return
        self._raw.close()

    def _record(self, offset: int, size: int | None, whole: bytes | None) -> bytes:
        """The checked data of the record at `offset`: from `whole` (its framed bytes, already read) or read here."""
        header = whole[:HEADER_SIZE] if whole is not None else self._read_at(offset, HEADER_SIZE)
        if len(header) < HEADER_SIZE:
            raise TruncatedRecordError(f"expected a {HEADER_SIZE}-byte record header, found {len(header)} bytes",
                                       self.path, offset)
        length = parse_header(header)
        if length is None:
            sentence = not_a_tfrecord(self._read_at(0, 512)) if offset == 0 else None
            if sentence is not None:
                raise CorruptRecordError(sentence, self.path, offset)
            raise CorruptRecordError("corrupt record header (its length CRC does not match): is the index stale "
                                     "or made for another file?", self.path, offset)
        if size is not None and length + OVERHEAD != size:
            raise CorruptRecordError(f"the record here has {length + OVERHEAD} bytes but the index says {size}: is "
                                     "the index stale or made for another file?", self.path, offset)
        need = length + OVERHEAD
        total = self._size if self._size is not None and offset + need <= self._size else self._current_size()
        if total is not None and offset + need > total:  # checked before anything is allocated for the body
            raise TruncatedRecordError(f"truncated record: its header says {length} bytes of data, so {need} bytes "
                                       f"from this offset, but the file has only {max(total - offset, 0)}",
                                       self.path, offset)
        body: bytes | memoryview = (memoryview(whole)[HEADER_SIZE:] if whole is not None  # no copy of the framed record
                                    else self._read_at(offset + HEADER_SIZE, length + FOOTER_SIZE))
        if len(body) < length + FOOTER_SIZE:
            raise TruncatedRecordError(f"truncated record: expected {length + OVERHEAD} bytes from this offset, "
                                       f"found {HEADER_SIZE + len(body)}", self.path, offset)
        data = bytes(body[:length])
        if self.verify and masked_crc32c(data) != unpack_crc(body, length)[0]:
            raise CorruptRecordError(f"corrupt record data: the CRC of its {length} data bytes does not match",
                                     self.path, offset)
        return data

    def read_many(self, offsets: np.ndarray, sizes: np.ndarray) -> list[bytes]:
        """The data of several records, each as `read(offset, size)` gives it (framed sizes from the index), in
        order. On a local file the compiled core reads each straight into its bytes (one system call and one
        copy per record) and checks it; from the first record it does not take whole and good, each is read by
        `read`, which raises what is wrong. A GZIP/ZLIB file inflates each stretch of its stream once for all the
        records asked for (SeekPoints.read_many: sorted by offset, one restart per run of nearby records instead of
        one per record), so a group read together costs about one pass over the intervals it touches; memory is
        the records plus one run's compressed bytes.

        >>> with RecordFile("data.tfrecord.gz") as f:  # doctest: +SKIP
        ...     records = f.read_many(index[order[:256], 0], index[order[:256], 1])
        """
        self._enter()
        try:
            return self._read_many(offsets, sizes)
        finally:
            self._leave()

    def _read_many(self, offsets: np.ndarray, sizes: np.ndarray) -> list[bytes]:
        core = _native.core
        out: list[bytes] = []
        if self._seek is not None and len(offsets) and int(np.min(sizes)) >= OVERHEAD:  # else `read` says
            return self._read_many_compressed(np.asarray(offsets, dtype=np.int64), np.asarray(sizes, dtype=np.int64))
        if self._remote and self.groups and core is not None and hasattr(core, "read_framed") and len(offsets):
            return self._read_many_cached(np.asarray(offsets, dtype=np.int64), np.asarray(sizes, dtype=np.int64))
        if (core is not None and self._fd is not None and self._seek is None and hasattr(core, "read_framed")
                and len(offsets)
                and int(np.min(sizes)) >= OVERHEAD and int(np.min(offsets)) >= 0):  # else `read` says what is wrong
            out, _ = core.read_framed(self._fd, np.ascontiguousarray(offsets, dtype=np.int64),
                                      np.ascontiguousarray(sizes, dtype=np.int64), self.verify)
        for offset, size in zip(offsets[len(out):].tolist(), sizes[len(out):].tolist()):
            out.append(self.read(offset, size))
        return out

    def _read_many_cached(self, offsets: np.ndarray, sizes: np.ndarray) -> list[bytes]:
        """Records of a remote file whose blocks are in the local cache: those inside one block read together by
        the compiled core from the block's file (as from a local file); the rest (across blocks, or from the
        first that does not check out) by `read`, which raises what is wrong."""
        core = cast(Any, _native.core)  # read_many checked that it has read_framed
        found: dict[int, bytes] = {}
        raw = cast(Any, self._raw)  # a RemoteFile (see `groups`)
        block_size = int(raw.options.block_size)
        first = offsets // block_size
        inside = (offsets >= 0) & (sizes >= OVERHEAD) & ((offsets + sizes - 1) // block_size == first)
        for b in np.unique(first[inside]).tolist():
            at = np.flatnonzero(inside & (first == b))
            opened = raw.block_descriptor(b)
            if opened is None:
                continue
            fd, base = opened
            try:
                records, _ = core.read_framed(fd, np.ascontiguousarray(offsets[at] - base),
                                              np.ascontiguousarray(sizes[at]), self.verify)
            finally:
                os.close(fd)
            found.update(zip(at[: len(records)].tolist(), records))
        return [found[k] if k in found else self.read(int(o), int(n))
                for k, (o, n) in enumerate(zip(offsets.tolist(), sizes.tolist()))]

    @property
    def groups(self) -> bool:
        """Whether `read_many` reads a group faster than `read` one by one: a compressed file (one inflation per
        stretch), a remote file with a block cache (records of a block read together from its file), a local file
        with the compiled core (one call reads and checks the group: a preadv per record, no Python per record)."""
        if self._seek is not None:
            return True
        if self._remote:
            return hasattr(self._raw, "block_descriptor") and getattr(self._raw, "_cache", None) is not None
        return self._fd is not None and _native.core is not None and hasattr(_native.core, "read_framed")

    def _read_many_compressed(self, offsets: np.ndarray, sizes: np.ndarray) -> list[bytes]:
        """Records of a compressed file inflated together, each record's data straight into its own bytes (its
        header and CRC into small ones beside it: no copy of the group); any record that does not check out is
        checked again whole by `_record`, which raises what is wrong. A record larger than _BEFORE_HEADER gets
        only its header in the first pass; its data and CRC are read in a second one once the header agrees with
        the index (nothing is inflated for a size that an index line claims and the header denies)."""
        seek = cast(SeekPoints, self._seek)
        small = sizes <= _BEFORE_HEADER
        pieces = np.stack([offsets, np.full_like(offsets, HEADER_SIZE),  # header, data, CRC of each record
                           offsets + HEADER_SIZE, np.where(small, sizes - OVERHEAD, 0),
                           offsets + sizes - FOOTER_SIZE, np.where(small, FOOTER_SIZE, 0)], axis=1)
        parts = seek.read_many(self._read_file_at, pieces[:, 0::2].reshape(-1), pieces[:, 1::2].reshape(-1))
        large = [k for k in np.flatnonzero(~small).tolist()
                 if len(parts[3 * k]) == HEADER_SIZE and parse_header(parts[3 * k]) == int(sizes[k]) - OVERHEAD]
        if large:  # headers that agree with the index: their data and CRC
            at, n = offsets[large], sizes[large]
            got = seek.read_many(self._read_file_at,
                                 np.stack([at + HEADER_SIZE, at + n - FOOTER_SIZE], axis=1).reshape(-1),
                                 np.stack([n - OVERHEAD, np.full_like(n, FOOTER_SIZE)], axis=1).reshape(-1))
            for j, k in enumerate(large):
                parts[3 * k + 1], parts[3 * k + 2] = got[2 * j], got[2 * j + 1]
        out: list[bytes] = []
        for k, (offset, size) in enumerate(zip(offsets.tolist(), sizes.tolist())):
            header, data, footer = parts[3 * k : 3 * k + 3]
            if (parse_header(header) != size - OVERHEAD or len(data) != size - OVERHEAD
                    or len(footer) != FOOTER_SIZE
                    or (self.verify and masked_crc32c(data) != unpack_crc(footer, 0)[0])):
                data = self._record(offset, size, header + data + footer)  # raises what is wrong
            out.append(data)
        return out

    def _read_at(self, offset: int, size: int) -> bytes:
        """`size` bytes from `offset` (fewer at the end): of the file, or of the decompressed stream through the
        seek points."""
        if self._seek is not None:
            return self._seek.read(self._read_file_at, offset, size)
        return self._read_file_at(offset, size)

    def _read_file_at(self, offset: int, size: int) -> bytes:
        """Read at an absolute offset; local files use pread, which shares no file position with anyone (a
        handle inherited by forked DataLoader workers stays safe)."""
        if self._fd is not None:
            chunks, got = [], 0
            while got < size:  # bounded reads: pread allocates what it is asked for
                chunk = os.pread(self._fd, min(size - got, _BUFFER << 4), offset + got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if self._pid != os.getpid():
            self._position, self._pid = threading.Lock(), os.getpid()
        with self._position:  # the handle's position is shared: another thread's seek must not come between
            self._raw.seek(offset)
            chunks, got = [], 0
            while got < size:
                chunk = self._raw.read(min(size - got, _BUFFER << 4))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def prefetch(self, offsets: np.ndarray | Sequence[int], sizes: np.ndarray | Sequence[int]) -> Any:
        """Start fetching these records (offsets and framed sizes from the index) of a remote file before `read`
        asks for them: the requests run together, nearby records in one. Give what it returns to `release` once
        they are read. Nothing to do for a local (or compressed) file."""
        prefetch = getattr(self._raw, "prefetch", None)
        if prefetch is None or getattr(self, "_seek", None) is not None:  # compressed: offsets are not the file's
            return None
        return prefetch([(int(o), int(o) + int(n)) for o, n in zip(offsets, sizes)])

    def release(self, token: Any) -> None:
        """Forget records fetched by `prefetch` (read now)."""
        release = getattr(self._raw, "release", None)
        if token and release is not None:
            release(token)

    def _current_size(self) -> int | None:
        """The file's size now (it may have grown since it was opened); None when it cannot be known."""
        if self._seek is not None:
            return self._seek.total_out
        self._size = _size_of(self._raw)
        return self._size

    def close(self) -> None:
        """Close the file: now, or, where other threads are reading it, once the last of those reads is done
        (reads that begin after this raise ValueError)."""
        self._closing = True
        if not self._reading:
            self._close_now()

    def __enter__(self) -> RecordFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_OPEN: weakref.WeakSet[RecordFile] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's other threads: the reads they had under way never end here, and
    must not keep the child's `close` from closing its copy of the handle."""
    for f in list(_OPEN):
        f._reading = []
        if f._closing:
            f._close_now()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _seek_points(path: str, kind: str, seek: PathLike | None, file_size: int | None) -> SeekPoints:
    """The checked seek points of a compressed file, or the ValueError that says it cannot be read by offset."""
    seek_path = as_path(seek) if seek is not None else seek_path_for(path + ".idx")
    if file_size is None or not exists(seek_path):
        raise ValueError(f"{path} is {kind.upper()}-compressed and has no seek points ({seek_path}): reading single "
                         "records by offset would inflate the file from its start each time; build them with "
                         "build_index (or `tfr-torch index`), read it sequentially (read_records with start/end, or "
                         "TFRecordDataset), or write it uncompressed for random access")
    return read_seek_points(seek_path, path, kind, file_size)
