"""Remote reads with range requests in flight and the local block cache (tfr_torch.format.remote, .blockcache),
against an S3-protocol server on the loopback interface (moto's ThreadedMotoServer) behind a proxy that delays
every request (benchmarks/latency_proxy.py: the delay is the simulated network, nothing here is timed).

Covered: exact records from S3 (plain and GZIP) read sequentially and shuffled through the index, in the process
and through DataLoader(num_workers=4) (every id exactly once), with small blocks so that many are in flight; the
cache: a second read makes no range request, eviction keeps the folder under its limit, a partial temporary file
or a short block file left by a crash is never served (read, pread, map), two processes share one folder, a
changed object (new ETag, same size) is read anew; one fetch per block for threads and processes filling it at
once (a cold cache under 4 workers fetches each block once), and a fetcher that dies leaves the block to the next;
files opened ahead are taken by the reader (no second HEAD) and a missing one raises where it is taken; indexes
of remote files checked with a few small requests; errors name the URL (and the offset); RemoteOptions' checks.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("moto")
moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")
fsspec = pytest.importorskip("fsspec")

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import tfr_torch  # noqa: E402
from benchmarks.latency_proxy import LatencyProxy  # noqa: E402
from tfr_torch.format.blockcache import BlockCache, block_key  # noqa: E402
from tfr_torch.format.framing import frame_record  # noqa: E402
from tfr_torch.format.record_file import RecordFile  # noqa: E402
from tfr_torch.format.remote import RemoteFile, RemoteOptions  # noqa: E402
from tfr_torch.format.remote_open import open_ahead, open_remote  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUCKET = "tfr-remote"
SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
SMALL = RemoteOptions(block_size=8192, readahead=6, max_in_flight=8, merge_gap=256)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The S3 server on 127.0.0.1, a proxy in front of it adding 5 ms per request, s3fs pointed at the proxy."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    proxy = LatencyProxy(*server.get_host_and_port(), delay=0.005).start()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_ENV.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", str(tmp_path_factory.mktemp("aws") / "config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path_factory.mktemp("aws") / "credentials"))
        mp.setenv("FSSPEC_S3_ENDPOINT_URL", proxy.url)
        mp.setitem(fsspec.config.conf, "s3", {**fsspec.config.conf.get("s3", {}), "endpoint_url": proxy.url})
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            fs = fsspec.filesystem("s3")
            assert fs.endpoint_url == proxy.url  # never the real AWS
            fs.mkdir(BUCKET)
            yield {"fs": fs, "proxy": proxy, "endpoint": proxy.url}
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            proxy.stop()
            server.stop()


def records_of(first: int, count: int) -> list[bytes]:
    return [tfr_torch.encode_example({"id": first + i, "blob": b"r" * ((first + i) * 37 % 900)})
            for i in range(count)]


def write(url: str, records: list[bytes], compression: str | None = None, index: bool = True) -> None:
    with tfr_torch.TFRecordWriter(url, compression=compression) as writer:
        for record in records:
            writer.write(record)
    if index:
        tfr_torch.build_index(url)


def ids_of(loader) -> list[int]:
    seen: list[int] = []
    for item in loader:
        seen += item["id"].reshape(-1).tolist()
    return seen


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_read_records_exact_with_many_blocks_in_flight(s3, compression):
    url = f"s3://{BUCKET}/exact-{compression}/a.tfrecord" + (".gz" if compression else "")
    records = records_of(0, 300) + [b"", b"\x01" * 40_000]  # a record longer than several blocks
    write(url, records, compression, index=compression is None)
    with tfr_torch.read_records(url, remote=SMALL) as reader:
        assert list(reader) == records
        assert reader._raw.requests > (10 if compression is None else 1)  # many range requests (GZIP: small)
    index = tfr_torch.read_index(url + ".idx", url) if compression is None else None
    if index is not None:  # the index's offsets from the middle
        assert list(tfr_torch.read_records(url, start=int(index[100, 0]), remote=SMALL)) == records[100:]


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes:UserWarning")
@pytest.mark.parametrize("variant", ["sequential", "shuffled-index", "gzip-sequential", "gzip-shuffled",
                                     "cached-shuffled-index"])
def test_dataloader_four_workers_every_record_exactly_once(s3, tmp_path, variant):
    gzip = variant.startswith("gzip")
    suffix = ".tfrecord.gz" if gzip else ".tfrecord"
    prefix = f"s3://{BUCKET}/loader-{variant}"
    counts = [120, 0, 75, 210, 33]
    first, ids = 1, []
    for n, count in enumerate(counts):
        write(f"{prefix}/part-{n}{suffix}", records_of(first, count), "gzip" if gzip else None, index=True)
        ids += list(range(first, first + count))
        first += count
    cache = str(tmp_path / "cache") if variant.startswith("cached") else None
    options = RemoteOptions(block_size=16384, readahead=4, max_in_flight=8, merge_gap=512, cache_dir=cache)
    dataset = tfr_torch.TFRecordDataset(f"{prefix}/part-*{suffix}", features=SPEC, index="auto",
                                        shuffle="shuffled" in variant, seed=3, batch_size=16, remote=options)
    assert dataset.remote is options
    first = s3["proxy"].requests
    seen = ids_of(DataLoader(dataset, batch_size=None, num_workers=4))
    if cache is not None:  # 4 workers on a cold cache: each block fetched once (the others wait for it), a HEAD
        #                    per worker and file
        blocks = sum(-(-s3["fs"].size(f"{prefix}/part-{n}{suffix}") // 16384) for n in range(len(counts)))
        assert s3["proxy"].requests - first <= blocks + 4 * len(counts)
    duplicated = sorted(i for i, c in Counter(seen).items() if c > 1)
    assert not duplicated, duplicated
    assert sorted(seen) == ids
    if "shuffled" in variant:
        assert seen != sorted(seen)
    if cache is not None:  # every worker's blocks went through the cache: a second epoch reads only from it
        before = s3["proxy"].requests
        dataset.set_epoch(1)
        assert sorted(ids_of(DataLoader(dataset, batch_size=None, num_workers=4))) == ids
        assert s3["proxy"].requests - before <= len(counts) * 4 + 4  # HEADs when files open; no range request


def test_shuffled_reads_in_process_merge_and_prefetch(s3):
    url = f"s3://{BUCKET}/inproc/a.tfrecord"
    records = records_of(1000, 400)
    write(url, records)
    dataset = tfr_torch.TFRecordDataset(url, index="auto", shuffle=True, seed=9, remote=SMALL)
    got = list(dataset)
    assert sorted(got) == sorted(records) and got != records


def test_cache_hits_misses_and_eviction(s3, tmp_path):
    url = f"s3://{BUCKET}/cache/a.tfrecord"
    records = records_of(0, 500)
    write(url, records, index=False)
    size = s3["fs"].size(url)
    folder = tmp_path / "cache"
    options = RemoteOptions(block_size=4096, readahead=3, cache_dir=str(folder), cache_bytes=10 * 4096)
    with RemoteFile(url, options) as f:
        assert f.read() == s3["fs"].cat(url)
        first = f.requests
    cache = BlockCache.shared(str(folder), 10 * 4096)
    assert cache.evicted > 0  # the file is larger than the cache
    assert cache.usage() <= 10 * 4096
    assert first == -(-size // 4096)
    # a cache as large as the file: the second read serves every block from disk
    big = RemoteOptions(block_size=4096, readahead=3, cache_dir=str(tmp_path / "big"), cache_bytes=size * 2)
    assert list(tfr_torch.read_records(url, remote=big)) == records
    before = s3["proxy"].requests
    hits = BlockCache.shared(str(tmp_path / "big"), size * 2).hits
    assert list(tfr_torch.read_records(url, remote=big)) == records
    assert s3["proxy"].requests - before == 0  # no range request, and no HEAD: its size and ETag are trusted (ttl)
    assert BlockCache.shared(str(tmp_path / "big"), size * 2).hits - hits == -(-size // 4096)
    before = s3["proxy"].requests
    asking = dataclasses.replace(big, metadata_ttl=0)
    assert list(tfr_torch.read_records(url, remote=asking)) == records
    assert s3["proxy"].requests - before == 1  # the HEAD that opens the file; no range request


def test_a_crash_leaves_nothing_that_is_served(s3, tmp_path):
    url = f"s3://{BUCKET}/crash/a.tfrecord"
    records = records_of(0, 200)
    write(url, records, index=False)
    options = RemoteOptions(block_size=4096, cache_dir=str(tmp_path / "c"))
    probe = RemoteFile(url, options)
    probe.close()
    cache = BlockCache.shared(str(tmp_path / "c"), options.cache_bytes)
    key0 = block_key(url, probe.version, probe.size, 4096, 0)
    key1 = block_key(url, probe.version, probe.size, 4096, 1)
    os.makedirs(os.path.dirname(cache.path(key0)), exist_ok=True)
    os.makedirs(os.path.dirname(cache.path(key1)), exist_ok=True)
    # a writer that died mid-block: its temporary file, and a block file cut short (a lost write)
    Path(cache.path(key0)).with_name(f".{key0}.tmp-99999-deadbeef").write_bytes(b"\x00" * 100)
    Path(cache.path(key1)).write_bytes(b"\x00" * 100)
    assert cache.read(key1, 4096) is None and cache.pread(key1, 4096, 0, 16) is None  # a short block: a miss
    Path(cache.path(key1)).write_bytes(b"\x00" * 100)
    assert cache.map(key1, 4096) is None
    Path(cache.path(key1)).write_bytes(b"\x00" * 100)
    assert list(tfr_torch.read_records(url, remote=options)) == records
    assert os.path.getsize(cache.path(key0)) == 4096 and os.path.getsize(cache.path(key1)) == 4096  # refetched
    shuffled = tfr_torch.TFRecordDataset(url, index=None, remote=options)  # no index: the records in order
    assert list(shuffled) == records


def test_two_processes_share_a_cache_folder(s3, tmp_path):
    """Slow (about 10 s): two fresh interpreters (each importing torch) fill one folder past its limit at once."""
    url = f"s3://{BUCKET}/shared/a.tfrecord"
    records = records_of(0, 600)
    write(url, records, index=False)
    folder = tmp_path / "shared-cache"
    limit = s3["fs"].size(url) // 2  # both fill it past its limit at once
    script = textwrap.dedent(f"""
        import sys, tfr_torch
        from tfr_torch.format.remote import RemoteOptions
        options = RemoteOptions(block_size=4096, readahead=4, cache_dir={str(folder)!r}, cache_bytes={limit})
        ids = [tfr_torch.parse_single_example(r, {{"id": tfr_torch.FixedLenFeature([], "int64")}})["id"].item()
               for r in tfr_torch.read_records({url!r}, remote=options)]
        print(len(ids), len(set(ids)))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSSPEC_")}
    env.update(AWS_ENV, FSSPEC_S3_ENDPOINT_URL=s3["endpoint"],
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert out.split() == ["600", "600"]
    cache = BlockCache(str(folder), limit)
    assert 0 < cache.usage() <= limit
    assert not [p for p in folder.rglob("*.tmp-*")]  # no temporary file left behind


def test_a_changed_object_is_read_anew(s3, tmp_path):
    url = f"s3://{BUCKET}/changed/a.tfrecord"
    old = [bytes([i % 251]) * 500 for i in range(100)]
    write(url, old, index=False)
    options = RemoteOptions(block_size=4096, cache_dir=str(tmp_path / "c"))
    assert list(tfr_torch.read_records(url, remote=options)) == old
    size = s3["fs"].size(url)
    same_size = [bytes([(i + 7) % 251]) * 500 for i in range(100)]  # the same size: only the ETag differs
    write(url, same_size, index=False)
    assert s3["fs"].size(url) == size
    assert list(tfr_torch.read_records(url, remote=options)) == same_size


def test_errors_name_the_url(s3):
    url = f"s3://{BUCKET}/errors/gone.tfrecord"
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        RemoteFile(url)
    write(url, records_of(0, 50), index=False)
    f = RemoteFile(url, RemoteOptions(block_size=1024, readahead=0), readahead=False)
    s3["fs"].rm(url)
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        f.read(100)
    f.close()


@pytest.mark.parametrize("kwargs,message", [
    ({"block_size": 0}, "block_size must be a positive int (bytes per range request and cached block), got 0"),
    ({"max_in_flight": -1}, "max_in_flight must be a positive int (range requests at once), got -1"),
    ({"readahead": -2}, "readahead must be a non-negative int, got -2"),
    ({"cache_bytes": 1.5}, "cache_bytes must be a positive int (the block cache's size limit), got 1.5"),
])
def test_remote_options_checks(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RemoteOptions(**kwargs)
    with pytest.raises(TypeError, match="cache_dir must be None or a local folder"):
        RemoteOptions(cache_dir=3)  # type: ignore[arg-type]


def test_dataset_checks_remote(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    write(path, records_of(0, 3), index=False)
    with pytest.raises(TypeError, match="remote must be None or a RemoteOptions, got dict"):
        tfr_torch.TFRecordDataset(path, remote={"block_size": 1})  # type: ignore[arg-type]


def test_one_fetch_per_block_for_threads_filling_it_at_once(tmp_path):
    cache = BlockCache(str(tmp_path / "c"), 1 << 20)
    calls = []
    gate = threading.Event()

    def fetch() -> bytes:
        calls.append(1)
        gate.wait(5)  # the others ask while this fetch is under way
        return b"b" * 1000

    with ThreadPoolExecutor(8) as pool:
        results = [pool.submit(cache.fill, "k" * 64, 1000, fetch) for _ in range(8)]
        while not calls:
            time.sleep(0.001)
        gate.set()
        returned = [r.result() for r in results]
    assert len(calls) == 1
    assert returned.count(b"b" * 1000) == 1 and returned.count(None) == 7  # one fetched; 7 found it stored
    assert cache.fetched == 1 and cache.waited == 7
    assert cache.pread("k" * 64, 1000, 10, 5) == b"bbbbb"
    assert not list((tmp_path / "c").glob("*/.*.lock"))  # the block's lock file goes with the fetch


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fetcher_that_dies_leaves_the_block_to_the_next(tmp_path):
    folder = str(tmp_path / "c")
    key = "d" * 64
    pid = os.fork()
    if pid == 0:  # the child dies holding the block's lock, mid-fetch
        try:
            BlockCache(folder, 1 << 20).fill(key, 10, lambda: os._exit(3))
        finally:
            os._exit(4)
    assert os.waitpid(pid, 0)[1] >> 8 == 3
    cache = BlockCache(folder, 1 << 20)
    assert not cache.has(key, 10)
    assert cache.fill(key, 10, lambda: b"0123456789") == b"0123456789"
    assert cache.read(key, 10) == b"0123456789"


def test_processes_filling_one_block_fetch_it_once(tmp_path):
    folder = tmp_path / "c"
    log = tmp_path / "fetches"
    script = textwrap.dedent(f"""
        import os, time
        from tfr_torch.format.blockcache import BlockCache
        def fetch():
            with open({str(log)!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            time.sleep(0.3)  # the other processes ask meanwhile
            return b"x" * 5000
        cache = BlockCache({str(folder)!r}, 1 << 20)
        cache.fill("e" * 64, 5000, fetch)
        assert cache.read("e" * 64, 5000) == b"x" * 5000
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for proc in procs:
        assert proc.wait(120) == 0, proc.stderr.read() if proc.stderr else ""
    assert len(log.read_text().split()) == 1


def test_a_file_opened_ahead_is_taken_open(s3):
    url = f"s3://{BUCKET}/ahead/a.tfrecord"
    records = records_of(0, 100)
    write(url, records, index=False)
    data = s3["fs"].cat(url)
    before = s3["proxy"].requests
    open_ahead(url, SMALL, readahead=False)
    with open_remote(url, SMALL, readahead=False) as f:
        opened = s3["proxy"].requests - before
        assert opened == 2  # its HEAD and its first bytes, made by open_ahead
        assert f.read(12) == data[:12]  # what compression sniffing reads: no request of its own
        assert s3["proxy"].requests - before == opened
    before = s3["proxy"].requests
    open_ahead(url, SMALL, start=0)  # a sequential reader: its first blocks requested too
    with tfr_torch.read_records(url, remote=SMALL) as reader:
        assert list(reader) == records
    # each block once, and no HEAD: the size and ETag the open above asked are trusted for metadata_ttl
    assert s3["proxy"].requests - before == -(-len(data) // SMALL.block_size)


def test_a_missing_file_opened_ahead_raises_where_it_is_taken(s3):
    url = f"s3://{BUCKET}/ahead/missing.tfrecord"
    open_ahead(url, SMALL, readahead=False)
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        open_remote(url, SMALL, readahead=False)


def test_remote_indexes_are_checked_with_small_requests(s3):
    prefix = f"s3://{BUCKET}/indexes"
    for n in range(4):
        write(f"{prefix}/part-{n}.tfrecord", records_of(n * 1000, 400))
    total = sum(s3["fs"].size(f"{prefix}/part-{n}.tfrecord") for n in range(4))
    before = s3["proxy"].bytes_down
    dataset = tfr_torch.TFRecordDataset(f"{prefix}/part-*.tfrecord", index="auto")
    assert len(dataset) == 1600
    assert s3["proxy"].bytes_down - before < total / 4  # indexes and a few headers, not the files' blocks


def test_a_remote_record_that_disagrees_with_its_index_names_the_url_and_offset(s3):
    url = f"s3://{BUCKET}/badindex/a.tfrecord"
    records = records_of(0, 20)
    write(url, records)
    index = tfr_torch.read_index(url + ".idx", url)
    offset, size = (int(v) for v in index[5])
    with RecordFile(url, remote=SMALL) as f:
        assert f.read(offset, size) == records[5]
        with pytest.raises(tfr_torch.CorruptRecordError, match=re.escape(
                f"the record here has {size} bytes but the index says {size + 1}")) as err:
            f.read(offset, size + 1)
    assert err.value.path == url and err.value.offset == offset


def test_records_of_cached_blocks_are_read_together(s3, tmp_path):
    url = f"s3://{BUCKET}/readmany/a.tfrecord"
    records = records_of(0, 300)  # up to ~940 bytes each: some records cross the 4 KiB blocks
    write(url, records)
    index = tfr_torch.read_index(url + ".idx", url)
    order = list(range(299, -1, -3)) + list(range(0, 300, 3))
    options = RemoteOptions(block_size=4096, cache_dir=str(tmp_path / "c"))
    with RecordFile(url, remote=options) as f:
        assert f.groups
        assert f.read_many(index[order, 0], index[order, 1]) == [records[i] for i in order]
        sizes = index[order, 1].copy()
        sizes[7] += 1  # the index disagrees with one record: read_many says so, naming the URL and the offset
        with pytest.raises(tfr_torch.CorruptRecordError, match="but the index says") as err:
            f.read_many(index[order, 0], sizes)
        assert err.value.path == url and err.value.offset == int(index[order[7], 0])
    with RecordFile(url, remote=SMALL) as f:  # no cache: read one by one
        assert not f.groups
        assert f.read_many(index[order, 0], index[order, 1]) == [records[i] for i in order]


def test_metadata_is_trusted_for_its_ttl_then_asked_again(s3, tmp_path, monkeypatch):
    from tfr_torch.format import remote_state

    url = f"s3://{BUCKET}/ttl/a.tfrecord"
    old = [bytes([i % 251]) * 500 for i in range(100)]
    write(url, old, index=False)
    now = [1000.0]
    monkeypatch.setattr(remote_state, "_clock", lambda: now[0])
    options = RemoteOptions(block_size=4096, cache_dir=str(tmp_path / "c"), metadata_ttl=30)
    assert list(tfr_torch.read_records(url, remote=options)) == old  # asked (HEAD) at t=1000
    new = [bytes([(i + 7) % 251]) * 500 for i in range(100)]  # the same size: only the ETag differs
    s3["fs"].pipe_file(url, b"".join(frame_record(r) for r in new))  # replaced by another program
    before = s3["proxy"].requests
    now[0] += 29
    # within the ttl: no request at all; the version first seen is read whole from the cache
    assert list(tfr_torch.read_records(url, remote=options)) == old
    assert s3["proxy"].requests == before
    now[0] += 1  # the ttl has passed: asked again, the new version read
    assert list(tfr_torch.read_records(url, remote=options)) == new
    assert s3["proxy"].requests > before
    # metadata_ttl=0 asks on every open
    before = s3["proxy"].requests
    assert list(tfr_torch.read_records(url, remote=dataclasses.replace(options, metadata_ttl=0))) == new
    assert s3["proxy"].requests == before + 1


def test_a_write_through_tfr_torch_is_seen_at_once(s3, tmp_path):
    url = f"s3://{BUCKET}/ttl/written.tfrecord"
    options = RemoteOptions(block_size=4096, cache_dir=str(tmp_path / "c"), metadata_ttl=3600)
    write(url, records_of(0, 50), index=False)
    assert len(list(tfr_torch.read_records(url, remote=options))) == 50
    write(url, records_of(0, 80), index=False)  # a new size and ETag, well within the ttl
    assert len(list(tfr_torch.read_records(url, remote=options))) == 80


def test_a_fetch_of_another_length_forgets_the_metadata(s3):
    url = f"s3://{BUCKET}/ttl/shrunk.tfrecord"
    write(url, records_of(0, 200), index=False)
    options = RemoteOptions(block_size=2048, readahead=0, metadata_ttl=3600)
    f = RemoteFile(url, options, readahead=False)
    s3["fs"].pipe_file(url, s3["fs"].cat(url)[:5000])  # shrunk by another program
    with pytest.raises(OSError, match=r"the object changed while it was read\?"):
        f.read(8000)
    f.close()
    assert RemoteFile(url, options).size == 5000  # asked again


def test_metadata_ttl_checks():
    for bad in (-1, float("nan"), "60", True):
        with pytest.raises(ValueError, match="metadata_ttl must be a non-negative number of seconds"):
            RemoteOptions(metadata_ttl=bad)  # type: ignore[arg-type]


def test_sequential_reads_of_cached_blocks_read_their_files(s3, tmp_path, monkeypatch):
    url = f"s3://{BUCKET}/direct/a.tfrecord"
    # 4-9 KB each (reading straight into records' bytes pays from 4 KB): many run into the next 32 KiB block
    records = [tfr_torch.encode_example({"id": i, "blob": b"r" * (4000 + i * 977 % 5000)}) for i in range(400)]
    write(url, records)
    options = RemoteOptions(block_size=32768, readahead=3, cache_dir=str(tmp_path / "c"))
    extents = []
    original = RemoteFile.local_extent
    monkeypatch.setattr(RemoteFile, "local_extent", lambda self, pos: extents.append(pos) or original(self, pos))
    for epoch in range(2):  # a cold cache (blocks fetched into it on the way), then a warm one
        dataset = tfr_torch.TFRecordDataset(url, SPEC, index="auto", remote=options)
        assert [int(x["id"]) for x in dataset] == list(range(400))
        assert len(extents) > -(-s3["fs"].size(url) // 32768)  # every block, from its cached file
        extents.clear()


def test_a_corrupt_cached_block_is_named_not_served(s3, tmp_path):
    url = f"s3://{BUCKET}/direct/corrupt.tfrecord"
    write(url, [tfr_torch.encode_example({"id": i, "blob": b"r" * 5000}) for i in range(200)])
    folder = tmp_path / "c"
    options = RemoteOptions(block_size=32768, cache_dir=str(folder))
    assert [int(x["id"]) for x in tfr_torch.TFRecordDataset(url, SPEC, index="auto", remote=options)] == list(
        range(200))
    index = tfr_torch.read_index(url + ".idx", url)
    offset, size = (int(v) for v in index[50])  # flip a byte of record 50's data in its cached block
    key = block_key(url, RemoteFile(url, options).version, s3["fs"].size(url), 32768, (offset + 20) // 32768)
    path = BlockCache.shared(str(folder), options.cache_bytes).path(key)
    with open(path, "r+b") as f:  # (the cache checks a block's length, the reader its records' CRCs)
        f.seek((offset + 20) % 32768)
        byte = f.read(1)
        f.seek((offset + 20) % 32768)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(tfr_torch.CorruptRecordError) as err:
        list(tfr_torch.TFRecordDataset(url, SPEC, index="auto", remote=options))
    assert err.value.path == url and err.value.offset == offset


def test_records_longer_than_a_cached_block_are_read_whole(s3, tmp_path, monkeypatch):
    url = f"s3://{BUCKET}/direct/long.tfrecord"
    records = [tfr_torch.encode_example({"id": i, "blob": bytes([i % 251]) * (5000 + (i % 7) * 9000)})
               for i in range(60)]  # 5-59 KB: many span two or more 16 KiB blocks
    write(url, records)
    options = RemoteOptions(block_size=16384, cache_dir=str(tmp_path / "c"))
    extents = []
    original = RemoteFile.local_extent
    monkeypatch.setattr(RemoteFile, "local_extent", lambda self, pos: extents.append(pos) or original(self, pos))
    for _ in range(2):  # cold, then warm
        got = [bytes(r) for r in tfr_torch.read_records(url, remote=options)]
        assert got == records
        assert [int(x["id"]) for x in tfr_torch.TFRecordDataset(url, SPEC, index="auto", remote=options)] == list(
            range(60))
    assert len(extents) > 2 * -(-s3["fs"].size(url) // 16384)  # read from the blocks' files, piece by piece


def test_a_shuffle_over_more_remote_files_than_it_keeps_open_reads_each_record_once(s3, monkeypatch):
    """A global shuffle keeps at most a budget of files open (data/open_files.py), and never closes a remote file
    with reads announced to it (pinned until its window is read): with room for 2 of 8 files, the same records in
    the same order as with every file open, and files were opened again (so closing really happened)."""
    from tfr_torch.data import open_files, reading

    monkeypatch.setattr(reading, "_AHEAD", 2)  # windows of 2 records: at most 4 of the 8 files pinned at once
    urls = []
    for k in range(8):
        url = f"s3://{BUCKET}/budget/s{k}.tfrecord"
        write(url, records_of(100 * k, 20))
        urls.append(url)

    def read() -> list[bytes]:
        return [bytes(r) for r in tfr_torch.TFRecordDataset(urls, index="auto", shuffle=True, seed=4, remote=SMALL)]

    opened: list[int] = []
    real = open_files.OpenFiles._get  # every open goes through it (get and pin)

    def counting(self, f):
        fresh = f not in self
        handle = real(self, f)
        if fresh:
            opened.append(f)
        return handle

    released = []
    real_release = RecordFile.release

    def release(self, token):
        released.append(self._closing)  # a handle closed with reads announced to it threw their blocks away
        real_release(self, token)

    monkeypatch.setattr(open_files.OpenFiles, "_get", counting)
    monkeypatch.setattr(RecordFile, "release", release)
    everything = read()
    assert len(opened) == 8
    opened.clear()
    monkeypatch.setattr(open_files, "open_budget", lambda: 2)
    assert read() == everything
    assert sorted(everything) == sorted(r for k in range(8) for r in records_of(100 * k, 20))
    assert len(opened) > 8
    assert released and not any(released)
