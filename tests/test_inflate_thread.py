"""The background inflate thread of GZIP/ZLIB reading (TFR_TORCH_INFLATE_THREAD=1): the same records, errors,
offsets and skips as inflating on the reader's thread; the thread ends with the reader; forked processes are safe."""

import gc
import gzip
import io
import os
import random
import sys
import threading
import zlib

import pytest

import tfr_torch
from tfr_torch.format import inflate as codec
from wirebytes import frame

RECORDS = [bytes([i % 251]) * (i * 37 % 3000) + b"%d" % i for i in range(300)]


def _prefetch_threads():
    return {t for t in threading.enumerate() if t.name.startswith("tfr_torch-prefetch")}


def _new_threads(before):
    """The prefetch threads started since `before` was taken (compared by identity: a thread another test left
    behind may end while this one runs, so counts would not say which threads are this test's)."""
    return _prefetch_threads() - before


@pytest.fixture
def small_pieces(monkeypatch):
    """Reads of 1 KiB and pieces of 4 KiB: a file of a few hundred KiB is many pieces, so the thread runs ahead."""
    monkeypatch.setattr(codec, "_READ", 1024)
    monkeypatch.setattr(codec, "_PIECE", 4096)


def _outcome(monkeypatch, path, threaded, **kwargs):
    """Everything a reader shows: the records, each error handed to on_error (class, message, offset), the final
    exception, the counters."""
    monkeypatch.setattr(codec, "_THREAD_DEFAULT", threaded)
    seen = []
    policy = kwargs.pop("on_error", "raise")
    if policy == "collect":
        policy = lambda err: seen.append((type(err).__name__, str(err), err.offset))  # noqa: E731
    reader = tfr_torch.RecordReader(str(path), on_error=policy, buffer_size=8192, **kwargs)
    got, final = [], None
    try:
        for record in reader:
            got.append(record)
    except Exception as exc:  # the comparison below is the assertion
        final = (type(exc).__name__, str(exc))
    finally:
        reader.close()
    return got, seen, final, reader.records, reader.skipped, reader.offset


def _files():
    plain = b"".join(frame(r) for r in RECORDS)
    one = gzip.compress(plain, mtime=0)
    members = b"".join(gzip.compress(b"".join(frame(r) for r in RECORDS[k : k + 60]), mtime=0)
                       for k in range(0, len(RECORDS), 60))
    return {"gzip, one member": ("gzip", one), "gzip, five members": ("gzip", members),
            "zlib": ("zlib", zlib.compress(plain, 6))}


@pytest.mark.parametrize("layout", list(_files()))
def test_thread_and_no_thread_agree_on_damaged_streams(tmp_path, monkeypatch, small_pieces, layout):
    from tfr_torch.format.prefetch import Prefetch

    ahead = []  # pieces the thread had made past the reader when it was stopped: they are given back
    stop = Prefetch.stop
    monkeypatch.setattr(Prefetch, "stop", lambda self: ahead.append(len(left := stop(self))) or left)
    compression, clean = _files()[layout]
    rng = random.Random(layout)
    path = tmp_path / f"data.tfrecord.{'gz' if compression == 'gzip' else 'zz'}"
    cases = [("clean", clean), ("garbage after", clean + b"\x00junk" * 3), ("cut", clean[: len(clean) * 3 // 5])]
    for k in range(25):
        damaged = bytearray(clean)
        at = rng.randrange(len(clean))
        damaged[at : at + 2] = bytes(rng.randrange(256) for _ in range(2))
        cases.append((f"bytes {at}-{at + 1} changed", bytes(damaged)))
    for name, data in cases:
        path.write_bytes(data)
        for kwargs in ({}, {"on_error": "collect"}, {"start": len(frame(RECORDS[0])), "on_error": "collect"}):
            with_thread = _outcome(monkeypatch, path, True, **dict(kwargs))
            without = _outcome(monkeypatch, path, False, **dict(kwargs))
            assert with_thread == without, (name, kwargs)
            if name == "clean":
                assert without[0] == RECORDS[1 if "start" in kwargs else 0 :]
    assert max(ahead) > 0


def test_an_error_reading_the_file_reaches_the_reader_where_it_happened(small_pieces):
    data = gzip.compress(b"".join(frame(r) for r in RECORDS), mtime=0)

    class Failing(io.BytesIO):
        def read(self, size=-1):
            if self.tell() > len(data) // 2:
                raise OSError("disk gone")
            return super().read(size)

    results = []
    for threaded in (True, False):
        inflater = codec.Inflater(Failing(data), "gzip", "x.gz", threaded=threaded)
        out = bytearray()
        with pytest.raises(OSError, match="disk gone"):
            while True:
                buf = bytearray(3000)
                n = inflater.readinto(buf)
                assert n
                out += buf[:n]
        results.append((bytes(out), inflater.position))
        inflater.close()
    assert results[0] == results[1]
    assert len(results[0][0]) > 1000


def test_the_thread_ends_with_the_reader(tmp_path, monkeypatch, small_pieces):
    monkeypatch.setattr(codec, "_THREAD_DEFAULT", True)
    path = tmp_path / "data.tfrecord.gz"
    big = [random.Random(i).randbytes(16384) for i in range(100)]  # more than the reader's 1 MiB buffer
    path.write_bytes(gzip.compress(b"".join(frame(r) for r in big), mtime=0))
    before = _prefetch_threads()

    reader = tfr_torch.read_records(str(path))
    next(iter(reader))
    assert len(_new_threads(before)) == 1  # it runs ahead, blocked on its bounded queue
    reader.close()
    assert not _new_threads(before)

    with tfr_torch.read_records(str(path)) as reader:
        assert list(reader) == big
    assert not _new_threads(before)

    for i, _ in enumerate(tfr_torch.read_records(str(path))):  # an iterator abandoned early, then collected
        if i == 3:
            break
    gc.collect()
    assert not _new_threads(before)

    inflater = codec.Inflater(open(path, "rb"), "gzip", str(path), threaded=True)
    assert inflater.readinto(bytearray(10)) == 10
    del inflater
    gc.collect()
    assert not _new_threads(before)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_children_read_alike_or_refuse_clearly(tmp_path, monkeypatch, small_pieces):
    """A reader opened before a fork (a DataLoader worker's dataset) starts its thread where it reads; one that
    has already started inflating in the parent refuses in the child rather than wait for a thread that is not
    there."""
    monkeypatch.setattr(codec, "_THREAD_DEFAULT", True)
    path = tmp_path / "data.tfrecord.gz"
    records = [random.Random(i).randbytes(16384) for i in range(100)]  # more than the reader's 1 MiB buffer
    path.write_bytes(gzip.compress(b"".join(frame(r) for r in records), mtime=0))
    opened = tfr_torch.read_records(str(path), start=len(frame(records[0])))  # skipping runs on this thread
    started = tfr_torch.read_records(str(path))
    assert next(iter(started)) == records[0]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, exit without running the parent's cleanup
        try:
            ok = list(opened) == records[1:]
            try:
                list(started)
                refused = "no error"
            except RuntimeError as err:
                refused = str(err)
            os.write(write, f"{ok}|{refused}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        report = f.read()
    os.waitpid(pid, 0)
    ok, refused = report.split("|", 1)
    assert ok == "True"
    assert "its inflate thread does not exist in this forked process" in refused
    assert list(started) == records[1:]  # the parent's reader goes on (`opened` shares its file offset with the
    # child's, as any file open across a fork does: only one process may read it)
    opened.close()
    started.close()


def test_the_switch_is_read_from_the_environment():
    import subprocess

    code = "from tfr_torch.format import inflate as c; print(c._THREAD_DEFAULT)"
    for value, expected in (("0", "False"), ("1", "True"), ("on", "True"), (None, "False")):
        env = {k: v for k, v in os.environ.items() if k != "TFR_TORCH_INFLATE_THREAD"}
        if value is not None:
            env["TFR_TORCH_INFLATE_THREAD"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True).stdout.strip()
        assert out == expected, value
