"""The worker's side of the transport (data/transport.py): slabs, shared memory a DataLoader worker writes its
batches into and reuses, and slabs lent to tensors made in place (slab_tensor), which travel without a copy.
See the transport's module docstring for the whole design."""

from __future__ import annotations

import itertools
import math
import mmap
import multiprocessing
import multiprocessing.util
import os
import struct
import threading
import warnings
import weakref

import torch

__all__ = ["lending_slabs", "shared_memory_available", "slab_tensor"]

_HEADER = 64  # bytes before the data: a uint64 count of the batches the receiver has copied out
_MIN_SLAB = 1 << 20
_MAX_SLABS = 8  # per worker: more batches in flight means nobody releases them, so send the next ones inline
_SERIAL_BITS = 24  # a slab's number within its pool (see _Pool.serials)
_RELEASED = struct.Struct("<Q")


_SUPPORTED = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")  # Linux


def shared_memory_available() -> bool:
    """Whether batches go through the transport here (Linux: memfd_create and /proc/<pid>/fd). Where making a slab
    failed in this process, they still do: its batches then go in the pickle (pipe._Inline), which sends their
    tensors through the pipe where torch's shared memory (/dev/shm) is full too; the pipe's way (data/pipe.py) would
    lose them there."""
    return _SUPPORTED


class _Slab:
    """One anonymous shared-memory file (memfd), mapped, reused batch after batch. The receiver maps it through
    /proc/<pid>/fd/<fd>; it vanishes when both sides have closed it (no name, so nothing can leak). Free when the
    receiver is done with every batch sent in it (its released count, which only the receiver writes, equals
    `sent`: it has copied them out, or the tensors it got as views of a lent slab are gone) and no tensor of this
    worker's lies in it (`lent`: slab_tensor's, alive)."""

    def __init__(self, size: int, serial: int) -> None:
        fd = os.memfd_create(f"tfr_torch-{serial}", getattr(os, "MFD_CLOEXEC", 0))
        try:
            # reserve the pages now: out of memory fails here with an error, not later with SIGBUS
            os.posix_fallocate(fd, 0, _HEADER + size)
            self.mm = mmap.mmap(fd, _HEADER + size)
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.size, self.serial, self.sent, self.lent = fd, size, serial, 0, 0

    def free(self) -> bool:
        released: int = _RELEASED.unpack_from(self.mm, 0)[0]
        return released == self.sent and not self.lent

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.slabs: list[_Slab] = []
        # slab numbers: this pool's own random number above _SERIAL_BITS, so that a worker that gets the pid of
        # one gone before it is never taken for it by the receiver (whose mappings are keyed by pid and number)
        self.serials = itertools.count(int.from_bytes(os.urandom(5), "little") << _SERIAL_BITS)
        self.retired: list[int] = []  # serials of closed slabs, for the receiver to unmap
        self.disabled: str | None = None
        # DataLoader pickles in the queue's feeder thread; reentrant: a lent tensor's finalizer (_unlend) may run
        # in a garbage collection that starts while the lock is held
        self.lock = threading.RLock()
        self.lent: dict[int, tuple[_Slab, int]] = {}  # data address of a lent slab's tensors -> (slab, nbytes)
        if multiprocessing.parent_process() is not None:  # a DataLoader worker: see _free_at_exit
            multiprocessing.util.Finalize(self, _free_at_exit, args=(self.slabs,), exitpriority=10)

    def take(self, size: int) -> _Slab | None:
        """A free slab of at least `size` bytes (reused, or made), or None: send inline."""
        if self.disabled is not None:
            return None
        free = [s for s in self.slabs if s.free()]
        fitting = [s for s in free if s.size >= size]
        if fitting:
            return min(fitting, key=lambda s: s.size)
        if len(self.slabs) >= _MAX_SLABS:
            if not free:
                return None
            victim = min(free, key=lambda s: s.size)
            self.slabs.remove(victim)
            self.retired.append(victim.serial)
            victim.close()
        try:
            slab = _Slab(_slab_size(size), next(self.serials))
        except OSError as exc:
            self.disabled = str(exc.strerror or exc)
            warnings.warn(f"tfr_torch: cannot make shared memory for DataLoader batches ({self.disabled}); batches "
                          "go through the DataLoader's pipe instead (slower for large records)", RuntimeWarning,
                          stacklevel=2)
            return None
        self.slabs.append(slab)
        return slab


def _free_at_exit(slabs: list[_Slab]) -> None:
    """When a worker process exits (multiprocessing runs this before it ends): the memory of each slab the
    receiver is done with is given back (the file cut to its header page), though the receiver keeps its mapping
    of it until a later batch makes it sweep the mappings of workers that are gone (it reads no more of it: its
    released count says so). Slabs whose batches the receiver still holds (lent views) or has not received keep
    their memory."""
    for slab in slabs:
        try:  # the worker's own tensors in a lent slab do not count: it writes nothing more
            if _RELEASED.unpack_from(slab.mm, 0)[0] == slab.sent:
                os.ftruncate(slab.fd, _HEADER)
        except (OSError, ValueError):
            pass


def _slab_size(size: int) -> int:
    """Room for `size` bytes and 1/8 more (batches of variable-length records vary a little), in whole MB: every
    byte of a slab is reserved up front, so a power of two would waste up to half."""
    return max(_MIN_SLAB, -(-(size + size // 8) // _MIN_SLAB) * _MIN_SLAB)


_POOL: _Pool | None = None


def _pool() -> _Pool:
    global _POOL
    if _POOL is None or _POOL.pid != os.getpid():  # a forked child never reuses its parent's slabs
        _POOL = _Pool()
    return _POOL


_LENDING = threading.local()


class lending_slabs:
    """While active (in this thread), slab_tensor makes its tensors in slabs: what TFRecordDataset sets around its
    `transform` in a DataLoader worker whose batches go through the transport, where a dict the transform returns is
    sent as a Batch. Anywhere else a lent tensor would reach the main process the usual way: moved to new shared
    memory by a copy."""

    __slots__ = ("before",)

    def __enter__(self) -> None:
        self.before = getattr(_LENDING, "on", False)
        _LENDING.on = True

    def __exit__(self, *exc: object) -> None:
        _LENDING.on = self.before


def slab_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    """An uninitialized contiguous CPU tensor in a slab of its own, or None (not inside lending_slabs, no shared
    memory, no free slab, or nothing to hold). For a batch's large values (DecodeImages' images): written in place
    by the worker and sent without a copy; the main process gets a view of the slab, and the slab is reused only
    once that view and every view of it are gone (and the worker's tensor too), so nothing anyone holds is ever
    overwritten. A slab stays taken as long as the main process keeps the batch: where every slab is taken, the
    next batches are made the usual way."""
    if not getattr(_LENDING, "on", False) or not _SUPPORTED:
        return None
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes <= 0:
        return None
    pool = _pool()
    with pool.lock:
        slab = pool.take(nbytes)
        if slab is None:
            return None
        slab.lent += 1
    view = memoryview(slab.mm)[_HEADER : _HEADER + nbytes]
    tensor = torch.frombuffer(view, dtype=dtype, count=count).view(shape)
    address = tensor.untyped_storage().data_ptr()
    weakref.finalize(view, _unlend, pool, slab, address).atexit = False  # torch holds `view` while the storage lives
    with pool.lock:
        pool.lent[address] = (slab, nbytes)
    return tensor


def _unlend(pool: _Pool, slab: _Slab, address: int) -> None:
    with pool.lock:
        slab.lent -= 1
        if pool.lent.get(address, (None,))[0] is slab:
            del pool.lent[address]
