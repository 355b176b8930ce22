"""Protocol buffer wire-format helpers shared by the hand-written encoders."""

from __future__ import annotations

__all__ = ["encode_varint", "length_delimited"]


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
