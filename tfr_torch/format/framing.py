"""TFRecord framing, written once: every reader, writer, index check and detector frames records through here.

A record on disk is its data between a 12-byte header and a 4-byte footer, all little-endian:

    uint64 length | uint32 masked CRC-32C of the 8 length bytes | data (length bytes) | uint32 masked CRC-32C of data

The CRC mask is `tfr_torch.format.crc.masked_crc32c`. The compiled core (tfr_torch._native) implements the same
layout in C for its hot loops; this module is the reference its Python side and the pure-Python backend use.

>>> frame = frame_record(b"abc")
>>> len(frame) == 3 + OVERHEAD, parse_header(frame)
(True, 3)
"""

from __future__ import annotations

import struct
from typing import Union

from tfr_torch.format.crc import masked_crc32c

__all__ = ["FOOTER_SIZE", "HEADER_SIZE", "OVERHEAD", "BytesLike", "data_crc", "frame_record", "header_bytes",
           "header_crc", "masked_crc32c", "pack_crc", "parse_header", "unpack_crc", "unpack_header"]

BytesLike = Union[bytes, bytearray, memoryview]

HEADER_SIZE = 12  # uint64 length + uint32 masked CRC of the length
FOOTER_SIZE = 4  # uint32 masked CRC of the data
OVERHEAD = HEADER_SIZE + FOOTER_SIZE  # the framing bytes around each record's data

unpack_header = struct.Struct("<QI").unpack_from  # (buffer, position) -> (length, stored length CRC)
unpack_crc = struct.Struct("<I").unpack_from  # (buffer, position) -> (stored CRC,)
pack_crc = struct.Struct("<I").pack
_pack_length = struct.Struct("<Q").pack

# A header's CRC depends on its length only: length -> the valid header, for the lengths seen (bounded)
_HEADERS: dict[int, bytes] = {}
_GOOD_CRCS: dict[int, int] = {}
_MAX_CACHED = 4096


def header_crc(buf: BytesLike, pos: int = 0) -> int:
    """The masked CRC the header at `buf[pos:]` should store: that of its 8 length bytes."""
    return masked_crc32c(memoryview(buf)[pos : pos + 8])


def parse_header(buf: BytesLike, pos: int = 0) -> int | None:
    """The data length declared by the record header at `buf[pos : pos + 12]`, or None when its length CRC does
    not match (a corrupt header, or no header at all). `buf` must hold the 12 bytes."""
    length: int
    stored: int
    length, stored = unpack_header(buf, pos)
    if _GOOD_CRCS.get(length) == stored:
        return length
    if masked_crc32c(memoryview(buf)[pos : pos + 8]) != stored:
        return None
    if len(_GOOD_CRCS) < _MAX_CACHED:
        _GOOD_CRCS[length] = stored
    return length


def header_bytes(length: int) -> bytes:
    """The 12-byte header of a record of `length` data bytes."""
    header = _HEADERS.get(length)
    if header is None:
        packed = _pack_length(length)
        header = packed + pack_crc(masked_crc32c(packed))
        if len(_HEADERS) < _MAX_CACHED:
            _HEADERS[length] = header
    return header


def data_crc(data: BytesLike) -> bytes:
    """The 4-byte footer of a record: the masked CRC of its data."""
    return pack_crc(masked_crc32c(data))


def frame_record(data: BytesLike) -> bytes:
    """Return one record framed as in a TFRecord file: length, length CRC, data, data CRC."""
    return header_bytes(len(data)) + bytes(data) + data_crc(data)
