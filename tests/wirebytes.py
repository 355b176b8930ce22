"""Protocol buffer wire bytes and TFRecord framing, written by hand for the tests.

Independent of tfr_torch's own encoders (format/wire.py, format/crc.py, the writer), so a bug there cannot hide
in both the code under test and the bytes it is checked against. The wire rules are protobuf's
(https://protobuf.dev/programming-guides/encoding/); the messages are TensorFlow's feature.proto, example.proto
and tensor.proto; the framing is tfrecord-format.md, section 1.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from crc32c import crc32c

# wire types: the low three bits of a field's tag
VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5


# ------------------------------------------------------------------------------------------------ wire format


def varint(value: int) -> bytes:
    """Base-128 varint, least significant group first; a negative int64 is its 64-bit two's complement (10 bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    """A field's tag: the varint of `field << 3 | wire_type`."""
    return varint(field << 3 | wire_type)


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field: tag, the payload's length as a varint, the payload."""
    return tag(field, LEN) + varint(len(payload)) + payload


def f32(bits: int) -> bytes:
    """Four little-endian bytes: a float32 given by its bit pattern (the I32 wire type's payload)."""
    return struct.pack("<I", bits)


# ------------------------------------------------------------------------------- tf.train.Example (feature.proto)


def packed_ints(values: Iterable[int]) -> bytes:
    """Int64List.value (field 1) as one packed run."""
    return ld(1, b"".join(varint(v) for v in values))


def unpacked_ints(values: Iterable[int]) -> bytes:
    """Int64List.value (field 1), one varint field per value."""
    return b"".join(tag(1, VARINT) + varint(v) for v in values)


def packed_floats(bits: Iterable[int]) -> bytes:
    """FloatList.value (field 1) as one packed run of float32 bit patterns."""
    return ld(1, b"".join(f32(b) for b in bits))


def unpacked_floats(bits: Iterable[int]) -> bytes:
    """FloatList.value (field 1), one I32 field per float32 bit pattern."""
    return b"".join(tag(1, I32) + f32(b) for b in bits)


def bytes_feature(list_body: bytes) -> bytes:
    """Feature.bytes_list (field 1) holding the BytesList body `list_body`."""
    return ld(1, list_body)


def float_feature(list_body: bytes) -> bytes:
    """Feature.float_list (field 2) holding the FloatList body `list_body`."""
    return ld(2, list_body)


def int64_feature(list_body: bytes) -> bytes:
    """Feature.int64_list (field 3) holding the Int64List body `list_body`."""
    return ld(3, list_body)


def raw_example(features: dict[str, bytes]) -> bytes:
    """A tf.train.Example whose Features map (field 1 of Features, in Example field 1) holds one entry per key,
    its value the raw tf.train.Feature bytes given."""
    entries = b"".join(ld(1, ld(1, key.encode()) + ld(2, raw)) for key, raw in features.items())
    return ld(1, entries)


# ------------------------------------------------------------------------------ TensorProto (tensor.proto)


def tensor_proto(dtype: int, dims=(), content: bytes | None = None, float_val=(), string_val=(), scomplex_val=(),
                 unknown_rank: bool = False) -> bytes:
    """A TensorProto: dtype (field 1), tensor_shape (2: dim 2 with size 1, unknown_rank 3), tensor_content (4),
    float_val (5, packed), string_val (8), scomplex_val (9, packed)."""
    shape = b"".join(ld(2, tag(1, VARINT) + varint(d)) for d in dims)
    if unknown_rank:
        shape += tag(3, VARINT) + varint(1)
    out = tag(1, VARINT) + varint(dtype) + ld(2, shape)
    if content is not None:
        out += ld(4, content)
    if float_val:
        out += ld(5, struct.pack(f"<{len(float_val)}f", *float_val))
    if scomplex_val:
        out += ld(9, struct.pack(f"<{len(scomplex_val)}f", *scomplex_val))
    for s in string_val:
        out += ld(8, s)
    return out


# ------------------------------------------------------------------------------------------- TFRecord framing

HEADER_BYTES = 12  # uint64 length, uint32 masked CRC of the length
FOOTER_BYTES = 4  # uint32 masked CRC of the data


def masked_crc(data: bytes) -> int:
    """CRC-32C of `data`, rotated right by 15 bits plus 0xa282ead8 (mod 2**32), as TFRecord stores it."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def header(length: int) -> bytes:
    """A record header claiming `length` bytes of data, with a correct length CRC."""
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc(raw))


def frame(data: bytes) -> bytes:
    """One framed record: header, data, masked CRC of the data."""
    return header(len(data)) + data + struct.pack("<I", masked_crc(data))
