"""Seek points: random access inside GZIP and ZLIB TFRecord files, from a sidecar beside the record index.

A seek point is where inflation can restart without reading the file from its start: the start of a deflate block
(RFC 1951), given by its compressed byte offset and bit, its offset in the decompressed stream, and the 32 KiB of
output before it (the window that back-references may reach). `build_index` writes them every ~1 MiB of output
(`seek_span`) for compressed files, to `<index>.seek` (`<file>.idx.seek` by default); the data file and its index
are left exactly as TensorFlow and DALI read them. Reading a record then inflates at most one interval between
points plus the record. Finding block boundaries needs zlib's Z_BLOCK, which Python's zlib lacks: the compiled
core builds the points (seek.c); without it no sidecar is written. Reading restarts at any point with the fastest
inflater at hand (restart_engine): zlib-ng's Python API when the sequential reader uses it, else the compiled core
(the system's zlib, inflatePrime for a point inside a byte), else Python's zlib; the zlib APIs reach a point inside
a byte through empty deflate blocks put before it (format/seek_inflate.py). The same records, errors and checks.

The sidecar (all integers little-endian):

    header, 48 bytes:  magic b"TFRSEEK1" | u32 version (1) | u32 compression (1 GZIP, 2 ZLIB) | u64 span |
                       u64 size of the compressed file | u64 decompressed size | u64 number of points
    points, 32 bytes:  u64 out (decompressed offset) | u64 in (file offset of the block's first whole byte) |
                       u8 bits (0-7: the block's first bits are the high bits of byte in - 1) | 3 zero bytes |
                       u32 window length (32768, less within 32 KiB of a member's start) | u32 CRC-32 of the
                       window | u32 CRC-32 of the file's bytes from in - (bits > 0) to in + 32 (or the file's end)
    windows:           each point's window, in point order (the decompressed bytes just before `out`)
    trailer, 4 bytes:  u32 CRC-32 (zlib's) of everything before it

Points are checked before they are trusted: the whole sidecar against its CRC, its compression and file size
against the data file when it is opened, each window against its CRC and the compressed bytes at a point against
theirs when the point is used, and every record read through one against its own CRCs as usual. A stale or forged
sidecar raises IndexMismatchError or CorruptRecordError naming the file, never gives wrong records.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from tfr_torch import _native
from tfr_torch.errors import CorruptRecordError, IndexMismatchError
from tfr_torch.format.compression import GZIP, ZLIB
from tfr_torch.format.inflate import INFLATE, _inflate
from tfr_torch.format.paths import PathLike, _fsspec, as_path, atomic_output, exists, is_url, open_input
from tfr_torch.format.seek_inflate import CHUNK, extract_ranges

__all__ = ["SeekPoints", "build_seek_points", "read_seek_points", "seek_path_for", "check_span", "has_seek_points",
           "restart_engine", "remove_seek_points", "DEFAULT_SPAN"]

_log = logging.getLogger(__name__)

DEFAULT_SPAN = 1 << 20
_MAGIC = b"TFRSEEK1"
_VERSION = 1
_HEADER = struct.Struct("<8sIIQQQQ")
_POINT = struct.Struct("<QQB3xIII")
_TRAILER = struct.Struct("<I")
_KINDS = {GZIP: 1, ZLIB: 2}
_WINDOW = 32768
_ANCHOR = 32  # compressed bytes after a point whose CRC the sidecar keeps
_STATUS = {1: "the compressed data is corrupt there", 2: "the compressed data ends too early",
           4: "bytes follow the end of the ZLIB stream"}


def seek_path_for(index_path: PathLike) -> str:
    """The sidecar of an index: `<index>.seek` (so `<file>.idx.seek` beside the default index)."""
    return as_path(index_path) + ".seek"


def has_seek_points(path: PathLike) -> bool:
    """Whether a file has a seek-point sidecar where RecordFile and the datasets look: `<file>.idx.seek`."""
    return exists(seek_path_for(as_path(path) + ".idx"))


def available() -> bool:
    """Whether seek points can be built here (the compiled core, with zlib)."""
    return _native.core is not None and hasattr(_native.core, "seek_build")


def restart_engine() -> str:
    """What inflates from a seek point: "zlib-ng" when the sequential reader uses it (format/inflate.py; it
    inflates 1.5x-5x faster than the system's zlib that the compiled core links), else "native" (the compiled
    core), else "zlib" (Python's). All restart at any point and give the same bytes (format/seek_inflate.py)."""
    if INFLATE == "zlib-ng":
        return INFLATE
    return "native" if _native.core is not None and hasattr(_native.core, "seek_extract_ranges") else "zlib"


@dataclass(frozen=True)
class SeekPoints:
    """The seek points of one compressed file, checked against their sidecar's CRC (see the module docstring).

    `table` is an int64 array (n, 3) of (out, in, bits); `windows[k]` point k's window; `window_crcs` and
    `anchor_crcs` what each is checked against when used."""

    path: str
    seek_path: str
    compression: str
    span: int
    file_size: int
    total_out: int
    table: np.ndarray
    windows: tuple[bytes, ...]
    window_crcs: tuple[int, ...]
    anchor_crcs: tuple[int, ...]

    def read(self, read_file_at: Callable[[int, int], bytes], offset: int, size: int) -> bytes:
        """The decompressed bytes [offset, offset + size) (fewer where the stream ends first), inflated from the
        last usable point at or before `offset`; `read_file_at(offset, size)` reads the compressed file."""
        return self.read_many(read_file_at, [offset], [size])[0]

    def read_many(self, read_file_at: Callable[[int, int], bytes], offsets: Sequence[int] | np.ndarray,
                  sizes: Sequence[int] | np.ndarray) -> list[bytes]:
        """Several ranges, each as `read(read_file_at, offset, size)` gives it, in the order given, inflating each
        stretch of the stream at most once: the ranges are sorted by offset and read in runs, each from one restart
        at the last usable point at or before its first range. A run goes on past the bytes between its ranges
        (inflated and dropped, never kept) while the next range's own point is not past where inflation stands, so
        a group of records costs one pass over the intervals it touches. Memory: the ranges' bytes (inflated
        straight into them) plus one run's compressed bytes at a time (at most the ranges' compressed size and
        one interval's). A range asked for twice is inflated once (the same bytes object twice)."""
        offs = np.asarray(offsets, dtype=np.int64).reshape(-1)
        lens = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if len(offs) != len(lens):
            raise ValueError(f"read_many: {len(offs)} offsets but {len(lens)} sizes")
        if len(offs) and int(offs.min()) < 0:
            raise ValueError(f"read_many: negative decompressed offset {int(offs.min())} in {self.path}")
        lens = np.minimum(lens, self.total_out - offs)  # fewer where the stream ends first
        out: list[bytes] = [b""] * len(offs)
        live = np.flatnonzero(lens > 0)
        if not len(live):
            return out
        order = live[np.lexsort((lens[live], offs[live]))]
        first = np.ones(len(order), dtype=bool)  # the first of each distinct range in `order`
        first[1:] = (np.diff(offs[order]) != 0) | (np.diff(lens[order]) != 0)
        ranges = order[first]  # positions in the caller's lists, one per distinct range, by offset
        engine = restart_engine()
        for k, run in self._runs(offs[ranges], lens[ranges]):
            got = self._read_run(read_file_at, k, offs[ranges[run]], lens[ranges[run]], engine)
            for u, data in zip(run, got):
                out[int(ranges[u])] = data
        slot = np.cumsum(first) - 1  # each position of `order` -> its distinct range
        for pos, u in zip(order[~first].tolist(), slot[~first].tolist()):
            out[pos] = out[int(ranges[u])]
        return out

    def _runs(self, offs: np.ndarray, lens: np.ndarray) -> list[tuple[int, list[int]]]:
        """Sorted ranges split into runs: (the point to restart at, the ranges it inflates). A range joins the run
        before it when it does not overlap that run's last range and its own point is not past where that run's
        inflation stands (going on costs no more than a restart there)."""
        points = np.maximum(np.searchsorted(self.table[:, 0], offs, side="right") - 1, 0).tolist()  # at/before
        outs = self.table[:, 0].tolist()
        runs: list[tuple[int, list[int]]] = []
        at = -1  # where the current run's inflation stands
        for u, (o, n, k) in enumerate(zip(offs.tolist(), lens.tolist(), points)):
            if runs and o >= at and outs[k] <= at:
                runs[-1][1].append(u)
            else:
                runs.append((k, [u]))
            at = o + n
        return runs

    def _read_run(self, read_file_at: Callable[[int, int], bytes], k: int, offs: np.ndarray, lens: np.ndarray,
                  engine: str) -> list[bytes]:
        """The ranges of one run (in order, apart), inflated from point k once (by `engine`: see restart_engine);
        raises CorruptRecordError naming the first range that the stream does not give whole."""
        out, start, bits = (int(v) for v in self.table[k])
        stop_at = int(np.searchsorted(self.table[:, 0], int(offs[-1] + lens[-1])))  # the first point at/after the end
        end = min(int(self.table[stop_at, 1]) + 1 if stop_at < len(self.table) else self.file_size, self.file_size)
        first = start - (1 if bits else 0)
        # the compiled core takes the run's compressed bytes whole; the zlib API reads them a chunk at a time
        data = read_file_at(first, end - first if engine == "native" else min(end - first, CHUNK))
        self._check_point(k, data, int(offs[0]))
        starts = np.ascontiguousarray(offs - out, dtype=np.int64)
        lens = np.ascontiguousarray(lens, dtype=np.int64)
        if engine == "native":
            status, got, made = _native.core.seek_extract_ranges(  # type: ignore[union-attr]
                data, bits, self.windows[k], self.compression == GZIP, starts, lens)
        else:
            status, got, made = extract_ranges(read_file_at, data, first, end, bits, self.windows[k],
                                               self.compression == GZIP, starts.tolist(), lens.tolist(),
                                               _inflate if engine == "zlib-ng" else zlib)
        ends = np.cumsum(lens)
        if status or made < int(ends[-1]):
            short = int(np.searchsorted(ends, made, side="right"))  # the first range not made whole
            short = min(short, len(lens) - 1)
            why = _STATUS.get(status, "the decompressed stream ends before it")
            raise CorruptRecordError(
                f"cannot read {int(lens[short])} decompressed bytes from seek point {k} (compressed byte {start}, "
                f"bit {bits}, decompressed offset {out}) of {self.seek_path}: {why}; the file or its seek points "
                "changed since they were built? Build them again (build_index, or `tfr-torch index`)", self.path,
                int(offs[short]))
        return cast("list[bytes]", got)

    def match_file(self, read_file_at: Callable[[int, int], bytes]) -> bool:
        """Whether every point matches the file (its anchor bytes and window, as a read checks the point it restarts
        from): one small read per point. A reader that goes through the file front to back without the points
        asks this before it relies on them agreeing with the file."""
        for k, row in enumerate(self.table):
            first = int(row[1]) - (1 if int(row[2]) else 0)
            try:
                self._check_point(k, read_file_at(first, _anchor_length(row)), 0)
            except IndexMismatchError:
                return False
        return True

    def _check_point(self, k: int, data: bytes, offset: int) -> None:
        if zlib.crc32(data[:_anchor_length(self.table[k])]) != self.anchor_crcs[k]:
            raise IndexMismatchError(
                f"seek point {k} does not match the file: its compressed bytes at {int(self.table[k, 1])} are not "
                "those the point was built on (stale seek points, or made for another file?)", self.path, offset,
                self.seek_path)
        if zlib.crc32(self.windows[k]) != self.window_crcs[k]:
            raise IndexMismatchError(f"the window of seek point {k} does not match its CRC (a damaged or forged "
                                     "sidecar?)", self.path, offset, self.seek_path)


def _anchor_length(row: np.ndarray) -> int:
    return (1 if int(row[2]) else 0) + _ANCHOR


def build_seek_points(path: PathLike, seek_path: PathLike, compression: str, span: int = DEFAULT_SPAN) -> bool:
    """Write the seek points of a GZIP or ZLIB file to `seek_path` (atomically); False (nothing written, and a
    sidecar already there removed, since it may be stale) when the compiled core is not available."""
    check_span(span)
    path, seek_path = as_path(path), as_path(seek_path)
    if not available():
        _log.info("no seek points for %s: the compiled core is not available", path)
        _remove(seek_path)
        return False
    with _whole_file(path) as data:
        status, raw_points, raw_windows, total_out, error_in = _native.core.seek_build(  # type: ignore[union-attr]
            data, compression == GZIP, span)
        if status:
            raise CorruptRecordError(f"cannot build seek points: {_STATUS.get(status, 'zlib failed')} (compressed "
                                     f"byte {error_in}, after {total_out} decompressed bytes)", path, total_out)
        table = np.frombuffer(raw_points, dtype=np.int64).reshape(-1, 4)
        size = len(data)
        parts = [_HEADER.pack(_MAGIC, _VERSION, _KINDS[compression], span, size, total_out, len(table))]
        windows = []
        for k, (out, start, bits, dict_len) in enumerate(table.tolist()):
            window = raw_windows[(k + 1) * _WINDOW - dict_len : (k + 1) * _WINDOW]
            first = start - (1 if bits else 0)
            anchor = data[first : first + _anchor_length(table[k])]
            parts.append(_POINT.pack(out, start, bits, dict_len, zlib.crc32(window), zlib.crc32(anchor)))
            windows.append(window)
    body = b"".join(parts + windows)
    with atomic_output(seek_path) as f:
        f.write(body + _TRAILER.pack(zlib.crc32(body)))
    return True


def check_span(span: object) -> int:
    """`seek_span` checked: an int of at least 64 KiB (points closer than that cost more window than they save)."""
    if not isinstance(span, int) or isinstance(span, bool) or span < 1 << 16:
        raise ValueError(f"seek_span must be an int of at least 65536 decompressed bytes (or None), got {span!r}")
    return span


class _whole_file:
    """The bytes of a file as one buffer: a read-only map of a local file, else the file read into memory."""

    def __init__(self, path: str) -> None:
        self._map: mmap.mmap | None = None
        self._file = open_input(path)
        try:
            size = os.fstat(self._file.fileno()).st_size if not is_url(path) else 0
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except (AttributeError, OSError, ValueError):
            self._map = None

    def __enter__(self) -> bytes | mmap.mmap:
        return self._map if self._map is not None else self._file.read()

    def __exit__(self, *exc: object) -> None:
        if self._map is not None:
            self._map.close()
        self._file.close()


def _remove(path: str) -> None:
    if not is_url(path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return
    fs, inner = _fsspec(path)
    if fs.exists(inner):
        fs.rm(inner)


def remove_seek_points(index_path: PathLike) -> None:
    """Remove the seek points beside an index (`<index>.seek`), if there are any: what `build_index` does where it
    writes none, since ones left by an earlier run would describe the file as it was then."""
    _remove(seek_path_for(index_path))


def read_seek_points(seek_path: PathLike, path: PathLike, compression: str, file_size: int) -> SeekPoints:
    """Read and check a sidecar for the file `path` (its compression and size as opened). Raises
    IndexMismatchError naming both files when the sidecar is damaged or does not describe the file."""
    seek_path, path = as_path(seek_path), as_path(path)

    def bad(why: str) -> IndexMismatchError:
        return IndexMismatchError(f"the seek points {why}", path, None, seek_path)

    with open_input(seek_path) as f:
        blob = f.read()
    if len(blob) < _HEADER.size + _TRAILER.size or blob[:8] != _MAGIC:
        raise bad(f"are not a tfr_torch seek file (expected {_HEADER.size + _TRAILER.size}+ bytes starting "
                  f"{_MAGIC!r}, found {len(blob)} bytes starting {blob[:8]!r})")
    if zlib.crc32(blob[: -_TRAILER.size]) != _TRAILER.unpack_from(blob, len(blob) - _TRAILER.size)[0]:
        raise bad("do not match their CRC (a damaged or truncated sidecar?)")
    _, version, kind, span, size, total_out, count = _HEADER.unpack_from(blob)
    if version != _VERSION:
        raise bad(f"have format version {version}; this tfr_torch reads version {_VERSION}")
    if kind != _KINDS.get(compression):
        found = {v: k for k, v in _KINDS.items()}.get(kind, f"kind {kind}")
        raise bad(f"were built for a {str(found).upper()} file, but the file is {compression.upper()}")
    if size != file_size:
        raise bad(f"were built for a file of {size} bytes, but the file has {file_size} (stale seek points, or made "
                  "for another file?)")
    points_end = _HEADER.size + count * _POINT.size
    if count < 1 or points_end > len(blob) - _TRAILER.size:
        raise bad(f"say {count} points, which the sidecar's {len(blob)} bytes cannot hold")
    rows = [_POINT.unpack_from(blob, _HEADER.size + k * _POINT.size) for k in range(count)]
    table = np.array([r[:3] for r in rows], dtype=np.int64).reshape(-1, 3)
    lengths = [r[3] for r in rows]
    problem = _layout_problem(table, lengths, size, total_out)
    if problem or points_end + sum(lengths) != len(blob) - _TRAILER.size:
        raise bad(problem or "have windows that do not fill the sidecar")
    windows, at = [], points_end
    for n in lengths:
        windows.append(blob[at : at + n])
        at += n
    return SeekPoints(path, seek_path, compression, span, size, total_out, table, tuple(windows),
                      tuple(r[4] for r in rows), tuple(r[5] for r in rows))


def _layout_problem(table: np.ndarray, lengths: list[int], size: int, total_out: int) -> str | None:
    """What makes a point table impossible for its file, or None."""
    outs, ins, bits = table[:, 0], table[:, 1], table[:, 2]
    if outs[0] != 0:
        return f"start at decompressed offset {outs[0]}, expected 0"
    if np.any(np.diff(outs) <= 0) or np.any(np.diff(ins) <= 0):
        return "are not in increasing order"
    if np.any(bits > 7) or np.any(ins < 1) or int(ins[-1]) > size or int(outs[-1]) > total_out:
        return "lie outside the file"
    if any(n > _WINDOW or n > int(o) for n, o in zip(lengths, outs.tolist())):
        return "have a window longer than 32768 bytes or than the output before it"
    return None
