"""Resource exhaustion audit: a full disk (ENOSPC) or a file size limit (RLIMIT_FSIZE: EFBIG) while writing, few file
descriptors (RLIMIT_NOFILE), a small /dev/shm, and shared memory that cannot be had. Promised: an OSError naming the
path, nothing half written left under a final name, no hang, nothing dropped, no leaked descriptor; a cache or a
spill that cannot write falls back.

Most tests need no root: a file size limit set for the duration of one call (SIGXFSZ ignored, so a write past it
fails with EFBIG, as a full disk fails with ENOSPC), `atomic_output` made to fail as a full disk does, descriptor
limits in a subprocess, torch's shared memory made to fail in DataLoader workers. The tests that need a real small
tmpfs (a full disk, a /dev/shm of 8 MB) run in a private mount namespace (`unshare -m`, which leaves no mount behind)
and skip where that is not allowed.

Found:
- Fixed (format/writer.py): a write or close that the disk refused raised `[Errno 28] No space left on device` (or
  27, File too large) naming no file, and the writer stayed usable: a caller that caught the error and went on (or
  called close()) got a GZIP/ZLIB file committed under its final name that was corrupt from the failed write on
  (and an uncompressed one that missed records). Now the OSError names the path, the file is discarded, and a
  later write, flush or close raises.
- Fixed (tools/shards.py, format/index.py, tfds/write.py, data/cache_folder.py): the same nameless errors from the
  indexes, seek points, progress files, sidecars, TFDS metadata and CachedDataset parts (through `naming_the_path`);
  the CLI's one line (`tfr-torch reshard: path: ...`) now names the file. build_index left the seek points of an
  earlier run beside a new index where writing the new ones failed.
- Fixed (data/cache_folder.py): torch.save into a full disk raised torch's `RuntimeError: [enforce fail at
  inline_container.cc] . unexpected pos ...`, not the OSError; a part whose check could not be written was left
  (replayed never, warned about as damaged later).
- Fixed (format/blockcache.py): the block cache kept up to 128 block descriptors open per process whatever the
  descriptor limit: under `ulimit -n 64` a cached remote read raised `[Errno 24] Too many open files` (from
  os.dup, naming nothing). Now it keeps at most an eighth of RLIMIT_NOFILE, sheds them and retries on EMFILE, and
  treats a block it still cannot open as a miss; the warning for blocks it cannot store is logged once, then at
  debug level (a full disk refused every block with a warning each).
- Fixed (data/transport.py, data/slabs.py): where no slab could be made (memfd ENOSPC) and torch's shared memory
  (/dev/shm) was full too, the batches' tensors failed to pickle in the worker's queue feeder thread, which prints
  the error and drops the batch: the epoch ended with records silently missing (16 of 64), and with
  persistent_workers the next epoch (then sent the pipe's way) lost them too. Now such tensors are moved to
  torch's shared memory before the pickle, and sent as bytes in the pickle where that fails (one warning).
- Fixed later (data/pipe.py): `shared_memory=False` sent batches torch's usual way, which lost them the same way
  under a full /dev/shm (drops, then hangs); its tensors now take the same fallback.
- Fixed later (data/reading.py, data/open_files.py): a global shuffle kept one open descriptor per file for the
  epoch: over more files than the descriptor limit it raised `[Errno 24] Too many open files: <file>`.

Checked and found right: a spill file over the size limit falls back to groups with the same order; a block cache
on a full disk reads on uncached; ShardedWriter on a full disk at any point resumes to every record once; nothing
is left under a final name.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.data import cache_folder, pipe, slabs, transport
from tfr_torch.format import paths as paths_module
from tfr_torch.tools import shards as shards_module
from tfr_torch.tools.shards import ShardedWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_linux_shm = pytest.mark.skipif(not transport.shared_memory_available(), reason="no memfd_create or /proc here")


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Writes past `limit` bytes of any file fail with EFBIG (SIGXFSZ ignored) while the block runs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def _records(n: int, size: int = 1000) -> list[bytes]:
    rng = np.random.default_rng(n)
    return [i.to_bytes(4, "little") + rng.bytes(size) for i in range(n)]


def _run(code: str, *, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


def _full_disk_for(suffix: str, real=paths_module.atomic_output):
    """atomic_output whose writes of names ending in `suffix` fail as on a full disk (an OSError naming nothing)."""
    @contextlib.contextmanager
    def atomic_output(path):
        with real(path) as f:
            if str(path).endswith(suffix):
                raise OSError(errno.ENOSPC, "No space left on device")
            yield f

    return atomic_output


# ----- TFRecordWriter ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_a_write_past_the_file_size_limit_names_the_path_and_leaves_nothing(tmp_path, compression):
    """Fixed: the OSError named no file ("[Errno 27] File too large")."""
    path = str(tmp_path / "out.tfrecord")
    with file_size_limit(200_000), pytest.raises(OSError) as err:
        with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
            for record in _records(2000):
                writer.write(record)
    assert err.value.errno == errno.EFBIG and err.value.filename == path
    assert "nothing is left under its name" in str(err.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_going_on_after_a_refused_write_never_commits_a_corrupt_file(tmp_path, compression):
    """Fixed: a caller that caught the error and went on writing (room freed meanwhile) then closed got a file under
    its final name that was corrupt from the failed write on (CorruptRecordError when read)."""
    path = str(tmp_path / "out.tfrecord")
    writer = tfr_torch.TFRecordWriter(path, compression=compression)
    records = _records(2000)
    with file_size_limit(200_000):
        with pytest.raises(OSError, match="File too large") as first:
            for record in records:
                writer.write(record)
    assert first.value.filename == path
    for call in (lambda: writer.write(records[0]), writer.flush, writer.close, writer.close):
        with pytest.raises(OSError, match=r"a TFRecordWriter whose writing failed \(File too large\): the file was "
                                          "discarded; write it again") as err:
            call()
        assert err.value.filename == path
    assert os.listdir(tmp_path) == []


def test_a_refused_close_names_the_path(tmp_path):
    """Fixed: records still buffered when close() wrote them past the limit: the nameless OSError of the temporary
    file's close."""
    path = str(tmp_path / "out.tfrecord")
    writer = tfr_torch.TFRecordWriter(path)
    for record in _records(100):  # 100 KB: pending in the writer until close
        writer.write(record)
    with file_size_limit(50_000), pytest.raises(OSError) as err:
        writer.close()
    assert err.value.filename == path and err.value.errno == errno.EFBIG
    assert os.listdir(tmp_path) == []
    with pytest.raises(OSError, match="writing failed"):
        writer.close()


# ----- ShardedWriter, build_index, TFDS, CLI ------------------------------------------------------------------------

def _write_set(out, records, resume=False, **kwargs):
    with ShardedWriter(out, "ds", "train", shard_size="20KB", resume=resume, **kwargs) as writer:
        start = 0 if writer.resumed_position is None else writer.resumed_position + 1
        for i in range(start, len(records)):
            writer.write(records[i], position=i)
    return writer.paths


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_shard_past_the_size_limit_names_it_and_the_set_resumes(tmp_path, compression):
    """Fixed: the OSError named no file. Nothing is left under a final name; resume=True then writes the set."""
    records = _records(120)
    with file_size_limit(15_000), pytest.raises(OSError) as err:  # (a limit of each file: shards are 20 KB)
        _write_set(str(tmp_path), records, compression=compression)
    assert err.value.filename == str(tmp_path / "ds-train.tfrecord-00000.partial")
    assert not [n for n in os.listdir(tmp_path) if "-of-" in n or n.endswith("tfr_torch.json")]
    paths = _write_set(str(tmp_path), records, resume=True, compression=compression)
    assert [bytes(r) for r in tfr_torch.TFRecordDataset(paths)] == records


@pytest.mark.parametrize("suffix,what", [(".partial.idx", "the index of a shard"),
                                         ("progress.json", "the progress file of a ShardedWriter"),
                                         ("ds-train.tfr_torch.json", "the sidecar of a shard set")])
def test_a_full_disk_at_each_side_file_of_a_shard_set_names_it(tmp_path, monkeypatch, suffix, what):
    """Fixed: the index's, the progress file's and the sidecar's errors named no file. Nothing looks finished
    (no sidecar), and resume=True gives every record once."""
    records = _records(60)
    monkeypatch.setattr(shards_module, "atomic_output", _full_disk_for(suffix))
    with pytest.raises(OSError, match=f"No space left on device \\(writing {what}: nothing was left") as err:
        _write_set(str(tmp_path), records)
    assert err.value.filename.endswith(suffix) and err.value.errno == errno.ENOSPC
    assert not os.path.exists(tmp_path / "ds-train.tfr_torch.json")
    monkeypatch.undo()
    paths = _write_set(str(tmp_path), records, resume=True)
    assert [bytes(r) for r in tfr_torch.TFRecordDataset(paths)] == records


def test_a_full_disk_at_a_shards_seek_points_names_them(tmp_path, monkeypatch):
    """Fixed: the seek points' error named no file."""
    from tfr_torch.format import seek

    monkeypatch.setattr(seek, "atomic_output", _full_disk_for(".idx.seek"))
    with pytest.raises(OSError, match="writing the seek points of a shard") as err:
        _write_set(str(tmp_path), _records(30), compression="gzip")
    assert err.value.filename == str(tmp_path / "ds-train.tfrecord-00000.partial.idx.seek")
    assert os.listdir(tmp_path) == []  # the shard being finished is removed with its index


def test_build_index_on_a_full_disk_names_the_index_and_leaves_no_stale_seek_points(tmp_path, monkeypatch):
    """Fixed: the errors named no file, and where the new seek points could not be written those of an earlier run
    stayed beside the new index (describing the file as it was)."""
    from tfr_torch.format import index, seek

    path = str(tmp_path / "a.tfrecord.gz")
    with tfr_torch.TFRecordWriter(path, compression="gzip") as writer:
        for record in _records(50):
            writer.write(record)
    tfr_torch.build_index(path)
    assert os.path.exists(path + ".idx.seek")
    monkeypatch.setattr(index, "atomic_output", _full_disk_for(".idx"))
    with pytest.raises(OSError, match="writing an index: nothing was left") as err:
        tfr_torch.build_index(path)
    assert err.value.filename == path + ".idx"
    monkeypatch.undo()
    monkeypatch.setattr(seek, "atomic_output", _full_disk_for(".idx.seek"))
    with pytest.raises(OSError, match="writing the seek points of an index") as err:
        tfr_torch.build_index(path)
    assert err.value.filename == path + ".idx.seek"
    assert not os.path.exists(path + ".idx.seek")
    monkeypatch.undo()
    assert [bytes(r) for r in tfr_torch.TFRecordDataset(path, index="auto")] == _records(50)


def test_a_full_disk_at_tfds_metadata_names_it(tmp_path, monkeypatch):
    """Fixed: dataset_info.json's error named no file; without it the folder is no TFDS dataset yet."""
    from tfr_torch.tfds import write

    monkeypatch.setattr(write, "atomic_output", _full_disk_for("dataset_info.json"))
    with pytest.raises(OSError, match="writing TFDS dataset metadata") as err:
        _write_set(str(tmp_path), _records(30), tfds={}, features={"id": tfr_torch.FixedLenFeature([], torch.int64)})
    assert err.value.filename == f"{tmp_path}/dataset_info.json"
    assert "dataset_info.json" not in os.listdir(tmp_path)


def test_cli_reshard_past_the_size_limit_is_one_line_naming_the_shard(tmp_path):
    """Fixed: `tfr-torch reshard: [Errno 27] File too large`, naming no file. (A subprocess, for its file size
    limit: it imports torch, a few seconds.)"""
    source = str(tmp_path / "in.tfrecord")
    with tfr_torch.TFRecordWriter(source) as writer:
        for record in _records(200):
            writer.write(record)
    out = tmp_path / "out"
    done = _run(f"""
        import resource, signal, sys
        from tfr_torch.tools.cli import main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.RLIM_INFINITY))
        sys.exit(main(["reshard", {source!r}, "--out", {str(out)!r}, "--shard-size", "100KB", "--name", "t"]))
    """)
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith(f"tfr-torch reshard: {out}/t-train.tfrecord-00000.partial: File too "
                                                 "large (") and line.endswith("nothing is left under its name)"), line
    assert os.listdir(out) == []


# ----- CachedDataset folders ------------------------------------------------------------------------------------------

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64), "x": tfr_torch.FixedLenFeature([2000], torch.float32)}


@pytest.fixture(scope="module")
def floats(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("floats") / "f.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(64):
            writer.write_example({"id": i, "x": np.full(2000, i, np.float32)})
    tfr_torch.build_index(path)
    return path


def test_a_cache_part_past_the_size_limit_is_an_oserror_naming_it(tmp_path, floats):
    """Fixed: torch.save's `RuntimeError: [enforce fail at inline_container.cc] . unexpected pos ...`. Nothing is
    kept; with room again, the next epoch reads the source and keeps it, and the one after replays it."""
    folder = tmp_path / "cache"
    dataset = tfr_torch.CachedDataset(tfr_torch.TFRecordDataset(floats, SPEC, index="auto", batch_size=16),
                                      str(folder))
    with file_size_limit(100_000), pytest.raises(OSError) as err:
        list(dataset)
    assert err.value.filename == str(folder / "part-rank0of1-worker0of1.pt") and err.value.errno == errno.EFBIG
    assert sorted(os.listdir(folder)) == ["tfr_torch-cache.json"]
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        assert torch.cat([b["id"] for b in dataset]).tolist() == list(range(64))
    assert sorted(os.listdir(folder)) == ["check-rank0of1-worker0of1.json", "part-rank0of1-worker0of1.pt",
                                          "tfr_torch-cache.json"]


def test_a_cache_part_whose_check_cannot_be_written_is_not_left(tmp_path, floats, monkeypatch):
    """Fixed: the part stayed without its check (never replayed; warned about as damaged at the next epoch)."""
    folder = tmp_path / "cache"
    dataset = tfr_torch.CachedDataset(tfr_torch.TFRecordDataset(floats, SPEC, index="auto", batch_size=16),
                                      str(folder))
    monkeypatch.setattr(cache_folder, "atomic_output", _full_disk_for(".json"))
    with pytest.raises(OSError, match="writing the check of a part") as err:
        list(dataset)
    assert err.value.filename == str(folder / "check-rank0of1-worker0of1.json")
    assert sorted(os.listdir(folder)) == ["tfr_torch-cache.json"]


# ----- the block cache of remote files ------------------------------------------------------------------------------

_REMOTE_SCRIPT = """
import logging, os, resource, sys, tfr_torch
from tfr_torch.format.remote_options import RemoteOptions
logging.basicConfig(level=logging.WARNING, format="LOG %(message)s")
url = "memory://resources/a.tfrecord"
records = [bytes([i % 251]) * 500 for i in range(1500)]
with tfr_torch.TFRecordWriter(url) as writer:
    for r in records:
        writer.write(r)
tfr_torch.build_index(url)
resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
options = RemoteOptions(block_size=4096, readahead=2, cache_dir=sys.argv[1])
for epoch in range(2):
    got = [bytes(r) for r in tfr_torch.TFRecordDataset(url, index="auto", shuffle=True, seed=epoch, remote=options)]
    assert sorted(got) == sorted(records), epoch
print("fds", len(os.listdir("/proc/self/fd")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
@pytest.mark.parametrize("nofile", [64])
def test_the_block_cache_under_a_low_descriptor_limit_reads_everything(tmp_path, nofile):
    """Fixed: under `ulimit -n 64` a shuffled read through the cache raised `[Errno 24] Too many open files` (the
    cache kept 128 blocks open); now it keeps a few, and a block it cannot open is read from the store. (A
    subprocess, for its descriptor limit: it imports torch, a few seconds.)"""
    pytest.importorskip("fsspec")
    done = subprocess.run([sys.executable, "-c", _REMOTE_SCRIPT.format(nofile=nofile), str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) <= nofile // 2
    logged = [line for line in done.stderr.splitlines() if line.startswith("LOG")]
    assert len([line for line in logged if "cannot cache block" in line]) <= 1, logged


def test_a_block_cache_on_a_full_disk_reads_on_and_warns_once(tmp_path, monkeypatch, caplog):
    """Fixed: a warning per block the full disk refused, now one (reading on uncached was already right)."""
    pytest.importorskip("fsspec")
    from tfr_torch.format import blockcache
    from tfr_torch.format.remote_options import RemoteOptions

    url = f"memory://resources-full/{tmp_path.name}.tfrecord"
    records = _records(300, 200)
    with tfr_torch.TFRecordWriter(url) as writer:
        for record in records:
            writer.write(record)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(blockcache.BlockCache, "put", full)
    options = RemoteOptions(block_size=4096, readahead=2, cache_dir=str(tmp_path / "c"))
    with caplog.at_level(logging.WARNING, logger="tfr_torch.format.blockcache"):
        assert [bytes(r) for r in tfr_torch.read_records(url, remote=options)] == records
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "cannot cache block" in r.getMessage()]
    assert len(warned) == 1 and "No space left on device" in warned[0].getMessage()


# ----- the spill of a global shuffle --------------------------------------------------------------------------------

def test_a_spill_past_the_size_limit_falls_back_to_the_same_order(tmp_path):
    """Already right: the spill file's sizing fails with EFBIG, the share is read in groups, in the same order."""
    paths = []
    rng = np.random.default_rng(3)
    for k in range(2):
        path = str(tmp_path / f"g{k}.tfrecord.gz")
        with tfr_torch.TFRecordWriter(path, compression="gzip") as writer:
            for i in range(400):
                writer.write(rng.bytes(int(rng.choice([10, 300, 3000]))))
        tfr_torch.build_index(path, seek_span=1 << 16)
        paths.append(path)

    def read(spill_dir):
        return [bytes(r) for r in tfr_torch.TFRecordDataset(paths, index="auto", shuffle=True, seed=5,
                                                            max_group_bytes=8 << 10, spill_dir=spill_dir)]

    want = read(False)
    folder = tmp_path / "spill"
    folder.mkdir()
    with file_size_limit(100_000), pytest.warns(RuntimeWarning, match="could not make a spill file .*File too large"):
        got = read(str(folder))
    assert got == want and os.listdir(folder) == []


# ----- DataLoader workers without shared memory ---------------------------------------------------------------------

def _no_shared_memory(_worker: int) -> None:
    """In a DataLoader worker: memfd slabs fail as under a memory limit (posix_fallocate ENOSPC), and torch's
    shared memory as in a full /dev/shm."""
    def fallocate(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    def share(self, *args, **kwargs):
        raise RuntimeError("unable to allocate shared memory(shm) for file </torch_0_0_0>: No space left on "
                           "device (28)")

    os.posix_fallocate = fallocate
    torch.UntypedStorage._share_fd_cpu_ = share
    torch.UntypedStorage._share_filename_cpu_ = share


def _epochs(path, epochs=2, timeout=20, **options):
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=16, **options)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=_no_shared_memory, timeout=timeout,
                        persistent_workers=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [sorted(torch.cat([b["id"] for b in loader]).tolist()) for _ in range(epochs)]


@needs_linux_shm
def test_batches_arrive_when_neither_slabs_nor_dev_shm_can_be_had(floats):
    """Fixed: each batch's tensors failed to pickle in the worker's queue feeder thread, which printed the error and
    dropped the batch: the epoch ended with records missing; the next epoch (persistent workers) too."""
    assert _epochs(floats) == [list(range(64))] * 2


def test_batches_of_shared_memory_false_arrive_when_dev_shm_is_full(floats):
    """Fixed later (data/pipe.py): records were dropped, or the DataLoader waited for them (3 s here): tensors sent
    torch's way were moved to /dev/shm in the feeder thread, which dropped the batch where /dev/shm was full."""
    assert _epochs(floats, epochs=1, timeout=3, shared_memory=False) == [list(range(64))]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux")
def test_the_inline_fallback_sends_every_kind_of_tensor_as_bytes(monkeypatch):
    """Fixed: the path of the fix above, in this process: a batch without a slab whose storage cannot be shared
    arrives whole (non-contiguous, bfloat16, bool, empty, nested), with one warning."""
    from multiprocessing.reduction import ForkingPickler
    import pickle

    def share(self, *args, **kwargs):
        raise RuntimeError("unable to allocate shared memory(shm): No space left on device (28)")

    monkeypatch.setattr(slabs._pool(), "disabled", "test: no memfd")
    monkeypatch.setattr(torch.UntypedStorage, "_share_fd_cpu_", share)
    monkeypatch.setattr(torch.UntypedStorage, "_share_filename_cpu_", share)
    monkeypatch.setattr(pipe, "_SHM_FAILED", [None])
    want = {"f": torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2],
            "bf": torch.tensor([1.5], dtype=torch.bfloat16), "m": torch.tensor([True, False]),
            "e": torch.zeros((0, 3)), "n": {"deep": [torch.ones(2, 2)]}, "data": [b"a", b"bc"]}
    with pytest.warns(RuntimeWarning, match=r"torch's shared memory \(/dev/shm\) cannot hold"):
        got = pickle.loads(ForkingPickler.dumps(transport.Batch(want)))
    assert got.keys() == want.keys() and got["data"] == want["data"]
    for key in ("f", "bf", "m", "e"):
        assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key])
    assert torch.equal(got["n"]["deep"][0], torch.ones(2, 2))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux")
def test_a_pipe_batch_without_dev_shm_sends_its_tensors_as_bytes(monkeypatch):
    """Fixed: the same fallback for `shared_memory=False` (data/pipe.py's PipeBatch): dense tensors in dicts and
    lists arrive whole as bytes, with one warning; a sparse tensor still arrives as itself; with /dev/shm there, a
    tensor goes as torch sends it (moved to shared memory, not copied into the message)."""
    from multiprocessing.reduction import ForkingPickler
    import pickle

    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (4,))
    want = {"f": torch.arange(6.0).reshape(2, 3).t(), "l": [torch.ones(2), torch.tensor([True])],
            "s": sparse, "data": [b"a"]}
    moved = pipe.PipeBatch({"x": torch.zeros(1 << 16)})
    message = ForkingPickler.dumps(moved)
    assert len(message) < 1 << 16 and moved["x"].is_shared()  # a descriptor, not the 256 KB
    assert torch.equal(pickle.loads(message)["x"], moved["x"])

    def share(self, *args, **kwargs):
        raise RuntimeError("unable to allocate shared memory(shm): No space left on device (28)")

    monkeypatch.setattr(torch.UntypedStorage, "_share_fd_cpu_", share)
    monkeypatch.setattr(torch.UntypedStorage, "_share_filename_cpu_", share)
    monkeypatch.setattr(pipe, "_SHM_FAILED", [None])
    with pytest.warns(RuntimeWarning, match=r"torch's shared memory \(/dev/shm\) cannot hold"):
        got = pickle.loads(ForkingPickler.dumps(pipe.PipeBatch(want)))
    assert type(got) is dict and got.keys() == want.keys() and got["data"] == [b"a"]
    assert torch.equal(got["f"], want["f"]) and torch.equal(got["l"][0], torch.ones(2))
    assert got["l"][1].dtype == torch.bool and torch.equal(got["s"].to_dense(), sparse.to_dense())


def _can_unshare_and_mount() -> str | None:
    """None where this process may make a private mount namespace and mount a tmpfs in it, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    try:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                               capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    return None if probe.returncode == 0 else f"cannot mount a tmpfs in a private namespace: {probe.stderr.strip()}"


_SMALL_SHM = """
import errno, os, sys, torch, tfr_torch, warnings
from torch.utils.data import DataLoader
warnings.simplefilter("ignore")
spec = {"id": tfr_torch.FixedLenFeature([], torch.int64), "x": tfr_torch.FixedLenFeature([100_000], torch.float32)}
def init(_):
    def fallocate(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    os.posix_fallocate = fallocate
dataset = tfr_torch.TFRecordDataset(sys.argv[1], spec, index="auto", batch_size=16)
loader = DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=init, timeout=30, persistent_workers=True)
for epoch in range(2):
    print(sorted(torch.cat([b["id"] for b in loader]).tolist()) == list(range(48)))
"""


@needs_linux_shm
def test_a_small_dev_shm_and_no_memfd_delivers_every_batch(tmp_path):
    """Fixed: as test_batches_arrive_when_neither_slabs_nor_dev_shm_can_be_had, with a real 8 MB /dev/shm (as in a
    container) and batches of 6.4 MB: records were dropped silently. (A subprocess in its own mount namespace.)"""
    why = _can_unshare_and_mount()
    if why is not None:
        pytest.skip(why)
    path = str(tmp_path / "big.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(48):
            writer.write_example({"id": i, "x": np.full(100_000, i, np.float32)})
    tfr_torch.build_index(path)
    script = tmp_path / "shm.py"
    script.write_text(_SMALL_SHM)
    done = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=8m tmpfs /dev/shm && exec "$@"', "sh",
                           sys.executable, str(script), path], capture_output=True, text=True, timeout=90, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.stdout.split() == ["True", "True"], done.stderr[-3000:]


_FULL_DISK = """
import os, random, sys, tfr_torch, subprocess
from tfr_torch.tools.shards import ShardedWriter
folder = sys.argv[1]
records = [i.to_bytes(4, "little") + random.Random(i).randbytes(1000) for i in range(300)]  # (GZIP cannot shrink)
def write(resume):
    with ShardedWriter(folder, "ds", "train", shard_size="40KB", compression=sys.argv[2], resume=resume) as w:
        for i in range(0 if w.resumed_position is None else w.resumed_position + 1, len(records)):
            w.write(records[i], position=i)
    return w.paths
for kb in (48, 100, 180, 240, 300, 316):
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", folder], check=True)
    try:
        try:
            write(False)
            error = None
        except OSError as exc:
            error = exc
        if error is not None:
            assert error.filename and error.filename.startswith(folder), (kb, error)
            assert not [n for n in os.listdir(folder) if "-of-" in n or n.endswith(".tfr_torch.json")], kb
        subprocess.run(["mount", "-o", "remount,size=10m", folder], check=True)
        paths = write(True)
        assert [bytes(r) for r in tfr_torch.TFRecordDataset(paths)] == records, kb
    finally:
        subprocess.run(["umount", folder], check=True)
print("ok")
"""


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_shard_set_on_a_really_full_disk_names_the_file_and_resumes(tmp_path, compression):
    """Fixed: a ShardedWriter on a small tmpfs failed naming no file; now it names the shard, index, seek points or
    progress file, and (already right) with room again resume=True gives every record once. (A subprocess in its
    own mount namespace.)"""
    why = _can_unshare_and_mount()
    if why is not None:
        pytest.skip(why)
    folder = tmp_path / "disk"
    folder.mkdir()
    script = tmp_path / "full.py"
    script.write_text(_FULL_DISK)
    done = subprocess.run(["unshare", "-m", sys.executable, str(script), str(folder), compression],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.stdout.strip() == "ok", done.stderr[-3000:]


# ----- few descriptors ----------------------------------------------------------------------------------------------

_MANY_FILES = """
import os, resource, sys, glob, warnings, tfr_torch
warnings.simplefilter("ignore")
paths = sorted(glob.glob(os.path.join(sys.argv[1], "*.tfrecord")))
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
got = [bytes(r) for r in tfr_torch.TFRecordDataset(paths, index="auto", shuffle=True, seed=1)]
print(len(got))
"""


def test_a_global_shuffle_of_more_files_than_descriptors_reads_them_all(tmp_path):
    """Fixed: the global shuffle kept a descriptor open per file for the epoch and, past RLIMIT_NOFILE, raised EMFILE
    naming a file; it now keeps at most half the limit open (data/open_files.py). (A subprocess, for its descriptor
    limit: it imports torch, a few seconds.)"""
    for k in range(80):
        path = str(tmp_path / f"s{k:02d}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(5):
                writer.write(bytes([k, i]))
        tfr_torch.build_index(path)
    done = subprocess.run([sys.executable, "-c", _MANY_FILES, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.stdout.strip() == "400", done.stderr[-1000:]
