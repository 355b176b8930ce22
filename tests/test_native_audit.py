"""An adversarial audit of the compiled core's Python face (tfr_torch/_native/src/bind_*.c and their kernels).

What was audited: every function and type that `tfr_torch._native._core` exports (crc32c, masked_crc32c,
scan_records, find_header, frame_records, read_framed, ExampleDecoder, decode_feature_lists, sparse_indices,
bytes_total, pack_bytes, unpack_bytes, pack_spans, bytes_of_spans, jpeg_next_marker, png_decode_many,
planes_from_pixels, normalize_pixels, seek_build, seek_extract, seek_extract_ranges), called with empty, 1-byte,
non-contiguous, read-only and odd-format buffers, wrong Python types, integers at the boundaries (0, 2**31 - 1,
2**31, 2**32, 2**63 - 1, negative), offsets at and past the end, and offset / size / span arrays that overlap, are
unsorted, are unaligned or lie; every kernel that runs without the GIL was read for a touch of a Python object (none
does: each works on pointers and lengths gathered before, from objects its binding holds), and the size arithmetic
on input-derived sizes for overflow. These tests pass in the normal build and under `make test-sanitizers`'s
AddressSanitizer + UndefinedBehaviorSanitizer build (their names hold "native").

What was found and fixed (each has a "Fixed:" test below that failed, or aborted under the sanitizers, before):
  - ExampleDecoder: an __init__ that failed (a second one on a live decoder, or the first on one made by __new__)
    left the new plan's key count with the old per-key arrays (or none): decode() then read past them (heap
    overflow) or through NULL (a segfault even without sanitizers); and an __init__ from one thread while another
    thread's decode() ran without the GIL freed the plan under it (heap-use-after-free). bind_example.c.
  - bytes_of_spans / pack_spans allocated 16 bytes per span of the caller's `total` before checking that the spans
    lie in the arena: a negative total raised MemoryError, a huge one tried a terabyte allocation. bind_bytes.c.
  - seek_extract_ranges read its int64 starts / lens through casts: an unaligned buffer (a memoryview slice) is
    undefined behaviour (UBSan aborts). And a range the stream did not fill came back as a bytes object of its full
    length, uninitialized heap memory, where the reference (seek_inflate.extract_ranges) gives it shorter or empty.
    bind_seek.c.
  - png_decode_many parsed width / height, seek_extract / seek_extract_ranges `bits` and seek_extract `skip` with
    the masking formats ("I", "K"): a width of 2**32 + 8 decoded as a width of 8, bits 2**32 as bits 0, skip -1 as
    2**64 - 1, with no error. bind_image.c, bind_seek.c.
  - planes_from_pixels / normalize_pixels built their error message from a signed product c * h * w that overflows
    (undefined behaviour; it printed "need 0 bytes" for 2**40 x 2**40 pixels). bind_image.c.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from typing import Any

import numpy as np
import pytest

from tfr_torch import _native

pytestmark = pytest.mark.skipif(not _native.available(), reason="the compiled core is not built")

core: Any = _native._compiled
BOUNDS = [2**31 - 1, 2**31, 2**32, 2**63 - 1, -1, -(2**63)]


def spans(*rows: tuple[int, int, int]) -> bytes:
    return np.array(rows, dtype=np.int64).tobytes()


def png(width: int, height: int, pixels: bytes) -> bytes:
    """A plain 8-bit grayscale PNG (filter 0 on every row)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    raw = b"".join(b"\0" + pixels[y * width:(y + 1) * width] for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


# ---- found and fixed ----------------------------------------------------------------------------------------------


def test_native_example_decoder_failed_reinit_leaves_no_stale_per_key_arrays():
    """Fixed: a failed second __init__ kept the new plan (2 keys) with the old 1-key `indices` array: decode()
    read past it (ASan: heap-buffer-overflow in tfr_batch_layout). Now a failed __init__ empties the decoder and
    decode() refuses it."""
    decoder = core.ExampleDecoder([b"a"], b"\x01")
    assert decoder.decode([b""])[0] == 0
    with pytest.raises(ValueError, match="one byte per key"):
        decoder.__init__([b"a", b"b"], b"\x01\x01", b"\x01")
    with pytest.raises(RuntimeError, match="not initialized"):
        decoder.decode([b""])
    decoder.__init__([b"a", b"b"], b"\x01\x01", b"\x01\x00")  # a good __init__ makes it usable again
    status, _arena, columns, _dense = decoder.decode([b"", b""])
    assert status == 0 and len(columns) == 2 and columns[0][5] >= 0 and columns[1][5] == -1


def test_native_example_decoder_failed_first_init_is_refused_not_dereferenced():
    """Fixed: __init__ failing on a decoder made by __new__ left a 1-key plan and NULL per-key arrays: decode()
    dereferenced NULL (a segfault in every build). Run in a subprocess so that a regression fails, not crashes."""
    code = ("from tfr_torch import _native\n"
            "D = _native._compiled.ExampleDecoder\n"
            "d = D.__new__(D)\n"
            "try:\n    d.__init__([b'a'], b'\\x01', b'\\x01\\x01')\nexcept ValueError:\n    pass\n"
            "try:\n    d.decode([b''])\nexcept RuntimeError as e:\n    print('refused:', e)\n"
            "print(D.__new__(D).decode.__name__)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=os.environ.copy())
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: ExampleDecoder: not initialized" in result.stdout


def test_native_example_decoder_init_while_another_thread_decodes_is_refused():
    """Fixed: decode() reads the decoder's plan and per-key arrays without the GIL; an __init__ from another thread
    meanwhile freed them (ASan: heap-use-after-free). Now such an __init__ raises RuntimeError and every decode gets
    its values. In a subprocess, so that a regression fails instead of crashing the run."""
    code = r"""
import threading
import numpy as np
from tfr_torch import _native
record = b"\x0a\x0f\x0a\x0d\x0a\x01x\x12\x08\x12\x06\x0a\x04\x00\x00\x80\x3f"
batch = [record] * 20000
decoder = _native._compiled.ExampleDecoder([b"x"], b"\x01")
bad = []
def work():
    for _ in range(20):
        status, arena, columns, _ = decoder.decode(batch)
        values = np.frombuffer(arena, np.float32, count=len(batch), offset=columns[0][2])
        if status != 0 or columns[0][3] != len(batch) or not (values == 1.0).all():
            bad.append(status)
thread = threading.Thread(target=work)
thread.start()
refused = 0
while thread.is_alive():
    try:
        decoder.__init__([b"x"], b"\x01")
    except RuntimeError:
        refused += 1
thread.join()
print("bad", len(bad), "refused", refused)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=os.environ.copy())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bad 0 " in result.stdout, result.stdout


def test_native_decoder_never_initialized_is_refused():
    """A decoder made by __new__ alone has no plan: decode() says so instead of decoding against nothing."""
    decoder = core.ExampleDecoder.__new__(core.ExampleDecoder)
    with pytest.raises(RuntimeError, match="not initialized"):
        decoder.decode([b"", b"\x0a\x00"])


@pytest.mark.parametrize("total", [-1, -(2**63), 2**40, 2**62, 2**63 - 1])
def test_native_span_counts_are_checked_before_anything_is_allocated(total):
    """Fixed: bytes_of_spans / pack_spans allocated total * 16 bytes before checking that `total` spans fit in the
    arena: a negative total raised MemoryError, 2**40 tried an 8 TiB allocation. Now ValueError, as for any span
    outside the arena."""
    arena = spans((0, 0, 1))
    with pytest.raises(ValueError, match="do not fit in the 24-byte arena"):
        core.bytes_of_spans((b"ab",), arena, 0, total)
    with pytest.raises(ValueError, match="do not fit in the 24-byte arena"):
        core.pack_spans((b"ab",), arena, 0, total, bytearray(8), 0)
    assert core.bytes_of_spans((b"ab",), arena, 0, 1) == [b"a"]


def zlib_point() -> tuple[bytes, bytes, int, int, bytes]:
    """A ZLIB stream, its text, and its first seek point as (data from the point, bits, first, window)."""
    text = bytes(range(256)) * 64 + b"the end"
    whole = zlib.compress(text, 6)
    status, points, windows, total, _ = core.seek_build(whole, False, 1 << 20)
    assert status == 0 and total == len(text)
    out, start, bits, dict_len = np.frombuffer(points, np.int64).reshape(-1, 4)[0].tolist()
    assert out == 0 and dict_len == 0
    first = start - (1 if bits else 0)
    return whole, text, bits, first, b""


def test_native_seek_extract_ranges_reads_unaligned_buffers():
    """Fixed: the int64 starts / lens were read through a cast: a buffer at an odd address (a memoryview slice, as
    numpy views can be) is undefined behaviour (UBSan: load of misaligned address). Now copied: the same result as
    from aligned arrays."""
    whole, text, bits, first, window = zlib_point()
    starts, lens = np.array([3, 100, 5000], np.int64), np.array([10, 0, 77], np.int64)
    odd_starts = memoryview(b"\0" + starts.tobytes())[1:]
    odd_lens = memoryview(b"\0" + lens.tobytes())[1:]
    aligned = core.seek_extract_ranges(whole[first:], bits, window, False, starts, lens)
    assert core.seek_extract_ranges(whole[first:], bits, window, False, odd_starts, odd_lens) == aligned
    assert aligned == (0, [text[3:13], b"", text[5000:5077]], 87)


@pytest.mark.parametrize("ranges", [[(16380, 200)], [(10, 5), (16000, 1000), (17000, 3)], [(20000, 4)],
                                    [(0, 16391)], [(0, 16392)]])
def test_native_seek_extract_ranges_past_the_end_equal_the_reference(ranges):
    """Fixed: a range the stream ends inside (or before) came back as a bytes object of its full length whose tail
    was never written (uninitialized heap memory handed to Python); the reference gives it shorter, or empty.
    Differential against tfr_torch.format.seek_inflate.extract_ranges."""
    from tfr_torch.format.seek_inflate import extract_ranges

    whole, text, bits, first, window = zlib_point()
    starts = np.array([s for s, _ in ranges], np.int64)
    lens = np.array([n for _, n in ranges], np.int64)
    native = core.seek_extract_ranges(whole[first:], bits, window, False, starts, lens)
    reference = extract_ranges(lambda at, n: whole[at:at + n], whole[first:], first, len(whole), bits, window,
                               False, starts.tolist(), lens.tolist(), zlib)
    assert native == reference
    assert native[1] == [text[s:s + n] for s, n in ranges]


def test_native_seek_arguments_are_checked_not_masked():
    """Fixed: `bits` was parsed with "I" (2**32 read as 0) and `skip` with "K" (-1 read as 2**64 - 1): both were
    accepted. Now an out-of-range value raises."""
    whole, _text, bits, first, window = zlib_point()
    data = whole[first:]
    assert core.seek_extract(data, bits, window, False, 2, 3)[0] == 0
    for wrapped in (2**32, 2**32 + bits, -1, 8):
        with pytest.raises((ValueError, OverflowError)):
            core.seek_extract(data, wrapped, window, False, 0, 4)
        with pytest.raises((ValueError, OverflowError)):
            core.seek_extract_ranges(data, wrapped, window, False, np.zeros(1, np.int64), np.ones(1, np.int64))
    for skip in (-1, -(2**63)):
        with pytest.raises(ValueError, match="skip must be >= 0"):
            core.seek_extract(data, bits, window, False, skip, 4)


def test_native_png_sizes_are_checked_not_masked():
    """Fixed: width and height were parsed with "I", which keeps the low 32 bits: a width of 2**32 + 8 decoded an
    8-pixel-wide PNG, -1 was taken as 4294967295. Now refused."""
    image = png(8, 2, bytes(range(16)))
    out = bytearray(16)
    assert core.png_decode_many([image], out, 8, 2, 0) == (-1, 0) and bytes(out) == bytes(range(16))
    for width, height in [(2**32 + 8, 2), (8, 2**32 + 2), (-1, 2), (8, -2), (0, 2), (2**63 - 1, 2)]:
        with pytest.raises(ValueError):
            core.png_decode_many([image], bytearray(16), width, height, 0)
    with pytest.raises(OverflowError):
        core.png_decode_many([image], bytearray(16), 2**64 + 8, 2, 0)


def test_native_pixel_layout_errors_do_not_overflow_their_sizes():
    """Fixed: the error message's size was the signed product c * h * w (undefined on overflow; it printed "need 0
    bytes of planes" for 2**40 x 2**40 pixels). Now a checked product."""
    with pytest.raises(ValueError, match=r"need 2\*\*64 or more bytes of planes"):
        core.planes_from_pixels(bytearray(1), b"", 2**40, 2**40, 1, 1, 0, False)
    with pytest.raises(ValueError, match=r"need 2\*\*64 or more bytes of output"):
        core.normalize_pixels(bytearray(1), False, False, b"", 2**40, 2**40, 1, 1, 0, False, b"", b"")
    with pytest.raises(ValueError, match="need 12 bytes of planes"):
        core.planes_from_pixels(bytearray(1), b"x" * 12, 2, 2, 3, 3, 6, False)
    # no pixels, channels past 16: the channel limit is checked before c * 4 is formed
    with pytest.raises(ValueError, match="at most 16 channels"):
        core.normalize_pixels(bytearray(0), False, False, b"", 0, 1, 2**62, 2**62, 0, False, b"", b"")


# ---- checked and found correct -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 2**31, 2**32 - 1, 2**32, 2**40 + 5, -1])
def test_native_crc32c_start_value_is_read_as_the_reference_reads_it(value):
    """crc32c(data, value) masks `value` to 32 bits, as the reference (the crc32c package) does: the same numbers."""
    from crc32c import crc32c as reference

    for data in (b"", b"a", bytes(range(200)), memoryview(bytes(range(64)))[3:]):
        assert core.crc32c(data, value) == reference(bytes(data), value)


ODD_BUFFERS = [np.arange(16, dtype=np.uint8)[::2], None, 1.5, "str", [1, 2]]


@pytest.mark.parametrize("bad", ODD_BUFFERS, ids=["strided", "None", "float", "str", "list"])
def test_native_buffer_arguments_refuse_what_is_not_a_contiguous_buffer(bad):
    """Every buffer argument refuses a strided array and what is not a buffer with TypeError / ValueError /
    BufferError (never reads it)."""
    refused = (TypeError, ValueError, BufferError)
    calls = [lambda: core.crc32c(bad), lambda: core.masked_crc32c(bad),
             lambda: core.scan_records(bad, 0, 0, 0, True, 1), lambda: core.find_header(bad, 0, 0),
             lambda: core.jpeg_next_marker(bad, 0), lambda: core.sparse_indices(bad),
             lambda: core.frame_records([bad]), lambda: core.unpack_bytes(bad, 0, []),
             lambda: core.pack_bytes([b"a"], bad, 0), lambda: core.seek_build(bad, True, 1),
             lambda: core.seek_extract(bad, 0, b"", True, 0, 4),
             lambda: core.planes_from_pixels(bytearray(1), bad, 1, 1, 1, 1, 1, False),
             lambda: core.planes_from_pixels(bad, b"a", 1, 1, 1, 1, 1, False),
             lambda: core.bytes_of_spans((b"abc",), bad, 0, 0),
             lambda: core.ExampleDecoder([b"a"], bad), lambda: core.decode_feature_lists([b"a"], bad, [])]
    for call in calls:
        with pytest.raises(refused):
            call()


def test_native_writable_targets_refuse_read_only_buffers():
    read_only = memoryview(bytes(64))
    with pytest.raises(BufferError):
        core.pack_bytes([b"a"], read_only, 0)
    with pytest.raises(BufferError):
        core.pack_spans((b"abc",), spans((0, 0, 3)), 0, 1, b"xxxx", 0)
    with pytest.raises(BufferError):
        core.planes_from_pixels(b"x", b"x", 1, 1, 1, 1, 1, False)
    with pytest.raises(BufferError):
        core.png_decode_many([], b"", 1, 1, 0)


@pytest.mark.parametrize("v", BOUNDS)
def test_native_offsets_and_lengths_at_the_integer_boundaries_are_refused(v):
    """Offsets, lengths and counts at 2**31 - 1 .. 2**63 - 1 and negative: ValueError (OverflowError past int64),
    never a read past the buffer."""
    buf = b"x" * 20
    for call in [lambda: core.scan_records(buf, v, 20, 0, True, 1), lambda: core.scan_records(buf, 0, v, 0, True, 1),
                 lambda: core.scan_records(buf, 0, 20, 0, True, v), lambda: core.find_header(buf, v, 20),
                 lambda: core.find_header(buf, 0, v), lambda: core.jpeg_next_marker(b"\xff\xd9", v),
                 lambda: core.unpack_bytes(b"abc", v, [1]), lambda: core.unpack_bytes(b"abc", 1, [1, v]),
                 lambda: core.pack_bytes([b"ab"], bytearray(4), v),
                 lambda: core.bytes_of_spans((b"abc",), spans((0, 0, 1)), v, 1),
                 lambda: core.bytes_of_spans((b"abc",), spans((0, v, 1)), 0, 1),
                 lambda: core.bytes_of_spans((b"abc",), spans((0, 1, v)), 0, 1),
                 lambda: core.bytes_of_spans((b"abc",), spans((v, 0, 1)), 0, 1),
                 lambda: core.pack_spans((b"abc",), spans((0, 0, 3)), 0, 1, bytearray(3), v),
                 lambda: core.ExampleDecoder([b"a"], b"\x01", b"", b"", np.array([0, v], np.int64).tobytes()),
                 lambda: core.ExampleDecoder([b"a"], b"\x01", b"\x00", b"\x00", np.array([v, 1], np.int64).tobytes())]:
        with pytest.raises(ValueError):
            call()
    # the limit may lie anywhere: it only stops the scan earlier
    assert core.scan_records(buf, 0, 20, v, True, 1)[0] == []


def test_native_scan_and_find_at_the_edges_of_a_buffer():
    framed = core.frame_records([b"abc", b""])
    for lo in range(len(framed) + 1):
        records, stop, _status = core.scan_records(framed, lo, len(framed), len(framed), True, 8)
        assert stop >= lo and (records == [b"abc", b""] if lo == 0 else records in ([b""], []))
        found = core.find_header(framed, lo, len(framed))
        assert found == -1 or (lo <= found <= len(framed) - 12)
    assert core.scan_records(b"", 0, 0, 0, True, 1) == ([], 0, core.SCAN_LIMIT)
    assert core.find_header(b"x", 0, 1) == -1 and core.jpeg_next_marker(b"\xff", 1) == -1


def test_native_unpack_bytes_refuses_lengths_that_lie():
    assert core.unpack_bytes(b"abcdef", 1, [2, 0, 3]) == [b"bc", b"", b"def"]
    for lengths in ([2, 4], [7], [3, -1, 1], [1.0], None, ["1"]):
        with pytest.raises((ValueError, TypeError)):
            core.unpack_bytes(b"abcdef", 1, lengths)


def test_native_pack_bytes_refuses_what_is_not_bytes_and_what_does_not_fit():
    out = bytearray(5)
    assert core.pack_bytes([b"ab", b"", b"c"], out, 1) == [2, 0, 1] and bytes(out) == b"\0abc\0"
    with pytest.raises(ValueError, match="not bytes"):
        core.pack_bytes([bytearray(b"a")], bytearray(4), 0)
    with pytest.raises(ValueError, match="do not fit"):
        core.pack_bytes([b"abc"], bytearray(4), 2)
    assert core.bytes_total([b"ab", b"c"]) == 3 and core.bytes_total((b"a",)) == -1
    assert core.bytes_total([b"a", bytearray(1)]) == -1 and core.bytes_total(None) == -1


def test_native_spans_overlapping_and_unsorted_are_resolved_each_in_its_record():
    records = (b"hello", b"world")
    arena = b"\0" * 5 + spans((1, 0, 5), (0, 1, 3), (0, 1, 3), (1, 5, 0))
    assert core.bytes_of_spans(records, arena, 5, 4) == [b"world", b"ell", b"ell", b""]
    out = bytearray(12)
    assert core.pack_spans(records, arena, 5, 4, out, 1) == [5, 3, 3, 0] and bytes(out) == b"\0worldellell"
    with pytest.raises(ValueError, match="span 0"):
        core.bytes_of_spans((b"hello", "world"), spans((1, 0, 1)), 0, 1)  # a record that is not bytes
    with pytest.raises(ValueError, match="do not fit"):
        core.bytes_of_spans(records, arena, 6, 4)  # the last span would run past the arena


def test_native_read_framed_with_offsets_that_overlap_lie_or_run_past_the_file(tmp_path):
    records = [b"abc", b"", b"xyz" * 10]
    path = tmp_path / "f.tfrecord"
    path.write_bytes(core.frame_records(records))
    sizes = [16 + len(r) for r in records]
    fd = os.open(path, os.O_RDONLY)
    try:
        i64 = lambda *v: np.array(v, np.int64).tobytes()  # noqa: E731
        assert core.read_framed(fd, 0, i64(*sizes), True) == (records, 3)
        # overlapping and unsorted offsets: each record read where it is said to be
        assert core.read_framed(fd, i64(35, 0, 0, 19), i64(46, 19, 19, 16), True) == (
            [records[2], records[0], records[0], records[1]], 4)
        # unaligned buffers
        odd = memoryview(b"\0" + i64(0, 19))[1:]
        assert core.read_framed(fd, odd, memoryview(b"\0" + i64(19, 16))[1:], True) == (records[:2], 2)
        # a size that lies: the checks stop there; one past the file is not even allocated
        assert core.read_framed(fd, 0, i64(19, 17), True) == ([b"abc"], 1)
        assert core.read_framed(fd, 0, i64(19, 2**40), True) == ([b"abc"], 1)
        assert core.read_framed(fd, i64(2**62), i64(16), True) == ([], 0)
        for bad_size in (15, 0, -1):
            with pytest.raises(ValueError, match="out of range"):
                core.read_framed(fd, 0, i64(19, bad_size), True)
        with pytest.raises(ValueError, match="out of range"):
            core.read_framed(fd, i64(-1), i64(19), True)
        for where, sizes_arg in [(-1, i64(19)), (0, b"1234567"), (i64(0), i64(19, 16)), (None, i64(19))]:
            with pytest.raises((ValueError, TypeError)):
                core.read_framed(fd, where, sizes_arg, True)
        with pytest.raises((ValueError, BufferError)):
            core.read_framed(fd, np.zeros(4, np.int64)[::2], i64(19, 19), True)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        core.read_framed(fd, 0, b"", True)


def test_native_sparse_indices_at_the_edges():
    assert core.sparse_indices(b"") == bytearray()
    counts = np.array([0, 2, 0, 1], np.int64)
    got = np.frombuffer(core.sparse_indices(counts), np.int64).reshape(2, -1)
    assert got.tolist() == [[1, 1, 3], [0, 1, 0]]
    assert np.frombuffer(core.sparse_indices(memoryview(b"\0" + counts.tobytes())[1:]), np.int64).size == 6
    for bad in (np.array([-1], np.int64), np.array([2**62, 2**62], np.int64), b"1234567"):
        with pytest.raises(ValueError):
            core.sparse_indices(bad)


def test_native_decoders_with_duplicate_keys_and_bad_plans():
    with pytest.raises(TypeError):
        core.ExampleDecoder([b"a", "b"], b"\x00\x00")
    with pytest.raises(TypeError):
        core.ExampleDecoder([b"a"], b"\x03")
    with pytest.raises(ValueError):
        core.ExampleDecoder([b"a"], b"\x00\x00")
    with pytest.raises(TypeError):
        core.decode_feature_lists([b"a"], b"\x05", [b""])
    # a key planned twice: the first gets the feature, the second never does (no slot written twice)
    record = b"\x0a\x0c\x0a\x0a\x0a\x01a\x12\x05\x1a\x03\x0a\x01\x07"
    status, arena, columns, _ = core.ExampleDecoder([b"a", b"a"], b"\x02\x02").decode([record])
    assert status == 0 and columns[0][3] == 1 and columns[1][3] == 0
    assert core.decode_feature_lists([b"a", b"a"], b"\x01\x01", [b""])[0] == 0
    # records that are not bytes: reported by index, never read
    assert core.ExampleDecoder([b"a"], b"\x00").decode([b"", bytearray(b"\x0a\x00")]) == (3, 1)
    assert core.decode_feature_lists([b"a"], b"\x00", [b"", memoryview(b"")]) == (3, 1)


def test_native_png_refuses_short_and_foreign_inputs_without_reading_past_them():
    image = png(2, 2, b"\1\2\3\4")
    out = bytearray(4)
    for cut in range(len(image)):
        failed, reason = core.png_decode_many([image[:cut]], out, 2, 2, 0)
        assert failed == 0 and reason != 0
    assert core.png_decode_many([image, bytearray(image)], bytearray(8), 2, 2, 0) == (1, 1)
    with pytest.raises(ValueError, match="do not fill"):
        core.png_decode_many([image], bytearray(5), 2, 2, 0)
    with pytest.raises(ValueError, match="not decoded here"):
        core.png_decode_many([image], bytearray(4), 2, 2, 3)
