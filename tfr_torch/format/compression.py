"""GZIP and ZLIB compression exactly as TensorFlow's TFRecordOptions does it.

TensorFlow compresses a whole file as one deflate stream with memLevel 9 and window bits 15 (+16 for GZIP);
CPython's zlib with the same parameters writes identical bytes at every level, 0 to 9. Writing always uses zlib
(so the bytes stay TensorFlow's). Reading (inflating) is format/inflate.py.
"""

from __future__ import annotations

import zlib

from tfr_torch.format.framing import HEADER_SIZE, parse_header

__all__ = ["NONE", "GZIP", "ZLIB", "normalize_compression", "compression_from_name", "detect_compression",
           "make_compressor"]

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


# Reads of 128 KiB inflate to less than a piece at usual ratios, so zlib uses all its input in one call: with 1 MiB
