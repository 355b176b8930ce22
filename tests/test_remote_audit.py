"""An audit of reading remote files (tfr_torch.format.remote, .remote_open, .blockcache) through fsspec URLs.

Every read is compared with the true records. The remote side is an fsspec filesystem registered by this file
(`tfraudit://`: an in-memory store whose range reads can be delayed, cut short, replaced or made to fail, and
whose objects carry an S3-like ETag, the MD5 of their bytes) and, for http://, a server on 127.0.0.1 that serves
byte ranges with an ETag (started and stopped by the tests).

Checked: exact records (sequential, with and without the block cache, cold and warm; by offset through
RecordFile.read/read_many and prefetch; shuffled through the index; GZIP sequential and through seek points) for
an empty file, a file smaller than one block, files of exactly one and three blocks, zero-length records and
records spanning several blocks; a sequential RemoteFile that seeks backward; range reads that come back short,
a server error in the middle of reading (an OSError, and an error type that is not one, as gcsfs's HttpError),
an object that shrinks between its HEAD and its GETs; the cache: a cut-short or byte-flipped block file, an
object replaced by one of another size, an object replaced by one of the same size while it is being read (the
blocks fetched then must not be stored under the first version's name), a small cache shared by two DataLoader
workers (eviction while reading); a forked child (a DataLoader worker) while its parent's request threads hold
a block's fetch lock; many files open at once (memory about (readahead + 1) blocks each); http:// URLs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import re
import signal
import threading
import time
import tracemalloc
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

import tfr_torch  # noqa: E402
from tfr_torch.format.blockcache import BlockCache, block_key  # noqa: E402
from tfr_torch.format.framing import frame_record  # noqa: E402
from tfr_torch.format.record_file import RecordFile  # noqa: E402
from tfr_torch.format.remote import RemoteFile, RemoteOptions, forget_object  # noqa: E402
from tfr_torch.format.remote_open import open_remote  # noqa: E402

BLOCK = 1024
OPTIONS = RemoteOptions(block_size=BLOCK, readahead=2, max_in_flight=4, merge_gap=64, metadata_ttl=0)


class AuditFS(MemoryFileSystem):
    """An in-memory object store with S3's ETag (the MD5 of the bytes) and hooks on range reads.

    `on_cat(path, start, end, data) -> data`: what a range read returns (or raises); `calls`: the range reads made
    (path, start, end, pid)."""

    protocol = "tfraudit"
    store: dict = {}
    pseudo_dirs = [""]
    on_cat = None
    calls: list = []

    @classmethod
    def _strip_protocol(cls, path):
        return str(path).removeprefix("tfraudit://").strip("/")

    def info(self, path, **kwargs):
        out = super().info(path, **kwargs)
        if out.get("type") == "file":
            out["ETag"] = '"' + hashlib.md5(bytes(self.store[self._strip_protocol(path)].getbuffer())).hexdigest() + '"'
        return out

    def cat_file(self, path, start=None, end=None, **kwargs):
        AuditFS.calls.append((self._strip_protocol(path), start, end, os.getpid()))
        data = super().cat_file(path, start, end, **kwargs)
        hook = AuditFS.on_cat
        return hook(self._strip_protocol(path), start, end, data) if hook is not None else data


fsspec.register_implementation("tfraudit", AuditFS, clobber=True)


@pytest.fixture
def store(tmp_path):
    """A fresh folder of the audit filesystem (its URL prefix), hooks and counts reset."""
    AuditFS.on_cat = None
    AuditFS.calls = []
    prefix = f"tfraudit://bucket/{tmp_path.name}"
    yield prefix
    AuditFS.on_cat = None
    fs = fsspec.filesystem("tfraudit")
    for key in [k for k in AuditFS.store if k.startswith(f"bucket/{tmp_path.name}/")]:
        fs.rm(key)


def put(url: str, data: bytes) -> None:
    """Replace the object at `url` as another program would, and forget what this process knew of it."""
    fsspec.filesystem("tfraudit").pipe_file(url, data)
    forget_object(url)


def framed(records: list[bytes]) -> bytes:
    return b"".join(frame_record(r) for r in records)


def example(i: int, blob: int) -> bytes:
    return tfr_torch.encode_example({"id": i, "blob": bytes([i % 251]) * blob})


def layout(name: str) -> list[bytes]:
    """Records laid out against BLOCK-byte blocks."""
    if name == "empty-file":
        return []
    if name == "smaller-than-a-block":
        return [b"", b"a" * 10, b"bc"]
    if name == "exactly-one-block":
        return [b"x" * (BLOCK // 2 - 16), b"y" * (BLOCK // 2 - 16)]
    if name == "exactly-three-blocks":  # a record ends on each block edge; zero-length records between
        return [b"p" * (BLOCK - 32), b"", b"q" * (BLOCK - 16), b"r" * (BLOCK - 32), b""]
    if name == "spanning":  # records of every size, some across two or more blocks, zero-length ones among them
        rng = random.Random(5)
        out = [example(i, rng.choice([0, 1, 50, 300, 900, 1500, 3500])) for i in range(120)]
        out[7:7] = [b""]
        out[60:60] = [b"", b""]
        return out + [b"\x07" * (5 * BLOCK + 3)]
    raise AssertionError(name)


LAYOUTS = ["empty-file", "smaller-than-a-block", "exactly-one-block", "exactly-three-blocks", "spanning"]


def cached(tmp_path: Path, **kwargs) -> RemoteOptions:
    return dataclasses.replace(OPTIONS, cache_dir=str(tmp_path / "cache"), **kwargs)


# ----- exact records ------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:the 1 file:UserWarning")  # the empty file
@pytest.mark.parametrize("name", LAYOUTS)
def test_sequential_reads_are_exact_at_block_edges(store, tmp_path, name):
    url = f"{store}/{name}.tfrecord"
    records = layout(name)
    put(url, framed(records))
    if name == "exactly-one-block":
        assert len(framed(records)) == BLOCK
    if name == "exactly-three-blocks":
        assert len(framed(records)) == 3 * BLOCK
    assert list(tfr_torch.read_records(url, remote=OPTIONS)) == records
    options = cached(tmp_path)
    for _ in range(2):  # a cold cache, then a warm one
        assert list(tfr_torch.read_records(url, remote=options)) == records
    tfr_torch.build_index(url)
    for remote in (OPTIONS, options):  # with an index: records read straight from the cached blocks' files
        got = list(tfr_torch.TFRecordDataset(url, index="auto", remote=remote))
        assert [bytes(r) for r in got] == records


@pytest.mark.filterwarnings("ignore:the 1 file:UserWarning")  # the empty file
@pytest.mark.parametrize("name", LAYOUTS)
def test_reads_by_offset_are_exact_at_block_edges(store, tmp_path, name):
    url = f"{store}/{name}.tfrecord"
    records = layout(name)
    put(url, framed(records))
    tfr_torch.build_index(url)
    index = tfr_torch.read_index(url + ".idx", url)
    order = list(range(len(records)))
    random.Random(1).shuffle(order)
    for remote in (OPTIONS, cached(tmp_path)):
        with RecordFile(url, remote=remote) as f:
            token = f.prefetch(index[order, 0], index[order, 1])
            assert [f.read(int(index[i, 0]), int(index[i, 1])) for i in order] == [records[i] for i in order]
            f.release(token)
            if order:
                assert f.read_many(index[order, 0], index[order, 1]) == [records[i] for i in order]
        got = list(tfr_torch.TFRecordDataset(url, index="auto", shuffle=True, seed=4, remote=remote))
        assert sorted(bytes(r) for r in got) == sorted(records)


def test_gzip_over_a_url_sequential_and_through_seek_points(store, tmp_path):
    url = f"{store}/g.tfrecord.gz"
    records = layout("spanning")
    with tfr_torch.TFRecordWriter(url, compression="gzip") as writer:
        for record in records:
            writer.write(record)
    tfr_torch.build_index(url)
    for remote in (OPTIONS, cached(tmp_path)):
        assert list(tfr_torch.read_records(url, remote=remote)) == records
        got = list(tfr_torch.TFRecordDataset(url, index="auto", shuffle=True, seed=2, remote=remote))
        assert sorted(bytes(r) for r in got) == sorted(records)
    index = tfr_torch.read_index(url + ".idx", url)
    with RecordFile(url, remote=OPTIONS) as f:
        assert f.read_many(index[::-1, 0], index[::-1, 1]) == records[::-1]


def test_prefetched_ranges_of_every_shape_read_exactly(store):
    url = f"{store}/p.tfrecord"
    data = bytes(random.Random(3).randrange(256) for _ in range(7 * BLOCK + 5))
    put(url, data)
    with RemoteFile(url, OPTIONS, readahead=False) as f:
        ranges = [(5000, 5100), (0, 0), (100, 50), (7 * BLOCK, 8 * BLOCK + 99), (-10, 20), (30, 5000),
                  (5160, 5170), (5100, 5160), (len(data) - 1, len(data) + 10)]
        token = f.prefetch(ranges)
        for start, end in [(5000, 5100), (0, 20), (7 * BLOCK, len(data)), (30, 5000), (5100, 5170), (3, 4),
                           (len(data) - 1, len(data))]:
            f.seek(start)
            assert f.read(end - start) == data[start:end], (start, end)
        f.release(token)
        f.seek(len(data) - 3)
        assert f.read(100) == data[-3:]
        assert f.read(1) == b""


def test_indexed_dataset_over_urls_reads_every_record_exactly(store):
    paths, records = [], []
    for n, name in enumerate(["spanning", "exactly-three-blocks", "smaller-than-a-block"]):
        url = f"{store}/indexed-{n}.tfrecord"
        put(url, framed(layout(name)))
        tfr_torch.build_index(url)
        paths.append(url)
        records += layout(name)
    dataset = tfr_torch.IndexedTFRecordDataset(paths)
    order = list(range(len(dataset)))
    random.Random(8).shuffle(order)
    assert [dataset[i] for i in order] == [records[i] for i in order]
    assert dataset.__getitems__(order[:50]) == [records[i] for i in order[:50]]


# ----- seeking ------------------------------------------------------------------------------------------------


def test_a_sequential_remote_file_reads_the_right_bytes_after_a_backward_seek(store):
    url = f"{store}/seek.bin"
    data = bytes(random.Random(7).randrange(256) for _ in range(12 * BLOCK))
    put(url, data)
    with open_remote(url, OPTIONS) as f:
        f.seek(8 * BLOCK)
        assert f.read(BLOCK) == data[8 * BLOCK : 9 * BLOCK]
        f.seek(7 * BLOCK + 10)  # one block back
        assert f.read(1000) == data[7 * BLOCK + 10 : 7 * BLOCK + 1010]
        f.seek(100)  # back to the start
        assert f.read(3000) == data[100:3100]


# ----- faults -------------------------------------------------------------------------------------------------


def test_a_short_range_read_names_the_url_and_the_range(store):
    url = f"{store}/short.tfrecord"
    records = layout("spanning")
    put(url, framed(records))
    AuditFS.on_cat = lambda path, start, end, data: data[:-1] if start == 2 * BLOCK else data
    with pytest.raises(OSError, match=re.escape(f"reading bytes [{2 * BLOCK}, {3 * BLOCK}) of {url} gave "
                                                f"{BLOCK - 1} bytes, expected {BLOCK}")):
        list(tfr_torch.read_records(url, remote=OPTIONS))


class HttpError(Exception):
    """What gcsfs raises for a server error (gcsfs.retry.HttpError, not an OSError); aiohttp's
    ClientResponseError (http://) is not one either."""


@pytest.mark.parametrize("error", [ConnectionResetError, HttpError])
@pytest.mark.parametrize("how", ["sequential", "by-offset"])
def test_a_server_error_in_the_middle_names_the_url_and_the_range(store, tmp_path, error, how):
    url = f"{store}/err.tfrecord"
    records = layout("spanning")
    put(url, framed(records))
    tfr_torch.build_index(url)

    def fail(path, start, end, data):
        if path.endswith("err.tfrecord") and start >= 4 * BLOCK:
            raise error("503 Service Unavailable: Slow Down")
        return data

    AuditFS.on_cat = fail
    with pytest.raises(Exception) as err:
        if how == "sequential":
            list(tfr_torch.read_records(url, remote=OPTIONS))
        else:
            list(tfr_torch.TFRecordDataset(url, index="auto", shuffle=True, seed=1, remote=OPTIONS))
    message = str(err.value)
    assert url in message and re.search(r"bytes \[\d+, \d+\)", message) and "Slow Down" in message, message


def test_an_object_that_shrinks_after_its_head_raises_and_is_asked_again(store):
    url = f"{store}/shrink.tfrecord"
    records = layout("spanning")
    data = framed(records)
    put(url, data)
    options = dataclasses.replace(OPTIONS, metadata_ttl=3600)
    reader = tfr_torch.read_records(url, remote=options)
    assert next(iter(reader)) == records[0]
    fsspec.filesystem("tfraudit").pipe_file(url, data[: 3 * BLOCK])  # another program, without telling us
    with pytest.raises(OSError, match=re.escape(url) + r".*the object changed while it was read\?"):
        list(reader)
    assert RemoteFile(url, options).size == 3 * BLOCK


# ----- the block cache ----------------------------------------------------------------------------------------


def _block_path(url: str, options: RemoteOptions, b: int) -> str:
    with RemoteFile(url, options) as probe:
        key = block_key(url, probe.version, probe.size, options.block_size, b)
    return BlockCache.shared(str(options.cache_dir), options.cache_bytes).path(key)


def test_a_cut_short_cached_block_is_fetched_again(store, tmp_path):
    url = f"{store}/cut.tfrecord"
    records = layout("spanning")
    put(url, framed(records))
    tfr_torch.build_index(url)
    options = cached(tmp_path)
    assert list(tfr_torch.read_records(url, remote=options)) == records
    for b, keep in ((3, 100), (4, 0), (5, BLOCK - 1)):
        path = _block_path(url, options, b)
        with open(path, "r+b") as f:
            f.truncate(keep)
    assert list(tfr_torch.read_records(url, remote=options)) == records
    for b in (3, 4, 5):
        assert os.path.getsize(_block_path(url, options, b)) == BLOCK
    Path(_block_path(url, options, 6)).write_bytes(b"\0" * 10)
    index = tfr_torch.read_index(url + ".idx", url)
    with RecordFile(url, remote=options) as f:
        assert f.read_many(index[:, 0], index[:, 1]) == records


def test_a_byte_flipped_cached_block_is_never_served(store, tmp_path):
    url = f"{store}/flip.tfrecord"
    records = layout("spanning")
    put(url, framed(records))
    tfr_torch.build_index(url)
    options = cached(tmp_path)
    assert list(tfr_torch.read_records(url, remote=options)) == records
    path = _block_path(url, options, 2)
    with open(path, "r+b") as f:
        f.seek(500)
        byte = f.read(1)
        f.seek(500)
        f.write(bytes([byte[0] ^ 0x40]))
    index = tfr_torch.read_index(url + ".idx", url)
    with pytest.raises(tfr_torch.TFRecordError) as err:
        list(tfr_torch.read_records(url, remote=options))
    assert err.value.path == url
    with RecordFile(url, remote=options) as f, pytest.raises(tfr_torch.TFRecordError) as err:
        f.read_many(index[:, 0], index[:, 1])
    assert err.value.path == url


def test_an_object_replaced_by_one_of_another_size_is_read_anew(store, tmp_path):
    url = f"{store}/other.tfrecord"
    options = cached(tmp_path)
    old = layout("spanning")
    put(url, framed(old))
    assert list(tfr_torch.read_records(url, remote=options)) == old
    new = [example(1000 + i, 200) for i in range(40)]
    put(url, framed(new))
    assert list(tfr_torch.read_records(url, remote=options)) == new
    with RecordFile(url, remote=options) as f:
        assert f.read(0, len(new[0]) + 16) == new[0]


@pytest.mark.xfail(strict=True, reason="known defect: a block fetched after the object was replaced by one of the "
                   "same size is stored under the version (ETag) seen at open; fsspec's cat_file does not return the "
                   "version it read, and a HEAD per cached block would break the request budgets of test_remote.py")
def test_blocks_fetched_after_a_same_size_replacement_are_not_cached_as_the_first_version(store, tmp_path):
    """An object replaced (same size, new ETag) while a reader goes through it: the blocks that reader fetches
    afterwards hold the new bytes. Stored under the first version's names, they are served for that version
    later: here once the first version is uploaded again (the same bytes, so the same ETag), to a reader that
    asks the object's version afresh."""
    url = f"{store}/same-size.tfrecord"
    options = cached(tmp_path)
    first = [example(i, 300) for i in range(60)]
    second = [example(i + 60, 300) for i in range(60)]  # the same sizes (ids < 128): only ids and blobs differ
    assert len(framed(first)) == len(framed(second))
    put(url, framed(first))
    with RemoteFile(url, options, readahead=False) as f:
        assert f.read(BLOCK) == framed(first)[:BLOCK]  # block 0 of the first version, into the cache
        fsspec.filesystem("tfraudit").pipe_file(url, framed(second))  # replaced by another program
        f.seek(4 * BLOCK)
        try:  # this reader may raise (the object it opened is gone) or read the second version's bytes
            f.read(BLOCK)
        except OSError:
            pass
    put(url, framed(first))  # the first version again
    assert list(tfr_torch.read_records(url, remote=options)) == first


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_is_not_blocked_by_a_fetch_its_parent_had_under_way(store, tmp_path):
    """DataLoader workers fork while the parent's request threads may be filling cache blocks (the parent read a
    few records first, or opened files ahead): the child must not wait forever for a block lock that only the
    parent's thread, which the child does not have, would release."""
    url = f"{store}/fork.tfrecord"
    records = layout("spanning")
    put(url, framed(records))
    options = cached(tmp_path)
    parent = os.getpid()
    started = threading.Event()

    def slow_in_parent(path, start, end, data):
        if os.getpid() == parent:
            started.set()
            time.sleep(1.0)
        return data

    AuditFS.on_cat = slow_in_parent
    f = RemoteFile(url, options, readahead=False)
    f.prefetch([(0, 100)])  # block 0 on its way into the cache in a request thread
    assert started.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: read the file through the same cache
        code = 1
        try:
            code = 0 if list(tfr_torch.read_records(url, remote=options)) == records else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 6
    status = None
    while status is None and time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = code
        else:
            time.sleep(0.05)
    if status is None:
        os.kill(pid, signal.SIGKILL)  # the child this test forked, stuck
        os.waitpid(pid, 0)
    f.close()
    assert status is not None, "the forked child did not finish in 6 s (the parent's fetch took 1 s)"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_dataloader_workers_started_after_a_first_look_at_the_data(store, tmp_path):
    """The user looks at one example, then trains with a DataLoader worker (fork): the blocks the first look
    requested ahead are still being fetched into the cache by the parent's request threads (1.5 s each here).
    The worker must not wait forever (the DataLoader's timeout, 4 s, says it did)."""
    torch_data = pytest.importorskip("torch.utils.data")
    url = f"{store}/peek.tfrecord"
    records = [example(i, 400) for i in range(100)]
    put(url, framed(records))
    options = cached(tmp_path)
    parent = os.getpid()

    def slow_in_parent(path, start, end, data):
        if os.getpid() == parent and start:
            time.sleep(1.5)
        return data

    AuditFS.on_cat = slow_in_parent
    spec = {"id": tfr_torch.FixedLenFeature([], "int64")}
    dataset = tfr_torch.TFRecordDataset(url, features=spec, remote=options)
    looked = iter(dataset)
    assert int(next(looked)["id"]) == 0
    seen = []
    try:
        for item in torch_data.DataLoader(dataset, batch_size=None, num_workers=1, timeout=4):
            seen.append(int(item["id"]))
    finally:
        del looked
    assert sorted(seen) == list(range(100))


def test_a_small_cache_shared_by_two_workers_evicting_while_reading(store, tmp_path):
    torch_data = pytest.importorskip("torch.utils.data")
    paths, ids, first = [], [], 0
    for n, count in enumerate([90, 0, 60, 130]):
        url = f"{store}/part-{n}.tfrecord"
        put(url, framed([example(first + i, (first + i) * 37 % 700) for i in range(count)]))
        tfr_torch.build_index(url)
        ids += range(first, first + count)
        first += count
        paths.append(url)
    options = cached(tmp_path, cache_bytes=4 * BLOCK)  # a few blocks: eviction all the time
    spec = {"id": tfr_torch.FixedLenFeature([], "int64")}
    for shuffle in (True, False):
        dataset = tfr_torch.TFRecordDataset(paths, features=spec, index="auto", shuffle=shuffle, seed=3,
                                            batch_size=8, remote=options)
        seen = []
        for batch in torch_data.DataLoader(dataset, batch_size=None, num_workers=2, timeout=30):
            seen += batch["id"].reshape(-1).tolist()
        assert sorted(seen) == ids, [i for i, c in Counter(seen).items() if c > 1]
    cache = BlockCache(str(options.cache_dir), options.cache_bytes)
    assert cache.usage() <= options.cache_bytes


# ----- many files ---------------------------------------------------------------------------------------------


def test_many_files_open_at_once_hold_about_readahead_plus_one_blocks_each(store):
    block = 64 << 10
    options = RemoteOptions(block_size=block, readahead=2, max_in_flight=4, metadata_ttl=0)
    data = bytes(range(256)) * (16 * block // 256)
    urls = [f"{store}/many-{n}.bin" for n in range(24)]
    for url in urls:
        put(url, data)
    files = [open_remote(url, options) for url in urls]
    try:
        tracemalloc.start()
        for step in range(4):  # every file read a bit at a time, round robin, 4 blocks in
            for f in files:
                assert f.read(block) == data[step * block : (step + 1) * block]
        time.sleep(0.2)  # the last requests land
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert held <= len(files) * (options.readahead + 1) * block * 1.25, held
    finally:
        for f in files:
            f.close()


# ----- http:// ------------------------------------------------------------------------------------------------


class _Objects(BaseHTTPRequestHandler):
    """Serves `server.objects` (path -> bytes) with HEAD, ranged GET (206) and an ETag; counts GETs."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _found(self):
        data = self.server.objects.get(self.path)  # type: ignore[attr-defined]
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        return data

    def _common(self, data):
        if self.server.etag:  # type: ignore[attr-defined]
            self.send_header("ETag", '"' + hashlib.md5(data).hexdigest() + '"')
        else:  # what plain web servers for static files send instead
            self.send_header("Last-Modified", "Thu, 26 Nov 2026 10:00:00 GMT")
        if self.server.ranges:  # type: ignore[attr-defined]
            self.send_header("Accept-Ranges", "bytes")

    def do_HEAD(self):
        data = self._found()
        if data is not None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self._common(data)
            self.end_headers()

    def do_GET(self):
        self.server.gets += 1  # type: ignore[attr-defined]
        data = self._found()
        if data is None:
            return
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match is None or not self.server.ranges:  # type: ignore[attr-defined]
            start, end = 0, len(data)
            self.send_response(200)
        else:
            start = int(match.group(1))
            end = min(int(match.group(2)) + 1 if match.group(2) else len(data), len(data))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.send_header("Content-Length", str(end - start))
        self._common(data)
        self.end_headers()
        self.wfile.write(data[start:end])


@pytest.fixture
def http_server():
    pytest.importorskip("aiohttp")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Objects)
    server.objects, server.gets = {}, 0  # type: ignore[attr-defined]
    server.etag = server.ranges = True  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_http_urls_are_read_and_cached(http_server, tmp_path):
    records = layout("spanning")
    http_server.objects["/data/a.tfrecord"] = framed(records)
    url = f"http://127.0.0.1:{http_server.server_address[1]}/data/a.tfrecord"
    assert list(tfr_torch.read_records(url, remote=OPTIONS)) == records
    options = cached(tmp_path)
    assert list(tfr_torch.read_records(url, remote=options)) == records
    before = http_server.gets
    assert list(tfr_torch.read_records(url, remote=options)) == records
    assert http_server.gets == before  # every block from the cache


def test_http_servers_without_etag_are_cached_by_last_modified(http_server, tmp_path):
    """A static web server sends Last-Modified and no ETag: that is the version the block cache keys on (before,
    such objects were silently never cached)."""
    http_server.etag = False
    records = layout("spanning")
    http_server.objects["/data/a.tfrecord"] = framed(records)
    url = f"http://127.0.0.1:{http_server.server_address[1]}/data/a.tfrecord"
    options = cached(tmp_path)
    assert list(tfr_torch.read_records(url, remote=options)) == records
    before = http_server.gets
    assert before > 0
    assert list(tfr_torch.read_records(url, remote=options)) == records
    assert http_server.gets == before  # every block from the cache


def test_a_server_ignoring_range_requests_is_named_as_such(http_server):
    """A server that answers a range request with the whole object (200): the error says so, not that the object
    changed while it was read."""
    http_server.ranges = False
    records = layout("spanning")
    http_server.objects["/data/a.tfrecord"] = framed(records)
    url = f"http://127.0.0.1:{http_server.server_address[1]}/data/a.tfrecord"
    with pytest.raises(OSError, match="ignored the byte-range request") as err:
        list(tfr_torch.read_records(url, remote=OPTIONS))
    assert url in str(err.value) and "changed" not in str(err.value)


def test_a_block_cache_smaller_than_one_block_is_refused(tmp_path):
    """A cache that cannot hold one block evicted every block before it was read (hundreds of requests for a file
    of a few KB): refused, naming both sizes. Without a cache folder the limit means nothing and is not checked."""
    with pytest.raises(ValueError, match=r"cache_bytes \(4096\) must hold at least one block \(block_size 8192\)"):
        RemoteOptions(block_size=8192, cache_dir=str(tmp_path), cache_bytes=4096)
    RemoteOptions(block_size=8192, cache_dir=str(tmp_path), cache_bytes=8192)
    RemoteOptions(block_size=8192, cache_bytes=4096)


def test_a_lying_index_line_does_not_fetch_its_claimed_size_before_the_header_check(store):
    """Reading by offset from a remote file without a cache: an index line claiming a record far larger than the
    one whose header is there is refused after at most one block is fetched, not the claimed size (here 200
    blocks). A true large record is read whole, with one more request."""
    big = b"\x05" * (40 * BLOCK)
    records = [example(i, 100) for i in range(50)] + [big] + [example(i, 100) for i in range(50, 250)]
    url = f"{store}/lying.tfrecord"
    put(url, framed(records))
    at = sum(16 + len(r) for r in records[:10])
    AuditFS.calls = []
    with RecordFile(url, remote=OPTIONS) as f:
        with pytest.raises(tfr_torch.TFRecordError, match="the index says"):
            f.read(at, 200 * BLOCK)
        fetched = sum(end - start for _, start, end, _ in AuditFS.calls)
        assert fetched <= 2 * BLOCK, fetched
        offset = sum(16 + len(r) for r in records[:50])
        assert f.read(offset, 16 + len(big)) == big


class _NoCredentials(Exception):
    """What botocore raises without credentials (NoCredentialsError): not an OSError."""


class LockedFS(MemoryFileSystem):
    """A store that refuses every question, as S3 does to a client without credentials."""

    protocol = "tfrlocked"
    store: dict = {}
    pseudo_dirs = [""]

    def info(self, path, **kwargs):
        raise _NoCredentials("Unable to locate credentials")


fsspec.register_implementation("tfrlocked", LockedFS, clobber=True)


def test_a_store_that_refuses_every_request_is_named_in_one_line(capsys):
    """Fixed: a store error that is not an OSError (botocore's NoCredentialsError) came out raw from opening a URL,
    and as a whole traceback from the CLI."""
    url = "tfrlocked://bucket/train.tfrecord"
    with pytest.raises(OSError, match=r"cannot ask the store about tfrlocked://bucket/train\.tfrecord: "
                                      r"_NoCredentials: Unable to locate credentials") as err:
        RemoteFile(url, OPTIONS)
    assert isinstance(err.value.__cause__, _NoCredentials)
    from tfr_torch.tools.cli import main

    assert main(["count", url]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "Unable to locate credentials" in lines[0], lines

