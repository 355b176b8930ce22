"""format/framing.py and format/wire.py: the record header and the protobuf wire primitives, written once.

- framing: a framed record is header + data + footer, `parse_header` accepts exactly the headers whose length CRC
  matches (a cached length never lets a wrong CRC through), and every reader and detector agrees with it;
- wire: varints round-trip, the byte-by-byte and array decoders of packed varints agree value by value and error
  by error (same position, same sentence), and a stream is skipped with `read_past`.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tfr_torch
from tfr_torch.format.compression import NONE, detect_compression
from tfr_torch.format.inflate import read_past
from tfr_torch.format.crc import masked_crc32c
from tfr_torch.format.framing import (
    FOOTER_SIZE,
    HEADER_SIZE,
    OVERHEAD,
    frame_record,
    header_bytes,
    parse_header,
)
from tfr_torch.format.wire import (
    WireError,
    decode_packed_varints,
    decode_varint_list,
    encode_varint,
    read_short_varints,
    read_varint,
)


def test_sizes():
    assert (HEADER_SIZE, FOOTER_SIZE, OVERHEAD) == (12, 4, 16)


@given(st.binary(max_size=300))
def test_frame_record_is_tensorflows_layout(data):
    framed = frame_record(data)
    length = struct.pack("<Q", len(data))
    assert framed == length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))
    assert header_bytes(len(data)) == framed[:HEADER_SIZE]
    assert parse_header(framed) == len(data) and parse_header(b"xx" + framed, 2) == len(data)
    assert detect_compression(framed) == NONE


def test_parse_header_refuses_every_bit_flip():
    header = header_bytes(300)  # its length is now cached as good
    assert parse_header(header) == 300
    for byte in range(HEADER_SIZE):
        for bit in range(8):
            flipped = bytearray(header)
            flipped[byte] ^= 1 << bit
            assert parse_header(flipped) is None, (byte, bit)


def test_writer_and_reader_frame_alike(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    records = [b"", b"a", b"x" * 70000]
    with tfr_torch.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as f:
        assert f.read() == b"".join(frame_record(r) for r in records)
    assert list(tfr_torch.read_records(path)) == records


@given(st.integers(0, 2**64 - 1))
def test_varints_round_trip(value):
    encoded = encode_varint(value)
    assert read_varint(b"\x00" + encoded, 1, len(encoded) + 1) == (value, len(encoded) + 1)
    assert decode_varint_list(encoded) == [value]
    assert decode_packed_varints(np.frombuffer(encoded, np.uint8)).view(np.uint64).tolist() == [value]


def test_read_varint_errors():
    with pytest.raises(WireError) as cut:
        read_varint(b"\x01\x80\x80", 1, 3)
    assert (cut.value.pos, cut.value.message) == (1, "ends inside a varint")
    with pytest.raises(WireError) as long:
        read_varint(b"\xff" * 11, 0, 11)
    assert (long.value.pos, long.value.message) == (0, "has a varint longer than 10 bytes")


def _outcome(decode, run: bytes):
    try:
        values = decode(run)
    except WireError as err:
        return (err.pos, err.message)
    # a list of Python ints is compared as it is: np.asarray would make [0, 2**63] float64 and lose the values
    values = values.tolist() if isinstance(values, np.ndarray) else list(values)
    return [v & 0xFFFF_FFFF_FFFF_FFFF for v in values]


@settings(max_examples=300)
@given(st.lists(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]), min_size=1, max_size=30), st.integers(0, 50))
@example([0x00] + [0x80] * 9 + [0x01], 0)  # 2**63 beside a small value (once lost by the comparison itself)
def test_packed_varint_decoders_agree(run_bytes, offset):
    run = bytes(run_bytes)
    small = _outcome(lambda r: decode_varint_list(r, offset), run)
    array = _outcome(lambda r: decode_packed_varints(np.frombuffer(r, np.uint8), offset), run)
    assert small == array


@pytest.mark.parametrize("run", [b"\x01" + b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x01" + b"\x80" * 11 + b"\x00",
                                 b"\x05\x80", b"\x80"])
def test_packed_varint_errors_are_placed_alike(run):
    small = _outcome(lambda r: decode_varint_list(r, 7), run)
    array = _outcome(lambda r: decode_packed_varints(np.frombuffer(r, np.uint8), 7), run)
    assert isinstance(small, tuple) and small == array


@given(st.lists(st.integers(0, 2**21), min_size=1, max_size=20))
def test_short_varints_read_at_once_as_one_by_one(values):
    encoded = [encode_varint(v) for v in values]
    flat = np.frombuffer(b"".join(encoded) + b"\x00", np.uint8)  # a trailing byte, as a message's payload follows
    starts = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    got = read_short_varints(flat, starts)
    one_by_one = [read_varint(flat.tobytes(), int(p), flat.size) for p in starts]
    if max(len(e) for e in encoded) > 2:  # 3-byte varints (values >= 2**14) are not short: the caller reads them
        assert got is None
    else:
        assert got is not None
        assert got[0].tolist() == [v for v, _ in one_by_one] and got[1].tolist() == [e for _, e in one_by_one]


def test_read_past():
    stream = io.BytesIO(b"0123456789")
    assert read_past(stream, 4, chunk=3) == 4 and stream.read() == b"456789"
    assert read_past(io.BytesIO(b"abc"), 10) == 3
    assert read_past(io.BytesIO(b"abc"), 0) == 0
