"""Moving batches from DataLoader workers to the main process through reused shared memory.

A DataLoader worker pickles what it yields and sends it to the main process. For a batch of 256 byte strings
of 16 KB that is 4 MB pickled, pushed through a 64 KB pipe and unpickled (four copies and dozens of wake-ups);
every tensor gets a new shared-memory segment, whose pages the kernel faults in and zeroes batch after batch
(on a VM, ~3 ms per 4 MB). Both cap a loader of large records far below what the workers decode.

So a TFRecordDataset worker yields its batches as `Batch` (a dict) or `RecordBatch` (a list). When
DataLoader's pickler (multiprocessing's ForkingPickler) sends one, its byte strings and dense CPU tensors are
written into a shared-memory slab that the worker reuses; the main process copies them out (into bytes objects
and tensors it owns) while it unpickles the batch, then marks the slab free. One copy on each side, no page
faults once the slabs are warm, and nothing the user holds ever points into memory that is reused.

A batch's large tensors can skip both copies: a transform that runs in the worker (DecodeImages) makes its output
with slab_tensor, in a slab of its own, as does the worker's default_collate for a stack of rows of 1 MiB or more,
and the main process gets a view of that slab. Such a slab is reused only
when the main process holds no view of it any more (and the worker none either): the user may keep a batch as long
as they like, its slab simply stays taken; with every slab taken, the next batches are made the usual way.

A batch of nested results (an RLDS episode: {"steps": {"observation": {"image": ...}, ...}, ...}, dicts and lists as
deep as they go) travels the same way: its skeleton (the dicts and lists, with None where a slab value goes) in the
pickle, each dense tensor and list of bytes in the slab with its path, put back in place in the main process.
Plain pickle, copy and deepcopy see the dict or list they are; other values of a batch (sparse tensors, tuples,
RaggedTensor) travel the usual way. Slabs are anonymous memory files (memfd_create) that the main process maps through
/proc/<worker pid>/fd/<fd>: they have no name, so a killed worker leaks nothing, and they do not count against
/dev/shm (64 MB in a default Docker container). Without memfd and /proc (macOS, Windows), or when a slab cannot
be made, batches travel the usual way (with one warning in the second case).
"""

from __future__ import annotations

import itertools
import math
import mmap
import os
import struct
import threading
import warnings
import weakref
from collections.abc import Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Literal, Union

import numpy as np
import torch

from tfr_torch import _native
from tfr_torch.decode.spans import RecordSpans

__all__ = ["Batch", "RecordBatch", "Parcel", "lending_slabs", "shared_memory_available", "slab_tensor",
           "wrap_for_transport"]

_HEADER = 64  # bytes before the data: a uint64 count of the batches the receiver has copied out
_ALIGN = 64
_MIN_SLAB = 1 << 20
_MAX_SLABS = 8  # per worker: more batches in flight means nobody releases them, so send the next ones inline
_SERIAL_BITS = 24  # a slab's number within its pool (see _Pool.serials)
_RELEASED = struct.Struct("<Q")
# torch dtypes (by name) that numpy has too: their tensors go in and out of slabs through numpy, whose copies cost
# a few µs less per tensor than torch's ops (a batch's label tensor is a good part of a small batch's trip)
_NUMPY_DTYPES = {name: np.dtype(name) for name in ("float64", "float32", "float16", "int64", "int32", "int16", "int8",
                                                    "uint8", "bool", "complex64", "complex128")}


Container = Literal["dict", "list"]  # what a batch is: a Batch (dict) or a RecordBatch (list of bytes)


# What travels in the pickle beside a slab is plain tuples: a NamedTuple pickles and unpickles through a Python call
# per object, a good part of a small batch's trip.
#
# TensorEntry: a dense CPU tensor written into a slab: ("t", key, pos, nbytes, dtype, shape): `nbytes` bytes at
#   `pos`, rebuilt as torch dtype `dtype` (its name, e.g. "float32") and `shape`; `key` is its key in the batch
#   (None for a RecordBatch).
# BytesEntry: a list of byte strings written end to end into a slab: ("b", key, pos, nbytes, lengths): from `pos`,
#   `nbytes` in all, one per `lengths`.
# SlabRef: where the receiver finds a slab: (pid, fd, serial, size): worker `pid`'s memfd `fd` (through /proc),
#   slab `serial`, `size` bytes.
# LentEntry: a tensor made in a slab of its own (slab_tensor), sent without a copy: (key, dtype, shape, stride,
#   storage offset) of a view of the slab's first bytes.
# Lent: a lent slab and the tensors a batch sends in it: (slab, nbytes lent, entries).
TensorEntry = tuple[Literal["t"], Any, int, int, str, tuple[int, ...]]
BytesEntry = tuple[Literal["b"], Any, int, int, list[int]]
Entry = Union[TensorEntry, BytesEntry]
SlabRef = tuple[int, int, int, int]
LentEntry = tuple[Any, str, tuple[int, ...], tuple[int, ...], int]
Lent = tuple[SlabRef, int, list[LentEntry]]


class Batch(dict[Any, Any]):
    """A decoded batch (a plain dict) that a DataLoader worker sends through shared memory; see the module doc."""

    __slots__ = ()


class RecordBatch(list[bytes]):
    """A batch of raw records (a plain list of bytes) that a DataLoader worker sends through shared memory."""

    __slots__ = ()


def _collate_rows(batch: list[Any], *, collate_fn_map: dict[Any, Callable[..., Any]] | None = None) -> Batch:
    """default_collate of rows that tfr_torch's datasets yield in a DataLoader worker (Batch, one per record): what
    default_collate gives for dicts, except that a key's tensors are stacked into plain memory. default_collate
    stacks them into a new shared-memory segment in every worker batch (a file, a mapping and its page faults:
    about 40 µs for a batch of 64 rows), which buys nothing here: the batch travels through the worker's reused
    slab, or, where there is none, its tensors are moved to shared memory when it is pickled, as any tensor is."""
    out = Batch()
    for key in batch[0]:
        values = [row[key] for row in batch]
        first = values[0]
        if type(first) is torch.Tensor and first.layout == torch.strided and not first.is_nested:
            out[key] = _stack(values)  # raises what default_collate's stack raises for unequal shapes
        else:
            out[key] = collate(values, collate_fn_map=collate_fn_map)
    return out


_LEND_FROM = 1 << 20  # a stacked tensor of at least this many bytes is made in a slab of its own (slab_tensor)


def _stack(values: list[torch.Tensor]) -> torch.Tensor:
    """torch.stack(values); in a DataLoader worker, a large result (images, say) straight into a lent slab, which
    the transport then sends without copying it (see slab_tensor)."""
    first = values[0]
    if (len(values) * first.numel() * first.element_size() >= _LEND_FROM and first.device.type == "cpu"
            and all(type(v) is torch.Tensor and v.dtype == first.dtype and v.device == first.device
                    and v.shape == first.shape and not v.requires_grad
                    for v in values)
            and torch.utils.data.get_worker_info() is not None):
        with lending_slabs():
            target = slab_tensor((len(values), *first.shape), first.dtype)
        if target is not None:
            return torch.stack(values, out=target)
    return torch.stack(values)


# default_collate looks a batch's element type up in this map first (torch's documented way to extend it, though
# the map lives in a private module: where a torch release moves it, rows collate the default way); only Batch,
# tfr_torch's own type, is added
try:
    from torch.utils.data._utils.collate import collate, default_collate_fn_map
except ImportError:  # pragma: no cover - every torch from 2.0 to this day has it
    pass
else:
    default_collate_fn_map[Batch] = _collate_rows


_SUPPORTED = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")  # Linux


def shared_memory_available() -> bool:
    """Whether slabs can be made here (Linux: memfd_create and /proc/<pid>/fd) and have not failed in this
    process."""
    return _SUPPORTED and _pool().disabled is None


class Parcel:
    """A worker's decoded batch (a dict) or raw batch (a list of bytes), sealed for the trip to the main process,
    where it arrives as the plain dict or list it holds. DataLoader(batch_size=None) runs `default_convert` on
    every item a worker yields, which walks a batch value by value (about a microsecond per byte string, an
    eighth of a worker's time with 16 KB records in batches of 64) and changes nothing in what tfr_torch decodes:
    a Parcel is neither a Mapping nor a Sequence, so it passes unwalked. Only used where the DataLoader's collate
    function is `default_convert` and there is no transform (which could return numpy arrays to convert)."""

    __slots__ = ("item",)

    def __init__(self, item: dict[Any, Any] | list[bytes]) -> None:
        self.item = item

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:  # plain pickle: the item itself
        return _unwrap, (self.item,)


def _unwrap(item: Any) -> Any:
    return item


def wrap_for_transport(item: Any, parcel: bool = False) -> Any:
    """In a worker: a batch as the type that travels through shared memory (exact dicts and lists only);
    `parcel`: sealed in a Parcel (see there)."""
    cls = type(item)
    if cls is dict:
        return Parcel(item) if parcel else Batch(item)
    if cls is list:
        return Parcel(item) if parcel else RecordBatch(item)
    return item


# ----- the worker side --------------------------------------------------------------------------------------------

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


def _slab_tensor(value: Any) -> bool:
    return (type(value) is torch.Tensor and value.layout == torch.strided and value.device.type == "cpu"
            and not value.requires_grad and not value.is_quantized and not value.is_conj() and not value.is_neg())


def _lent_entry(pool: _Pool, key: Any, value: Any) -> tuple[_Slab, int, LentEntry] | None:
    """Where `value` (a _slab_tensor) is a view of a lent slab: the slab, the bytes lent, and its entry."""
    storage = value.untyped_storage()
    lent = pool.lent.get(storage.data_ptr())
    if lent is None:
        return None
    slab, nbytes = lent
    if storage.nbytes() != nbytes or nbytes % value.element_size():
        return None
    dtype = str(value.dtype).rpartition(".")[2]
    return slab, nbytes, (key, dtype, tuple(value.shape), tuple(value.stride()), value.storage_offset())


def _bytes_total(value: Any) -> int:
    """The total length of a list of bytes (exactly those types) or of a RecordSpans, else -1. The compiled core's
    loops, when loaded."""
    if type(value) is RecordSpans:
        return value.nbytes()
    core = _native.core
    if core is not None:
        total: int = core.bytes_total(value)
        return total
    if type(value) is list and all(type(v) is bytes for v in value):
        return sum(map(len, value))
    return -1


def _pack_bytes(value: list[bytes] | RecordSpans, mm: mmap.mmap, pos: int) -> list[int]:
    """Write a list of bytes (or the values of a RecordSpans, from their records) back to back into the slab at
    `pos`; their lengths."""
    if isinstance(value, RecordSpans):
        return value.pack(mm, pos)
    core = _native.core
    if core is not None:
        lengths: list[int] = core.pack_bytes(value, mm, pos)
        return lengths
    mm.seek(pos)
    return [mm.write(v) for v in value]


def _unpack_bytes(mm: mmap.mmap, pos: int, lengths: list[int]) -> list[bytes]:
    """New bytes objects copied out of the slab from `pos`, of the given lengths."""
    core = _native.core
    if core is not None:
        copies: list[bytes] = core.unpack_bytes(mm, pos, lengths)
        return copies
    out = []
    for length in lengths:
        out.append(mm[pos : pos + length])
        pos += length
    return out


def _pad(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _nested(value: Any) -> bool:
    """A value of a batch that holds others to send through the slab: a dict, or a list that is not all bytes."""
    cls = type(value)
    return cls is dict or cls is Batch or (cls is list and _bytes_total(value) < 0)


def _flatten(value: Any, path: tuple[Any, ...], plan: list[tuple[Any, str, Any]]) -> Any:
    """A copy of a nested value (dicts and lists, as deep as they go) where each dense tensor and list of bytes is
    None, planned for the slab under its path (the keys and list positions leading to it); other values stay."""
    cls = type(value)
    if cls is dict or cls is Batch:
        return {key: _flatten(item, (*path, key), plan) for key, item in value.items()}
    if _slab_tensor(value):
        plan.append((path, "t", value))
        return None
    if cls is list or cls is RecordSpans:
        if _bytes_total(value) >= 0:
            plan.append((path, "b", value))
            return None
        return [_flatten(item, (*path, i), plan) for i, item in enumerate(value)]
    return value  # travels in the pickle, the usual way (tuples, sparse tensors, RaggedTensor, scalars, ...)


def _plan_size(plan: list[tuple[Any, str, Any]]) -> int:
    size = 0
    for _, what, value in plan:
        size += _pad(value.numel() * value.element_size() if what == "t" else _bytes_total(value))
    return size


def _write(plan: list[tuple[Any, str, Any]], mm: mmap.mmap) -> list[Entry]:
    """Write the planned values into the slab one after another; the entries that say where each lies."""
    entries: list[Entry] = []
    pos = _HEADER
    for key, what, value in plan:
        if what == "t":
            nbytes = value.numel() * value.element_size()
            dtype = str(value.dtype).rpartition(".")[2]
            if nbytes and dtype in _NUMPY_DTYPES:  # numpy's copy: a few µs less than torch's ops per tensor
                flat = np.ascontiguousarray(value.numpy()).reshape(-1)
                np.frombuffer(mm, np.uint8, nbytes, pos)[:] = flat.view(np.uint8)
            elif nbytes:
                dst = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=pos)
                dst.copy_(value.contiguous().reshape(-1).view(torch.uint8))
                del dst
            entries.append(("t", key, pos, nbytes, dtype, tuple(value.shape)))
        else:
            lengths = _pack_bytes(value, mm, pos)
            nbytes = sum(lengths)
            entries.append(("b", key, pos, nbytes, lengths))
        pos += _pad(nbytes)
    return entries


def _reduce(batch: Any, items: list[tuple[Any, Any]],
            container: Container) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """What ForkingPickler calls for Batch and RecordBatch: the values written into a slab, the tensors made in
    lent slabs (slab_tensor) as where they lie, plus what is left. A dict with nested values (an RLDS episode:
    {"steps": {"observation": {...}, ...}, ...}) travels as its skeleton (the dicts and lists, with None where a
    slab value goes) and the path of each slab value."""
    if container == "dict" and any(_nested(value) for _, value in items):
        return _reduce_nested(batch, items)
    plan: list[tuple[Any, str, Any]] = []  # (key, "t" tensor or "b" bytes list, value)
    inline: list[tuple[Any, Any]] = []
    lent: dict[int, tuple[_Slab, int, list[LentEntry]]] = {}  # by slab serial
    size = 0
    pool = _pool()
    with pool.lock:
        for key, value in items:
            if _slab_tensor(value):
                found = _lent_entry(pool, key, value) if pool.lent else None
                if found is not None:
                    lent.setdefault(found[0].serial, (found[0], found[1], []))[2].append(found[2])
                elif value.is_shared():  # already in shared memory (made there): sent as it is, the usual way
                    inline.append((key, value))
                else:
                    plan.append((key, "t", value))
                    size += _pad(value.numel() * value.element_size())
            elif (total := _bytes_total(value)) >= 0:
                plan.append((key, "b", value))
                size += _pad(total)
            else:
                inline.append((key, value))
        slab = pool.take(size) if plan else None
        if slab is None and not lent:
            return _rebuild_inline, (container, list(items))
        ref, entries = None, []
        if slab is not None:
            entries = _write(plan, slab.mm)
            slab.sent += 1
            ref = (pool.pid, slab.fd, slab.serial, _HEADER + slab.size)
        else:
            inline += [(key, value) for key, _, value in plan]
        views: list[Lent] = []
        for held, nbytes, at in lent.values():
            held.sent += 1  # released by the receiver when its views of the slab are gone
            views.append(((pool.pid, held.fd, held.serial, _HEADER + held.size), nbytes, at))
        retired, pool.retired = pool.retired, []
    keys = [key for key, _ in items]
    return _rebuild, (container, ref, keys, entries, inline, retired, views)


def _reduce_nested(batch: Any, items: list[tuple[Any, Any]]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    plan: list[tuple[Any, str, Any]] = []  # (path, "t" or "b", value)
    skeleton = {key: _flatten(value, (key,), plan) for key, value in items}
    pool = _pool()
    with pool.lock:
        slab = pool.take(_plan_size(plan)) if plan else None
        if slab is None:
            return _rebuild_inline, ("dict", list(items))
        entries = _write(plan, slab.mm)
        slab.sent += 1
        retired, pool.retired = pool.retired, []
    return _rebuild_nested, ((pool.pid, slab.fd, slab.serial, _HEADER + slab.size), skeleton, entries, retired)


def _reduce_batch(batch: Batch) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return _reduce(batch, list(batch.items()), "dict")


def _reduce_records(batch: RecordBatch) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return _reduce(batch, [(None, list(batch))], "list")


def _reduce_parcel(parcel: Parcel) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    item = parcel.item
    if type(item) is dict:
        return _reduce(item, list(item.items()), "dict")
    return _reduce(item, [(None, item)], "list")


ForkingPickler.register(Batch, _reduce_batch)
ForkingPickler.register(RecordBatch, _reduce_records)
ForkingPickler.register(Parcel, _reduce_parcel)


# ----- the receiving side (the main process) ----------------------------------------------------------------------

_MAPS: dict[tuple[int, int], mmap.mmap] = {}  # (worker pid, slab serial) -> mapping
_MAPS_LOCK = threading.Lock()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mapping(slab: SlabRef, retired: list[int]) -> mmap.mmap:
    pid, fd, serial, size = slab
    with _MAPS_LOCK:
        for old in retired:
            gone = _MAPS.pop((pid, old), None)
            if gone is not None:
                _close(gone)
        mm = _MAPS.get((pid, serial))
        if mm is not None:
            return mm
        dead = {p for p, _ in _MAPS if p != pid and not _alive(p)}  # unmap what workers that are gone left
        pool = serial >> _SERIAL_BITS  # and what an earlier process of this pid left
        for key in [key for key in _MAPS if key[0] in dead or (key[0] == pid and key[1] >> _SERIAL_BITS != pool)]:
            _close(_MAPS.pop(key))
        path = f"/proc/{pid}/fd/{fd}"
        try:
            own = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise RuntimeError(f"tfr_torch: cannot open the shared memory of DataLoader worker {pid} ({path}: "
                               f"{exc.strerror}); the worker may have exited, or /proc is not readable here: pass "
                               "shared_memory=False to the dataset to send batches through the pipe") from None
        try:
            mm = mmap.mmap(own, size)
        finally:
            os.close(own)
        _MAPS[(pid, serial)] = mm
        return mm


def _close(mm: mmap.mmap) -> None:
    """Unmap a slab now, or, where tensors still view it (a lent slab's batch the user keeps, after its worker has
    exited), when the last of them is gone (the mapping is freed with them)."""
    try:
        mm.close()
    except BufferError:
        pass


def _read(mm: mmap.mmap, entry: Entry) -> Any:
    """A new tensor or list of bytes copied out of the slab, as `entry` says."""
    pos, nbytes = entry[2], entry[3]
    if entry[0] == "t":
        dtype_name, shape = entry[4], entry[5]
        as_numpy = _NUMPY_DTYPES.get(dtype_name)
        if nbytes and as_numpy is not None:
            return torch.from_numpy(np.frombuffer(mm, as_numpy, nbytes // as_numpy.itemsize, pos).reshape(shape)
                                    .copy())
        dtype = getattr(torch, dtype_name)
        if nbytes:
            return torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=pos).clone().view(dtype).reshape(shape)
        return torch.empty(shape, dtype=dtype)
    return _unpack_bytes(mm, pos, entry[4])


def _rebuild(container: Container, slab: SlabRef | None, keys: list[Any], entries: list[Entry],
             inline: list[tuple[Any, Any]], retired: list[int], lent: Sequence[Lent] = ()) -> Any:
    values: dict[Any, Any] = dict(inline)
    if slab is not None:
        mm = _mapping(slab, retired)
        retired = []
        for entry in entries:
            values[entry[1]] = _read(mm, entry)
        _RELEASED.pack_into(mm, 0, _RELEASED.unpack_from(mm, 0)[0] + 1)  # the worker may reuse the slab now
    for ref, nbytes, at in lent:
        _views(_mapping(ref, retired), nbytes, at, values)
        retired = []
    return _rebuild_inline(container, [(key, values[key]) for key in keys])


def _views(mm: mmap.mmap, nbytes: int, at: list[LentEntry], values: dict[Any, Any]) -> None:
    """The tensors a worker made in a lent slab, as views of the slab's first `nbytes` (no copy). The slab's
    released count goes up when the last of them (and of any view of them) is gone: only then may the worker
    write into the slab again."""
    region = memoryview(mm)[_HEADER : _HEADER + nbytes]
    base = torch.frombuffer(region, dtype=torch.uint8)
    # torch holds `region` as long as the storage lives; not at exit (nothing to release then), and never in a
    # process forked from this one, which would release what this one still holds
    weakref.finalize(region, _release, mm, os.getpid()).atexit = False
    del region
    for key, dtype_name, shape, stride, offset in at:
        values[key] = base.view(getattr(torch, dtype_name)).as_strided(shape, stride, offset)


def _release(mm: mmap.mmap, pid: int) -> None:
    if os.getpid() != pid:
        return
    try:
        _RELEASED.pack_into(mm, 0, _RELEASED.unpack_from(mm, 0)[0] + 1)
    except ValueError:  # unmapped: its worker is gone
        pass


def _rebuild_nested(slab: SlabRef, skeleton: dict[Any, Any], entries: list[Entry], retired: list[int]) -> Any:
    """The nested dict: each slab value copied out and put back at its path in the skeleton (fresh from the
    pickle, so the receiver's own)."""
    mm = _mapping(slab, retired)
    for entry in entries:
        path = entry[1]
        node: Any = skeleton
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = _read(mm, entry)
    _RELEASED.pack_into(mm, 0, _RELEASED.unpack_from(mm, 0)[0] + 1)  # the worker may reuse the slab now
    return skeleton


def _rebuild_inline(container: Container, items: list[tuple[Any, Any]]) -> Any:
    return items[0][1] if container == "list" else dict(items)
