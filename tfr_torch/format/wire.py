"""Protocol buffer wire format, written once: varints, tags and length-delimited fields, to encode and to decode.

The hand-written encoders (format/example.py, format/tensor.py) and decoders (format/strict.py, format/columns.py)
all use these. Decoding follows protobuf's wire rules: a varint has at most 10 bytes and its value is truncated to
64 bits where it is stored; every length is checked against the bytes left in its message before it is used.
Decoders raise `WireError` (a position and a sentence), which the format layer turns into DecodeError.
"""

from __future__ import annotations

from typing import Union

import numpy as np

__all__ = ["VARINT_CUT", "VARINT_LONG", "WIRE_NAMES", "BytesLike", "WireError", "decode_packed_varints",
           "decode_varint_list", "encode_varint", "length_delimited", "read_delimited", "read_short_varints",
           "read_tag", "read_varint", "skip_field"]

BytesLike = Union[bytes, bytearray, memoryview]


def encode_varint(value: int) -> bytes:
    """The base-128 varint of a non-negative int."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its one-byte tag, the payload's length as a varint, the payload."""
    return bytes((tag,)) + encode_varint(len(payload)) + payload


# ------------------------------------------------------------------------------------------------- decoding

WIRE_NAMES = {0: "varint", 1: "fixed64", 2: "length-delimited", 3: "group start", 4: "group end", 5: "fixed32"}
VARINT_CUT = "has a packed int64 run that ends inside a varint"
VARINT_LONG = "has a varint longer than 10 bytes"


class WireError(Exception):
    """A wire rule broken at `pos` (a byte offset in the message); the format decoders turn it into DecodeError
    (naming the record, the key when `key` is known, and the offset)."""

    def __init__(self, pos: int, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.pos, self.message, self.key = pos, message, key


def read_varint(buf: BytesLike, pos: int, end: int) -> tuple[int, int]:
    """A base-128 varint at `pos` (at most 10 bytes, within `end`): (value, position after it). The value is not
    truncated to 64 bits (callers that store it do that)."""
    start = pos
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError(start, "ends inside a varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError(start, VARINT_LONG)


def read_tag(buf: BytesLike, pos: int, end: int) -> tuple[int, int, int]:
    """A field tag at `pos`: (field number, wire type, position after it). Padded (non-minimal) tags, field
    number 0, unknown wire types and groups (which no message tfr_torch reads may hold) are errors."""
    byte = buf[pos]
    if byte < 0x80:
        tag, after = byte, pos + 1
    else:
        tag, after = read_varint(buf, pos, end)
        if buf[after - 1] == 0:
            raise WireError(pos, "has a padded (non-minimal) field tag")
    number, wire = tag >> 3, tag & 7
    if number == 0 or wire > 5:
        raise WireError(pos, f"has an invalid field tag {tag:#x} (field {number}, wire type {wire})")
    if wire in (3, 4):
        raise WireError(pos, f"has a group (field {number}, wire type {wire}): groups are not part of tf.train.Example "
                             "and TensorFlow's parse_example rejects them")
    return number, wire, after


def read_delimited(buf: BytesLike, pos: int, end: int, what: str) -> tuple[int, int]:
    """The payload bounds (start, stop) of a length-delimited field whose length varint is at `pos`."""
    length, start = read_varint(buf, pos, end)
    if length > end - start:
        raise WireError(pos, f"has a {what} of {length} bytes but only {end - start} bytes remain in its message")
    return start, start + length


def skip_field(buf: BytesLike, pos: int, end: int, wire: int) -> int:
    """Skip an unknown field's value (wire types 0, 1, 2, 5); return the position after it."""
    if wire == 0:
        return read_varint(buf, pos, end)[1]
    if wire == 2:
        return read_delimited(buf, pos, end, "length-delimited unknown field")[1]
    size = 8 if wire == 1 else 4
    if pos + size > end:
        raise WireError(pos, f"ends inside a {WIRE_NAMES[wire]} field")
    return pos + size


def decode_varint_list(run: bytes, offset: int = 0) -> list[int]:
    """The values of a short packed run of varints, byte by byte, as unsigned 64-bit ints (bits beyond 64 dropped,
    as protobuf does). `offset` (the run's position in its message) places errors. The rules and errors of
    `decode_packed_varints`, without numpy's per-call cost."""
    if run[-1] >= 0x80:  # checked first, as decode_packed_varints does: the same error for the same run
        last = max((i for i, byte in enumerate(run) if byte < 0x80), default=-1)
        raise WireError(offset + last + 1, VARINT_CUT)
    values: list[int] = []
    result = shift = 0
    for byte in run:
        if byte < 0x80:
            values.append((result | (byte << shift)) & 0xFFFF_FFFF_FFFF_FFFF)
            result = shift = 0
            continue
        result |= (byte & 0x7F) << shift
        shift += 7
        if shift >= 70:
            raise WireError(offset + _start_of_long_varint(run), VARINT_LONG)
    return values


def _start_of_long_varint(run: bytes) -> int:
    """Where the first varint longer than 10 bytes starts in `run` (which has one)."""
    start = 0
    for pos, byte in enumerate(run):
        if byte < 0x80:
            start = pos + 1
        elif pos - start >= 9:
            return start
    return start  # not reached: the caller found one


def read_short_varints(flat: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Read a 1- or 2-byte varint at each position of `pos` in the uint8 array `flat` at once (the length fields
    of a batch of short messages): (values, positions after them), or None when any is longer (the caller then
    reads them one by one with `read_varint`, which also places errors)."""
    first = flat[pos].astype(np.int64)
    one = first < 0x80
    if one.all():
        return first, pos + 1
    second = flat[np.minimum(pos + 1, flat.size - 1)].astype(np.int64)
    if (second[~one] >= 0x80).any():
        return None
    return np.where(one, first, (first & 0x7F) | (second << 7)), pos + np.where(one, 1, 2)


def decode_packed_varints(payload: np.ndarray, offset: int = 0) -> np.ndarray:
    """Decode a uint8 array of concatenated varints (each at most 10 bytes, the last ending the array) into int64
    values, as protobuf and TensorFlow read them (two's complement, bits beyond 64 dropped), with array operations.
    `offset` (the payload's position in its message) places errors."""
    if payload.size == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(payload < 0x80)
    if ends.size == 0 or ends[-1] != payload.size - 1:
        raise WireError(offset + (int(ends[-1]) + 1 if ends.size else 0), VARINT_CUT)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > 10:
        raise WireError(offset + int(starts[np.argmax(lengths > 10)]), VARINT_LONG)
    if lengths.max() == 1:
        return payload.astype(np.int64)
    shift = (7 * (np.arange(payload.size) - np.repeat(starts, lengths))).astype(np.uint64)
    with np.errstate(over="ignore"):
        parts = (payload & 0x7F).astype(np.uint64) << shift  # shifts of 63 keep the low bit; 64+ never occur
    return np.add.reduceat(parts, starts).view(np.int64)
