"""Bad input: flipped bytes and truncation at every offset (plain, GZIP, ZLIB), lying record lengths, garbage
Examples and TensorProtos, mismatched index files, and values that cannot be encoded.

The contract under test: a damaged file never yields wrong data and never raises anything but tfr_torch's own
errors, each saying where (`.path`, `.offset`) and what; `on_error="skip"` drops exactly the damaged record and
counts it; nothing hangs, and a lying length or shape never makes the library allocate what it claims.

Records are framed here by an independent implementation of the format (tfrecord-format.md, section 1), so the
tests do not trust the library's own CRC code.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import resource
import signal
import struct
import tracemalloc
import uuid
import warnings
import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import (
    CorruptRecordError,
    DecodeError,
    IndexMismatchError,
    SkippedRecordWarning,
    TFRecordError,
    TruncatedRecordError,
)
from tfr_torch.format import limits
from tfr_torch.format.record_file import RecordFile
from wirebytes import frame, header, ld, masked_crc, tensor_proto

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core

fsspec = pytest.importorskip("fsspec")

MB = 1 << 20


# --------------------------------------------------------------------------------------------------------------
# Helpers: an independent framer, an outcome recorder, and a guard against hangs and runaway allocations.


def layout(records: list[bytes]) -> list[int]:
    """Start offsets of each record, plus the end of the file."""
    offsets = [0]
    for r in records:
        offsets.append(offsets[-1] + 12 + len(r) + 4)
    return offsets


def compress(data: bytes, compression: str) -> bytes:
    z = zlib.compressobj(6, zlib.DEFLATED, 31 if compression == "gzip" else 15, 9)
    return z.compress(data) + z.flush()


def read_outcome(path, **kwargs):
    """Read every record; return (records yielded, the exception that stopped reading or None, the reader)."""
    got: list[bytes] = []
    reader = None
    try:
        reader = tfr_torch.read_records(path, **kwargs)
        for record in reader:
            got.append(record)
    except Exception as exc:  # any type: the tests assert which one
        return got, exc, reader
    return got, None, reader


def test_bounded_refuses_a_large_allocation_and_still_starts_threads():
    """The harness itself: past its headroom an allocation raises MemoryError, while threads (the GZIP reader's
    inflate thread) start whatever address space earlier tests left reserved: 32 one after another (each joined
    before the next: from Python 3.13 a thread's stack, 8 MiB, is kept until it is joined) and 4 at once."""
    import threading

    with bounded(10, headroom=64 * MB, trace=False):
        with pytest.raises(MemoryError):
            bytearray(512 * MB)
        started = []
        for _ in range(32):
            thread = threading.Thread(target=lambda: started.append(bytes(1 << 16)))
            thread.start()
            thread.join()
        threads = [threading.Thread(target=lambda: started.append(bytes(1 << 16))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(started) == 36
    bytearray(512 * MB)  # the cap is lifted afterwards


def describe(exc) -> str:
    return "no error" if exc is None else f"{type(exc).__name__}: {exc}"


class Usage:
    peak = 0  # bytes, traced by tracemalloc


def _data_size() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None  # not Linux: no data cap, the timers and tracemalloc still apply


WALL_BACKSTOP_S = 600  # only for a deadlock, which uses no CPU time; never reached by a test that works


@contextlib.contextmanager
def bounded(seconds: float = 20.0, headroom: int = 1 << 30, trace: bool = True):
    """Trace the block's allocations (`usage.peak`) and fail it, rather than the machine, if it hangs or runs away.

    The block may use `seconds` of CPU time (the process's, all threads): a decoder that loops forever fails here
    whatever the machine's load, while a correct block never fails for having waited its turn on a busy machine
    (a wall-clock limit would). A wall-clock backstop of WALL_BACKSTOP_S catches a deadlock, which uses no CPU.
    The data segment (the writable private memory malloc and mmap hand out) is capped at `headroom` bytes above its
    current size, so an attempt to allocate what a lying header claims raises MemoryError at once. Not the address
    space (RLIMIT_AS): it also counts what a new thread reserves (glibc reserves 64 MiB of address space per malloc
    arena), so under it the GZIP reader's inflate thread failed to start, or hung in Thread.start, depending on
    what earlier tests had mapped.
    """
    usage = Usage()
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    data_size = _data_size()
    cap = soft if data_size is None else data_size + headroom
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)

    def on_cpu_limit(signum, frame):
        raise TimeoutError(f"still running after {seconds} s of CPU time")

    def on_wall_limit(signum, frame):
        raise TimeoutError(f"still running after {WALL_BACKSTOP_S} s (waiting on something that never came?)")

    previous_prof = signal.signal(signal.SIGPROF, on_cpu_limit)
    previous_alarm = signal.signal(signal.SIGALRM, on_wall_limit)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, max(WALL_BACKSTOP_S, seconds))
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    if trace:
        tracemalloc.start()
    try:
        yield usage
    finally:
        if trace:
            usage.peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, previous_prof)
        signal.signal(signal.SIGALRM, previous_alarm)


def check(failures: list[str]) -> None:
    assert not failures, f"{len(failures)} failures, first ones:\n" + "\n".join(failures[:15])


# Five records of different lengths, one empty. None of them contains anything that looks like a framed record.
RECORDS = [b"first record", b"", bytes(range(1, 8)), b"a longer record in the middle " + bytes(range(200, 256)), b"end"]
OFFSETS = layout(RECORDS)
CLEAN = b"".join(frame(r) for r in RECORDS)

FLIPS = [0xFF] + [1 << bit for bit in range(8)]


def record_at(pos: int) -> int:
    """Index of the record whose framed bytes contain byte `pos`."""
    return max(i for i in range(len(RECORDS)) if OFFSETS[i] <= pos)


def test_the_test_file_is_what_the_writer_writes(tmp_path, write_records):
    assert write_records(tmp_path / "clean.tfrecord", RECORDS).read_bytes() == CLEAN
    assert OFFSETS[-1] == len(CLEAN)


# --------------------------------------------------------------------------------------------------------------
# 1. A flipped byte anywhere in an uncompressed file.


def _flip_raises_at_its_record(path, data, k, off, rel, at):
    got, exc, _ = read_outcome(path)
    where = f"{at}: yielded {len(got)}, {describe(exc)}"
    if not isinstance(exc, CorruptRecordError):  # CRC-32C catches every error within one byte
        return f"{where}: expected CorruptRecordError"
    what = "corrupt record header" if rel < 12 else "corrupt record data"
    if (
        got != RECORDS[:k]
        or exc.offset != off
        or exc.path != str(path)
        or not str(exc).startswith(f"{path}:{off}: ")
        or what not in str(exc)
    ):
        return f"{where}: expected the {k} records before it, then {what!r} at offset {off}"
    return None


def _flip_is_skipped_alone(path, data, k, off, rel, at):
    with pytest.warns(SkippedRecordWarning) as caught:
        got, exc, reader = read_outcome(path, on_error="skip")
    where = f"{at}: yielded {len(got)}, {describe(exc)}"
    messages = [str(w.message) for w in caught if issubclass(w.category, SkippedRecordWarning)]
    if exc is not None or got != RECORDS[:k] + RECORDS[k + 1 :]:
        return f"{where}: expected every record but record {k}"
    if (reader.skipped, reader.records) != (1, len(RECORDS) - 1):
        return f"{where}: skipped={reader.skipped} records={reader.records}, expected 1 and 4"
    if len(messages) != 1 or f"{path}:{off}: corrupt record" not in messages[0]:
        return f"{where}: expected one warning naming {path}:{off}, got {messages}"
    return None


def _flip_without_verify(path, data, k, off, rel, at):
    """verify=False skips the data CRC only: header flips still raise, data flips come through as they are."""
    got, exc, _ = read_outcome(path, verify=False)
    where = f"{at}: yielded {len(got)}, {describe(exc)}"
    if rel < 12:
        if not (isinstance(exc, CorruptRecordError) and exc.offset == off and got == RECORDS[:k]
                and "corrupt record header" in str(exc)):
            return f"{where}: a header flip must raise at {off} even without verify"
        return None
    expected = list(RECORDS)
    if rel < 12 + len(RECORDS[k]):
        expected[k] = bytes(data[off + 12 : OFFSETS[k + 1] - 4])
    if exc is not None or got != expected:
        return f"{where}: expected the records as stored (footer not checked)"
    return None


@pytest.mark.parametrize("outcome", [_flip_raises_at_its_record, _flip_is_skipped_alone, _flip_without_verify],
                         ids=["raises-at-its-record", "is-skipped-alone", "without-verify"])
def test_every_flipped_byte(tmp_path, outcome):
    """Each byte of the file flipped each way in FLIPS: read as is, it raises at its record; under
    on_error="skip", only its record is missing; with verify=False, header flips raise and data flips come through."""
    path = tmp_path / "flipped.tfrecord"
    failures = []
    with bounded(60, trace=False):
        for pos in range(len(CLEAN)):
            k = record_at(pos)
            off, rel = OFFSETS[k], pos - OFFSETS[k]
            for flip in FLIPS:
                data = bytearray(CLEAN)
                data[pos] ^= flip
                path.write_bytes(data)
                problem = outcome(path, data, k, off, rel, f"byte {pos} ^ {flip:#04x} (record {k} at {off})")
                if problem is not None:
                    failures.append(problem)
    check(failures)


@pytest.mark.parametrize("part, k, rel, flip", [
    ("data", 3, 12 + 5, 0x01),  # a data byte of record 3
    ("header", 2, 1, 0x80),  # the length field of record 2
], ids=["data", "header"])
def test_crc_error_names_the_offset_and_both_crcs(tmp_path, part, k, rel, flip):
    path = tmp_path / f"{part}-flip.tfrecord"
    data = bytearray(CLEAN)
    data[OFFSETS[k] + rel] ^= flip
    path.write_bytes(data)
    got, exc, _ = read_outcome(path)
    assert got == RECORDS[:k]
    assert isinstance(exc, CorruptRecordError)
    message = str(exc)
    if part == "data":
        stored = struct.unpack_from("<I", CLEAN, OFFSETS[k + 1] - 4)[0]
        actual = masked_crc(bytes(data[OFFSETS[k] + 12 : OFFSETS[k + 1] - 4]))
        assert message.startswith(f"{path}:{OFFSETS[k]}: corrupt record data")
        assert f"its {len(RECORDS[k])} data bytes (at offset {OFFSETS[k] + 12})" in message
    else:
        assert exc.offset == OFFSETS[k]
        stored = struct.unpack_from("<I", CLEAN, OFFSETS[k] + 8)[0]
        actual = masked_crc(bytes(data[OFFSETS[k] : OFFSETS[k] + 8]))
        assert message.startswith(f"{path}:{OFFSETS[k]}: corrupt record header")
    assert f"{actual:#010x}" in message and f"expected {stored:#010x}" in message


def test_on_error_callable_gets_each_error_instead_of_a_warning(tmp_path):
    path = tmp_path / "two-bad.tfrecord"
    data = bytearray(CLEAN)
    data[OFFSETS[0] + 12] ^= 0xFF  # data of record 0
    data[OFFSETS[3] + 3] ^= 0xFF  # header of record 3
    path.write_bytes(data)
    errors = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader = tfr_torch.read_records(path, on_error=errors.append)
        got = list(reader)
    assert got == [RECORDS[1], RECORDS[2], RECORDS[4]]
    assert [(type(e), e.offset, e.path) for e in errors] == [
        (CorruptRecordError, OFFSETS[0], str(path)),
        (CorruptRecordError, OFFSETS[3], str(path)),
    ]
    assert reader.skipped == 2


def test_bad_on_error_is_rejected(tmp_path):
    path = tmp_path / "ok.tfrecord"
    path.write_bytes(CLEAN)
    with pytest.raises(ValueError, match="on_error must be .*'ignore'"):
        tfr_torch.read_records(path, on_error="ignore")


# --------------------------------------------------------------------------------------------------------------
# 2. Truncation at every offset, and short trailing bytes.


def _cut_raises_at_its_record(path, cut, k, boundary):
    off = OFFSETS[k]
    got, exc, _ = read_outcome(path)
    where = f"cut at {cut} (record {k} at {off}): yielded {len(got)}, {describe(exc)}"
    if boundary:
        if exc is not None or got != RECORDS[:k]:
            return f"{where}: a cut at a record boundary is a shorter valid file"
        return None
    if not isinstance(exc, TruncatedRecordError) or got != RECORDS[:k] or exc.offset != off \
            or exc.path != str(path) or not str(exc).startswith(f"{path}:{off}: "):
        return f"{where}: expected {k} records, then TruncatedRecordError at {off}"
    have = cut - off
    if have < 12:
        expected = [f"found {have} trailing bytes", "12-byte record header"]
    else:
        expected = ["truncated record", f"says {len(RECORDS[k])} bytes of data",
                    f"{len(RECORDS[k]) + 16} bytes from this offset", f"has only {have}"]
    if not all(e in str(exc) for e in expected):
        return f"{where}: message lacks {expected}"
    return None


def _cut_is_skipped(path, cut, k, boundary):
    ctx = warnings.catch_warnings() if boundary else pytest.warns(SkippedRecordWarning)
    with ctx:
        if boundary:
            warnings.simplefilter("error")
        got, exc, reader = read_outcome(path, on_error="skip")
    where = f"cut at {cut}: yielded {len(got)}, {describe(exc)}"
    if exc is not None or got != RECORDS[:k] or reader.skipped != (0 if boundary else 1):
        return (f"{where}, skipped={getattr(reader, 'skipped', None)}: expected {k} records and "
                f"{0 if boundary else 1} skipped")
    return None


@pytest.mark.parametrize("outcome", [_cut_raises_at_its_record, _cut_is_skipped], ids=["raises", "under-skip"])
def test_truncation_at_every_offset(tmp_path, outcome):
    """The file cut at each offset: a cut at a record boundary is a shorter valid file; any other cut raises
    TruncatedRecordError at its record, or under on_error="skip" drops that record alone."""
    path = tmp_path / "cut.tfrecord"
    failures = []
    with bounded(60, trace=False):
        for cut in range(len(CLEAN)):
            path.write_bytes(CLEAN[:cut])
            k = record_at(cut)
            problem = outcome(path, cut, k, cut == OFFSETS[k])
            if problem is not None:
                failures.append(problem)
    check(failures)


@pytest.mark.parametrize("n", range(1, 12))
@pytest.mark.parametrize("fill", [b"\x00", b"\xa5"])
def test_short_trailing_bytes_are_reported(tmp_path, n, fill):
    """TensorFlow reads fewer than 12 trailing bytes as a clean end of file; tfr_torch reports them."""
    path = tmp_path / "trailing.tfrecord"
    path.write_bytes(CLEAN + fill * n)
    got, exc, _ = read_outcome(path)
    assert got == RECORDS
    assert isinstance(exc, TruncatedRecordError), describe(exc)
    assert (exc.path, exc.offset) == (str(path), len(CLEAN))
    assert str(exc) == (f"{path}:{len(CLEAN)}: found {n} trailing bytes: expected a 12-byte record header or the end "
                        "of the file")

    with pytest.warns(SkippedRecordWarning, match=f"found {n} trailing bytes"):
        got, exc, reader = read_outcome(path, on_error="skip")
    assert exc is None and got == RECORDS
    assert (reader.skipped, reader.records) == (1, len(RECORDS))


def test_long_trailing_garbage_is_a_corrupt_header(tmp_path):
    path = tmp_path / "garbage.tfrecord"
    path.write_bytes(CLEAN + b"this is not a record header at all")
    got, exc, _ = read_outcome(path)
    assert got == RECORDS
    assert isinstance(exc, CorruptRecordError) and exc.offset == len(CLEAN)
    assert "corrupt record header" in str(exc)
    with pytest.warns(SkippedRecordWarning):
        got, exc, reader = read_outcome(path, on_error="skip")
    assert exc is None and got == RECORDS and reader.skipped == 1


# --------------------------------------------------------------------------------------------------------------
# 3. The same sweeps on GZIP and ZLIB files.

SMALL = [b"alpha", b"", b"the third record"]


def _compressed_outcome_problem(got, exc, path, truncated: bool) -> str | None:
    if exc is None:
        if truncated:
            return "a truncated stream must raise"
        return None if got == SMALL else "wrong records without an error"
    if truncated and not isinstance(exc, TruncatedRecordError):
        return "expected TruncatedRecordError"
    if not isinstance(exc, (CorruptRecordError, TruncatedRecordError)):
        return "expected CorruptRecordError or TruncatedRecordError"
    if got != SMALL[: len(got)]:
        return "yielded wrong records before the error"
    has_offset = isinstance(exc.offset, int) and exc.offset >= 0
    if exc.path != str(path) or not has_offset or not str(exc).startswith(f"{path}:"):
        return "the error must carry the file's path and an offset"
    return None


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_every_flipped_byte_of_a_compressed_file(tmp_path, compression, write_records, inflate_thread):
    clean = write_records(tmp_path / "clean.tfrecord", SMALL, compression).read_bytes()
    path = tmp_path / "flipped.tfrecord"
    failures = []
    with bounded(60, trace=False):
        for pos in range(len(clean)):
            for flip in FLIPS:
                data = bytearray(clean)
                data[pos] ^= flip
                path.write_bytes(data)
                for kwargs in ({}, {"compression": compression}):
                    got, exc, _ = read_outcome(path, **kwargs)
                    problem = _compressed_outcome_problem(got, exc, path, truncated=False)
                    if problem:
                        failures.append(f"byte {pos} ^ {flip:#04x} {kwargs}: yielded {got}, {describe(exc)}: {problem}")
    check(failures)


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_truncation_at_every_offset_of_a_compressed_file(tmp_path, compression, write_records, inflate_thread):
    clean = write_records(tmp_path / "clean.tfrecord", SMALL, compression).read_bytes()
    path = tmp_path / "cut.tfrecord"
    failures = []
    with bounded(60, trace=False):
        for cut in range(len(clean)):
            path.write_bytes(clean[:cut])
            runs = [{"compression": compression}] + ([{}] if cut else [])  # an empty file is a valid plain file
            for kwargs in runs:
                got, exc, _ = read_outcome(path, **kwargs)
                problem = _compressed_outcome_problem(got, exc, path, truncated=True)
                if problem:
                    failures.append(f"cut at {cut} {kwargs}: yielded {got}, {describe(exc)}: {problem}")
    check(failures)


def test_gzip_cut_in_its_trailer_yields_every_record_then_raises(tmp_path, write_records, inflate_thread):
    """The deflate data is complete, only the CRC32/ISIZE trailer is missing: like a plain file cut after its last
    record, every record is yielded before the TruncatedRecordError."""
    clean = write_records(tmp_path / "clean.tfrecord", SMALL, "gzip").read_bytes()
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(clean[:-8])
    got, exc, _ = read_outcome(path)
    assert isinstance(exc, TruncatedRecordError), describe(exc)
    assert got == SMALL
    assert exc.offset == layout(SMALL)[-1]
    assert "GZIP stream ends before its end marker" in str(exc)


def test_truncated_gzip_under_skip_is_counted_not_raised(tmp_path, write_records, inflate_thread):
    clean = write_records(tmp_path / "clean.tfrecord", SMALL, "gzip").read_bytes()
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(clean[:-8])
    with pytest.warns(SkippedRecordWarning, match="GZIP stream ends before its end marker"):
        got, exc, reader = read_outcome(path, on_error="skip")
    assert exc is None, describe(exc)
    assert got == SMALL
    assert reader.skipped == 1


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_trailing_garbage_after_a_compressed_stream_raises_after_the_records(tmp_path, compression, write_records,
                                                                           inflate_thread):
    """TensorFlow ignores bytes after a ZLIB stream; tfr_torch reports them, after yielding the records."""
    path = tmp_path / "garbage.tfrecord"
    clean = write_records(path, SMALL, compression).read_bytes()
    path.write_bytes(clean + b"garbage!")
    got, exc, _ = read_outcome(path)
    assert isinstance(exc, CorruptRecordError), describe(exc)
    assert got == SMALL
    assert exc.path == str(path)
    assert exc.offset == layout(SMALL)[-1]
    if compression == "zlib":
        assert "8+ bytes follow the end of the ZLIB stream" in str(exc)


def test_concatenated_gzip_members_are_all_read(tmp_path, write_records, inflate_thread):
    first = write_records(tmp_path / "a.tfrecord", SMALL, "gzip").read_bytes()
    empty = write_records(tmp_path / "b.tfrecord", [], "gzip").read_bytes()
    second = write_records(tmp_path / "c.tfrecord", [b"second file", b""], "gzip").read_bytes()
    python_gzip = gzip.compress(frame(b"made by python's gzip"), mtime=12345)
    path = tmp_path / "joined.tfrecord"
    path.write_bytes(first + empty + second + python_gzip)
    reader = tfr_torch.read_records(path)
    assert list(reader) == SMALL + [b"second file", b"", b"made by python's gzip"]
    assert reader.compression == "gzip"


# --------------------------------------------------------------------------------------------------------------
# 4. Lying lengths: a header (with a correct CRC) that claims far more data than there is.

LIES = [2**29, 2**32, 2**40, 2**63, 2**64 - 1]  # the first is under format.limits.MAX_RECORD_BYTES


@pytest.mark.parametrize("length", LIES)
def test_lying_length_in_a_plain_file(tmp_path, length):
    path = tmp_path / "lie.tfrecord"
    path.write_bytes(frame(b"ok") + header(length) + b"a few bytes")
    with bounded(10) as usage:
        got, exc, _ = read_outcome(path)
    assert got == [b"ok"]
    assert isinstance(exc, TruncatedRecordError), describe(exc)
    assert (exc.path, exc.offset) == (str(path), 18)
    assert f"says {length} bytes of data" in str(exc) and "has only 23" in str(exc)
    assert usage.peak < 50 * MB


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.parametrize("length", LIES)
def test_lying_length_in_a_compressed_stream(tmp_path, compression, length, inflate_thread):
    """The decompressed size is unknown, so the reader must not trust the length: it finds the stream's end."""
    path = tmp_path / "lie.tfrecord"
    path.write_bytes(compress(frame(b"ok") + header(length) + bytes(100_000), compression))
    with bounded(10) as usage:
        got, exc, _ = read_outcome(path)
    assert got == [b"ok"]
    assert (exc.path, exc.offset) == (str(path), 18)
    if length > limits.MAX_RECORD_BYTES:  # refused at its header, before anything is buffered
        assert isinstance(exc, DecodeError), describe(exc)
        assert str(exc).startswith(f"{path}:18: the record header declares {length} bytes of data, more than the "
                                   f"{limits.MAX_RECORD_BYTES} bytes a record in a {compression.upper()} file may hold")
    else:
        assert isinstance(exc, TruncatedRecordError), describe(exc)
        assert f"says {length} bytes of data" in str(exc) and "ends after 100012" in str(exc)
    assert usage.peak < 50 * MB


@pytest.fixture
def memory_url():
    root = f"memory://tfr-corruption-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.mark.parametrize("length", LIES)
def test_lying_length_through_fsspec_memory(memory_url, length):
    url = f"{memory_url}/lie.tfrecord"
    with fsspec.open(url, "wb") as f:
        f.write(header(length) + b"xyz")
    with bounded(10) as usage:
        got, exc, _ = read_outcome(url)
    assert got == []
    assert isinstance(exc, TruncatedRecordError), describe(exc)
    assert (exc.path, exc.offset) == (url, 0)
    assert f"says {length} bytes of data" in str(exc)
    assert usage.peak < 50 * MB


class _PipeFile(io.RawIOBase):
    """A read-only stream like a pipe or a socket: no size, no fileno, no seek, and short reads."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._chunk = chunk

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self._chunk, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


class _PipeFileSystem(fsspec.AbstractFileSystem):
    """`tfrpipe://name` opens the bytes stored in `files[name]` as a _PipeFile."""

    protocol = "tfrpipe"
    files: dict[str, tuple[bytes, int]] = {}

    def _open(self, path, mode="rb", **kwargs):
        data, chunk = self.files[self._strip_protocol(path)]
        return _PipeFile(data, chunk)


@pytest.fixture
def pipe_url():
    fsspec.register_implementation("tfrpipe", _PipeFileSystem, clobber=True)
    names = []

    def make(data: bytes, chunk: int = 64 * 1024) -> str:
        name = f"stream-{uuid.uuid4().hex}"
        _PipeFileSystem.files[name] = (data, chunk)
        names.append(name)
        return f"tfrpipe://{name}"

    yield make
    for name in names:
        del _PipeFileSystem.files[name]


@pytest.mark.parametrize("length", LIES)
def test_lying_length_through_a_sizeless_stream(pipe_url, length):
    """No size to compare with and 64 KiB per read: the buffer may grow with the data that arrives, not faster."""
    url = pipe_url(header(length) + bytes(4 * MB))
    with bounded(10) as usage:
        got, exc, _ = read_outcome(url, compression=None)
    assert got == []
    assert (exc.path, exc.offset) == (url, 0)
    if length > limits.MAX_RECORD_BYTES:  # refused at its header, before anything is buffered
        assert isinstance(exc, DecodeError), describe(exc)
        assert f"the record header declares {length} bytes of data" in str(exc)
        assert "a record in a stream of unknown size may hold" in str(exc)
    else:
        assert isinstance(exc, TruncatedRecordError), describe(exc)
        assert f"says {length} bytes of data" in str(exc) and f"ends after {12 + 4 * MB}" in str(exc)
    assert usage.peak < 50 * MB


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_non_seekable_stream_is_read_with_auto_detection(tmp_path, pipe_url, compression, write_records,
                                                        inflate_thread):
    data = write_records(tmp_path / "data.tfrecord", SMALL, compression).read_bytes()
    url = pipe_url(data, chunk=7)
    reader = tfr_torch.read_records(url)
    assert list(reader) == SMALL
    assert reader.compression == (compression or "none")


# --------------------------------------------------------------------------------------------------------------
# 5. Garbage Examples, SequenceExamples and TensorProtos.

DECODERS = [
    (tfr_torch.decode_example, "tf.train.Example"),
    (tfr_torch.decode_sequence_example, "tf.train.SequenceExample"),
    (tfr_torch.parse_tensor, "TensorProto"),
]


@pytest.mark.parametrize("decode, what", DECODERS)
@pytest.mark.parametrize("garbage", [b"\xff" * 10, b"\x0a\x05ab", b"\x08", b"\x0a" + b"\xff" * 10])
def test_garbage_bytes_raise_decode_error(decode, what, garbage):
    with pytest.raises(DecodeError) as info:
        decode(garbage)
    assert str(info.value).startswith(f"cannot parse {len(garbage)} bytes as a {what}")
    assert isinstance(info.value, ValueError) and isinstance(info.value, TFRecordError)


@pytest.mark.parametrize("decode, what", DECODERS)
@pytest.mark.parametrize("value", ["\x0a\x00", None, 17, [b"\x0a\x00"]])
def test_non_bytes_input_raises_type_error(decode, what, value):
    with pytest.raises(TypeError, match=f"got {type(value).__name__}"):
        decode(value)


@pytest.mark.parametrize("decode", [tfr_torch.decode_example, tfr_torch.decode_sequence_example])
def test_feature_name_that_is_not_utf8_is_a_decode_error(decode):
    entry = ld(1, b"\xff") + ld(2, b"")  # map entry: key b"\xff", an empty Feature
    message = ld(1, ld(1, entry))  # Example.features, Features.feature
    with pytest.raises(DecodeError, match=f"cannot parse {len(message)} bytes"):
        decode(message)


def test_every_truncation_of_an_example_raises():
    """An Example is one length-delimited field, so every proper non-empty prefix is malformed."""
    valid = tfr_torch.encode_example({"label": 3, "text": b"hello world", "score": [0.5, 1.5], "ids": list(range(20))})
    for cut in range(1, len(valid)):
        with pytest.raises(DecodeError, match=f"cannot parse {cut} bytes as a tf.train.Example"):
            tfr_torch.decode_example(valid[:cut])


def test_truncations_of_a_sequence_example_never_raise_anything_else():
    valid = tfr_torch.encode_sequence_example({"id": 7}, {"tokens": [[1, 2], [3]], "words": [b"a", b"bc"]})
    for cut in range(len(valid)):
        try:
            context, lists = tfr_torch.decode_sequence_example(valid[:cut])
        except DecodeError as exc:
            assert f"cannot parse {cut} bytes as a tf.train.SequenceExample" in str(exc)
        else:
            assert isinstance(context, dict) and isinstance(lists, dict)
    with pytest.raises(DecodeError):
        tfr_torch.decode_sequence_example(valid[:-1])


def test_truncations_of_a_tensor_proto_never_raise_anything_else():
    valid = tfr_torch.serialize_tensor(torch.arange(12, dtype=torch.float32).reshape(3, 4))
    for cut in range(len(valid)):
        try:
            tfr_torch.parse_tensor(valid[:cut])
        except DecodeError:
            pass
    with pytest.raises(DecodeError, match="cannot parse"):
        tfr_torch.parse_tensor(valid[:-1])  # inside tensor_content


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_decode_error(data):
    for decode, _ in DECODERS:
        try:
            with bounded(10, headroom=3 << 30):
                decode(data)
        except DecodeError:
            pass


# TensorProto built by hand (tests/wirebytes.py), independent of the library's encoder.


def test_hand_built_tensor_proto_matches_the_reference_bytes():
    assert tensor_proto(4, (2, 2), bytes([1, 2, 3, 4])).hex() == "0804120812020802120208022204" + "01020304"
    assert tfr_torch.parse_tensor(tensor_proto(1, (2,), float_val=(1.5,))).tolist() == [1.5, 1.5]


@pytest.mark.parametrize(
    "proto, expected",
    [
        (tensor_proto(1, (3,), bytes(8)), ["float32", "shape [3]", "needs 12 bytes of tensor_content, found 8"]),
        (tensor_proto(9, (2, 2), bytes(40)), ["int64", "shape [2, 2]", "needs 32 bytes of tensor_content, found 40"]),
        (tensor_proto(1, (2**62, 2**62), bytes(4)), ["float32", "found 4"]),
        (tensor_proto(99, (1,), bytes(4)), ["dtype 99", "cannot read"]),
        (tensor_proto(11, (1,), bytes(1)), ["dtype DT_QINT8", "cannot read"]),
        (tensor_proto(0, ()), ["dtype DT_INVALID", "cannot read"]),
        (b"", ["dtype DT_INVALID", "cannot read"]),
        (tensor_proto(1, (2, -1), b""), ["negative dimension", "[2, -1]"]),
        (tensor_proto(1, (2,), unknown_rank=True), ["unknown rank"]),
        (tensor_proto(8, (2,), scomplex_val=(1.0, 2.0, 3.0)), ["complex64", "odd number (3)"]),
        (tensor_proto(7, (1,), b"abc"), ["string", "tensor_content"]),
    ],
    ids=["short-content", "long-content", "overflowing-shape", "unknown-code", "qint8", "invalid", "empty",
         "negative-dim", "unknown-rank", "odd-complex", "string-with-content"],
)
def test_malformed_tensor_proto_raises_decode_error(proto, expected):
    with bounded(2, headroom=256 * MB) as usage:
        try:
            tfr_torch.parse_tensor(proto)
        except DecodeError as exc:
            message = str(exc)
        else:
            pytest.fail("no DecodeError")
    assert all(e in message for e in expected), message
    assert usage.peak < 50 * MB


@pytest.mark.parametrize(
    "proto, expected",
    [
        (tensor_proto(1, (2**40,), float_val=(1.0,)), ["shape [1099511627776]", "max_bytes=268435456"]),
        (tensor_proto(1, (2**40,)), ["shape [1099511627776]", "max_bytes=268435456"]),
        (tensor_proto(1, (2**20, 2**20, 2**20)), ["shape [1048576, 1048576, 1048576]"]),
        (tensor_proto(7, (2**40,), string_val=(b"x",)), ["shape [1099511627776]", "max_bytes=268435456"]),
        (tensor_proto(7, (2**40,)), ["shape [1099511627776]"]),
        (tensor_proto(7, (2**40, 0)), ["shape [1099511627776, 0]"]),
    ],
    ids=["float-one-value", "float-no-value", "float-3d", "string-one-value", "string-no-value", "string-empty-rows"],
)
def test_huge_shape_with_few_values_raises_without_allocating(proto, expected):
    with bounded(2, headroom=256 * MB) as usage:
        try:
            tfr_torch.parse_tensor(proto)
        except DecodeError as exc:
            message = str(exc)
        except (MemoryError, TimeoutError) as exc:
            pytest.fail(f"{type(exc).__name__}: tried to build what the shape claims")
        else:
            pytest.fail("no DecodeError")
    assert all(e in message for e in expected), message
    assert usage.peak < 50 * MB


def test_huge_numeric_shape_with_no_elements_is_fine():
    with bounded(10) as usage:
        t = tfr_torch.parse_tensor(tensor_proto(1, (2**40, 0)))
    assert t.shape == (2**40, 0) and t.dtype == torch.float32
    assert usage.peak < 50 * MB


def test_dtype_mismatch_names_both_dtypes():
    data = tfr_torch.serialize_tensor(torch.zeros(2, dtype=torch.float32))
    with pytest.raises(DecodeError, match="the serialized tensor is float32, but dtype int64 was asked for"):
        tfr_torch.parse_tensor(data, dtype=torch.int64)


# --------------------------------------------------------------------------------------------------------------
# 6. Index files that do not describe their TFRecord file.

INDEXED = [b"", b"abcd", b"x" * 10]  # framed sizes 16, 20, 26


@pytest.fixture
def indexed(tmp_path, write_records):
    path = tmp_path / "data.tfrecord"
    write_records(path, INDEXED)
    assert tfr_torch.build_index(path) == str(tmp_path / "data.tfrecord.idx")
    assert (tmp_path / "data.tfrecord.idx").read_text() == "0 16\n16 20\n36 26\n"
    return path, tmp_path / "data.tfrecord.idx"


def _assert_mismatch(index_path, tfrecord_path, *expected):
    with pytest.raises(IndexMismatchError) as info:
        tfr_torch.read_index(index_path, tfrecord_path)
    err = info.value
    assert (err.path, err.index_path) == (str(tfrecord_path), str(index_path))
    message = str(err)
    assert str(tfrecord_path) in message and str(index_path) in message, message
    assert all(e in message for e in expected), message


def test_valid_index_reads(indexed):
    path, index = indexed
    assert tfr_torch.read_index(index, path).tolist() == [[0, 16], [16, 20], [36, 26]]


def test_index_of_another_file(indexed, tmp_path, write_records):
    _, index = indexed
    other = tmp_path / "other.tfrecord"
    write_records(other, [b"q" * 5, b"r" * 30])
    _assert_mismatch(index, other, "stale index, or made for another file?")


def test_index_of_another_file_of_the_same_size(indexed, tmp_path, write_records):
    _, index = indexed
    other = tmp_path / "reversed.tfrecord"
    write_records(other, INDEXED[::-1])  # 26 + 20 + 16 bytes: same total, different records
    assert other.stat().st_size == 62
    _assert_mismatch(index, other, "line 1", "a record of 26 bytes", "stale index, or made for another file?")


def test_stale_index_after_append(indexed):
    path, index = indexed
    with open(path, "ab") as f:
        f.write(frame(b"appended"))
    _assert_mismatch(index, path, "3 records ending at byte 62", "the file has 86 bytes")


def test_truncated_index(indexed):
    path, index = indexed
    index.write_text("0 16\n16 20\n")
    _assert_mismatch(index, path, "2 records ending at byte 36", "the file has 62 bytes")


def test_index_with_a_gap(indexed):
    path, index = indexed
    index.write_text("0 16\n36 26\n")
    _assert_mismatch(index, path, "line 2", "starts at 36", "ends at 16")


@pytest.mark.parametrize(
    "text, line",
    [
        ("0 16\nfoo bar\n36 26\n", 2),
        ("0 16\n16 20\n36 26\ngarbage\n", 4),
        ("0 16 16 20\n36 26\n", 1),
        ("0 16 16\n20\n36 26\n", 1),
        ("0 16\n\n16 20\n36 26\n", 2),
        ("0 16\n16 20\n36 0x1a\n", 3),
        ("0 16\n16 20\n36 26 extra\n", 3),
        ("\x00\xff\x00 binary\n", 1),
    ],
    ids=["words", "last-line", "two-per-line", "split-pairs", "blank-line", "hex", "extra-column", "binary"],
)
def test_garbage_index_lines(indexed, text, line):
    path, index = indexed
    index.write_bytes(text.encode("latin-1"))
    _assert_mismatch(index, path, f"line {line}")


@pytest.mark.parametrize("text", ["-16 16\n", "0 -16\n", "0 8\n8 8\n"])
def test_impossible_index_values(indexed, text):
    path, index = indexed
    index.write_text(text)
    _assert_mismatch(index, path)


# --------------------------------------------------------------------------------------------------------------
# 7. Values that encode_example cannot encode.


UNENCODABLE = [
    ("none", None, TypeError, ["NoneType"]),
    ("dict", {"a": 1}, TypeError, ["dict"]),
    ("object", object(), TypeError, ["object"]),
    ("complex", 1 + 2j, TypeError, ["complex"]),
    ("complex-list", [1 + 2j], TypeError, ["complex"]),
    ("complex-array", np.array([1j, 2]), TypeError, ["complex128"]),
    ("complex-scalar", np.complex64(1j), TypeError, ["complex64"]),
    ("datetime-array", np.array(["2024-01-01"], dtype="datetime64[D]"), TypeError, ["datetime64"]),
    ("object-array-mixed", np.array([1, b"x"], dtype=object), TypeError, ["bytes", "int"]),
    ("object-array-none", np.array([1, None], dtype=object), TypeError, ["NoneType"]),
    ("ragged", [[1, 2], [3]], TypeError, ["rectangular"]),
    ("nested-int-bytes", [[1, 2], [b"a", b"b"]], TypeError, ["bytes", "int"]),
    ("nested-float-str", [[1.5], ["a"]], TypeError, ["bytes", "float"]),
    ("arrays-int-str", [np.array([1, 2]), np.array(["a", "b"])], TypeError, ["bytes", "int"]),
    ("bytes-int", [b"a", 1], TypeError, ["bytes", "int"]),
    ("str-float", ["a", 1.5], TypeError, ["bytes", "float"]),
    ("list-of-none", [None], TypeError, ["NoneType"]),
    ("array-and-int", [np.array([1]), 2], TypeError, ["int", "nested"]),
    ("uint64-array", np.array([2**63], dtype=np.uint64), ValueError, ["uint64", "9223372036854775808"]),
    ("uint64-scalar", np.uint64(2**64 - 1), ValueError, ["uint64", "18446744073709551615"]),
    ("uint64-in-list", [np.uint64(2**63)], ValueError, ["9223372036854775808"]),
    ("int-above-int64", 2**63, ValueError, ["9223372036854775808", "int64"]),
    ("int-below-int64", -(2**63) - 1, ValueError, ["-9223372036854775809", "int64"]),
    ("int-in-list", [0, 2**64], ValueError, ["18446744073709551616", "int64"]),
    ("empty-list", [], TypeError, ["empty list"]),
    ("empty-tuple", (), TypeError, ["empty list"]),
    ("nested-empty-list", [[]], TypeError, ["empty"]),
]


@pytest.mark.parametrize("value, error, expected", [pytest.param(*case[1:], id=case[0]) for case in UNENCODABLE])
def test_unencodable_values_name_the_key_and_the_type(value, error, expected):
    with pytest.raises(error) as info:
        tfr_torch.encode_example({"the_key": value})
    message = str(info.value)
    assert "'the_key'" in message, message
    assert all(e in message for e in expected), message


def test_unencodable_step_names_the_feature_list_and_step():
    with pytest.raises(TypeError, match=r"'words\[1\]'.*NoneType"):
        tfr_torch.encode_sequence_example({}, {"words": [b"a", None]})


@pytest.mark.parametrize(
    "features, expected",
    [(None, "got NoneType"), ([("a", 1)], "got list"), ({1: 2}, "got int: 1"), ({b"k": 2}, "got bytes")],
)
def test_bad_feature_mappings(features, expected):
    with pytest.raises(TypeError, match=expected):
        tfr_torch.encode_example(features)


# --------------------------------------------------------------------------------------------------------------
# Records read straight into their bytes (RecordReader.blocks(sizes), from an index): the same records and the
# same errors as reading without sizes, whatever the file or the sizes say.

BIG = [bytes([k]) * (4096 + 997 * k) + bytes(range(k)) for k in range(7)]  # above blocks(sizes)'s threshold
BIG_FILE = b"".join(frame(r) for r in BIG)
BIG_SIZES = np.array([16 + len(r) for r in BIG], dtype=np.int64)


def blocks_outcome(path, sizes=None, **kwargs):
    """(records, error description, error offset, skipped, the generator's kind) of reading `path` in blocks."""
    got: list[bytes] = []
    reader = tfr_torch.RecordReader(path, **kwargs)
    blocks = reader.blocks(sizes)
    kind = getattr(blocks, "gi_code", None) and blocks.gi_code.co_name
    error = offset = None
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            for records, _ in blocks:
                got.extend(records)
        except TFRecordError as exc:
            error, offset = describe(exc), exc.offset
    reader.close()
    return got, error, offset, reader.skipped, kind


def test_blocks_with_sizes_read_straight_into_the_records(tmp_path, backend):
    path = tmp_path / "big.tfrecord"
    path.write_bytes(BIG_FILE)
    got, error, _, _, kind = blocks_outcome(path, BIG_SIZES)
    assert got == BIG and error is None
    assert kind == ("_direct" if backend == "native" else "_records")
    starts = np.cumsum([0, *BIG_SIZES]).tolist()
    for buffer_size in (64, 9000):  # one record per read, or a few
        reader = tfr_torch.RecordReader(path, buffer_size=buffer_size)
        blocks = list(reader.blocks(BIG_SIZES))
        assert [r for records, _ in blocks for r in records] == BIG
        assert [offset for _, offset in blocks] == [starts[sum(len(b) for b, _ in blocks[:i])]
                                                    for i in range(len(blocks))]
    reader = tfr_torch.RecordReader(path, start=starts[2], end=starts[5])
    assert [r for records, _ in reader.blocks(BIG_SIZES[2:]) for r in records] == BIG[2:5]  # never past `end`


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_blocks_with_sizes_meet_every_damage_as_blocks_do(tmp_path, verify, on_error):
    """Every flipped byte of the framing and samples of the data, cuts at every record's edges, and sizes that
    lie: the same records, error (message and offset) and skip count as blocks() without sizes."""
    path = tmp_path / "big.tfrecord"
    starts = np.cumsum([0, *BIG_SIZES]).tolist()
    damaged: list[bytes] = []
    for start, size in zip(starts, BIG_SIZES.tolist()):
        for rel in [*range(12), 12, 13, size // 2, size - 5, *range(size - 4, size)]:
            data = bytearray(BIG_FILE)
            data[start + rel] ^= 0x20
            damaged.append(bytes(data))
        for cut in (start + 5, start + 12, start + size // 2, start + size - 1):
            damaged.append(BIG_FILE[:cut])
    failures = []
    for data in damaged:
        path.write_bytes(data)
        want = blocks_outcome(path, None, verify=verify, on_error=on_error)[:4]
        got = blocks_outcome(path, BIG_SIZES, verify=verify, on_error=on_error)[:4]
        if got != want:
            failures.append(f"{len(data)} bytes: {got[1:]} != {want[1:]}")
    path.write_bytes(BIG_FILE)
    want = blocks_outcome(path)[:4]
    for k in range(len(BIG)):
        for delta in (-1, 1, 4096):
            lying = BIG_SIZES.copy()
            lying[k] += delta
            got = blocks_outcome(path, lying, verify=verify, on_error=on_error)[:4]
            if got != want:
                failures.append(f"size {k} {delta:+}: {got[1:]} != {want[1:]}")
    check(failures)


@pytest.mark.parametrize("k", [0, 3, 6])
def test_blocks_with_sizes_never_allocate_what_a_lying_size_claims(tmp_path, k):
    """A size of 1 TiB (a forged index) allocates nothing near it: records past the end of the file are left to
    the usual loop, which reports what the file holds."""
    path = tmp_path / "big.tfrecord"
    path.write_bytes(BIG_FILE)
    lying = BIG_SIZES.copy()
    lying[k] = 1 << 40
    want = blocks_outcome(path)[:4]
    with bounded(20) as usage:
        got = blocks_outcome(path, lying)[:4]
    assert got == want
    assert usage.peak < 4 * len(BIG_FILE) + (1 << 20)


def test_blocks_with_sizes_read_empty_records(tmp_path, backend):
    """Empty records between large ones (zero-length reads into their bytes): the same records, one per read or
    several."""
    records = [b"x" * 20000, b"", b"y" * 7000, b"", b""]
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"".join(frame(r) for r in records))
    sizes = np.array([16 + len(r) for r in records], dtype=np.int64)
    for buffer_size in (64, 1 << 20):
        got, error, _, _, kind = blocks_outcome(path, sizes, buffer_size=buffer_size)
        assert got == records and error is None
        assert kind == ("_direct" if backend == "native" else "_records")
    handle = RecordFile(path)
    starts = np.cumsum([0, *sizes[:-1]])
    assert handle.read_many(starts[::-1].copy(), sizes[::-1].copy()) == records[::-1]


def test_sizes_no_record_can_have_are_read_as_the_file_says(tmp_path, backend):
    """A framed size under 16 bytes (no record has one): blocks(sizes) reads what the file holds, and read_many
    raises what `read` raises, naming the file and the offset."""
    path = tmp_path / "big.tfrecord"
    path.write_bytes(BIG_FILE)
    sizes = BIG_SIZES.copy()
    sizes[1] = 5
    assert blocks_outcome(path, sizes)[:2] == (BIG, None)
    starts = np.cumsum([0, *BIG_SIZES[:-1]])
    with pytest.raises(CorruptRecordError) as info:
        RecordFile(path).read_many(starts, sizes)
    assert (info.value.path, info.value.offset) == (str(path), int(starts[1]))
    assert f"the record here has {BIG_SIZES[1]} bytes but the index says 5" in str(info.value)
