"""Leak audit: a job that iterates for days must not accumulate descriptors, threads, mappings, temporary files,
shared memory, child processes or memory.

Each test runs a scenario once (warm-up: imports, per-process pools, allocator arenas), takes a snapshot, runs it
several more times, collects garbage and compares: open descriptors (by target), tfr_torch's threads (and the
per-process request pool staying at its size), mappings (/proc/self/maps), child processes, `/dev/shm` entries of
this process and its DataLoader workers, files left in the folders the library writes to, and, over 30 DataLoader
epochs, RSS within a generous bound. Scenarios: `TFRecordDataset` (plain, GZIP streamed, GZIP with seek points in a
global shuffle, the shuffle spilled to a temporary file, batches with features, a shuffle buffer) stopped by
`break`, by an exception of the consumer, by a transform that raises, by a corrupt record under
`on_error="raise"`, or dropped mid-epoch, under both backends; `read_records` closed early; `RecordFile` over
fsspec's `memory://` with and without a block cache; `IndexedTFRecordDataset` (items, batches, close, pickling);
`MixedDataset`, `CachedDataset`, `tfr_torch.nodes`; `TFRecordWriter` / `ShardedWriter` (local and `memory://`)
aborted by an exception inside `with`; DataLoader workers (fork, persistent_workers False and True; spawn, the
dataset pickled) stopped early, failing in a worker, and over 30 epochs.

Found:
- Fixed (tfr_torch/data/dataset.py): `TFRecordDataset.__iter__` read `caller.f_locals` of the frame that called
  `iter()`. On CPython before 3.13 that stores a snapshot dict of the caller's locals on its frame, which kept every
  local the caller had at that moment alive after the caller `del`ed it (the dataset, with its 4 shared-memory
  descriptors, the previous epoch's last batch, ...), until the caller's frame returned. Only the locals of a
  fetcher's `__init__` (where a DataLoader calls iter()) are read now.
- Fixed (tfr_torch/data/items.py): `TFRecordDataset._items` set the thread-local `_APPLYING.dataset` (and `_batches`
  `_APPLYING.names`, which holds the batch's blocks of records) before it called `transform`, and cleared them only
  after the transform returned: a transform that raised left them set, so the dataset and the failed batch's
  records stayed alive after the caller dropped everything, until this thread ran another dataset's transform.
- `spill.spilled` (tfr_torch/data/spill.py): where the spill file was made but sizing it (`os.ftruncate`) failed,
  the file object was not closed: its descriptor lived on with the generator's frame (the traceback of the
  `SpillFailed` the caller catches) and was closed by the garbage collector with a ResourceWarning. Fixed: closed
  before `SpillFailed` is raised.

Checked and found correct (no growth after warm-up): the scenarios above. By design and bounded, not growth: the
main process keeps its mappings (and, since CPython's mmap dups the descriptor, one descriptor each) of the slabs of
DataLoader workers that have exited until a later batch makes it sweep them (data/receive.py), at most the 8 slabs
per worker of the last DataLoader; the request thread pool (tfr_torch-remote) lives as long as its process.
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
import time
import uuid
import weakref
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.data import spill as spill_module
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.remote import RemoteOptions

fsspec = pytest.importorskip("fsspec")

needs_core = pytest.mark.skipif(not tfr_torch._native.available(), reason="the compiled core is not built")
linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self")
pytestmark = [linux_only, pytest.mark.filterwarnings("ignore::tfr_torch.SkippedRecordWarning")]

N_FILES, N_RECORDS = 3, 600
FEATURES = {"id": tfr_torch.FixedLenFeature([], torch.int64), "x": tfr_torch.FixedLenFeature([8], torch.float32)}


# ----- what is held -----------------------------------------------------------------------------------------------


def _fds() -> list[str]:
    """What each open descriptor of this process points at (sorted), less the one listdir holds."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # listdir's own descriptor, closed since
            pass
    return sorted(out)


def _threads() -> list[str]:
    """Every thread but the main one and the request pools' (one per process and max_in_flight, each adding threads
    on demand up to its size: bounded, checked by _pools): tfr_torch's own, torch's queue threads, a leaked
    executor's."""
    return sorted(t.name for t in threading.enumerate()
                  if t is not threading.main_thread() and not t.name.startswith("tfr_torch-remote"))


def _pools() -> dict[Any, int]:
    """This process's request pools (remote_state: one per max_in_flight) and the threads each has started."""
    from tfr_torch.format import remote_state

    with remote_state._POOLS_LOCK:
        return {key: len(pool._threads) for key, pool in remote_state._POOLS.items() if key[0] == os.getpid()}


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _children() -> list[int]:
    me = str(os.getpid())
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            out.append(int(pid))
    return sorted(out)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _shm(pids: set[int]) -> list[str]:
    """/dev/shm entries made by these processes (torch names its segments torch_<pid>_...)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return []
    return sorted(n for n in names if any(n.startswith(f"torch_{pid}_") for pid in pids))


class _Snapshot:
    def __init__(self) -> None:
        gc.collect()
        self.fds, self.threads, self.maps, self.children = _fds(), _threads(), _maps(), _children()
        self.pools = _pools()


def _wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Threads and processes end a moment after they are told to: poll (bounded), then let the assert say what."""
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
        gc.collect()


def _grown(now: list[Any], before: list[Any]) -> list[Any]:
    """The entries of `now` beyond those of `before`, counted with repeats (two threads of one name are two)."""
    return sorted((Counter(now) - Counter(before)).elements())


def _assert_nothing_grew(before: _Snapshot, *, maps_slack: int = 4, fd_filter: Callable[[str], bool] | None = None
                         ) -> None:
    # what is here now and was not before: something an earlier test left (a multiprocessing queue's feeder
    # thread, a descriptor) may end meanwhile, which is no growth
    _wait_for(lambda: not _grown(_threads(), before.threads) and not _grown(_children(), before.children))
    gc.collect()
    keep = fd_filter or (lambda _: True)
    assert not _grown([t for t in _fds() if keep(t)], [t for t in before.fds if keep(t)]), "descriptors grew"
    assert not _grown(_threads(), before.threads), "threads grew"
    assert not _grown(_children(), before.children), "child processes outlived their work"
    # a mapping per repetition would show as many; a few come and go with the allocator
    assert _maps() <= before.maps + maps_slack, f"mappings grew: {before.maps} -> {_maps()}"
    # no new pool after the warm-up, each within its size (earlier tests may have made pools of other sizes)
    pools = _pools()
    assert pools.keys() <= before.pools.keys() and all(n <= key[1] for key, n in pools.items()), \
        f"the request pools grew past their sizes: {before.pools} -> {pools}"


def _repeat(scenario: Callable[[], Any], times: int = 6, **kwargs: Any) -> None:
    scenario()  # warm-up
    before = _Snapshot()
    for _ in range(times):
        scenario()
    _assert_nothing_grew(before, **kwargs)


# ----- data ---------------------------------------------------------------------------------------------------------


def _write(path: str, first_id: int, compression: str | None = None, n: int = N_RECORDS) -> None:
    rng = np.random.default_rng(first_id)
    with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
        for k in range(n):
            writer.write_example({"id": first_id + k, "x": rng.random(8).astype(np.float32),
                                  "pad": rng.bytes(int(rng.integers(50, 400)))})


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("leaks")
    out: dict[str, list[str]] = {"plain": [], "gzip": [], "seek": [], "corrupt": []}
    for i in range(N_FILES):
        plain = str(folder / f"plain-{i}.tfrecord")
        _write(plain, i * 10_000)
        tfr_torch.build_index(plain)
        out["plain"].append(plain)
        gz = str(folder / f"stream-{i}.tfrecord.gz")
        _write(gz, i * 10_000, "gzip")
        out["gzip"].append(gz)
        if tfr_torch._native.available():
            seek = str(folder / f"seek-{i}.tfrecord.gz")
            _write(seek, i * 10_000, "gzip", n=1500)
            tfr_torch.build_index(seek, seek_span=1 << 16)
            out["seek"].append(seek)
    bad = str(folder / "bad.tfrecord")
    _write(bad, 0)
    with open(bad, "r+b") as f:  # a data byte of a record in the middle: its data CRC fails
        f.seek(os.path.getsize(bad) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    out["corrupt"] = [bad]
    return out


def _memory_copy(path: str) -> str:
    fs = fsspec.filesystem("memory")
    folder = f"/leaks-{uuid.uuid4().hex[:10]}"
    name = os.path.basename(path)
    for suffix in ("", ".idx", ".idx.seek"):
        if os.path.exists(path + suffix):
            with open(path + suffix, "rb") as src:
                fs.pipe(f"{folder}/{name}{suffix}", src.read())
    return f"memory://{folder}/{name}"


def _consume(make: Callable[[], Any], how: str, k: int = 40) -> None:
    """Iterate what `make()` gives and stop after k items as `how` says; nothing of it outlives this call."""
    obj = make()
    if how == "end":
        for _ in obj:
            pass
    elif how == "break":
        for i, _ in enumerate(obj):
            if i == k:
                break
    elif how == "raise":
        with pytest.raises(KeyError):
            for i, _ in enumerate(obj):
                if i == k:
                    raise KeyError("stop")
    elif how == "drop":
        it = iter(obj)
        for _ in range(k):
            next(it)
        del it
    else:
        raise AssertionError(how)


# ----- datasets in the main process ---------------------------------------------------------------------------------


_CASES: dict[str, Callable[[dict[str, list[str]], Any], dict[str, Any]]] = {
    "plain": lambda d, tmp: {"paths": d["plain"]},
    "gzip-stream": lambda d, tmp: {"paths": d["gzip"], "shuffle": True, "shuffle_buffer": 100},
    "batches": lambda d, tmp: {"paths": d["plain"], "index": "auto", "batch_size": 16, "features": FEATURES},
    "global-shuffle": lambda d, tmp: {"paths": d["seek"], "index": "auto", "shuffle": True, "spill_dir": False},
    "spilled": lambda d, tmp: {"paths": d["seek"], "index": "auto", "shuffle": True, "max_group_bytes": 1 << 16,
                               "spill_dir": str(tmp)},
}


@pytest.mark.parametrize("how", ["end", "break", "raise", "drop"])
@pytest.mark.parametrize("case", list(_CASES))
def test_dataset_iteration_stopped_any_way_leaks_nothing(data, tmp_path, backend, case, how):
    kwargs = _CASES[case](data, tmp_path)
    if not kwargs["paths"]:
        pytest.skip("needs the compiled core (seek points)")
    paths = kwargs.pop("paths")
    epoch = [0]

    def scenario() -> None:
        def make() -> Any:
            ds = tfr_torch.TFRecordDataset(paths, seed=epoch[0], **kwargs)
            epoch[0] += 1
            return ds

        _consume(make, how, k=5 if "batch_size" in kwargs else 300)

    _repeat(scenario, times=4)
    assert os.listdir(tmp_path) == [], "a spill file was left behind"


def test_the_spilled_case_does_spill_and_closes_its_file(data, tmp_path):
    """The 'spilled' case above really goes through a spill file (an unnamed one in spill_dir), and `break` closes
    it at once."""
    if not data["seek"]:
        pytest.skip("needs the compiled core (seek points)")
    folder = str(tmp_path)
    ds = tfr_torch.TFRecordDataset(data["seek"], index="auto", shuffle=True, max_group_bytes=1 << 16, spill_dir=folder)
    it = iter(ds)
    next(it)
    spill_fds = [t for t in _fds() if t.startswith(folder)]
    assert len(spill_fds) == 1 and "(deleted)" in spill_fds[0], spill_fds
    it.close()
    del it, ds
    gc.collect()
    assert [t for t in _fds() if t.startswith(folder)] == []
    assert os.listdir(folder) == []


def test_fixed_spill_file_closed_when_it_cannot_be_sized(data, tmp_path, monkeypatch):
    """Fixed: where `os.ftruncate` of a new spill file failed, `spilled` raised SpillFailed without closing the
    file: its descriptor lived as long as the traceback (here: held on purpose) and the garbage collector closed it
    later with a ResourceWarning."""
    if not data["seek"]:
        pytest.skip("needs the compiled core (seek points)")
    folder = str(tmp_path)

    def refuse(fd: int, size: int) -> None:
        raise OSError(27, "File too large")

    monkeypatch.setattr(spill_module.os, "ftruncate", refuse)
    gen = spill_module.spilled(folder, data["seek"], "gzip", True, np.zeros(2, np.int64),
                               np.array([[0, 100], [100, 100]], np.int64), [(0, 1), (1, 2)], {0: 200},
                               lambda f, o, s: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(spill_module.SpillFailed) as info:
            next(gen)
        # the traceback (and the generator's frame in it) is still alive here
        assert [t for t in _fds() if t.startswith(folder)] == [], "the spill file is still open"
        del info, gen
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("batch_size", [None, 16])
def test_dataset_stopped_by_a_corrupt_record_leaks_nothing(data, backend, batch_size):
    def scenario() -> None:
        ds = tfr_torch.TFRecordDataset(data["corrupt"], on_error="raise", batch_size=batch_size)
        with pytest.raises(tfr_torch.TFRecordError, match="bad.tfrecord"):
            for _ in ds:
                pass

    _repeat(scenario)


def _boom(item: Any) -> Any:
    if int(np.asarray(item["id"]).reshape(-1)[-1]) >= 77:
        raise LookupError("transform failed")
    return item


@pytest.mark.parametrize("batch_size", [None, 16])
def test_a_transform_that_raises_leaves_nothing_alive(data, backend, batch_size):
    """Fixed (data/items.py): the thread-local _APPLYING.dataset (and _APPLYING.names, the batch's records) was set
    before calling `transform` and cleared only after it returned: a transform that raised left them set, so the
    dataset (its shared-memory descriptors) and the failed batch's records stayed alive, and applying() named that
    dataset, until this thread ran another dataset's transform."""
    def scenario() -> weakref.ref[Any]:
        ds = tfr_torch.TFRecordDataset(data["gzip"], features=FEATURES, transform=_boom, batch_size=batch_size)
        with pytest.raises(LookupError):
            for _ in ds:
                pass
        return weakref.ref(ds)

    gone = scenario()
    gc.collect()
    assert gone() is None, "the dataset outlived its last reference"


def test_a_dataset_deleted_by_its_caller_is_freed_before_the_caller_returns(data):
    """Fixed (data/dataset.py _fetcher_of): TFRecordDataset.__iter__ read caller.f_locals, which on CPython < 3.13
    stores a snapshot of the caller's locals on its frame: after `del ds; gc.collect()` in the caller the dataset
    (its shared-memory descriptors, any batch the caller held then) stayed alive until the caller returned. Only a
    fetcher's __init__ frame has its locals read now."""
    before = _fds()
    ds = tfr_torch.TFRecordDataset(data["plain"])
    for _ in ds:
        break
    del ds
    gc.collect()
    assert _fds() == before


# ----- readers and files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["plain", "gzip"])
def test_read_records_closed_early_leaks_nothing(data, backend, kind):
    path = data[kind][0]

    def scenario() -> None:
        with tfr_torch.read_records(path) as reader:
            for i, _ in enumerate(reader):
                if i == 10:
                    break
        it = iter(tfr_torch.read_records(path))
        next(it)
        del it
        _consume(lambda: tfr_torch.read_records(path), "raise", k=200)

    _repeat(scenario)


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("kind", ["plain", "seek"])
def test_memory_record_files_opened_and_closed_leak_nothing(data, tmp_path, backend, kind, cached):
    if not data[kind]:
        pytest.skip("needs the compiled core (seek points)")
    urls = [_memory_copy(p) for p in data[kind]]
    cache = tmp_path / "cache"
    remote = RemoteOptions(cache_dir=str(cache), cache_bytes=64 << 20) if cached else None
    indexes = [tfr_torch.read_index(p + ".idx", p) for p in data[kind]]

    def scenario() -> None:
        for url, index in zip(urls, indexes):
            with RecordFile(url, remote=remote) as f:
                f.read(int(index[3, 0]), int(index[3, 1]))
                f.read_many(index[::7, 0], index[::7, 1])
        _consume(lambda: tfr_torch.TFRecordDataset(urls, remote=remote), "break", k=700)
        _consume(lambda: tfr_torch.read_records(urls[0], remote=remote), "raise", k=100)

    _repeat(scenario, times=4)
    leftovers = [n for _, _, names in os.walk(cache) for n in names if ".tmp-" in n]
    assert leftovers == [], "a temporary block file was left behind"


def test_indexed_dataset_items_close_and_pickle_leak_nothing(data, backend):
    paths = data["plain"] + data["seek"]

    def scenario() -> None:
        ds = tfr_torch.IndexedTFRecordDataset(paths, FEATURES)
        for i in range(0, len(ds), 97):
            ds[i]
        ds.__getitems__(list(range(0, len(ds), 13)))
        copy = pickle.loads(pickle.dumps(ds))
        copy[5]
        copy.close()
        ds.close()
        unclosed = tfr_torch.IndexedTFRecordDataset(paths)  # never closed: dropped
        unclosed[len(unclosed) - 1]

    _repeat(scenario)


# ----- compositions -------------------------------------------------------------------------------------------------


def test_mixed_and_cached_datasets_and_nodes_stopped_early_leak_nothing(data, tmp_path, backend):
    from tfr_torch.nodes import TFRecordNode

    cache_dir = tmp_path / "cached"
    runs = [0]

    def scenario() -> None:
        mixed = tfr_torch.MixedDataset({"a": tfr_torch.TFRecordDataset(data["plain"], features=FEATURES),
                                        "b": tfr_torch.TFRecordDataset(data["gzip"], features=FEATURES)},
                                       weights={"a": 1, "b": 2}, seed=runs[0])
        _consume(lambda: mixed, "break", k=500)
        _consume(lambda: mixed, "raise", k=50)
        cached = tfr_torch.CachedDataset(tfr_torch.TFRecordDataset(data["plain"][:1], features=FEATURES),
                                         str(cache_dir), shuffle=True, seed=runs[0])
        _consume(lambda: cached, "end")
        _consume(lambda: cached, "break", k=100)
        node = TFRecordNode(data["gzip"])
        for i, _ in enumerate(node):
            if i == 50:
                break
        runs[0] += 1

    _repeat(scenario, times=3)


# ----- writers aborted -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_writers_aborted_by_an_exception_leave_nothing(tmp_path, compression):
    out = tmp_path / "out"
    out.mkdir()
    url = f"memory:///leaks-writer-{uuid.uuid4().hex[:8]}"
    staging = tmp_path / "staging"
    runs = [0]

    def scenario() -> None:
        runs[0] += 1
        with pytest.raises(KeyError), tfr_torch.TFRecordWriter(str(out / f"w{runs[0]}.tfrecord"), compression) as w:
            w.write(b"x" * 1000)
            raise KeyError("abort")
        for where, extra in ((str(out), {}), (url, {"staging_dir": str(staging)})):
            sharded = tfr_torch.ShardedWriter(where, f"ds{runs[0]}", "train", compression=compression,
                                              records_per_shard=50, **extra)
            with pytest.raises(KeyError), sharded as writer:
                for k in range(120):  # two shards finished (one uploaded or uploading), a third open
                    writer.write_example({"id": k})
                raise KeyError("abort")

    _repeat(scenario, times=3)
    assert not [n for n in os.listdir(out) if ".tmp" in n], os.listdir(out)
    memory = fsspec.filesystem("memory")
    assert not [n for n in memory.find(url[len("memory://"):]) if ".tmp" in n], "a temporary object was left"
    assert [n for n in os.listdir(out) if n.startswith("w")] == [], "an aborted TFRecordWriter left its file"
    assert not staging.exists() or os.listdir(staging) == [], "a staging folder was left behind"


# ----- DataLoader workers -------------------------------------------------------------------------------------------


def _not_slab(target: str) -> bool:
    """Descriptors other than the main process's mappings of workers' slabs (bounded, see the module doc)."""
    return not target.startswith("/memfd:tfr_torch-")


def _loader_epochs(dataset: Any, epochs: int, *, workers: int = 2, persistent: bool = False, stop_at: int | None = 4,
                   seen: set[int] | None = None, context: str | None = None) -> Iterator[int]:
    loader = DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=persistent,
                        multiprocessing_context=context)
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        it = iter(loader)
        for k, _ in enumerate(it):
            if seen is not None:
                seen.update(_children())
            if k == stop_at:
                break
        del it
        yield epoch


@pytest.mark.parametrize(("persistent", "stop_at"), [(False, 4), (True, 4), (False, None)])
def test_dataloader_epochs_leak_nothing(data, persistent, stop_at):
    """Loaders of 3 epochs (2 forked workers), made 3 times: ~5 s, most of it starting workers."""
    seen: set[int] = set()
    shm_before = set(_shm({os.getpid()}))
    slabs_before = Counter(t for t in _fds() if not _not_slab(t))  # earlier tests' loaders may still hold some

    def scenario() -> None:
        ds = tfr_torch.TFRecordDataset(data["plain"], index="auto", batch_size=32, features=FEATURES)
        for _ in _loader_epochs(ds, 3, persistent=persistent, stop_at=stop_at, seen=seen):
            pass

    _repeat(scenario, times=2, maps_slack=2 * 8 + 4, fd_filter=_not_slab)
    # the slabs' mappings the main process keeps: at most the last loader's workers' (8 each)
    kept = Counter(t for t in _fds() if not _not_slab(t)) - slabs_before
    assert sum(kept.values()) <= 2 * 8
    assert set(_shm(seen | {os.getpid()})) <= shm_before, "shared-memory segments were left in /dev/shm"


def test_dataloader_workers_failing_leak_nothing(data):
    """A worker's transform that raises, and a corrupt record under on_error="raise" in a worker: the error reaches
    the main process, the loader is dropped. ~10 s: after an error from a worker, torch's shutdown waits its 5 s
    (MP_STATUS_CHECK_INTERVAL) for the worker before it terminates it, as it does for a plain IterableDataset."""
    def scenario() -> None:
        for ds, error in ((tfr_torch.TFRecordDataset(data["plain"], batch_size=16, features=FEATURES, transform=_boom),
                           LookupError),
                          (tfr_torch.TFRecordDataset(data["corrupt"], batch_size=16), tfr_torch.TFRecordError)):
            loader = DataLoader(ds, batch_size=None, num_workers=1)
            with pytest.raises(error):
                for _ in loader:
                    pass
            del loader

    _repeat(scenario, times=1, maps_slack=8 + 4, fd_filter=_not_slab)


def test_rss_plateaus_over_30_dataloader_epochs(data):
    ds = tfr_torch.TFRecordDataset(data["plain"], index="auto", shuffle=True, batch_size=32, features=FEATURES)
    rss = []
    for epoch in _loader_epochs(ds, 30, persistent=True, stop_at=None):
        if epoch in (5, 29):
            gc.collect()
            rss.append(_rss())
    # a leak of a batch per epoch (32 rows, ~10 KB) over 24 epochs stays below this; a leak of the records read
    # (1,800 x ~300 B a epoch) or of a slab (1 MiB) per epoch does not
    assert rss[1] - rss[0] < 16 << 20, f"RSS grew by {(rss[1] - rss[0]) >> 20} MiB over 24 epochs"


def test_spawned_workers_leak_nothing(data):
    """One spawned worker (the dataset pickled to it) for one epoch stopped early: ~10 s, most of it the worker's
    imports. multiprocessing's resource tracker (a process and a pipe, for the life of this one) is started first."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    ds = tfr_torch.TFRecordDataset(data["plain"], batch_size=64, features=FEATURES)
    before = _Snapshot()
    for _ in _loader_epochs(ds, 1, workers=1, stop_at=2, context="spawn"):
        pass
    _assert_nothing_grew(before, maps_slack=8 + 4, fd_filter=_not_slab)
