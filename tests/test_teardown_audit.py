"""Teardown audit: closing while other threads still read, and the shared state of the remote read path.

tests/test_threads_audit.py checks reads shared by threads; this file checks what happens at their edges, with
pauses injected at the racy point (threading.Event, monkeypatch) instead of stress loops:
- `RecordFile.close()` while another thread is inside `read` / `read_many` of a local file: the read completes
  with its own file's record (the descriptor is not closed under it, so it can never read another file opened
  meanwhile under the same descriptor number); a read that begins after `close` raises ValueError naming the
  file; the handle is closed once the last read under way is done (`IndexedTFRecordDataset.close` the same);
- data/receive.py: the sweep that forgets the slabs of DataLoader workers that have exited never unmaps a slab
  that another thread is copying out of;
- `RemoteFile.prefetch` / `release` from several threads: no prefetched range stays pinned after its release
  (memory bounded), and reads stay byte-exact;
- `BlockCache.fill`: after a fetch that fails, a reader that waited for it and a reader that arrives later do not
  both fetch the block; a failed fetch leaves no lock held.
Every thread is joined with a timeout: a stuck thread fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tfr_torch
from tfr_torch.format import blockcache as blockcache_module
from tfr_torch.format import record_file as record_file_module
from tfr_torch.format import remote as remote_module
from tfr_torch.format.blockcache import BlockCache
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.remote import RemoteFile, RemoteOptions

fsspec = pytest.importorskip("fsspec")

JOIN_S = 5.0  # a thread not done by then is stuck: the test fails (the suite never hangs)
PAUSE_S = 0.5  # how long a paused thread waits for an event that the fixed code never lets happen
needs_core = pytest.mark.skipif(not tfr_torch._native.available(), reason="the compiled core is not built")


# ----- helpers --------------------------------------------------------------------------------------------------


class _Thread:
    """A thread running `target()`; `result()` joins it (failing the test when stuck) and returns or raises what
    the target did."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = target()
            except BaseException as exc:  # handed to result()
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join(JOIN_S)
        assert not self._thread.is_alive(), f"thread stuck (deadlock?) after {JOIN_S} s"
        if self._error is not None:
            raise self._error
        return self._value


def _wait(event: threading.Event) -> None:
    assert event.wait(JOIN_S), "the other thread never got there"


def _write_pair(tmp_path, n: int = 8) -> tuple[str, str, list[bytes], list[bytes]]:
    """Two files with the same layout (same record sizes, so the same index) and different bytes: a read that
    went to the wrong one would pass every check."""
    a_records = [b"A%03d" % i * (10 + i) for i in range(n)]
    b_records = [b"B%03d" % i * (10 + i) for i in range(n)]
    paths = []
    for name, records in (("a.tfrecord", a_records), ("b.tfrecord", b_records)):
        path = str(tmp_path / name)
        with tfr_torch.TFRecordWriter(path) as w:
            for r in records:
                w.write(r)
        tfr_torch.build_index(path)
        paths.append(path)
    return paths[0], paths[1], a_records, b_records


def _index(path: str) -> np.ndarray:
    return np.asarray(tfr_torch.read_index(path + ".idx"), dtype=np.int64).reshape(-1, 2)


def _open_as(fd: int) -> str | None:
    """The file that descriptor `fd` of this process is open on, or None when it is not open."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return None


class _PausingOs:
    """record_file's `os`, whose first `pread` (in whichever thread) waits for `go` after saying `reached`."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()
        self._armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        if self._armed:
            self._armed = False
            self.reached.set()
            self.go.wait(JOIN_S)
        return os.pread(fd, n, offset)


# ----- RecordFile.close while other threads read -------------------------------------------------------------------


def test_a_read_racing_close_never_reads_another_file_under_the_reused_descriptor(tmp_path, monkeypatch):
    # Fixed: close() closed the descriptor under a read in flight; the next file opened got the same number and
    # the read returned ITS record (same layout, valid CRC: a silent wrong record), or EBADF.
    a, b, a_records, _ = _write_pair(tmp_path)
    index = _index(a)
    pausing = _PausingOs()
    monkeypatch.setattr(record_file_module, "os", pausing)
    f = RecordFile(a)
    reader = _Thread(lambda: f.read(int(index[3, 0]), int(index[3, 1])))
    _wait(pausing.reached)  # the reader is about to pread from the descriptor
    f.close()
    with open(b, "rb") as other:  # the lowest free descriptor: the one close() freed, were it freed
        pausing.go.set()
        assert reader.result() == a_records[3]
        other.read()
    with pytest.raises(ValueError, match=r"^cannot read .*a\.tfrecord: the RecordFile is closed$"):
        f.read(int(index[3, 0]), int(index[3, 1]))


def test_the_handle_is_closed_once_the_last_read_under_way_is_done(tmp_path, monkeypatch):
    # Fixed: close() closed the handle at once, under the read (EBADF, or another file's bytes).
    a, _, a_records, _ = _write_pair(tmp_path)
    index = _index(a)
    pausing = _PausingOs()
    monkeypatch.setattr(record_file_module, "os", pausing)
    f = RecordFile(a)
    fd = f._raw.fileno()
    reader = _Thread(lambda: f.read(int(index[5, 0]), int(index[5, 1])))
    _wait(pausing.reached)
    f.close()
    assert _open_as(fd) == a  # kept open while the read is under way
    with pytest.raises(ValueError, match=r"the RecordFile is closed$"):  # a read that begins now
        f.read(int(index[0, 0]), int(index[0, 1]))
    pausing.go.set()
    assert reader.result() == a_records[5]
    assert _open_as(fd) != a  # closed now
    f.close()  # closing again is harmless


def test_a_read_after_close_raises_instead_of_reading_the_next_file_opened(tmp_path):
    # Fixed: a read after close() pread the freed descriptor number: another file's bytes once it was reused.
    a, b, _, b_records = _write_pair(tmp_path)
    index = _index(a)
    f = RecordFile(a)
    f.close()
    with open(b, "rb"):
        with pytest.raises(ValueError, match=r"^cannot read .*a\.tfrecord: the RecordFile is closed$"):
            f.read(int(index[2, 0]), int(index[2, 1]))
        with pytest.raises(ValueError, match=r"the RecordFile is closed$"):
            f.read_many(index[:4, 0], index[:4, 1])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_parent_thread_reads_closes_its_copy_at_once(tmp_path, monkeypatch):
    """The read under way in the parent's thread never ends in the child: it must not keep the child's close()
    from closing the child's copy of the handle (nor the parent's read from completing)."""
    a, _, a_records, _ = _write_pair(tmp_path)
    index = _index(a)
    pausing = _PausingOs()
    monkeypatch.setattr(record_file_module, "os", pausing)
    f = RecordFile(a)
    fd = f._raw.fileno()
    reader = _Thread(lambda: f.read(int(index[1, 0]), int(index[1, 1])))
    _wait(pausing.reached)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert f.read(int(index[2, 0]), int(index[2, 1])) == a_records[2]
            f.close()
            code = 0 if _open_as(fd) is None else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    pausing.go.set()
    assert reader.result() == a_records[1]
    assert os.WEXITSTATUS(status) == 0
    f.close()
    assert _open_as(fd) != a


class _PausingCore:
    """The compiled core, whose first `read_framed` waits for `go` after saying `reached`."""

    def __init__(self, core: Any) -> None:
        self._core = core
        self.reached = threading.Event()
        self.go = threading.Event()
        self._armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)

    def read_framed(self, *args: Any) -> Any:
        if self._armed:
            self._armed = False
            self.reached.set()
            self.go.wait(JOIN_S)
        return self._core.read_framed(*args)


@needs_core
def test_read_many_racing_close_reads_its_own_file(tmp_path, monkeypatch):
    # Fixed: as for read, the compiled core's preads went to whatever file got the closed descriptor's number.
    a, b, a_records, _ = _write_pair(tmp_path)
    index = _index(a)
    pausing = _PausingCore(tfr_torch._native.core)
    monkeypatch.setattr(tfr_torch._native, "core", pausing)
    f = RecordFile(a)
    assert f.groups
    reader = _Thread(lambda: f.read_many(index[:, 0], index[:, 1]))
    _wait(pausing.reached)
    f.close()
    with open(b, "rb"):
        pausing.go.set()
        assert reader.result() == a_records


def test_indexed_dataset_closed_while_a_thread_reads_an_item(tmp_path, monkeypatch):
    # Fixed: (in RecordFile) the item came from file b, opened meanwhile under the closed handle's number.
    a, b, a_records, _ = _write_pair(tmp_path)
    dataset = tfr_torch.IndexedTFRecordDataset(a)
    before = dataset[0]  # opens the handle
    pausing = _PausingOs()
    monkeypatch.setattr(record_file_module, "os", pausing)
    reader = _Thread(lambda: dataset[6])
    _wait(pausing.reached)
    dataset.close()
    with open(b, "rb"):
        pausing.go.set()
        got = reader.result()
    fresh = tfr_torch.IndexedTFRecordDataset(a)
    assert got == fresh[6] and before == fresh[0]  # the item of file a, not of file b
    assert got != tfr_torch.IndexedTFRecordDataset(b)[6]


# ----- receive.py: the sweep of exited workers' slabs ------------------------------------------------------------


def _slab(payload: bytes) -> tuple[int, int]:
    """A memfd holding a slab header and `payload` after it (as a worker's slab): (descriptor, size)."""
    from tfr_torch.data.slabs import _HEADER

    fd = os.memfd_create("teardown-audit")
    size = _HEADER + len(payload)
    os.ftruncate(fd, size)
    os.pwrite(fd, payload, _HEADER)
    return fd, size


@pytest.mark.skipif(not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"), reason="no memfd / /proc")
def test_the_sweep_of_exited_workers_never_unmaps_a_slab_being_copied(monkeypatch):
    # Fixed: a thread receiving another DataLoader's batch swept (closed) the mappings of exited workers under
    # the lock, while this thread was still copying out of one it had got: ValueError "mmap closed or invalid".
    # (Reachable when a worker is gone while its last batch is still being unpickled, e.g. a killed worker.)
    from tfr_torch.data import receive
    from tfr_torch.data.slabs import _HEADER

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(gone.stdout)  # a process that has exited: a worker that is gone
    payload = b"".join(b"%05d" % i for i in range(200))
    fd, size = _slab(payload)
    other_fd, other_size = _slab(b"x" * 64)
    serial, other_serial = (1 << 40) + 1, (1 << 40) + 2  # this pid's pool: nothing of this process is swept
    try:
        mm = receive._mapping((os.getpid(), fd, serial, size), [])  # mapped while the "worker" was alive
        with receive._MAPS_LOCK:
            del receive._MAPS[(os.getpid(), serial)]
            receive._MAPS[(dead_pid, serial)] = mm
        del mm
        reached, go = threading.Event(), threading.Event()
        real_read = receive._read

        def pausing_read(mapping: Any, entry: Any) -> Any:
            reached.set()
            go.wait(JOIN_S)
            return real_read(mapping, entry)

        monkeypatch.setattr(receive, "_read", pausing_read)
        lengths = [5] * 200
        values: dict[Any, Any] = {}
        receiver = _Thread(lambda: receive._received((dead_pid, fd, serial, size), [("b", "k", _HEADER, 1000, lengths)],
                                                     [], (), values))
        _wait(reached)  # the receiver has its mapping, not yet copied out of it
        receive._mapping((os.getpid(), other_fd, other_serial, other_size), [])  # another loader's new slab: a sweep
        assert (dead_pid, serial) not in receive._MAPS  # the gone worker's slab is forgotten
        go.set()
        receiver.result()
        assert values["k"] == [payload[i : i + 5] for i in range(0, 1000, 5)]
    finally:
        with receive._MAPS_LOCK:
            for key in [(dead_pid, serial), (os.getpid(), serial), (os.getpid(), other_serial)]:
                receive._MAPS.pop(key, None)
        os.close(fd)
        os.close(other_fd)


# ----- RemoteFile.prefetch / release from several threads --------------------------------------------------------


def _memory_file(data: bytes) -> str:
    url = f"memory://teardown-{uuid.uuid4().hex[:10]}/f.bin"
    with fsspec.open(url, "wb") as out:
        out.write(data)
    return url


def test_two_releases_at_once_leave_no_range_pinned(monkeypatch):
    # Fixed: release() rebuilt the pinned list from a copy it read before another thread's release replaced it,
    # so that thread's range came back, pinned (its bytes held) for the life of the file; prefetch's two inserts
    # could likewise put a range into a list another release had just replaced (starts and ranges out of step).
    data = bytes(range(256)) * 64
    f = RemoteFile(_memory_file(data), RemoteOptions(), readahead=False)
    token_a = f.prefetch([(0, 1000)])
    token_b = f.prefetch([(8000, 9000)])
    entry_b = token_b[0]
    reached, b_done = threading.Event(), threading.Event()
    me: list[threading.Thread] = []

    def pausing_id(obj: Any) -> int:
        if obj is entry_b and threading.current_thread() in me:  # thread A, inside its filter, past entry b
            reached.set()
            b_done.wait(PAUSE_S)  # the fixed code makes B wait for A: then this only waits PAUSE_S
        return id(obj)

    monkeypatch.setattr(remote_module, "id", pausing_id, raising=False)

    def release_a() -> None:
        me.append(threading.current_thread())
        f.release(token_a)

    a = _Thread(release_a)
    _wait(reached)
    b = _Thread(lambda: (f.release(token_b), b_done.set()))
    b.result()
    a.result()
    before = f.requests
    f.seek(8000)
    assert f.read(1000) == data[8000:9000]
    assert f.requests == before + 1  # fetched anew: range b is no longer pinned
    f.seek(0)
    assert f.read(1000) == data[:1000] and f.requests == before + 2
    f.close()


def test_prefetch_read_release_from_threads_is_exact_and_unpins_everything():
    data = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()
    f = RemoteFile(_memory_file(data), RemoteOptions(block_size=1 << 12, merge_gap=64), readahead=False)
    errors: list[str] = []

    def work(k: int) -> None:
        rng = np.random.default_rng(k + 1)
        for _ in range(40):
            starts = rng.integers(0, len(data) - 600, 4).tolist()
            ranges = [(s, s + int(rng.integers(1, 600))) for s in starts]
            token = f.prefetch(ranges)
            for s, e in ranges:
                got = bytes(f._read_at(s, e - s))  # the read path a RecordFile takes (no shared position)
                if got != data[s : s + len(got)] or not got:
                    errors.append(f"thread {k}: bytes [{s}, {e}) wrong")
            f.release(token)

    threads = [_Thread(lambda k=k: work(k)) for k in range(6)]
    for t in threads:
        t.result()
    assert not errors, errors[:3]
    before = f.requests
    f.seek(100)
    assert f.read(10) == data[100:110] and f.requests == before + 1  # nothing left pinned
    f.close()


# ----- BlockCache.fill after a failed fetch ----------------------------------------------------------------------


def test_after_a_failed_fetch_a_waiter_and_a_newcomer_do_not_both_fetch(tmp_path, monkeypatch):
    # Fixed: the failed fetcher removed the lock file and let go; a reader waiting on that (removed) file got its
    # lock while a reader arriving later made a new lock file and locked that one: both fetched the block.
    cache = BlockCache(str(tmp_path / "cache"), 1 << 20)
    key, block = "ab" + "0" * 62, b"z" * 100
    fetches: list[str] = []
    a_fetching, a_fail, b_flocking, c_fetched = (threading.Event() for _ in range(4))
    real_flock = blockcache_module.fcntl.flock
    who: dict[threading.Thread, str] = {}

    def flock(fd: int, op: int) -> None:
        if who.get(threading.current_thread()) == "b":
            b_flocking.set()
        real_flock(fd, op)

    monkeypatch.setattr(blockcache_module.fcntl, "flock", flock)

    def fetch_a() -> bytes:
        fetches.append("a")
        a_fetching.set()
        _wait(a_fail)
        raise OSError("the store failed")

    def fetch_b() -> bytes:
        fetches.append("b")
        c_fetched.wait(PAUSE_S)  # the fixed code keeps C out until B is done: then this only waits PAUSE_S
        return block

    def fetch_c() -> bytes:
        fetches.append("c")
        c_fetched.set()
        return block

    def named(name: str, fetch: Callable[[], bytes]) -> Callable[[], Any]:
        def run() -> Any:
            who[threading.current_thread()] = name
            return cache.fill(key, len(block), fetch)
        return run

    a = _Thread(named("a", fetch_a))
    _wait(a_fetching)  # A holds the block's lock, fetching
    b = _Thread(named("b", fetch_b))
    _wait(b_flocking)  # B has the lock file open and waits for the lock
    a_fail.set()
    with pytest.raises(OSError, match="the store failed"):
        a.result()
    c = _Thread(named("c", fetch_c))  # arrives once A has let go
    got = [b.result(), c.result()]  # one of the two fetches (which one is the scheduler's); the other finds its block
    assert sorted(map(repr, got)) == sorted([repr(block), repr(None)]), got
    assert fetches in (["a", "b"], ["a", "c"])
    assert cache.read(key, len(block)) == block
    assert not blockcache_module._HELD_FDS  # no lock left held


def test_a_failed_fetch_leaves_no_lock_and_the_next_fill_fetches(tmp_path):
    cache = BlockCache(str(tmp_path / "cache"), 1 << 20)
    key, block = "cd" + "1" * 62, b"q" * 50

    def failing() -> bytes:
        raise ConnectionError("reset")

    with pytest.raises(ConnectionError, match="reset"):
        cache.fill(key, len(block), failing)
    assert not blockcache_module._HELD_FDS
    assert _Thread(lambda: cache.fill(key, len(block), lambda: block)).result() == block
    assert cache.fill(key, len(block), failing) is None  # held now: no fetch
    assert cache.read(key, len(block)) == block
