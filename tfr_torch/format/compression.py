"""GZIP and ZLIB compression exactly as TensorFlow's TFRecordOptions does it.

TensorFlow compresses a whole file as one deflate stream with memLevel 9 and window bits 15 (+16 for GZIP);
CPython's zlib with the same parameters writes identical bytes at levels 1 to 9.
"""

from __future__ import annotations

import struct
import zlib
from typing import IO

from tfr_torch.errors import CorruptRecordError, TruncatedRecordError
from tfr_torch.format.crc import masked_crc32c

__all__ = ["NONE", "GZIP", "ZLIB", "normalize_compression", "compression_from_name", "detect_compression",
           "make_compressor", "Inflater"]

NONE, GZIP, ZLIB = "none", "gzip", "zlib"

_NAMES = {None: NONE, "": NONE, "none": NONE, "gzip": GZIP, "zlib": ZLIB}
_WBITS = {GZIP: 31, ZLIB: 15}
_MEM_LEVEL = 9  # TensorFlow's ZlibCompressionOptions.mem_level


def normalize_compression(compression: str | None, allow_auto: bool = False) -> str:
    """Map None / "" / "GZIP" / "gzip" / "ZLIB" / ... (and "auto" when allowed) to "none", "gzip", "zlib" or "auto"."""
    key = compression.lower() if isinstance(compression, str) else compression
    if allow_auto and key == "auto":
        return "auto"
    try:
        return _NAMES[key]
    except (KeyError, TypeError):
        choices = 'None, "gzip", "zlib" (or TensorFlow\'s "", "GZIP", "ZLIB")' + (', "auto"' if allow_auto else "")
        raise ValueError(f"unknown compression {compression!r}: expected one of {choices}") from None


def compression_from_name(path: str) -> str | None:
    """Guess from a file name: .gz/.gzip -> gzip, .zz/.zlib -> zlib, otherwise None (unknown)."""
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return GZIP
    if lower.endswith((".zz", ".zlib")):
        return ZLIB
    return None


def detect_compression(head: bytes) -> str:
    """Tell the compression of a TFRecord file from its first bytes (at least 12 when the file has them).

    A valid first record header (its length CRC matches) means an uncompressed file; this is checked first,
    since a record length can begin with the same bytes as a gzip or zlib header. Otherwise gzip's magic
    bytes, then a zlib header, are recognised. Anything else is treated as uncompressed, so that reading
    reports the corrupt header at offset 0.
    """
    if len(head) == 0:
        return NONE
    if len(head) >= 12 and struct.unpack_from("<I", head, 8)[0] == masked_crc32c(head[:8]):
        return NONE
    if head[:3] == b"\x1f\x8b\x08":
        return GZIP
    if len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0:
        return ZLIB
    return NONE


def make_compressor(compression: str, level: int | None):
    """Return a zlib compressor that writes the bytes TensorFlow writes for this compression and level."""
    if level is None:
        level = zlib.Z_DEFAULT_COMPRESSION
    if not isinstance(level, int) or isinstance(level, bool) or not -1 <= level <= 9:
        raise ValueError(f"compression_level must be an int from 0 to 9 (or None for the default, 6), got {level!r}")
    return zlib.compressobj(level, zlib.DEFLATED, _WBITS[compression], _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY)


class Inflater:
    """A readable stream of the decompressed bytes of a GZIP or ZLIB file, with `readinto`.

    Reads every member of a multi-member gzip file (as TensorFlow does). Trailing bytes after a ZLIB stream,
    which TensorFlow silently ignores, raise CorruptRecordError. Memory stays bounded by the caller's buffer:
    inflation is limited to what each `readinto` asks for.
    """

    def __init__(self, raw: IO[bytes], compression: str, path: str, chunk_size: int = 1 << 20, head: bytes = b"") -> None:
        self._raw = raw
        self._compression = compression
        self._path = path
        self._chunk = chunk_size
        self._pending = head  # compressed bytes read but not yet given to zlib
        self._z = zlib.decompressobj(_WBITS[compression])
        self._eof = False
        self._error: Exception | None = None  # raised on the next call, after the bytes before it were returned
        self.position = 0  # decompressed bytes delivered so far

    def _fill(self) -> bool:
        if not self._pending:
            self._pending = self._raw.read(self._chunk)
        return bool(self._pending)

    def readinto(self, view) -> int:
        """Fill `view` with decompressed bytes; return how many (0 only at the end of the stream).

        A corrupt or truncated stream raises CorruptRecordError / TruncatedRecordError, but only once every byte
        inflated before the damage has been returned, so the records before it are still read."""
        if self._error is not None:
            err, self._error = self._error, None
            self._eof = True
            raise err
        view = memoryview(view).cast("B")
        filled = 0
        try:
            filled = self._inflate(view)
        except (CorruptRecordError, TruncatedRecordError) as err:
            filled = err.filled  # type: ignore[attr-defined]
            if not filled:
                self._eof = True
                raise
            self._error = err
        self.position += filled
        return filled

    def _inflate(self, view: memoryview) -> int:
        want = len(view)
        filled = 0

        def failure(cls, message: str) -> Exception:
            err = cls(message, self._path, self.position + filled)
            err.filled = filled
            return err

        while filled < want and not self._eof:
            if self._z.eof:
                rest = self._z.unused_data + self._pending
                self._pending = b""
                if not rest:
                    rest = self._raw.read(self._chunk)
                if not rest:
                    self._eof = True
                    break
                if self._compression == ZLIB:
                    raise failure(CorruptRecordError,
                                  f"{len(rest)}+ bytes follow the end of the ZLIB stream (TensorFlow would ignore them "
                                  "silently): expected the file to end there")
                self._pending = rest
                self._z = zlib.decompressobj(_WBITS[self._compression])
            if self._z.unconsumed_tail:
                data = self._z.unconsumed_tail
            else:
                if not self._fill():
                    raise failure(TruncatedRecordError,
                                  f"the {self._compression.upper()} stream ends before its end marker after "
                                  f"{self.position + filled} decompressed bytes: expected more compressed data")
                data, self._pending = self._pending, b""
            try:
                out = self._z.decompress(data, want - filled)
            except zlib.error as exc:
                raise failure(CorruptRecordError,
                              f"cannot inflate the {self._compression.upper()} stream after "
                              f"{self.position + filled} decompressed bytes: {exc}") from None
            view[filled : filled + len(out)] = out
            filled += len(out)
        return filled

    def skip(self, count: int) -> int:
        """Discard `count` decompressed bytes (one pass, no allocation beyond a chunk); return how many were skipped."""
        scratch = bytearray(min(count, self._chunk) or 1)
        skipped = 0
        while skipped < count:
            n = self.readinto(memoryview(scratch)[: min(len(scratch), count - skipped)])
            if n == 0:
                break
            skipped += n
        return skipped

    def close(self) -> None:
        self._raw.close()
