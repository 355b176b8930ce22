"""Inflation restarted at a seek point with a zlib-API module (zlib-ng when installed, else zlib): the ranges of one
run, as the compiled core's seek_extract_ranges gives them (format/seek.py chooses which inflates).

The compiled core links the system's zlib, which inflates these files 1.5x-5x slower than zlib-ng, the library the
sequential reader uses when it is installed (format/inflate.py): a random-order epoch read through the core would
be compared with a sequential pass made by a faster inflater. Python's zlib API has no inflatePrime, so a point that
starts inside a byte (a deflate block begins at any bit) is reached by putting empty deflate blocks before it
(`restart_prefix`): their bits end exactly where the point's block begins, so the block starts the way it did in
the file, and they write nothing, so the window given as the preset dictionary is still the 32 KiB before the point.

The compressed bytes are read `CHUNK` at a time and given to zlib `_FEED` at a time (zlib copies what a call
leaves unused); each zlib call makes the bytes up to the end of the range being read, but at least `_LEAST` (a
restart for one small record inflated a whole 128 KiB feed, 256 KiB of output: 350 us against 130-170 us with
64 KiB) and at most `_PIECE`, and the ranges are cut from those pieces (one copy each). Memory: a chunk, a piece,
and the ranges themselves.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from types import ModuleType

__all__ = ["CHUNK", "restart_prefix", "extract_ranges"]

CHUNK = 1 << 20  # compressed bytes read from the file at a time
_FEED = 1 << 17  # compressed bytes given to one zlib call
_PIECE = 1 << 20  # the most decompressed bytes one zlib call makes
_LEAST = 1 << 16  # the least it is asked for (a call that makes just the bytes wanted costs more calls)
_GZIP_TRAILER = 8  # CRC-32 and ISIZE after a member's deflate data (RFC 1952 section 2.3.1)
_GZIP_MAGIC = b"\x1f\x8b"

# Empty deflate blocks (RFC 1951 section 3.2.3), as (value, bit count) fields written from the low bit up.
# A fixed-Huffman block: BFINAL 0, BTYPE 01, then end-of-block (code 256 is seven 0 bits, section 3.2.6): 10 bits.
_EMPTY_FIXED = ((0, 1), (1, 2), (0, 7))
# A dynamic-Huffman block (section 3.2.7) with 19 code-length codes, so 95 bits (10 bits of fixed blocks cannot
# make an odd count): HLIT 0 (257 literal/length codes), HDIST 1 (2 distance codes), HCLEN 15; of the code-length
# alphabet, symbols 1 and 18 have length 1 (codes 0 and 1); the lengths are then 1 (literal 0), 255 zeros (code 18:
# 138 zeros, extra 127; 117 zeros, extra 106), 1 (end-of-block), 1 and 1 (the two distances): every code complete;
# last, end-of-block (literal 256, code 1).
_CL_ORDER = (16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15)
_EMPTY_DYNAMIC = ((0, 1), (2, 2), (0, 5), (1, 5), (15, 4),
                  *((1 if s in (1, 18) else 0, 3) for s in _CL_ORDER),
                  (0, 1), (1, 1), (127, 7), (1, 1), (106, 7), (0, 1), (0, 1), (0, 1),
                  (1, 1))


def restart_prefix(bits: int, shared: int) -> bytes:
    """Bytes to give raw inflation in place of a point's shared byte (`shared`, whose high `bits` bits are the
    first bits of the point's block): empty blocks whose bits end where the block's begin, then that byte's
    block bits. b"" for a point on a byte boundary (bits 0)."""
    if not 0 <= bits <= 7:
        raise ValueError(f"restart_prefix: bits must be 0..7, got {bits}")
    if not bits:
        return b""
    need = 8 - bits  # the prefix's length in bits, modulo 8
    fields: list[tuple[int, int]] = list(_EMPTY_DYNAMIC) if need % 2 else []
    value = length = 0
    for v, n in fields:
        value, length = value | v << length, length + n
    while length % 8 != need:
        for v, n in _EMPTY_FIXED:
            value, length = value | v << length, length + n
    whole = length // 8
    raw = value.to_bytes(whole + 1, "little")
    return raw[:whole] + bytes([raw[whole] | (shared & (0xFF << need) & 0xFF)])


def _gzip_header_length(data: bytes) -> int:
    """The length of the GZIP member header (RFC 1952 section 2.3.1) that `data` begins with: 0 when `data` ends
    inside it, -1 when it is not one (magic, method, reserved flags or header CRC wrong, as zlib checks them)."""
    if data[:2] != _GZIP_MAGIC[: len(data)] or (len(data) > 2 and data[2] != 8):
        return -1
    if len(data) < 10:
        return 0
    flags = data[3]
    if flags & 0xE0:
        return -1
    pos = 10
    if flags & 4:  # FEXTRA: a 2-byte length, then that many bytes
        if len(data) < pos + 2:
            return 0
        pos += 2 + int.from_bytes(data[pos : pos + 2], "little")
        if len(data) < pos:
            return 0
    for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            zero = data.find(b"\0", pos)
            if zero < 0:
                return 0
            pos = zero + 1
    if flags & 2:  # FHCRC: the low 16 bits of the CRC-32 of the header so far
        if len(data) < pos + 2:
            return 0
        if zlib.crc32(data[:pos]) & 0xFFFF != int.from_bytes(data[pos : pos + 2], "little"):
            return -1
        pos += 2
    return pos


class _Restart:
    """Raw inflation from a point over the compressed bytes [first, end) of a file, across GZIP members."""

    def __init__(self, read_file_at: Callable[[int, int], bytes], head: bytes, first: int, end: int, bits: int,
                 window: bytes, gzip: bool, module: ModuleType) -> None:
        self._read, self._next, self._end = read_file_at, first + len(head), end
        self._buf = memoryview(restart_prefix(bits, head[0]) + head[1:] if bits else head)
        self._pos = 0
        self._front = b""  # input zlib returned unused at a member's end, given again first
        self._module, self._gzip = module, gzip
        self._z = module.decompressobj(-15, zdict=window) if window else module.decompressobj(-15)
        self.ended = False
        self.status = 0  # 1: corrupt, 2: the input ends inside the stream

    def _feed(self) -> bytes | memoryview:
        """The next compressed bytes (b"" when [first, end) is used up)."""
        if self._front:
            front, self._front = self._front, b""
            return front
        if self._pos == len(self._buf) and self._next < self._end:
            chunk = self._read(self._next, min(CHUNK, self._end - self._next))
            self._next = self._next + len(chunk) if chunk else self._end  # a file shorter than it was ends the input
            self._buf, self._pos = memoryview(chunk), 0
        data = self._buf[self._pos : self._pos + _FEED]
        self._pos += len(data)
        return data

    def _member_end(self) -> None:
        """After a member (or the ZLIB stream) ends: on to the next GZIP member's deflate data, or the end. As the
        compiled core does, each member is inflated raw: its trailer (CRC-32, ISIZE) is passed over unchecked, as
        each record's own CRC32C guards its bytes, so a damaged trailer refuses no record read sequentially."""
        if not self._gzip:
            self.ended = True
            return
        rest = bytes(self._z.unused_data)
        while len(rest) < _GZIP_TRAILER:  # pass over the trailer zlib does not read in raw mode
            more = self._feed()
            if not more:
                self.status, self.ended = 2, True
                return
            rest += bytes(more)
        rest = rest[_GZIP_TRAILER:] or bytes(self._feed())
        if not rest:  # the input ends after the member
            self.ended = True
            return
        while (length := _gzip_header_length(rest)) == 0:
            more = self._feed()
            if not more:
                self.status, self.ended = 2, True
                return
            rest += bytes(more)
        if length < 0:
            self.status, self.ended = 1, True
            return
        self._front = rest[length:]
        self._z = self._module.decompressobj(-15)

    def piece(self, wanted: int) -> bytes:
        """The next decompressed bytes: `wanted` (the bytes up to the end of the range being read) but at least
        _LEAST and at most _PIECE, or fewer (b"" at the end of the stream or the input, or an error: `status` says
        which)."""
        while not self.ended:
            if self._z.eof:
                self._member_end()
                continue
            data = self._z.unconsumed_tail or self._feed()
            if not data:
                self.status, self.ended = 2, True
                break
            try:
                out: bytes = self._z.decompress(data, min(max(wanted, _LEAST), _PIECE))
            except self._module.error:
                self.status, self.ended = 1, True
                break
            if out:
                return out
        return b""


def extract_ranges(read_file_at: Callable[[int, int], bytes], head: bytes, first: int, end: int, bits: int,
                   window: bytes, gzip: bool, starts: Sequence[int], lens: Sequence[int],
                   module: ModuleType) -> tuple[int, list[bytes], int]:
    """The ranges (starts[i] decompressed bytes after the point, lens[i] long; in order and apart) inflated from a
    point whose compressed bytes are [first, end) of the file (`first`: its shared byte when bits > 0); `head`
    holds the first of them, already read. Returns (status: 0, 1 corrupt or 2 truncated; each range's bytes,
    shorter or empty past where the stream or the input ended; how many bytes the ranges got in all), as the
    compiled core's seek_extract_ranges does."""
    inflater = _Restart(read_file_at, head, first, end, bits, window, gzip, module)
    parts: list[bytes] = []
    piece = memoryview(b"")
    at = made = last = 0  # where `piece` begins (decompressed, since the point); bytes given; the last range's end
    for start, n in zip(starts, lens):
        if start < last:  # ranges must be in order and apart: the caller sees to it, this guards
            return 1, parts + [b""] * (len(lens) - len(parts)), made
        last = start + n
        while at + len(piece) <= start:  # pieces that end before the range: dropped
            at += len(piece)
            piece = memoryview(inflater.piece(last - at))
            if not piece:
                break
        got: list[bytes | memoryview] = []
        have, want = 0, n
        while have < want and piece:
            lo = start + have - at
            hi = min(len(piece), lo + want - have)
            got.append(piece[lo:hi])
            have += hi - lo
            if hi == len(piece) and have < want:
                at += len(piece)
                piece = memoryview(inflater.piece(want - have))
        parts.append(bytes(got[0]) if len(got) == 1 else b"".join(got))
        made += have
        if have < want:
            break
    return inflater.status, parts + [b""] * (len(lens) - len(parts)), made
