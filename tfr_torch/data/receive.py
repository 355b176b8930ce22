"""The main process's side of the transport (data/transport.py): the workers' slabs mapped through /proc, and each
batch rebuilt from its slab as it is unpickled: values copied out, or views of a lent slab whose release waits for
the last of them. See the transport's module docstring for the whole design."""

from __future__ import annotations

import itertools
import mmap
import os
import threading
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, Literal, Union

import numpy as np
import torch

from tfr_torch import _native
from tfr_torch.data.slabs import _HEADER, _RELEASED, _SERIAL_BITS

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
        dead = {p for p, _ in _MAPS if p != pid and not _alive(p)}  # forget what workers that are gone left
        pool = serial >> _SERIAL_BITS  # and what an earlier process of this pid left
        for key in [key for key in _MAPS if key[0] in dead or (key[0] == pid and key[1] >> _SERIAL_BITS != pool)]:
            # dropped, not closed: another thread (another DataLoader's) may be copying out of it right now; it is
            # unmapped when the last reference goes (at once when there is none)
            del _MAPS[key]
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


def _received(slab: SlabRef | None, entries: list[Entry], retired: list[int], lent: Sequence[Lent],
              values: dict[Any, Any]) -> None:
    """Into `values`, by key (or path): each value of `slab` copied out (then the slab released to its worker), and
    each tensor made in a lent slab as a view of it."""
    if slab is not None:
        mm = _mapping(slab, retired)
        retired = []
        for entry in entries:
            values[entry[1]] = _read(mm, entry)
        _RELEASED.pack_into(mm, 0, _RELEASED.unpack_from(mm, 0)[0] + 1)  # the worker may reuse the slab now
    for ref, nbytes, at in lent:
        _views(_mapping(ref, retired), nbytes, at, values, (ref[0], ref[2]))
        retired = []


def _rebuild(container: Container, slab: SlabRef | None, keys: list[Any], entries: list[Entry],
             inline: list[tuple[Any, Any]], retired: list[int], lent: Sequence[Lent] = ()) -> Any:
    values: dict[Any, Any] = dict(inline)
    _received(slab, entries, retired, lent, values)
    return _rebuild_inline(container, [(key, values[key]) for key in keys])


def _views(mm: mmap.mmap, nbytes: int, at: list[LentEntry], values: dict[Any, Any],
           slab: tuple[int, int] | None = None) -> None:
    """The tensors a worker made in a lent slab, as views of the slab's first `nbytes` (no copy). The slab's
    released count goes up when the last of them (and of any view of them) is gone: only then may the worker
    write into the slab again (see also _before_fork)."""
    region = memoryview(mm)[_HEADER : _HEADER + nbytes]
    base = torch.frombuffer(region, dtype=torch.uint8)
    # torch holds `region` as long as the storage lives; not at exit (nothing to release then), and never in a
    # process forked from this one, which would release what this one still holds
    number = next(_NUMBERS)
    done = weakref.finalize(region, _release, mm, os.getpid(), number, slab)
    done.atexit = False
    _HELD[number] = (done, mm, slab[0] if slab is not None else None)
    del region
    for key, dtype_name, shape, stride, offset in at:
        values[key] = base.view(getattr(torch, dtype_name)).as_strided(shape, stride, offset)


def _release(mm: mmap.mmap, pid: int, number: int, slab: tuple[int, int] | None = None) -> None:
    """The last view of a lent slab's batch is gone: the worker may reuse the slab. Where the worker has exited,
    the mapping (`slab`: its key in _MAPS, worker pid and slab serial) goes now, its memory with it, not at the
    next sweep."""
    _HELD.pop(number, None)
    if os.getpid() != pid:
        return
    try:
        _RELEASED.pack_into(mm, 0, _RELEASED.unpack_from(mm, 0)[0] + 1)
    except ValueError:  # unmapped already
        return
    if slab is not None and not _alive(slab[0]):
        with _MAPS_LOCK:
            if _MAPS.get(slab) is mm:
                del _MAPS[slab]
                _close(mm)


# the lent slabs this process holds views of, each by a number: (its finalizer, its mapping)
_HELD: dict[int, tuple[weakref.finalize[Any, Any], mmap.mmap, int | None]] = {}  # + the worker's pid
_NUMBERS = itertools.count()
COPY_AT_FORK = 256 << 20  # held lent slabs a forked child copies (bytes in all); beyond it they are kept instead
_TO_COPY: list[tuple[mmap.mmap, bytes]] = []  # set just before a fork: the mappings the child copies, and their bytes


def _before_fork() -> None:
    """Run before this process forks. A forked child inherits the views this process holds of lent slabs, and those
    are the worker's own memory (MAP_SHARED): once this process's views die and release a slab, the worker writes
    its next batches into it, under the child's eyes. So their bytes are taken here, and the child puts private
    copies of them in place of those mappings, at the same addresses, before it runs anything
    (`_after_fork_in_child`); this process goes on as before. Where the
    slabs held come to more than COPY_AT_FORK bytes (a process keeping many batches), or the copy cannot be made,
    they are never released instead: each stays its worker's until the worker exits (the worker makes others, up
    to 8, then sends its batches the usual way). Slabs of workers that have exited need neither."""
    # a slab of a worker that has exited is never written again (a DataLoader's new workers are forked while the
    # last epoch's last batch is still held, its workers gone): nothing to protect
    live = [(key, entry) for key, entry in list(_HELD.items()) if entry[2] is None or _alive(entry[2])]
    held = {id(mm): mm for _, (_, mm, _) in live}
    if not held:
        return
    if sum(len(mm) for mm in held.values()) <= COPY_AT_FORK and _private_copy is not None:
        # their bytes taken here, while this process holds the slabs: taken in the child after the fork, they could
        # be another batch's already (this process goes on at once, may release a slab, and its worker write in it)
        _TO_COPY[:] = [(mm, mm[:]) for mm in held.values()]
        return
    for key, (done, _, _) in live:
        done.detach()
        _HELD.pop(key, None)


def _after_fork_in_parent() -> None:
    _TO_COPY.clear()


def _after_fork_in_child() -> None:
    mappings, _TO_COPY[:] = list(_TO_COPY), []
    for mm, saved in mappings:
        try:
            _private_copy(mm, saved)
        except (OSError, ValueError) as exc:  # the views stay the worker's memory: say so, nothing else to do
            warnings.warn(f"tfr_torch: a forked process could not copy a batch it inherits ({exc}); its values may "
                          "change once the parent drops it", RuntimeWarning, stacklevel=1)


def _libc_private_copy() -> Any:
    """A function that replaces a mapping by a private copy of its bytes at the same address (mmap MAP_FIXED of
    anonymous memory), or None where libc's mmap cannot be called."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        mmap_call = libc.mmap
    except (OSError, AttributeError):
        return None
    mmap_call.restype = ctypes.c_void_p
    mmap_call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_FIXED", 0x10)

    def copy(mm: mmap.mmap, saved: bytes) -> None:
        size = len(mm)
        anchor = ctypes.c_char.from_buffer(mm)
        address = ctypes.addressof(anchor)
        del anchor
        got = mmap_call(address, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
        if got != address:
            raise OSError(ctypes.get_errno(), "mmap of a private copy failed")
        ctypes.memmove(address, saved, size)

    return copy


_private_copy: Any = None
if hasattr(os, "register_at_fork"):
    _private_copy = _libc_private_copy()
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def _rebuild_nested(slab: SlabRef | None, skeleton: dict[Any, Any], entries: list[Entry], retired: list[int],
                    lent: Sequence[Lent] = ()) -> Any:
    """The nested dict: each slab value copied out (or, made in a lent slab, viewed there) and put back at its path
    in the skeleton (fresh from the pickle, so the receiver's own)."""
    values: dict[Any, Any] = {}
    _received(slab, entries, retired, lent, values)
    for path, value in values.items():
        node: Any = skeleton
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value
    return skeleton


def _rebuild_inline(container: Container, items: list[tuple[Any, Any]]) -> Any:
    return items[0][1] if container == "list" else dict(items)
