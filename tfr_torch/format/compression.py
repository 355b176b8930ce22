"""GZIP and ZLIB compression exactly as TensorFlow's TFRecordOptions does it.

TensorFlow compresses a whole file as one deflate stream with memLevel 9 and window bits 15 (+16 for GZIP);
CPython's zlib with the same parameters writes identical bytes at levels 1 to 9. Writing always uses zlib (so the
bytes stay TensorFlow's); reading inflates with zlib-ng when it is installed (`pip install tfr_torch[fast-gzip]`:
the `zlib-ng` package, a drop-in zlib API), zlib otherwise; TFR_TORCH_INFLATE=zlib turns it off. (python-isal
is faster still but reports the end of a stream differently, which the corruption checks here rely on.)
"""

from __future__ import annotations

import os
import zlib
from types import ModuleType
from typing import IO, Protocol

from tfr_torch.errors import CorruptRecordError, TruncatedRecordError
from tfr_torch.format.framing import HEADER_SIZE, parse_header

__all__ = ["NONE", "GZIP", "ZLIB", "normalize_compression", "compression_from_name", "detect_compression",
           "make_compressor", "Inflater", "read_past"]

NONE, GZIP, ZLIB = "none", "gzip", "zlib"

_NAMES = {None: NONE, "": NONE, "none": NONE, "gzip": GZIP, "zlib": ZLIB}
_WBITS = {GZIP: 31, ZLIB: 15}
_MEM_LEVEL = 9  # TensorFlow's ZlibCompressionOptions.mem_level


def _inflate_library() -> tuple[str, ModuleType]:
    """The fastest installed library with zlib's decompressobj API (TFR_TORCH_INFLATE overrides)."""
    wanted = os.environ.get("TFR_TORCH_INFLATE", "auto").strip().lower()
    candidates = {"zlib-ng": ("zlib_ng", "zlib_ng")}
    if wanted not in ("auto", "zlib", *candidates):
        raise ValueError(f'TFR_TORCH_INFLATE must be "auto", "zlib" or "zlib-ng", got {wanted!r}')
    for name, (package, module) in candidates.items():
        if wanted in ("auto", name):
            try:
                return name, getattr(__import__(f"{package}.{module}"), module)
            except ImportError:
                if wanted == name:
                    raise ImportError(f"TFR_TORCH_INFLATE={name} but the {name} package is not installed "
                                      "(pip install tfr_torch[fast-gzip])") from None
    return "zlib", zlib


INFLATE, _inflate = _inflate_library()  # the library's name ("zlib" or "zlib-ng") and module
_INFLATE_ERRORS = (zlib.error, _inflate.error)


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
    if len(head) >= HEADER_SIZE and parse_header(head) is not None:
        return NONE
    if head[:3] == b"\x1f\x8b\x08":
        return GZIP
    if len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0:
        return ZLIB
    return NONE


def make_compressor(compression: str, level: int | None) -> zlib._Compress:
    """Return a zlib compressor that writes the bytes TensorFlow writes for this compression and level."""
    if level is None:
        level = zlib.Z_DEFAULT_COMPRESSION
    if not isinstance(level, int) or isinstance(level, bool) or not -1 <= level <= 9:
        raise ValueError(f"compression_level must be an int from 0 to 9 (or None for the default, 6), got {level!r}")
    return zlib.compressobj(level, zlib.DEFLATED, _WBITS[compression], _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY)


class _Failure(Exception):
    """Inside Inflater: the stream failed (`error`) after `filled` bytes of the caller's buffer were filled."""

    def __init__(self, error: CorruptRecordError | TruncatedRecordError, filled: int) -> None:
        super().__init__(error)
        self.error, self.filled = error, filled


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
        self._z = _inflate.decompressobj(_WBITS[compression])
        self._eof = False
        self._error: Exception | None = None  # raised on the next call, after the bytes before it were returned
        self.position = 0  # decompressed bytes delivered so far
        self.dropped_members = 0  # members (or the ZLIB stream) given up after a corruption: see abandon_member
        self.dropped_bytes = 0  # compressed bytes dropped by abandon_member
        self._fresh = True  # the next input given to zlib starts with the current member's header
        self._failed = False  # the stream stopped at an error (not at its end): abandon_member may go on
        self._salvage: bytes | None = None  # the input of a decompress call that failed (see abandon_member)

    def _fill(self) -> bool:
        if not self._pending:
            self._pending = self._raw.read(self._chunk)
        return bool(self._pending)

    def readinto(self, view: bytearray | memoryview) -> int:
        """Fill `view` with decompressed bytes; return how many (0 only at the end of the stream).

        A corrupt or truncated stream raises CorruptRecordError / TruncatedRecordError, but only once every byte
        inflated before the damage has been returned, so the records before it are still read."""
        if self._error is not None:
            err, self._error = self._error, None
            self._eof = self._failed = True
            raise err
        view = memoryview(view).cast("B")
        filled = 0
        try:
            filled = self._inflate(view)
        except _Failure as failure:
            filled = failure.filled
            if not filled:
                self._eof = self._failed = True
                raise failure.error from None
            self._error = failure.error
        self.position += filled
        return filled

    def _inflate(self, view: memoryview) -> int:
        want = len(view)
        filled = 0

        def failure(cls: type[CorruptRecordError | TruncatedRecordError], message: str) -> _Failure:
            return _Failure(cls(message, self._path, self.position + filled), filled)

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
                self._z = _inflate.decompressobj(_WBITS[self._compression])
                self._fresh = True
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
                self._fresh = False
            except _INFLATE_ERRORS as exc:
                # zlib keeps no unconsumed input after an error: keep the chunk for abandon_member (past this
                # member's own magic bytes when the chunk starts with them)
                self._salvage = data[1:] if self._fresh else data
                raise failure(CorruptRecordError,
                              f"cannot inflate the {self._compression.upper()} stream after "
                              f"{self.position + filled} decompressed bytes: {exc}") from None
            view[filled : filled + len(out)] = out
            filled += len(out)
        return filled

    def abandon_member(self) -> int:
        """Give up the rest of the current GZIP member (of a ZLIB file: the rest of the file) after a corruption.

        A damaged deflate stream can go on inflating without a zlib error: a corrupted back-reference copies
        earlier bytes, so records that pass their CRCs may be duplicates of earlier ones. After a corruption is
        seen (a zlib error, or a record header or data CRC that fails in the decompressed bytes), nothing later
        in that member can be trusted: reading resumes at the next gzip member (its magic bytes, where a member
        header that inflates without error starts) or ends. Returns how many compressed bytes were dropped
        (also summed in `dropped_bytes`; `dropped_members` counts the calls). `position` keeps counting the
        decompressed bytes delivered, so offsets after this point are positions in the stream as read.
        """
        self._error = None
        if self._salvage is not None:  # after a zlib error: the failed call's input, then what follows it
            rest, self._salvage = self._salvage + self._pending, None
        else:  # the compressed bytes zlib has not used yet
            rest = self._z.unconsumed_tail + self._z.unused_data + self._pending
        self._pending = b""
        self._z = _inflate.decompressobj(_WBITS[self._compression])
        self._fresh = True
        self.dropped_members += 1
        dropped = 0
        if self._failed:
            self._eof = self._failed = False
        if self._compression == GZIP and not self._eof:
            while True:
                at = _next_member(rest, False)
                while at == -2:  # a candidate too close to the end of what is buffered to check: read on
                    more = self._raw.read(self._chunk)
                    rest += more
                    at = _next_member(rest, not more)
                if at >= 0:
                    self._pending = rest[at:]
                    dropped += at
                    self.dropped_bytes += dropped
                    return dropped
                keep = min(len(rest), 2)  # a magic may straddle the next read
                dropped += len(rest) - keep
                rest = rest[len(rest) - keep:]
                more = self._raw.read(self._chunk)
                if not more:
                    break
                rest += more
        dropped += len(rest)
        while True:  # ZLIB (one stream), or no further gzip member: the rest of the file is lost
            more = self._raw.read(self._chunk)
            if not more:
                break
            dropped += len(more)
        self._eof = True
        self.dropped_bytes += dropped
        return dropped

    def skip(self, count: int) -> int:
        """Discard `count` decompressed bytes (one pass, no allocation beyond a chunk); return how many were skipped."""
        return read_past(self, count, self._chunk)

    def close(self) -> None:
        self._raw.close()


class _Readable(Protocol):
    def readinto(self, view: memoryview, /) -> int: ...


def read_past(stream: _Readable, count: int, chunk: int = 1 << 20) -> int:
    """Read and discard `count` bytes of a stream with `readinto` (one scratch buffer of at most `chunk` bytes);
    return how many there were (fewer when the stream ends first)."""
    scratch = bytearray(min(count, chunk) or 1)
    done = 0
    while done < count:
        n = stream.readinto(memoryview(scratch)[: min(len(scratch), count - done)])
        if not n:
            break
        done += n
    return done


_GZIP_MAGIC = b"\x1f\x8b\x08"  # ID1 ID2 and CM=8 (deflate), RFC 1952 section 2.3
_PROBE = 1 << 16  # compressed bytes a candidate member must inflate without error to be accepted


def _next_member(data: bytes, final: bool) -> int:
    """The offset in `data` of the first gzip member header that inflates without error (a false magic inside
    deflate data fails within a few bytes), -1 when there is none, -2 when a candidate needs more bytes to tell
    (`final`: there are no more bytes; a candidate that has not failed by the end is taken)."""
    at = data.find(_GZIP_MAGIC)
    while at >= 0:
        window = data[at : at + _PROBE]
        if len(window) < 10 and not final:  # not even a whole fixed header yet
            return -2
        if not window[3:4] or not window[3] & 0xE0:  # FLG's reserved bits must be zero
            probe = _inflate.decompressobj(_WBITS[GZIP])
            try:
                probe.decompress(window)
            except _INFLATE_ERRORS:
                pass
            else:
                if probe.eof or len(window) == _PROBE or final:
                    return at
                return -2
        at = data.find(_GZIP_MAGIC, at + 1)
    return -1
