"""What a file that is not a TFRecord file looks like, from its first bytes.

A JPEG, a text file or a `.idx` given where a TFRecord file was expected fails on its first record header with
a CRC mismatch that tells the user nothing. `describe` names what the bytes look like instead, so the error can
say "not a TFRecord file: it starts like a JPEG image".

>>> describe(b"\\xff\\xd8\\xff\\xe0\\x00\\x10JFIF\\x00")
'a JPEG image'
>>> describe(b"0 120\\n120 118\\n")
'a TFRecord index file (<offset> <size> lines)'
"""

from __future__ import annotations

import re

__all__ = ["describe", "not_a_tfrecord"]

# (magic bytes at offset 0, what they are); checked in order
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"BM", ""),  # BMP: checked below with its size field, "BM" alone is too common
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\x1f\x8b", "GZIP-compressed data"),
    (b"PK\x03\x04", "a ZIP archive (or a file stored in one, such as .npz or .docx)"),
    (b"PK\x05\x06", "an empty ZIP archive"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"PAR1", "a Parquet file"),
    (b"ARROW1", "an Arrow file"),
    (b"BZh", "BZIP2-compressed data"),
    (b"\xfd7zXZ\x00", "XZ-compressed data"),
    (b"\x28\xb5\x2f\xfd", "Zstandard-compressed data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"%PDF", "a PDF document"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"\x80\x02", "a Python pickle"),
    (b"\x80\x03", "a Python pickle"),
    (b"\x80\x04", "a Python pickle"),
    (b"\x80\x05", "a Python pickle"),
    (b"SQLite format 3\x00", "an SQLite database"),
)
_RIFF = {b"WEBP": "a WebP image", b"WAVE": "a WAV audio file", b"AVI ": "an AVI video"}
_INDEX_LINE = re.compile(rb"\s*\d+[ \t]+\d+[ \t]*\r?\n")
_TEXT_BYTES = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


def describe(head: bytes | bytearray | memoryview) -> str | None:
    """What the first bytes of a file look like ("a JPEG image", "JSON text", ...), or None when they look like
    nothing known. A few hundred bytes give the best answer; 12 are enough for most formats."""
    head = bytes(head)
    if not head:
        return None
    for magic, what in _MAGIC:
        if head.startswith(magic) and what:
            return what
    if head.startswith(b"BM") and len(head) >= 14 and head[6:10] == b"\x00\x00\x00\x00":
        return "a BMP image"
    if head.startswith(b"RIFF") and head[8:12] in _RIFF:
        return _RIFF[head[8:12]]
    if len(head) >= 12 and head[4:8] == b"ftyp":
        return "an MP4/HEIF media file"
    if len(head) >= 2 and head[0] == 0x78 and (head[0] << 8 | head[1]) % 31 == 0:
        return "ZLIB-compressed data"
    if _INDEX_LINE.match(head):
        return "a TFRecord index file (<offset> <size> lines)"
    text = _as_text(head)
    if text is not None:
        stripped = text.lstrip("\ufeff \t\r\n")
        if stripped.startswith(("{", "[")):
            return "JSON text"
        if stripped.startswith("<"):
            return "XML or HTML text"
        return "text"
    return None


def _as_text(head: bytes) -> str | None:
    """The bytes as text when they are (printable ASCII or UTF-8, tolerating a character cut at the end)."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # a real decoding error, not a character cut by the sample's end
            return None
        text = head[: exc.start].decode("utf-8")
    if not text:
        return None
    printable = sum(1 for c in text if ord(c) >= 0x80 or ord(c) in _TEXT_BYTES)
    return text if printable == len(text) else None


def not_a_tfrecord(head: bytes | bytearray | memoryview, compressed: str | None = None) -> str | None:
    """The sentence an error at offset 0 should start with when `head` (the first bytes of the file, or of its
    decompressed stream when `compressed` names the compression) is clearly not TFRecord data; else None.

    >>> not_a_tfrecord(b"hello, world\\n")
    'not a TFRecord file: it starts like text'
    """
    what = describe(head)
    if what is None:
        return None
    if compressed:
        return f"not TFRecord data: the {compressed.upper()} stream decompresses to what looks like {what}"
    if what.endswith("-compressed data") and what.split("-")[0] in ("GZIP", "ZLIB"):
        kind = what.split("-")[0].lower()
        return (f"not a TFRecord file as read (uncompressed): it starts like {what}; pass compression={kind!r} "
                "(or 'auto')")
    return f"not a TFRecord file: it starts like {what}"


def header_message(head: bytes | bytearray | memoryview, offset: int, computed: int, stored: int,
                   compression: str | None = None) -> str:
    """The message of a corrupt record header: at offset 0, what the file looks like when it is clearly not
    TFRecord data; otherwise (and for a real TFRecord file with a damaged first header) the two CRCs."""
    crcs = f"the CRC of its length field is {computed:#010x}, expected {stored:#010x} (stored in the header)"
    if offset == 0:
        sentence = not_a_tfrecord(head, None if compression in (None, "none") else compression)
        if sentence is not None:
            return f"{sentence} (its first bytes {bytes(head[:8]).hex(' ')} are not a record header)"
    return f"corrupt record header: {crcs}"
