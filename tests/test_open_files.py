"""The files a reader by offset keeps open (tfr_torch.data.open_files.OpenFiles): at most a budget of them, the
least recently used closed first, pinned ones never; an open that fails for want of descriptors (EMFILE) closes
half of them and tries once more. And the global shuffle through it: with room for fewer files than it reads, the
same records in the same order as with all open, on both backends, for uncompressed and GZIP files (seek points),
and no file left open at the end. (Remote files, whose handles are pinned while reads are announced to them:
tests/test_remote.py; more files than RLIMIT_NOFILE in a subprocess: tests/test_resources_audit.py.)"""

from __future__ import annotations

import errno
import os
import resource

import pytest

import tfr_torch
from tfr_torch.data import open_files
from tfr_torch.data.open_files import OpenFiles, open_budget


class Handle:
    def __init__(self, f: int, log: list) -> None:
        self.f, self.log, self.closed = f, log, False

    def close(self) -> None:
        assert not self.closed, "closed twice"
        self.closed = True
        self.log.append(("close", self.f))


def files_of(budget, fail=None):
    log: list = []

    def opener(f):
        if fail is not None:
            fail(f)
        log.append(("open", f))
        return Handle(f, log)

    return OpenFiles(opener, budget=budget), log


def test_the_least_recently_used_file_is_closed_first():
    files, log = files_of(2)
    a = files.get(0)
    files.get(1)
    assert files.get(0) is a  # kept open: no second open
    files.get(2)  # 1 is the least recently used
    assert log == [("open", 0), ("open", 1), ("close", 1), ("open", 2)]
    assert 0 in files and 2 in files and 1 not in files and len(files) == 2
    files.get(1)  # opened again; now 0 goes
    assert log[-2:] == [("close", 0), ("open", 1)] and files.opened == 4


def test_a_pinned_file_stays_open_until_as_many_unpins():
    files, log = files_of(1)
    files.get(0)
    assert files.pin(0) is files.pin(0) is files.get(0)
    files.get(1)  # 0 is pinned: the budget is passed rather than close it
    assert 0 in files and 1 in files and ("close", 0) not in log
    files.unpin(0)
    files.get(2)  # 0 still pinned once: 1 goes
    assert ("close", 1) in log and 0 in files
    files.unpin(0)
    files.get(3)
    assert ("close", 0) in log and ("close", 2) in log and len(files) == 1


def test_out_of_descriptors_closes_half_and_tries_again():
    budget_of_the_process = 4

    def fail(f):
        if sum(1 for h in held.values() if not h.closed) >= budget_of_the_process:
            raise OSError(errno.EMFILE, "Too many open files", f"file{f}")

    files, log = files_of(100, fail)
    held = files._open  # what is open now
    for f in range(4):
        files.get(f)
    files.get(4)  # EMFILE: closes 2 (the oldest), then opens
    assert [e for e in log if e[0] == "close"] == [("close", 0), ("close", 1)]
    assert sorted(held) == [2, 3, 4]


def test_out_of_descriptors_with_nothing_to_close_raises_the_error():
    def fail(f):
        raise OSError(errno.EMFILE, "Too many open files", f"file{f}")

    files, _ = files_of(10, fail)
    with pytest.raises(OSError, match="Too many open files") as caught:
        files.get(0)
    assert caught.value.filename == "file0"


def test_other_open_errors_are_not_retried():
    calls = []

    def fail(f):
        calls.append(f)
        if f == 1:
            raise FileNotFoundError(errno.ENOENT, "No such file", "file1")

    files, log = files_of(10, fail)
    files.get(0)
    with pytest.raises(FileNotFoundError):
        files.get(1)
    assert calls == [0, 1] and 0 in files and ("close", 0) not in log


def test_close_closes_every_file_pinned_or_not():
    files, log = files_of(3)
    for f in range(3):
        files.get(f)
    files.pin(1)
    files.close()
    assert sorted(e for e in log if e[0] == "close") == [("close", 0), ("close", 1), ("close", 2)] and not len(files)


def test_the_budget_is_half_the_descriptor_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    assert open_budget() == 512
    monkeypatch.setattr(resource, "getrlimit", lambda which: (10, 4096))
    assert open_budget() == 8  # at least 8
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert open_budget() >= 1 << 20


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_shuffle_over_more_files_than_it_keeps_open_is_the_same_shuffle(tmp_path, monkeypatch, backend,
                                                                          compression):
    if compression == "gzip" and backend != "native":
        pytest.skip("a global shuffle of GZIP files reads through seek points on the native backend")
    paths = []
    for k in range(12):
        path = str(tmp_path / (f"s{k:02d}.tfrecord" + (".gz" if compression else "")))
        with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
            for i in range(25):
                writer.write(b"%d-%d-" % (k, i) + b"x" * (i * 53 % 700))
        tfr_torch.build_index(path)
        paths.append(path)

    def read():
        dataset = tfr_torch.TFRecordDataset(paths, index="auto", shuffle=True, seed=7, spill_dir=False)
        return [bytes(r) for r in dataset]

    opened = []
    real = OpenFiles._get  # every open goes through it (get and pin)

    def counting(self, f):
        fresh = f not in self
        handle = real(self, f)
        if fresh:
            opened.append(f)
        assert len(self) <= self.budget
        return handle

    monkeypatch.setattr(OpenFiles, "_get", counting)
    everything = read()
    assert sorted(opened) == list(range(12))
    opened.clear()
    monkeypatch.setattr(open_files, "open_budget", lambda: 3)
    before = _open_descriptors()
    assert read() == everything
    assert _open_descriptors() == before  # nothing left open
    assert len(opened) > 12  # files were closed and opened again
    assert sorted(everything) == sorted(b"%d-%d-" % (k, i) + b"x" * (i * 53 % 700)
                                        for k in range(12) for i in range(25))


def _many_files(tmp_path, count=8, records=6):
    paths = []
    for k in range(count):
        path = str(tmp_path / f"m{k:02d}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(records):
                writer.write(b"%d-%d" % (k, i))
        tfr_torch.build_index(path)
        paths.append(path)
    return paths


def test_random_access_over_more_files_than_it_keeps_open_from_many_threads(tmp_path, monkeypatch, backend):
    """IndexedTFRecordDataset keeps at most the budget open too: 4 threads reading at random through a budget of 2
    (files closed and opened again under the others' reads) each get every record right, and never a "closed"
    error from a handle another thread's open closed under it (a thread's read pins its handle)."""
    import random
    import threading

    monkeypatch.setattr(open_files, "open_budget", lambda: 2)
    paths = _many_files(tmp_path)
    ds = tfr_torch.IndexedTFRecordDataset(paths)
    want = [b"%d-%d" % (k, i) for k in range(8) for i in range(6)]
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(300):
                i = rng.randrange(len(want))
                assert bytes(ds[i]) == want[i]
                batch = [rng.randrange(len(want)) for _ in range(5)]
                assert [bytes(r) for r in ds.__getitems__(batch)] == [want[j] for j in batch]
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    assert len(ds._files) <= 2 + 4  # the budget, passed only by handles pinned by reads under way
    assert ds._files.opened > 8
    ds.close()
    assert len(ds._files) == 0


_MANY_INDEXED = """
import os, resource, sys, glob, torch, tfr_torch
paths = sorted(glob.glob(os.path.join(sys.argv[1], "*.tfrecord")))
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
ds = tfr_torch.IndexedTFRecordDataset(paths)
loader = torch.utils.data.DataLoader(ds, batch_size=7, shuffle=True, num_workers=2, collate_fn=list,
                                     generator=torch.Generator().manual_seed(0))
got = sorted(bytes(r) for batch in loader for r in batch)
want = sorted(b"%d-%d" % (k, i) for k in range(80) for i in range(3))
print("ok" if got == want else f"{len(got)} records, {len(set(got))} distinct")
"""


def test_random_access_over_more_files_than_descriptors_in_dataloader_workers(tmp_path):
    """80 files under `ulimit -n 64`, read at random by 2 DataLoader workers: every record once (it raised "Too
    many open files" in a worker). (A subprocess, for its descriptor limit: a few seconds.)"""
    import subprocess
    import sys

    _many_files(tmp_path, count=80, records=3)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", _MANY_INDEXED, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_readers_with_files_open_share_the_budget(monkeypatch):
    """The budget is the process's: three readers with files open keep a third each (a mixture of large datasets
    in one worker), a reader shrinking to its share as it opens its next file; one alone has it all again."""
    import weakref

    monkeypatch.setattr(open_files, "_READERS", weakref.WeakSet())  # this test's readers only
    a, log_a = files_of(24)
    for f in range(24):
        a.get(f)
    assert len(a) == 24 and a.share() == 24
    b, _ = files_of(24)
    c, _ = files_of(24)
    for f in range(8):
        b.get(f)
        c.get(f)
    assert a.share() == b.share() == c.share() == 8 and len(b) == len(c) == 8
    a.get(100)  # its next open: down to its share
    assert len(a) == 8 and 100 in a and [e for e in log_a if e[0] == "close"][:3] == [("close", 0), ("close", 1),
                                                                                       ("close", 2)]
    b.close()
    c.close()
    assert a.share() == 24  # readers with nothing open take no share
    small, _ = files_of(3)
    assert small.share() == 3  # at least min(8, budget) each
