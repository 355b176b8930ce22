"""Audit of writing TFRecords into object storage (ShardedWriter / TFRecordWriter to a URL, build_index of a remote
file) against a simple model: every record written is read back exactly once, in order, byte for byte.

Beyond tests/test_shards_url.py, tests/test_s3.py and tests/test_remote*.py, this checks:
- shards that roll over by size (records of 0 bytes to > 64 KiB, one larger than a shard) for plain, GZIP and
  ZLIB, read back in order through the shard list, a glob, `IndexedTFRecordDataset` record by
  record and `RecordFile` through the `.idx` / `.idx.seek` written beside the remote shards (several seek points
  per shard), with the sidecar's record and byte counts;
- what a reader sees while a set is being written (no final name, no sidecar: globs find no TFRecord file) and
  after each failure: an upload refused while the last shard is sent by `close()`, a refused server-side move
  (a failing fsspec filesystem stand-in, `flaky://`), the S3 server stopped in the middle of a run, a progress
  file that cannot be saved; in each case no final shard or sidecar, no staging file, no upload thread left, and
  a resumed run that ends with every record once;
- `write()` after a failed upload, `close()` after a failed close, a corrupt progress file, `abort(False)`
  with an upload in flight, a rewrite into a folder holding a set of another count and compression;
- TFRecordWriter into a missing bucket / folder or a stopped server: the error names the URL written.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from typing import Any, Callable

import pytest

import tfr_torch
from tfr_torch import ShardedWriter
from tfr_torch.format import folder as folder_module
from tfr_torch.format.record_file import RecordFile

fsspec = pytest.importorskip("fsspec")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

try:  # imported here, once, not inside the first S3 test (moto takes seconds to import)
    import moto.server as moto_server
    import s3fs
except ImportError:  # the memory:// and flaky:// tests run without them
    moto_server = s3fs = None

native = pytest.mark.skipif(not tfr_torch._native.available(), reason="seek points need the compiled core")


# ----- helpers ---------------------------------------------------------------------------------------------------

def records(n: int, first: int = 0) -> list[bytes]:
    """Records of varied sizes: every 11th empty, the others numbered, every 37th longer than 64 KiB."""
    out = []
    for i in range(first, first + n):
        size = 70_000 + i if i % 37 == 36 else (i * 131) % 2_000
        out.append(i.to_bytes(4, "big") + bytes((i * 7 + j) % 256 for j in range(size)) if i % 11 else b"")
    return out


def fs_files(fs: Any, root: str) -> list[str]:
    """The names of every object under `root` (relative to it)."""
    root = fs._strip_protocol(root).rstrip("/")
    return sorted(p[len(root) + 1:] for p in fs.find(root))


def staging_left(staging) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(staging) for f in files]


@pytest.fixture(autouse=True)
def threads_before():
    """The threads running when the test began (an upload thread another test left is not this test's)."""
    global _BEFORE
    _BEFORE = set(threading.enumerate())
    yield


_BEFORE: set[threading.Thread] = set()


def upload_threads() -> list[str]:
    """The writers' upload threads started by this test and still running."""
    return [t.name for t in threading.enumerate() if t.name.startswith("tfr_torch-upload") and t not in _BEFORE]


def read_all(paths) -> list[bytes]:
    return [bytes(r) for r in tfr_torch.read_records(paths)] if isinstance(paths, str) else [
        bytes(r) for p in paths for r in tfr_torch.read_records(p)]


@pytest.fixture
def memory_url():
    root = f"/tfr-audit-{uuid.uuid4().hex[:8]}"
    yield f"memory://{root}"
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


class FlakyFileSystem(MemoryFileSystem):
    """An in-memory store whose operations fail on demand, as a store that refuses a request would:
    `fail[op](path)` true makes `op` ("put_file", "cp_file", "open_write") raise PermissionError."""

    protocol = "flaky"
    store: dict[str, Any] = {}
    pseudo_dirs = [""]
    fail: dict[str, Callable[[str], bool]] = {}

    def _check(self, op: str, path: str) -> None:
        if op in self.fail and self.fail[op](path):
            raise PermissionError("Access Denied")  # as S3 says it: naming no object

    def put_file(self, lpath, rpath, *args, **kwargs):
        self._check("put_file", rpath)
        return super().put_file(lpath, rpath, *args, **kwargs)

    def cp_file(self, path1, path2, **kwargs):
        self._check("cp_file", path1)
        return super().cp_file(path1, path2, **kwargs)

    def _open(self, path, mode="rb", *args, **kwargs):
        if "w" in mode:
            self._check("open_write", path)
        return super()._open(path, mode, *args, **kwargs)


@pytest.fixture
def flaky():
    fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)
    FlakyFileSystem.fail = {}
    root = f"/tfr-flaky-{uuid.uuid4().hex[:8]}"
    yield f"flaky://{root}"
    FlakyFileSystem.fail = {}
    FlakyFileSystem.store.clear()


# ----- every record once, in order, byte for byte ----------------------------------------------------------------

@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_size_rolled_shards_read_back_exactly_every_way(tmp_path, memory_url, compression):
    data = records(400) + [b"\xff" * 250_000]  # the last alone is larger than a shard
    with ShardedWriter(memory_url, "ds", "train", shard_size="200KB", compression=compression,
                       seek_span=65536, staging_dir=tmp_path / "staging") as writer:
        for i, record in enumerate(data):
            writer.write(record, position=i)
    count = len(writer.paths)
    assert count > 4 and writer.records == len(data)
    assert writer.paths == [f"{memory_url}/ds-train.tfrecord-{i:05d}-of-{count:05d}" for i in range(count)]
    fs = fsspec.filesystem("memory")
    expected = {p.rsplit("/", 1)[-1] + suffix for p in writer.paths
                for suffix in ("", ".idx") + ((".idx.seek",) if compression and tfr_torch._native.available() else ())}
    assert set(fs_files(fs, memory_url)) == expected | {"ds-train.tfr_torch.json"}
    assert staging_left(tmp_path / "staging") == [] and upload_threads() == []

    assert read_all(writer.paths) == data  # in order, byte for byte
    sidecar = json.loads(fs.cat(f"{memory_url[len('memory://'):]}/ds-train.tfr_torch.json"))
    assert [s["file"] for s in sidecar["shards"]] == [p.rsplit("/", 1)[-1] for p in writer.paths]
    per_shard = [len(read_all(p)) for p in writer.paths]
    assert [s["records"] for s in sidecar["shards"]] == per_shard and sidecar["records"] == len(data)
    assert [s["bytes"] for s in sidecar["shards"]] == [fs.size(p) for p in writer.paths]
    for path in writer.paths[:-1]:  # the shard size is of the framed, uncompressed records
        assert sum(len(r) + 16 for r in read_all(path)) <= 200_000
    folder = tfr_torch.TFRecordDataset(f"{memory_url}/ds-train.tfrecord-*", batch_size=None)
    assert [bytes(r) for r in folder] == data
    if compression and not tfr_torch._native.available():
        return
    indexed = tfr_torch.IndexedTFRecordDataset(writer.paths)
    assert len(indexed) == len(data)
    order = list(range(len(data)))[::-7] + list(range(len(data)))[::3]
    assert [bytes(indexed[i]) for i in order] == [data[i] for i in order]
    index = tfr_torch.read_index(writer.paths[1] + ".idx", writer.paths[1])
    with RecordFile(writer.paths[1]) as shard:  # the seek points beside the remote shard
        got = [bytes(shard.read(int(o), int(s))) for o, s in index.tolist()[::-1]]
    assert got[::-1] == read_all(writer.paths[1])


def test_records_per_shard_and_an_empty_set(memory_url):
    with ShardedWriter(memory_url, "ds", "train", records_per_shard=1) as writer:
        for record in records(3):
            writer.write(record)
    assert [p.rsplit("/", 1)[-1] for p in writer.paths] == [f"ds-train.tfrecord-0000{i}-of-00003" for i in range(3)]
    with ShardedWriter(memory_url, "ds", "train") as writer:  # no records: the old shards go, the sidecar says 0
        pass
    fs = fsspec.filesystem("memory")
    assert writer.paths == [] and fs_files(fs, memory_url) == ["ds-train.tfr_torch.json"]
    assert json.loads(fs.cat(f"{memory_url[9:]}/ds-train.tfr_torch.json"))["records"] == 0


# ----- what a reader sees while writing and after failures --------------------------------------------------------

def test_nothing_is_visible_under_a_final_name_while_writing(memory_url):
    writer = ShardedWriter(memory_url, "ds", "train", records_per_shard=4, compression="gzip")
    for i, record in enumerate(records(30)):
        writer.write(record, position=i)
    writer._wait_upload()  # (seven shards uploaded, the eighth open)
    fs = fsspec.filesystem("memory")
    names = fs_files(fs, memory_url)
    assert len([n for n in names if n.endswith(".partial")]) == 7
    assert not [n for n in names if "-of-" in n or n.endswith(".tfr_torch.json")]
    with pytest.raises(FileNotFoundError, match="matches only side files"):
        tfr_torch.TFRecordDataset(f"{memory_url}/ds-train.tfrecord-*", batch_size=None)
    paths = writer.close()
    assert read_all(paths) == records(30)


# Fixed: an upload that failed while close() sent the last shard left the staging folder (two shards' files) and
# the upload thread behind, and a second close() published a set missing that shard's upload
def test_a_failed_upload_in_close_leaves_no_staging_and_the_run_resumes(monkeypatch, tmp_path, memory_url):
    real = folder_module.OutputFolder.upload

    def upload(folder, local, name):
        if name.startswith("ds-train.tfrecord-00002.partial"):
            raise PermissionError("Access Denied")
        real(folder, local, name)

    monkeypatch.setattr(folder_module.OutputFolder, "upload", upload)
    staging = tmp_path / "staging"
    data = records(10)
    with pytest.raises(OSError, match=r"uploading ds-train\.tfrecord-00002\.partial to "
                                      r"'memory://.*/ds-train\.tfrecord-00002\.partial' failed: PermissionError"):
        with ShardedWriter(memory_url, "ds", "train", records_per_shard=4, staging_dir=staging) as writer:
            for i, record in enumerate(data):
                writer.write(record, position=i)
    assert staging_left(staging) == [] and upload_threads() == []
    names = fs_files(fsspec.filesystem("memory"), memory_url)
    assert not [n for n in names if "-of-" in n or n.endswith(".tfr_torch.json")]
    with pytest.raises(ValueError, match=r"close\(\) failed \(OSError: ShardedWriter: uploading"):
        writer.close()  # not [] as if the set were written
    monkeypatch.setattr(folder_module.OutputFolder, "upload", real)
    with ShardedWriter(memory_url, "ds", "train", records_per_shard=4, staging_dir=staging, resume=True) as writer:
        assert writer.resumed_position == 7
        for i in range(writer.resumed_position + 1, len(data)):
            writer.write(data[i], position=i)
    assert read_all(writer.paths) == data and staging_left(staging) == []


# Fixed: write() went on after the previous shard's upload had failed: the shard it had just finished was never
# uploaded, and close() then failed with "it is not there (was the folder changed by another program ...)"
def test_a_write_after_a_failed_upload_is_refused(monkeypatch, tmp_path, memory_url):
    real = folder_module.OutputFolder.upload

    def upload(folder, local, name):
        if name.startswith("ds-train.tfrecord-00001.partial"):
            raise PermissionError("Access Denied")
        real(folder, local, name)

    monkeypatch.setattr(folder_module.OutputFolder, "upload", upload)
    writer = ShardedWriter(memory_url, "ds", "train", records_per_shard=2, staging_dir=tmp_path / "staging")
    data = records(8)
    failed = None
    for i, record in enumerate(data):  # a loop that retries a write once after an error
        try:
            writer.write(record, position=i)
        except OSError as exc:
            failed = i
            assert "uploading ds-train.tfrecord-00001.partial" in str(exc)
            with pytest.raises(ValueError, match="write to a closed ShardedWriter"):
                writer.write(record, position=i)
            break
    assert failed is not None
    assert staging_left(tmp_path / "staging") == [] and upload_threads() == []
    assert writer.close() == []  # aborted: nothing published
    assert "ds-train.tfr_torch.json" not in fs_files(fsspec.filesystem("memory"), memory_url)


# Fixed (as above): a move refused while close() published the set left the staging folder and upload thread
def test_a_refused_server_side_move_publishes_no_sidecar_and_a_rerun_is_exact(tmp_path, flaky):
    FlakyFileSystem.fail = {"cp_file": lambda path: path.endswith("tfrecord-00001.partial")}
    staging = tmp_path / "staging"
    data = records(12)
    with pytest.raises(PermissionError, match="Access Denied"):
        with ShardedWriter(flaky, "ds", "train", records_per_shard=5, compression="zlib",
                           staging_dir=staging) as writer:
            for i, record in enumerate(data):
                writer.write(record, position=i)
    fs = fsspec.filesystem("flaky")
    assert "ds-train.tfr_torch.json" not in fs_files(fs, flaky)
    assert staging_left(staging) == [] and upload_threads() == []
    FlakyFileSystem.fail = {}
    writer = ShardedWriter(flaky, "ds", "train", records_per_shard=5, compression="zlib", resume=True)
    assert writer.records == 0  # a shard already moved: the run starts over (nothing kept twice)
    with writer:
        for i, record in enumerate(data):
            writer.write(record, position=i)
    assert read_all(writer.paths) == data
    assert [n for n in fs_files(fs, flaky) if "-of-" not in n] == ["ds-train.tfr_torch.json"]
    assert [bytes(r) for r in tfr_torch.TFRecordDataset(f"{flaky}/ds-train.tfrecord-*", batch_size=None)] == data


def test_a_refused_server_side_move_names_the_objects(flaky):
    # Fixed: OutputFolder._move_one named the objects only for FileNotFoundError; a refused copy raised the store's
    # bare "Access Denied"
    FlakyFileSystem.fail = {"cp_file": lambda path: path.endswith("tfrecord-00000.partial")}
    with pytest.raises(PermissionError, match=r"flaky://.*/ds-train\.tfrecord-00000\.partial"):
        with ShardedWriter(flaky, "ds", "train") as writer:
            writer.write(b"x")


def test_a_progress_file_that_cannot_be_saved_stops_the_run_and_loses_nothing(tmp_path, flaky):
    FlakyFileSystem.fail = {"open_write": lambda path: "progress.json" in path and "00002" in str(saves)}
    saves: list[str] = []
    real = ShardedWriter._save_progress

    def save(self, done):
        saves.append(done[-1]["partial"])
        real(self, done)

    data = records(20)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ShardedWriter, "_save_progress", save)
        with pytest.raises(OSError, match=r"writing 'flaky://.*/ds-train\.progress\.json' failed: PermissionError"):
            with ShardedWriter(flaky, "ds", "train", records_per_shard=3, staging_dir=tmp_path / "s") as writer:
                for i, record in enumerate(data):
                    writer.write(record, position=i)
    FlakyFileSystem.fail = {}
    assert staging_left(tmp_path / "s") == [] and upload_threads() == []
    writer = ShardedWriter(flaky, "ds", "train", records_per_shard=3, resume=True)
    assert writer.resumed_position == 5  # shard 2 was uploaded but not recorded: it is written again
    with writer:
        for i in range(writer.resumed_position + 1, len(data)):
            writer.write(data[i], position=i)
    assert read_all(writer.paths) == data


# Fixed: a progress file cut short (or of another program) raised a bare JSONDecodeError naming no file
def test_a_corrupt_progress_file_is_named(tmp_path, memory_url):
    fsspec.filesystem("memory").pipe(f"{memory_url[9:]}/ds-train.progress.json", b'{"settings": {"na')
    with pytest.raises(ValueError, match=r"cannot resume from memory://.*/ds-train\.progress\.json: expected a "
                                         r"ShardedWriter progress file .*found '\{\"settings\": \{\"na'"):
        ShardedWriter(memory_url, "ds", "train", resume=True, staging_dir=tmp_path / "s")
    assert staging_left(tmp_path / "s") == []


def test_abort_without_keeping_removes_everything_even_an_upload_in_flight(monkeypatch, tmp_path, memory_url):
    release = threading.Event()
    real = folder_module.OutputFolder.upload

    def slow(folder, local, name):
        if name.endswith("00002.partial"):
            release.wait(5)
        real(folder, local, name)

    monkeypatch.setattr(folder_module.OutputFolder, "upload", slow)
    writer = ShardedWriter(memory_url, "ds", "train", records_per_shard=2, compression="gzip",
                           staging_dir=tmp_path / "s")
    for i, record in enumerate(records(7)):
        writer.write(record, position=i)
    threading.Timer(0.2, release.set).start()
    writer.abort(keep_finished=False)
    assert fs_files(fsspec.filesystem("memory"), memory_url) == []
    assert staging_left(tmp_path / "s") == [] and upload_threads() == []


def test_a_rewrite_of_another_count_and_compression_leaves_only_the_new_set(memory_url):
    with ShardedWriter(memory_url, "ds", "train", records_per_shard=3, compression="gzip") as old:
        for record in records(10, first=100):
            old.write(record)
    with pytest.raises(RuntimeError):  # an interrupted run of the new settings leaves partials and progress
        with ShardedWriter(memory_url, "ds", "train", records_per_shard=4) as writer:
            for record in records(9):
                writer.write(record)
            raise RuntimeError("stop")
    with ShardedWriter(memory_url, "ds", "train", records_per_shard=4) as writer:  # no resume: starts over
        for record in records(6):
            writer.write(record)
    names = fs_files(fsspec.filesystem("memory"), memory_url)
    assert names == sorted(["ds-train.tfr_torch.json"] + [f"ds-train.tfrecord-0000{i}-of-00002{s}"
                                                          for i in range(2) for s in ("", ".idx")])
    assert read_all(writer.paths) == records(6)
    glob = tfr_torch.TFRecordDataset(f"{memory_url}/ds-train.tfrecord-*", batch_size=None)
    assert [bytes(r) for r in glob] == records(6)


# ----- TFRecordWriter and build_index to a URL ---------------------------------------------------------------------

@native
def test_build_index_of_a_remote_gzip_file_feeds_the_indexed_reader(memory_url):
    url = f"{memory_url}/one.tfrecord.gz"
    data = records(80)
    with tfr_torch.TFRecordWriter(url, "gzip") as writer:
        for record in data:
            writer.write(record)
    assert tfr_torch.build_index(url, seek_span=65536) == url + ".idx"
    assert fs_files(fsspec.filesystem("memory"), memory_url) == ["one.tfrecord.gz", "one.tfrecord.gz.idx",
                                                                 "one.tfrecord.gz.idx.seek"]
    indexed = tfr_torch.IndexedTFRecordDataset(url)
    assert [bytes(indexed[i]) for i in range(79, -1, -3)] == data[79::-3]
    tfr_torch.build_index(url, seek_span=None)  # no seek points: the stale ones go
    assert not fsspec.filesystem("memory").exists(f"{memory_url[9:]}/one.tfrecord.gz.idx.seek")


# Fixed: TFRecordWriter into a folder that is not there named only its temporary object
def test_a_url_writer_into_a_missing_folder_names_the_url(tmp_path):
    url = f"local://{tmp_path}/missing/a.tfrecord"
    with pytest.raises(FileNotFoundError, match=rf"writing '{url}' failed: FileNotFoundError"):
        tfr_torch.TFRecordWriter(url)
    assert os.listdir(tmp_path) == []


# ----- against an S3 server --------------------------------------------------------------------------------------

@pytest.fixture
def s3(tmp_path):
    """An S3 server of this test's own on 127.0.0.1 (a test may stop it), s3fs pointed at it with one attempt per
    request (no retries with back-off when it is stopped); stopped afterwards."""
    if moto_server is None or s3fs is None:
        pytest.skip("needs moto[server] and s3fs")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                            "AWS_DEFAULT_REGION": "us-east-1"}.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
        mp.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://{host}:{port}",
                                              "config_kwargs": {"retries": {"max_attempts": 1}}})
        mp.setattr(s3fs.S3FileSystem, "retries", 1)
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            fs = fsspec.filesystem("s3")
            if not fs.exists("audit-bucket"):  # (moto keeps its buckets in the process, server or not)
                fs.mkdir("audit-bucket")
            yield {"fs": fs, "server": server}
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            server.stop()


# Fixed: with the server gone while close() waited for the last upload, the staging folder kept two shards
def test_a_stopped_s3_server_mid_run_names_the_url_and_leaves_no_staging(monkeypatch, tmp_path, s3):
    real = folder_module.OutputFolder.upload
    calls = []

    def upload(folder, local, name):
        calls.append(name)
        if len(calls) == 3:  # the second shard's data: the server goes away
            s3["server"].stop()
        real(folder, local, name)

    monkeypatch.setattr(folder_module.OutputFolder, "upload", upload)
    staging = tmp_path / "staging"
    with pytest.raises(OSError, match=r"uploading ds-train\.tfrecord-00001\.partial to "
                                      r"'s3://audit-bucket/out/ds-train\.tfrecord-00001\.partial' failed"):
        with ShardedWriter("s3://audit-bucket/out", "ds", "train", records_per_shard=4,
                           staging_dir=staging) as writer:
            for i, record in enumerate(records(10)):
                writer.write(record, position=i)
    assert staging_left(staging) == [] and upload_threads() == []


def test_s3_set_with_seek_points_reads_back_exactly(tmp_path, s3):
    data = records(74)
    with ShardedWriter("s3://audit-bucket/set", "ds", "train", shard_size="100KB", compression="gzip",
                       seek_span=65536, staging_dir=tmp_path / "s") as writer:
        for record in data:
            writer.write(record)
    assert len(writer.paths) >= 2 and staging_left(tmp_path / "s") == []
    assert read_all(writer.paths) == data
    assert [n for n in fs_files(s3["fs"], "audit-bucket/set") if n.endswith(".partial") or ".tmp-" in n
            or n.endswith("progress.json")] == []
    if tfr_torch._native.available():
        indexed = tfr_torch.IndexedTFRecordDataset(writer.paths)
        assert [bytes(indexed[i]) for i in (73, 36, 0, 50)] == [data[i] for i in (73, 36, 0, 50)]


# Fixed: TFRecordWriter into a missing bucket raised "The specified bucket does not exist" naming nothing, and a
# server gone before close() raised botocore's error naming the temporary object only
def test_s3_writer_errors_name_the_url(s3):
    with pytest.raises(FileNotFoundError, match=r"writing 's3://no-such-bucket-q/x\.tfrecord' failed"):
        with tfr_torch.TFRecordWriter("s3://no-such-bucket-q/x.tfrecord") as writer:
            writer.write(b"x")
    writer = tfr_torch.TFRecordWriter("s3://audit-bucket/y.tfrecord")
    writer.write(b"y" * 100)
    s3["server"].stop()
    with pytest.raises(OSError, match=r"writing 's3://audit-bucket/y\.tfrecord' failed"):
        writer.close()


# Fixed: an aborted write to S3 closed its file first, which sent the buffered bytes and finished the multipart
# upload (a whole object made), only to remove it
@pytest.mark.parametrize("size", [100_000, 12 << 20])  # one PUT's worth; a multipart upload under way
def test_an_aborted_s3_write_sends_nothing_more(s3, size, monkeypatch):
    from tfr_torch.format.paths import AtomicOutput

    sent = []
    for name in ("_upload_chunk", "_initiate_upload"):
        real = getattr(s3fs.core.S3File, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            sent.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(s3fs.core.S3File, name, spy)
    monkeypatch.setitem(fsspec.config.conf["s3"], "default_block_size", 5 << 20)  # parts of 5 MiB (S3's least)
    s3fs.S3FileSystem.clear_instance_cache()
    out = AtomicOutput("s3://audit-bucket/aborted.tfrecord")
    out.file.write(b"x" * size)
    before = list(sent)  # a large write starts its multipart upload and sends parts as the buffer fills
    assert bool(before) == (size > 5 << 20)
    out.abort()
    assert sent == before
    assert [n for n in fs_files(s3["fs"], "audit-bucket") if "aborted" in n] == []
    uploads = s3["fs"].call_s3("list_multipart_uploads", Bucket="audit-bucket").get("Uploads", [])
    assert uploads == []
