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
with slab_tensor, in a slab of its own, as do the worker's default_collate for a stack of rows of 1 MiB or more and
an RLDS FrameDataset's batches, and the main process gets a view of that slab. Such a slab is reused only
when the main process holds no view of it any more (and the worker none either): the user may keep a batch as long
as they like, its slab simply stays taken; with every slab taken, the next batches are made the usual way.

A batch of nested results (an RLDS episode: {"steps": {"observation": {"image": ...}, ...}, ...}, dicts and lists as
deep as they go) travels the same way: its skeleton (the dicts and lists, with None where a slab value goes) in the
pickle, each dense tensor and list of bytes in the slab with its path, put back in place in the main process. Plain
pickle, copy and deepcopy see the dict or list they are; other values of a batch (sparse tensors, tuples,
RaggedTensor) travel the usual way (sparse COO tensors as data/pipe.py sends them). Slabs are anonymous memory files
(memfd_create) that the main process maps through /proc/<worker pid>/fd/<fd>: they have no name, so a killed worker
leaks nothing, and they do not count against /dev/shm (64 MB in a default Docker container). Without memfd and /proc
(macOS, Windows), or when a slab cannot be made, batches travel the usual way (with one warning in the second case).

Here: the batch types and how a worker writes a batch (the pickler's reductions). The worker's slabs and the lending
of them: data/slabs.py; the main process's mappings and the rebuilding of batches: data/receive.py.
"""

from __future__ import annotations

import mmap
import warnings
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

import numpy as np
import torch

from tfr_torch import _native
from tfr_torch.data.receive import (_NUMPY_DTYPES, Container, Entry, Lent, LentEntry, _rebuild, _rebuild_inline,
                                    _rebuild_nested)
from tfr_torch.data.pipe import _dense_cpu_tensor, _portable
from tfr_torch.data.slabs import _HEADER, _Pool, _pool, _Slab, lending_slabs, shared_memory_available, slab_tensor
from tfr_torch.decode.spans import RecordSpans

__all__ = ["Batch", "RecordBatch", "Parcel", "lending_slabs", "shared_memory_available", "slab_tensor",
           "wrap_for_transport"]

_ALIGN = 64


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

_slab_tensor = _dense_cpu_tensor  # a tensor a slab can hold


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
    return _portable(value)  # travels in the pickle, the usual way (tuples, sparse tensors, RaggedTensor, ...)


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


def _inline(value: Any) -> Any:
    """A batch's value, as it goes in the pickle where no slab holds it: each dense CPU tensor in it (in dicts and
    lists as deep as they go) wrapped in pipe._Inline, sparse tensors as _portable sends them."""
    cls = type(value)
    if cls is dict or cls is Batch:
        return {key: _inline(item) for key, item in value.items()}
    if cls is list:
        return [_inline(item) for item in value]
    return _portable(value)


def _reduce(items: list[tuple[Any, Any]], container: Container) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A batch's items reduced for the pickle (see _reducer): the values written into a slab, the tensors made in
    lent slabs (slab_tensor) as where they lie, plus what is left. A dict with nested values (an RLDS episode:
    {"steps": {"observation": {...}, ...}, ...}) travels as its skeleton (the dicts and lists, with None where a
    slab value goes) and the path of each slab value."""
    if container == "dict" and any(_nested(value) for _, value in items):
        return _reduce_nested(items)
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
                inline.append((key, _inline(value)))
        slab = pool.take(size) if plan else None
        if slab is None and not lent:
            return _rebuild_inline, (container, [(key, _inline(value)) for key, value in items])
        ref, entries = None, []
        if slab is not None:
            entries = _write(plan, slab.mm)
            slab.sent += 1
            ref = (pool.pid, slab.fd, slab.serial, _HEADER + slab.size)
        else:
            inline += [(key, _inline(value)) for key, _, value in plan]
        views: list[Lent] = []
        for held, nbytes, at in lent.values():
            held.sent += 1  # released by the receiver when its views of the slab are gone
            views.append(((pool.pid, held.fd, held.serial, _HEADER + held.size), nbytes, at))
        retired, pool.retired = pool.retired, []
    keys = [key for key, _ in items]
    return _rebuild, (container, ref, keys, entries, inline, retired, views)


def _reduce_nested(items: list[tuple[Any, Any]]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    plan: list[tuple[Any, str, Any]] = []  # (path, "t" or "b", value)
    skeleton = {key: _flatten(value, (key,), plan) for key, value in items}
    pool = _pool()
    with pool.lock:
        lent: dict[int, tuple[_Slab, int, list[LentEntry]]] = {}  # by slab serial: tensors made in lent slabs
        if pool.lent:
            copied = []
            for path, what, value in plan:
                found = _lent_entry(pool, path, value) if what == "t" else None
                if found is None:
                    copied.append((path, what, value))
                else:
                    lent.setdefault(found[0].serial, (found[0], found[1], []))[2].append(found[2])
            plan = copied
        slab = pool.take(_plan_size(plan)) if plan else None
        if slab is None and (plan or not lent):
            return _rebuild_inline, ("dict", [(key, _inline(value)) for key, value in items])
        ref, entries = None, []
        if slab is not None:
            entries = _write(plan, slab.mm)
            slab.sent += 1
            ref = (pool.pid, slab.fd, slab.serial, _HEADER + slab.size)
        views: list[Lent] = []
        for held, nbytes, at in lent.values():
            held.sent += 1  # released by the receiver when its views of the slab are gone
            views.append(((pool.pid, held.fd, held.serial, _HEADER + held.size), nbytes, at))
        retired, pool.retired = pool.retired, []
    return _rebuild_nested, (ref, skeleton, entries, retired, views)


def _reducer(items_of: Callable[[Any], tuple[Container, list[tuple[Any, Any]]]]
             ) -> Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]]:
    """What ForkingPickler calls for a batch type whose (container, items) `items_of` gives: `_reduce`, or, where it
    fails on a value it did not expect, the batch sent the usual way (pickled, tensors in torch's shared memory),
    with a warning: an exception here is raised in the worker's queue feeder thread, which prints it and drops the
    batch, and the DataLoader then waits for it forever. Nothing was sent from a slab that failed (its `sent` count
    moves only once it is written)."""
    def reduce(batch: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        container, items = items_of(batch)
        try:
            return _reduce(items, container)
        except Exception as exc:  # noqa: BLE001 - any failure must not lose the batch
            warnings.warn(f"tfr_torch: a batch could not go through the shared-memory transport ({type(exc).__name__}: "
                          f"{exc}); it was sent the usual way", RuntimeWarning, stacklevel=2)
            return _rebuild_inline, (container, [(key, _inline(value)) for key, value in items])

    return reduce


def _batch_items(batch: Batch) -> tuple[Container, list[tuple[Any, Any]]]:
    return "dict", list(batch.items())


def _record_items(batch: RecordBatch) -> tuple[Container, list[tuple[Any, Any]]]:
    return "list", [(None, list(batch))]


def _parcel_items(parcel: Parcel) -> tuple[Container, list[tuple[Any, Any]]]:
    item = parcel.item
    return ("dict", list(item.items())) if type(item) is dict else ("list", [(None, item)])


ForkingPickler.register(Batch, _reducer(_batch_items))
ForkingPickler.register(RecordBatch, _reducer(_record_items))
ForkingPickler.register(Parcel, _reducer(_parcel_items))
